"""SGD's own step-size condition (docs/sgd.md, "SGD's step-size condition").

``sgd_threshold``'s η*(B) is checked against brute force: the second-moment map T_η built as a d² × d² matrix by
enumerating every minibatch (all n^B ordered draws with replacement, all C(n, B) subsets without), with η* found by
bisection on its spectral radius; against the mixture process (a full step w.p. 1 − p, one example's step w.p. p)
built the same way; against two closed forms of least-squares regression; matrix-free against dense; and against a
Monte Carlo ensemble of SGD runs. The asymptotic covariance is checked against the fixed point of the vectorised
map, the necessary condition at every η ≤ η*.
"""

from __future__ import annotations

import itertools
import re
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _sgd_maps import enumerated, second_moment_map

import popdyn
from popdyn.analysis import _sgd_stability as stab
from popdyn.analysis._sgd_stability import DensePencil, MatrixFreePencil, mean_square_stability, sgd_threshold
from popdyn.exact import WeightedTable

DOCS = Path(__file__).resolve().parents[1] / "docs"


def quadratic(th, x):
    """ℓ(θ, x) = ½ θᵀH_xθ + g_x·θ + ¼(u_x·θ)⁴: Hessian H_x and gradient g_x at θ = 0 (the quartic adds neither)."""
    return 0.5 * th @ x["H"] @ th + x["g"] @ th + 0.25 * (x["u"] @ th) ** 4


def make(Hs, G=None, weights=None):
    """A user's problem whose examples have Hessians Hs (n, d, d) and gradients G (n, d) at θ* = 0."""
    n, d = Hs.shape[:2]
    G = np.zeros((n, d)) if G is None else G - (np.ones(n) / n if weights is None else weights) @ G
    points = {"H": Hs, "g": G, "u": np.cos(np.arange(n * d).reshape(n, d))}
    table = WeightedTable.uniform(points) if weights is None else WeightedTable(points, weights)
    return popdyn.Problem.from_examples(quadratic, np.zeros(d), data=table)


def hessians(rng, n, d, indefinite=True):
    """n symmetric d × d Hessians of unequal sizes whose mean has λ_min = 0.3; with ``indefinite`` some are."""
    A = rng.normal(size=(n, d, d)) * rng.uniform(0.3, 2.0, size=(n, 1, 1))
    return shifted((A + A.transpose(0, 2, 1)) / 2 if indefinite else A @ A.transpose(0, 2, 1), np.full(n, 1 / n))


def shifted(Hs, w):
    """Hs + cI with c such that the w-weighted mean has λ_min = 0.3."""
    return Hs + (0.3 - np.linalg.eigvalsh(np.einsum("n,nij->ij", w, Hs)).min()) * np.eye(Hs.shape[1])


def bisect(steps, probs):
    """η* by bisection on spectral radius(T_η) ≤ 1 over [0, 2/λ_max(H)] (the stable steps form an interval)."""
    H = probs @ steps.reshape(len(probs), -1)
    lo, hi = 0.0, 2.0 / np.linalg.eigvalsh(H.reshape(steps.shape[1:])).max()
    for _ in range(60):
        mid = (lo + hi) / 2
        if np.abs(np.linalg.eigvals(second_moment_map(steps, probs, mid))).max() <= 1.0:
            lo = mid
        else:
            hi = mid
    return lo


RNG = np.random.default_rng(7)
TINY = {  # two tiny problems with unequal, partly indefinite example Hessians (d = 2, n = 4 and d = 3, n = 5)
    "d2": hessians(RNG, 4, 2),
    "d3": hessians(RNG, 5, 3),
}
WEIGHTS = np.array([0.1, 0.2, 0.3, 0.15, 0.25])


@pytest.mark.parametrize("name", ["d2", "d3"])
@pytest.mark.parametrize("replace", [True, False])
def test_thresholds_are_the_brute_force_ones(name, replace):
    """η*(B) for every B in 1..n against the bisection on the enumerated map (1e-10 relative); with replacement
    also from unequal weights."""
    Hs = TINY[name]
    n = len(Hs)
    assert any(np.linalg.eigvalsh(h).min() < 0 for h in Hs)  # some examples' Hessians are indefinite
    weights = WEIGHTS[:n] / WEIGHTS[:n].sum()
    cases = [(Hs, None, np.full(n, 1.0 / n))] + ([(shifted(Hs, weights), weights, weights)] if replace else [])
    for Hs, weights, w in cases:
        found = sgd_threshold(make(Hs, weights=weights), np.zeros(Hs.shape[1]), np.arange(1, n + 1), replace)
        expected = [bisect(*enumerated(Hs, B, replace, w)) for B in range(1, n + 1)]
        np.testing.assert_allclose(found, expected, rtol=1e-10, atol=0)
    assert isinstance(sgd_threshold(make(Hs), np.zeros(Hs.shape[1]), 2, replace), float)


def test_a_whole_batch_is_gd():
    """B = n without replacement (p = 0) gives 2/λ_max(H) to 1e-10, and so does the pencil itself at p = 0: its
    largest eigenvalue is λ_max/2 (GD's condition), not only the closed form that the function returns."""
    for Hs in TINY.values():
        n, d = Hs.shape[:2]
        gd = 2.0 / np.linalg.eigvalsh(Hs.mean(axis=0)).max()
        found = mean_square_stability(make(Hs), np.zeros(d), [n, 1], replace=False)
        assert found.factors[0] == 0.0 and abs(found.thresholds[0] / gd - 1) <= 1e-10
        assert abs(found.gd_threshold / gd - 1) <= 1e-10 and found.thresholds[1] < found.thresholds[0]
        for solver in (DensePencil(), MatrixFreePencil()):
            mu = solver.largest(stab._pencil(found.moment, found.curvature, 0.0), d * (d + 1) // 2)[0]
            assert abs(1.0 / mu / gd - 1) <= 1e-10


def test_thresholds_do_not_decrease_with_the_batch():
    """On five problems (d = 2..4, PSD and indefinite examples, equal and unequal weights), η*(B) is
    non-decreasing in B with and without replacement, and at most GD's 2/λ_max."""
    rng = np.random.default_rng(3)
    for k, (n, d) in enumerate([(4, 2), (5, 3), (6, 2), (6, 4), (5, 3)]):
        Hs = hessians(rng, n, d, indefinite=k % 2 == 0)
        weights = rng.dirichlet(np.ones(n)) if k == 4 else None
        Hs = Hs if weights is None else shifted(Hs, weights)
        modes = [True, None] if weights is not None else [True, False]
        for replace in modes:
            batches = np.arange(1, 2 * n + 1) if replace else np.arange(1, n + 1)
            found = mean_square_stability(make(Hs, weights=weights), np.zeros(d), batches, replace)
            assert np.all(np.diff(found.thresholds) >= -1e-12 * found.thresholds[1:])
            assert np.all(found.thresholds <= found.gd_threshold * (1 + 1e-12))
            assert found.thresholds[-1] > found.thresholds[0]


def necessary_problems():
    """Example Hessians (n, d, d) of four small problems: the two TINY ones, PSD ones, a regression's x_i x_iᵀ."""
    rng = np.random.default_rng(11)
    yield TINY["d2"]
    yield TINY["d3"]
    yield hessians(rng, 6, 3, indefinite=False)
    X = rng.normal(size=(5, 3))
    yield np.einsum("ni,nj->nij", X, X)  # an interpolating least-squares regression's Hessians


@pytest.mark.parametrize("Hs", list(necessary_problems()), ids=["d2", "d3", "psd-d3", "regression-d3"])
def test_the_mixture_process_has_the_same_threshold(Hs):
    """A full-batch step w.p. 1 − p and a one-example step w.p. p: its map is SGD's (1e-12) and its η*, found by
    bisection, is sgd_threshold's (1e-10), for every B with and without replacement, on each of
    ``necessary_problems`` (d = 2 and 3, indefinite and PSD examples, an interpolating regression)."""
    n, d = Hs.shape[:2]
    w = np.full(n, 1.0 / n)
    for replace, B in itertools.product([True, False], range(1, n + 1)):
        p = popdyn.analysis._noise.minibatch_factor(B, replace, n)
        steps = np.concatenate([Hs.mean(axis=0)[None], Hs])
        probs = np.concatenate([[1 - p], p * w])
        eta = 0.7 * sgd_threshold(make(Hs), np.zeros(d), B, replace)
        sgd = second_moment_map(*enumerated(Hs, B, replace, w), eta)
        np.testing.assert_allclose(second_moment_map(steps, probs, eta), sgd, rtol=0, atol=1e-12)
        assert abs(bisect(steps, probs) / sgd_threshold(make(Hs), np.zeros(d), B, replace) - 1) <= 1e-10


def wide_problem():
    """d = 30 parameters, n = 24 examples: rank-3 PSD terms minus a random shift (indefinite examples), noise."""
    rng = np.random.default_rng(1)
    n, d = 24, 30
    A = rng.normal(size=(n, d, 3))
    Hs = np.einsum("nia,nja->nij", A, A) - 0.3 * rng.uniform(size=(n, 1, 1)) * np.eye(d)
    Hs += (0.2 - np.linalg.eigvalsh(Hs.mean(axis=0)).min()) * np.eye(d)
    return make(Hs, G=rng.normal(size=(n, d))), Hs


def test_matrix_free_is_dense():
    """On d = 30 (the pencil is 465 × 465) the matrix-free thresholds (block Krylov on passes of per-example
    Hessian-vector products) and covariance (conjugate gradients) are the dense ones to 1e-8."""
    prob, Hs = wide_problem()
    dense = mean_square_stability(prob, np.zeros(30), [1, 8], solver=DensePencil())
    free = mean_square_stability(prob, np.zeros(30), [1, 8], solver=MatrixFreePencil())
    assert free.converged and np.all(free.passes > 1) and np.all(dense.passes == 0)
    np.testing.assert_allclose(free.thresholds, dense.thresholds, rtol=1e-8, atol=0)
    assert abs(free.non_uniformity / dense.non_uniformity - 1) <= 1e-12
    eta = 0.5 * dense.thresholds[1]
    Cd, Cf = dense.covariance(eta, 8), free.covariance(eta, 8)
    np.testing.assert_allclose(Cf, Cd, rtol=0, atol=1e-8 * np.abs(Cd).max())
    assert type(stab._pick_solver(None, 30)) is DensePencil and type(stab._pick_solver(None, 41)) is MatrixFreePencil


def squared(th, x):
    return 0.5 * (x["x"] @ th - x["y"]) ** 2


def test_least_squares_closed_forms():
    """1-D regression ℓ_i = ½(x_iθ − y_i)² at its least-squares θ*: T_η is the scalar
    1 − 2ηE[x²] + η²((1 − p)E[x²]² + pE[x⁴]), so η*(B) = 2E[x²]/((1 − p)E[x²]² + pE[x⁴]) (B = 1: 2E[x²]/E[x⁴]).
    In d = 3 with examples ±α e_k (6 of them): η* = 2d/(α²(1 − p + pd)), from the diagonal of C (off it, E_i H_i C
    H_i vanishes), against GD's 2d/α². Both to 1e-12."""
    x, y = np.array([0.5, -1.2, 2.0, 0.8, -0.3]), np.array([0.7, -1.0, 1.5, 1.1, 0.2])
    w = np.full(5, 0.2)
    table = WeightedTable.uniform({"x": x[:, None], "y": y})
    prob = popdyn.Problem.from_examples(squared, np.zeros(1), data=table)
    theta = np.array([w @ (x * y) / (w @ x**2)])
    m2, m4 = w @ x**2, w @ x**4
    for replace in (True, False):
        found = mean_square_stability(prob, theta, [1, 2, 3, 5], replace)
        expected = 2 * m2 / ((1 - found.factors) * m2**2 + found.factors * m4)
        np.testing.assert_allclose(found.thresholds, expected, rtol=1e-12, atol=0)
        np.testing.assert_allclose(found.necessary, expected, rtol=1e-12, atol=0)  # in 1-D the condition is exact
        assert abs(found.thresholds[0] / (2 * m2 / m4) - 1) <= 1e-12  # B = 1: p = 1 either way
    alpha, d = 1.5, 3
    points = np.concatenate([alpha * np.eye(d), -alpha * np.eye(d)])
    axes = popdyn.Problem.from_examples(
        squared, np.zeros(d), data=WeightedTable.uniform({"x": points, "y": np.zeros(2 * d)})
    )
    found = mean_square_stability(axes, np.zeros(d), [1, 2, 4, 6], replace=False)
    p = found.factors
    np.testing.assert_allclose(found.thresholds, 2 * d / (alpha**2 * (1 - p + p * d)), rtol=1e-12, atol=0)
    assert abs(found.gd_threshold / (2 * d / alpha**2) - 1) <= 1e-12


def test_the_necessary_condition_holds_below_the_threshold():
    """η*(B) ≤ the necessary bound 2λ_max/(λ_max² + p s²); so at every η ≤ η*(B): η ≤ 2/λ_max and
    η²p s² ≤ 1 − (1 − ηλ_max)² ≤ 1 (s ≤ √B/η with replacement). s is the spread of vᵀH_i v along H's top
    eigenvector v, computed by hand."""
    for Hs in necessary_problems():
        n, d = Hs.shape[:2]
        v = np.linalg.eigh(Hs.mean(axis=0))[1][:, -1]
        curvatures = np.einsum("i,nij,j->n", v, Hs, v)
        for replace in (True, False):
            found = mean_square_stability(make(Hs), np.zeros(d), np.arange(1, n + 1), replace)
            assert abs(found.non_uniformity / curvatures.std() - 1) <= 1e-10
            assert np.all(found.thresholds <= found.necessary * (1 + 1e-12))
            a, s, p = found.sharpness, found.non_uniformity, found.factors
            for eta in np.linspace(0.05, 1.0, 20)[:, None] * found.thresholds:
                assert np.all(eta <= 2 / a) and np.all((1 - eta * a) ** 2 + eta**2 * p * s**2 <= 1 + 1e-12)


def test_the_matrix_non_uniformity_gives_no_necessary_condition():
    """Three examples of a least-squares regression in d = 3 (H_i = x_i x_iᵀ), B = 1: stable SGD (η = 0.999η*, the
    enumerated map's spectral radius below 1) with η²λ_max(E H_i² − H²) = 1.12 and η²(λ_max(E H_i²) − λ_max(H)²)
    = 1.05 above 1. The matrix forms bound the one-step growth E‖δ_1‖² ≤ λ_max((I − ηH)² + η²pΣ)‖δ_0‖², a
    sufficient condition; the necessary one takes the spread along H's top eigenvector."""
    X = np.array(
        [
            [-0.32971082, 0.87111051, -1.32618144],
            [-0.1694702, 1.8594975, 0.03889734],
            [1.19861522, 1.1368635, 1.31664782],
        ]
    )
    Hs = np.einsum("ni,nj->nij", X, X)
    eta = 0.999 * sgd_threshold(make(Hs), np.zeros(3), 1)
    assert np.abs(np.linalg.eigvals(second_moment_map(Hs, np.full(3, 1 / 3), eta))).max() < 1
    H, second = Hs.mean(axis=0), np.einsum("nij,njk->ik", Hs, Hs) / 3
    assert eta**2 * np.linalg.eigvalsh(second - H @ H).max() > 1.1
    assert eta**2 * (np.linalg.eigvalsh(second).max() - np.linalg.eigvalsh(H).max() ** 2) > 1.04


def test_the_asymptotic_covariance_is_the_fixed_point():
    """C_∞ against (I − T_η) vec C = η² c_B vec Σ with T_η enumerated and Σ from the examples' gradients (1e-10 of
    ‖C‖), for B = 1, 2 with and without replacement; with B = n without replacement (no noise) C_∞ = 0."""
    Hs = TINY["d3"]
    n, d = Hs.shape[:2]
    G = np.random.default_rng(5).normal(size=(n, d))
    prob = make(Hs, G=G)
    G = G - G.mean(axis=0)
    sigma = G.T @ G / n
    for replace in (True, False):
        found = mean_square_stability(prob, np.zeros(d), [1, 2, n], replace)
        for B, eta_star, c in zip(found.batches[:2], found.thresholds[:2], found.factors[:2], strict=True):
            eta = 0.8 * eta_star
            T = second_moment_map(*enumerated(Hs, int(B), replace, np.full(n, 1 / n)), eta)
            C = np.linalg.solve(np.eye(d * d) - T, eta**2 * c * sigma.reshape(-1)).reshape(d, d)
            np.testing.assert_allclose(found.covariance(eta, int(B)), C, rtol=0, atol=1e-10 * np.abs(C).max())
        if not replace:
            assert not np.any(found.covariance(0.5 * found.thresholds[2], n))


def test_flat_directions():
    """An over-parameterised interpolating regression whose inputs span 2 of 3 coordinates: the flat direction is
    neutral (T_η's eigenvalue 1 there) and η* is the 2-D problem's; with noise only in the range, C_∞ is the
    enumerated fixed point on the range and 0 along the flat direction. Examples whose Hessians curve a flat
    direction of H (H_1 = [[1, 1], [1, 0]], H_2 = [[1, −1], [−1, 0]], or H_i = diag(1, ±1)) leave no stable step:
    η* = 0, with a warning, where the enumerated map has spectral radius > 1 at η = 10⁻³·2/λ_max; GD's 2/λ_max at
    p = 0."""
    X = np.array([[1.0, 0.4], [-0.3, 1.2], [0.8, -0.9], [0.2, 0.5]])
    flat = np.einsum("ni,nj->nij", np.pad(X, ((0, 0), (0, 1))), np.pad(X, ((0, 0), (0, 1))))
    G = np.pad(np.random.default_rng(2).normal(size=(4, 2)), ((0, 0), (0, 1)))
    found = mean_square_stability(make(flat, G=G), np.zeros(3), [1, 2, 3], replace=False)
    reduced = sgd_threshold(make(flat[:, :2, :2]), np.zeros(2), [1, 2, 3], replace=False)
    assert found.flat == 1 and not found.flat_curved
    np.testing.assert_allclose(found.thresholds, reduced, rtol=1e-12, atol=0)
    eta = 0.6 * found.thresholds[0]
    T = second_moment_map(*enumerated(flat[:, :2, :2], 1, False, np.full(4, 0.25)), eta)
    G2 = G[:, :2] - G[:, :2].mean(axis=0)
    C2 = np.linalg.solve(np.eye(4) - T, eta**2 * (G2.T @ G2 / 4).reshape(-1)).reshape(2, 2)
    C = found.covariance(eta, 1)
    np.testing.assert_allclose(C[:2, :2], C2, rtol=0, atol=1e-10 * np.abs(C2).max())
    assert np.abs(C[2]).max() <= 1e-12 * np.abs(C2).max()
    coupled = np.array([[[1.0, 1.0], [1.0, 0.0]], [[1.0, -1.0], [-1.0, 0.0]]])
    curved = np.array([np.diag([1.0, 1.0]), np.diag([1.0, -1.0])])  # P_N H_i P_N ≠ 0 itself
    for Hs in (coupled, curved):
        with pytest.warns(UserWarning, match="act on the 1 flat direction"):
            found = mean_square_stability(make(Hs), np.zeros(2), [1, 2], replace=False)
        assert found.flat_curved and list(found.thresholds) == [0.0, 2.0]
        T = second_moment_map(*enumerated(Hs, 1, False, np.full(2, 0.5)), 1e-3 * 2.0)
        assert np.abs(np.linalg.eigvals(T)).max() > 1


def sgd_runs(Hs, eta, B, steps, seeds):
    """‖θ_t − θ*‖² at the end of ``seeds`` SGD runs with i.i.d. minibatches of B examples on L = E_i ½θᵀH_iθ
    (θ* = 0) from θ_0 = (1, …)/√d: their mean and its standard error."""
    n, d = Hs.shape[:2]

    def run(key):
        def step(theta, k):
            idx = jax.random.randint(k, (B,), 0, n)
            return theta - eta * jnp.mean(Hs[idx], axis=0) @ theta, None

        return jax.lax.scan(step, jnp.ones(d) / jnp.sqrt(d), jax.random.split(key, steps))[0]

    ends = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), seeds))
    sq = np.sum(np.asarray(ends) ** 2, axis=1)
    return sq.mean(), sq.std() / np.sqrt(seeds)


def test_monte_carlo_runs_decay_below_and_grow_above_the_threshold():
    """100,000 runs of one-example SGD (a plain ``lax.scan``, vmapped over seeds) on an interpolating least-squares
    regression in d = 2 (four examples), 8 steps from ‖θ_0 − θ*‖² = 1: the mean of ‖θ_8 − θ*‖² is the exact
    tr(T_η⁸ C_0) within 4 SE, below 1 by more than 8 SE at 0.98η* and above it by more than 8 SE at 1.02η*, where GD
    is still stable (1.02η* < 2/λ_max). Few steps, because ‖θ_t − θ*‖² is a product of random factors: its mean
    is carried by rarer runs the longer they are."""
    X = np.array([[1.0, 0.3], [0.8, -0.3], [1.2, 0.2], [0.9, -0.1]])
    Hs = np.einsum("ni,nj->nij", X, X)
    found = mean_square_stability(make(Hs), np.zeros(2), 1)
    assert 1.02 * found.thresholds[0] < 0.9 * found.gd_threshold
    for factor, sign in ((0.98, -1), (1.02, 1)):
        eta = factor * found.thresholds[0]
        T = second_moment_map(*enumerated(Hs, 1, True, np.full(4, 0.25)), eta)
        exact = np.trace((np.linalg.matrix_power(T, 8) @ np.full(4, 0.5)).reshape(2, 2))
        mean, se = sgd_runs(jnp.asarray(Hs), eta, 1, 8, 100_000)
        assert abs(mean - exact) <= 4 * se
        assert sign * (mean - 1.0) > 8 * se and sign * (exact - 1.0) > 0.2


@pytest.mark.validation
def test_bad_inputs_are_refused_by_name(monkeypatch):
    Hs = TINY["d2"]
    prob = make(Hs)
    zero = np.zeros(2)
    for bad, match in [(0, "batch=0 is out of range"), (2.5, "batch=2.5 is out of range"), ([], "batch=\\[\\] is")]:
        with pytest.raises(ValueError, match=match):
            sgd_threshold(prob, zero, bad)
    with pytest.raises(ValueError, match=re.escape("batch=5 is out of range: without replacement it must be an")):
        sgd_threshold(prob, zero, [1, 5], replace=False)
    plain = popdyn.Problem.from_loss(lambda th: jnp.sum(th**2), np.zeros(2))
    with pytest.raises(ValueError, match="FunctionProblem declares no per-example data"):
        sgd_threshold(plain, zero, 1)
    saddle = make(Hs - 0.5 * np.eye(2))
    with pytest.raises(ValueError, match="theta_star is not a minimum: ∇²L has λ_min = -0.2"):
        sgd_threshold(saddle, zero, 1)
    with pytest.raises(ValueError, match="H = ∇²L = 0"):
        sgd_threshold(make(np.zeros((3, 2, 2))), zero, 1)
    with pytest.raises(ValueError, match="theta_star has a batch axis: mean_square_stability takes one unbatched θ"):
        sgd_threshold(prob, np.zeros((3, 2)), 1)
    with pytest.raises(ValueError, match="solver='dense' is invalid"):
        sgd_threshold(prob, zero, 1, solver="dense")
    with pytest.raises(ValueError, match="rtol=-1 is out of range"):
        MatrixFreePencil(rtol=-1)
    with pytest.raises(ValueError, match="replace=False needs n = 5 equally weighted examples"):
        sgd_threshold(make(TINY["d3"], weights=WEIGHTS), np.zeros(3), 1, replace=False)
    found = mean_square_stability(prob, zero, [1, 2])
    for eta, batch, match in [
        (found.thresholds[0], 1, "eta=.* is out of range: must be in \\(0, η\\*\\(B\\)"),
        (-0.1, 1, "eta=-0.1 is out of range"),
        (0.1, 3, re.escape("batch=3 is invalid: must be one of the batches [1, 2]")),
    ]:
        with pytest.raises(ValueError, match=match):
            found.covariance(eta, batch)
    X = np.array([[1.0, 0.4], [-0.3, 1.2], [0.8, -0.9]])
    flat = np.einsum("ni,nj->nij", np.pad(X, ((0, 0), (0, 1))), np.pad(X, ((0, 0), (0, 1))))
    noisy = mean_square_stability(make(flat, G=np.random.default_rng(0).normal(size=(3, 3))), np.zeros(3), 1)
    with pytest.raises(ValueError, match="component along the 1 flat direction"):
        noisy.covariance(0.5 * noisy.thresholds[0], 1)
    monkeypatch.setattr(stab, "MAX_DIM", 1)
    with pytest.raises(
        ValueError, match="theta_star has d = 2 parameters: mean_square_stability takes at most MAX_DIM = 1"
    ):
        sgd_threshold(prob, zero, 1)


def test_the_public_names_and_the_docs_example():
    """popdyn's lazy names are the analysis module's; the worked case of docs/sgd.md's "SGD's step-size condition",
    executed from the page: its thresholds are the enumerated maps' (1e-10), the whole batch's is GD's, and its
    covariance is the fixed point of the enumerated map with Σ from the examples' gradients (1e-10)."""
    assert popdyn.sgd_threshold is sgd_threshold and popdyn.mean_square_stability is mean_square_stability
    assert popdyn.SGDStability is stab.SGDStability
    section = (DOCS / "sgd.md").read_text(encoding="utf-8").split("## SGD's step-size condition", 1)[1]
    code = re.search(r"```python\n(.*?)```", section.split("### A worked case", 1)[1], re.S)
    assert code is not None
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(code.group(1), str(DOCS / "sgd.md"), "exec"), namespace)
    x, y, found, theta = namespace["x"], namespace["y"], namespace["found"], namespace["theta_star"]
    Hs, n = np.einsum("ni,nj->nij", x, x), len(x)
    for B, eta_star in zip(found.batches, found.thresholds, strict=True):
        assert abs(bisect(*enumerated(Hs, int(B), False, np.full(n, 1 / n))) / eta_star - 1) <= 1e-10
    assert found.thresholds[-1] == found.gd_threshold and np.all(np.diff(found.thresholds) > 0)
    eta = 0.5 * found.thresholds[0]
    G = x * (x @ theta - y)[:, None]
    G = G - G.mean(axis=0)
    T = second_moment_map(*enumerated(Hs, 1, False, np.full(n, 1 / n)), eta)
    C = np.linalg.solve(np.eye(4) - T, eta**2 * (G.T @ G / n).reshape(-1)).reshape(2, 2)
    np.testing.assert_allclose(namespace["C"], C, rtol=0, atol=1e-10 * np.abs(C).max())
