"""SGD's step-size condition at a valley of minima (docs/sgd.md, "Flat directions"): the threshold across the valley
η*_⊥(B) and the motion along it.

Where the examples' Hessians act on the flat directions N of H, no step is mean-square stable (η*(B) = 0); the
transverse threshold η*_⊥(B) is that of the motion in H's range R with the Hessians compressed to it,
K_i = UᵀH_iU. Checked against brute force on tiny quadratic problems whose mean Hessian has a null space the
examples act on: η*_⊥ against the bisection on the enumerated map of the K_i, and the valley fields against one step
of the second-moment map T_η enumerated over every minibatch (d² × d²) and the minibatches' own gradients. Then
against minibatch SGD (``popdyn.sgd``) on two user models with a valley of non-interpolating minima: a regression
through the norm, ℓ = ½(x‖θ‖ − y)² (a sphere of minima, whose distance to the valley moves exactly linearly), and
a product-parameterised regression ℓ = ½(x·ab − y)² (a hyperbola of minima, nonlinear).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_sgd_stability import bisect, enumerated, make, second_moment_map

import popdyn
from popdyn.analysis import mean_square_stability, minibatch_factor
from popdyn.exact import WeightedTable


def valley(rng, n, r, k):
    """n example Hessians (n, d, d), d = r + k, whose mean is PSD of rank r with k flat directions on which the
    examples act (zero-mean symmetric parts added to every example), and orthonormal bases U (d, r) of its range and
    V (d, k) of its null space."""
    d = r + k
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    mean = Q[:, :r] @ np.diag(rng.uniform(0.5, 2.0, r)) @ Q[:, :r].T
    A = rng.normal(size=(n, d, d))
    spread = (A + A.transpose(0, 2, 1)) / 2
    return mean + 0.6 * (spread - spread.mean(axis=0)), Q[:, :r], Q[:, r:]


def blocks(Hs, P, Q):
    """Pᵀ H_i Q for every example."""
    return np.einsum("da,nde,eb->nab", P, Hs, Q)


def quietly(*args, **kwargs):
    """``mean_square_stability`` without its warning that η* = 0 (asserted by ``test_the_full_threshold_is_zero``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return mean_square_stability(*args, **kwargs)


RNG = np.random.default_rng(5)
VALLEYS = {"k1": valley(RNG, 4, 2, 1), "k2": valley(RNG, 5, 2, 2)}  # d = 3 with one flat direction, d = 4 with two


@pytest.mark.parametrize("name", ["k1", "k2"])
@pytest.mark.parametrize("replace", [True, False])
def test_the_transverse_threshold_is_the_compressed_maps(name, replace):
    """η*_⊥(B) for every B in 1..n is the bisection on the enumerated second-moment map of the K_i = UᵀH_iU
    (1e-10 relative), with U a basis of H's range of my own; it is non-decreasing in B, at most 2/λ_max and the
    necessary bound, and 2/λ_max where the minibatch is the whole data set."""
    Hs, U, _ = VALLEYS[name]
    n, d = Hs.shape[:2]
    found = quietly(make(Hs), np.zeros(d), np.arange(1, n + 1), replace)
    assert found.flat == d - U.shape[1] and found.flat_curved
    expected = [bisect(*enumerated(blocks(Hs, U, U), B, replace, np.full(n, 1 / n))) for B in range(1, n + 1)]
    np.testing.assert_allclose(found.transverse_thresholds, expected, rtol=1e-10, atol=0)
    eta = found.transverse_thresholds
    assert np.all(np.diff(eta) >= -1e-12 * eta[1:]) and eta[-1] > eta[0]
    assert np.all(eta <= found.gd_threshold * (1 + 1e-12)) and np.all(eta <= found.necessary * (1 + 1e-12))
    if not replace:
        assert eta[-1] == found.gd_threshold and found.thresholds[-1] == found.gd_threshold


def test_the_full_threshold_is_zero():
    """At p > 0 ``thresholds`` stays the full mean-square threshold, 0, with the warning that names the valley: the
    enumerated T_η has spectral radius above 1 already at a tenth of η*_⊥."""
    Hs, _, _ = VALLEYS["k1"]
    n, d = Hs.shape[:2]
    with pytest.warns(UserWarning, match=r"act on the 1 flat direction.*stable for η ≤ η\*_⊥\(B\)"):
        found = mean_square_stability(make(Hs), np.zeros(d), [1, 2])
    assert list(found.thresholds) == [0.0, 0.0] and np.all(found.transverse_thresholds > 0)
    T = second_moment_map(*enumerated(Hs, 1, True, np.full(n, 1 / n)), 0.1 * found.transverse_thresholds[0])
    assert np.abs(np.linalg.eigvals(T)).max() > 1


def test_without_a_curved_valley_the_transverse_threshold_is_the_threshold():
    """On problems without flat directions, and on an interpolating one whose examples do not act on its flat
    direction, ``transverse_thresholds`` is ``thresholds``, bit for bit, and the valley fields say nothing moves
    along a valley: 0 without flat directions, and no growth or coupling on the interpolating one."""
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 2, 2))
    Hs = A @ A.transpose(0, 2, 1)
    found = mean_square_stability(make(Hs), np.zeros(2), [1, 2, 4], replace=False)
    assert np.array_equal(found.transverse_thresholds, found.thresholds) and found.flat == 0
    assert found.valley_curvature == found.valley_coupling == 0.0 and not np.any(found.valley_diffusion)
    X = np.array([[1.0, 0.4], [-0.3, 1.2], [0.8, -0.9], [0.2, 0.5]])
    flat = np.einsum("ni,nj->nij", np.pad(X, ((0, 0), (0, 1))), np.pad(X, ((0, 0), (0, 1))))
    found = mean_square_stability(make(flat), np.zeros(3), [1, 2, 3], replace=False)
    assert found.flat == 1 and not found.flat_curved
    assert np.array_equal(found.transverse_thresholds, found.thresholds)
    assert found.valley_curvature == found.valley_coupling == 0.0 and not np.any(found.valley_diffusion)


def one_step(T, P, Z):
    """The k × k matrix G[a, b] = tr(P T_η(sym(z_a z_bᵀ))) for the columns z_a of Z: E‖P δ_1‖² = zᵀGz from δ_0 = Zz."""
    d, k = Z.shape
    G = np.empty((k, k))
    for a in range(k):
        for b in range(k):
            C = (np.outer(Z[:, a], Z[:, b]) + np.outer(Z[:, b], Z[:, a])) / 2
            G[a, b] = np.trace(P @ (T @ C.reshape(-1)).reshape(d, d))
    return G


@pytest.mark.parametrize("name", ["k1", "k2"])
@pytest.mark.parametrize(("B", "replace"), [(1, True), (2, True), (2, False)])
def test_the_valley_fields_are_one_step_of_the_enumerated_map(name, B, replace):
    """From an offset z along N, one step of the enumerated T_η gives E‖P_N δ_1‖² = ‖z‖² + η²p zᵀ(E N_i²)z and
    E‖P_R δ_1‖² = η²p zᵀ(E J_iᵀJ_i)z: their largest eigenvalues are ``valley_curvature`` and ``valley_coupling``
    (1e-9 of the scale). E‖P_N δ‖² never decreases, from any second moment (random PSD C); and from θ* the
    minibatches' own gradients spread along N by E‖P_N ĝ_B‖² = ``valley_diffusion`` (1e-12)."""
    Hs, U, V = VALLEYS[name]
    n, d = Hs.shape[:2]
    rng = np.random.default_rng(11)
    G = rng.normal(size=(n, d))
    found = quietly(make(Hs, G=G), np.zeros(d), B, replace)
    p, eta = minibatch_factor(B, replace, n), 0.5 * found.transverse_thresholds[0]
    T = second_moment_map(*enumerated(Hs, B, replace, np.full(n, 1 / n)), eta)
    along = (one_step(T, V @ V.T, V) - np.eye(V.shape[1])) / (eta**2 * p)
    across = one_step(T, U @ U.T, V) / (eta**2 * p)
    N, J = blocks(Hs, V, V), blocks(Hs, U, V)
    scale = np.mean(np.sum(Hs**2, axis=(1, 2)))
    np.testing.assert_allclose(along, np.mean(N @ N, axis=0), rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(across, np.mean(J.transpose(0, 2, 1) @ J, axis=0), rtol=0, atol=1e-9 * scale)
    assert abs(found.valley_curvature - np.linalg.eigvalsh(along)[-1]) <= 1e-9 * scale
    assert abs(found.valley_coupling - np.linalg.eigvalsh(across)[-1]) <= 1e-9 * scale
    for _ in range(5):
        A = rng.normal(size=(d, d))
        C = A @ A.T
        assert np.trace(V.T @ (T @ C.reshape(-1)).reshape(d, d) @ V) >= np.trace(V.T @ C @ V) * (1 - 1e-12)
    means, probs = enumerated(G - G.mean(axis=0), B, replace, np.full(n, 1 / n))  # every minibatch's mean gradient
    spread = probs @ np.sum((means @ V) ** 2, axis=1)
    assert abs(found.valley_diffusion[0] / spread - 1) <= 1e-12


def test_the_growth_along_one_flat_direction_bounds_the_full_map():
    """With one flat direction, the spectral radius of the enumerated T_η is at least 1 + η²p·``valley_curvature``
    at every step (its Rayleigh quotient on vvᵀ, v the flat direction), and (ρ(T_η) − 1)/(η²p) tends to it as η → 0:
    within 1e-3 at η = 10⁻³η*_⊥ (the coupling to the range enters at order η³)."""
    Hs, _, _ = VALLEYS["k1"]
    n, d = Hs.shape[:2]
    found = quietly(make(Hs), np.zeros(d), 1)
    steps, probs = enumerated(Hs, 1, True, np.full(n, 1 / n))
    for frac in (1e-3, 0.1, 0.5, 1.0):
        eta = frac * found.transverse_thresholds[0]
        rho = np.abs(np.linalg.eigvals(second_moment_map(steps, probs, eta))).max()
        assert rho - 1 >= eta**2 * found.valley_curvature * (1 - 1e-9)
        if frac == 1e-3:
            assert abs((rho - 1) / (eta**2 * found.valley_curvature) - 1) <= 1e-3


# ---- SGD runs on two valleys of non-interpolating minima ----------------------------------------------------------

SEEDS, STEPS, BATCH = 20_000, 8, 8
"""Each ensemble: 20,000 runs of 8 steps with minibatches of 8 drawn with replacement (p = 1/8), on the inputs
``INPUTS`` of nearby sizes: one step's random factor on the square of the offset across the valley then varies
little, so the ensemble's mean of a product of 8 of them is not carried by a few rare runs (as it is with one example
a step), while 1.02η*_⊥ stays below GD's 2/λ_max."""

INPUTS = np.array([0.7, 1.0, 1.3, 1.6])


def runs(prob, start, eta):
    """θ_8 of ``SEEDS`` runs of SGD from ``start``; every call draws the same minibatches (run s: seed s of start 0),
    so ensembles from two starts differ by their starts alone."""
    traj = popdyn.sgd(prob, start, lr=eta, batch=BATCH, steps=STEPS, seeds=SEEDS, chunk_size=SEEDS)
    assert np.all(np.asarray(traj.t_final) == STEPS)  # every run takes every step (its status only labels its end)
    return np.asarray(traj.final)


def mean_se(values):
    return values.mean(), values.std() / np.sqrt(values.size)


def radial(th, ex):
    """ℓ(θ, x) = ½(x‖θ‖ − y)²: its minima are the sphere ‖θ‖ = R = E xy/E x²."""
    return 0.5 * (ex["x"] * jnp.linalg.norm(th) - ex["y"]) ** 2


@pytest.mark.slow
def test_sgd_on_a_sphere_of_minima_is_stable_across_it_below_the_transverse_threshold():
    """ℓ = ½(x‖θ‖ − y)², θ ∈ R³, four examples with residuals: every example's loss is a function of r = ‖θ‖, so its
    gradient is radial and r ← r − η(m̂₂r − m̂_xy) exactly while r > 0 (m̂ the minibatch's means of x² and xy): the
    distance to the sphere x = r − R is a linear SGD whose examples have curvature K_i = x_i² and gradient
    φ_i = x_i(x_iR − y_i).
    The flat directions are the sphere's tangent plane, where H_i = (φ_i/R)·I: η*(B) = 0, while
    η*_⊥(B) = 2m₂/((1 − p)m₂² + p m₄), ``valley_curvature`` = E φ_i²/R², no coupling and no gradient noise along
    the sphere (1e-12). SGD at 0.98η*_⊥ and 1.02η*_⊥ (both below 2/λ_max) from θ* + εθ*/R and from θ*: the runs
    keep their direction (no motion along the valley, whatever the linearisation's E‖P_N δ‖² says); E x_8² is the
    linear prediction within 4 SE; and the offset's own part, E(x_8(ε) − x_8(0))²/ε² (the same minibatches), is the
    transverse map's ρ_⊥⁸ within 4 SE, below 1 by more than 8 SE at 0.98η*_⊥ and above by more than 8 SE at 1.02."""
    X = INPUTS
    Y = 1.2 * X + 0.03 * np.array([1.0, -1.0, -1.0, 1.0])  # R = 1.2, residuals ±0.03
    prob = popdyn.Problem.from_examples(radial, np.ones(3), data=WeightedTable.uniform({"x": X, "y": Y}))
    R, e = X @ Y / (X @ X), np.array([0.6, 0.0, 0.8])
    m2, m4, phi = np.mean(X**2), np.mean(X**4), X * (X * R - Y)
    found = quietly(prob, R * e, [1, BATCH])
    assert found.flat == 2 and found.flat_curved and list(found.thresholds) == [0.0, 0.0]
    p = found.factors
    np.testing.assert_allclose(found.transverse_thresholds, 2 * m2 / ((1 - p) * m2**2 + p * m4), rtol=1e-12)
    assert abs(found.valley_curvature / (np.mean(phi**2) / R**2) - 1) <= 1e-12
    assert found.valley_coupling <= 1e-12 * m4 and np.all(found.valley_diffusion <= 1e-12 * np.mean(phi**2))
    eps, p = 0.02, 1 / BATCH
    for factor, sign in ((0.98, -1), (1.02, 1)):
        eta = factor * found.transverse_thresholds[1]
        assert eta < 0.999 * found.gd_threshold
        ends, base = runs(prob, (R + eps) * e, eta), runs(prob, R * e, eta)
        direction = ends / np.linalg.norm(ends, axis=1, keepdims=True)
        assert np.abs(direction - e).max() <= 1e-12
        rho = 1 - 2 * eta * m2 + eta**2 * ((1 - p) * m2**2 + p * m4)
        mean, square = eps, eps**2  # E x_t, E x_t² of x ← (1 − ηK̂)x − ηφ̂
        for _ in range(STEPS):
            square = rho * square + 2 * eta**2 * p * np.mean(X**2 * phi) * mean + eta**2 * p * np.mean(phi**2)
            mean *= 1 - eta * m2
        x, x0 = np.linalg.norm(ends, axis=1) - R, np.linalg.norm(base, axis=1) - R
        got, se = mean_se(x**2)
        assert abs(got - square) <= 4 * se
        got, se = mean_se((x - x0) ** 2 / eps**2)
        assert abs(got - rho**STEPS) <= 4 * se and sign * (got - 1) > 8 * se


def product(th, ex):
    """ℓ(θ, x) = ½(x·ab − y)², θ = (a, b): its minima are the hyperbola ab = c = E xy/E x²."""
    return 0.5 * (ex["x"] * th[0] * th[1] - ex["y"]) ** 2


@pytest.mark.slow  # six ensembles of SGD on a problem of its own
def test_sgd_on_a_hyperbola_of_minima_is_stable_across_it_below_the_transverse_threshold():
    """ℓ = ½(x·ab − y)² with small residuals (label noise 10⁻³), at the unbalanced minimum a = 1.6, b = c/a where
    the examples' Hessians act on the valley's tangent and couple it to the normal (J_i ≠ 0): η*(B) = 0, η*_⊥(B) is
    the one-dimensional 2λ/((1 − p)λ² + pE K_i²) with K_i = uᵀH_iu (1e-12). SGD at 0.98η*_⊥ and 1.02η*_⊥ from
    θ* ± εu and θ*, the same minibatches: the offset's own part of the squared distance to the valley d = (ab − c)/‖θ‖,
    E[(d₊² + d₋²)/2 − d₀²]/ε² (the runs from θ* remove the gradient noise's part and the ± its cross term, in the
    linearisation), is the linearised E(uᵀδ_8)²/ε² = ⟨uuᵀ, T_η⁸(uuᵀ)⟩ within 4 SE, below 1 by more than 8 SE at
    0.98η*_⊥ and above by more than 8 SE at 1.02; the runs drift along the valley by less than ε/100."""
    X = INPUTS
    Z = X**3 - (X**3 @ X) / (X @ X) * X  # residuals orthogonal to x, correlated with x³
    Y = 0.6 * X - 1e-3 * Z / np.sqrt(np.mean(Z**2))
    prob = popdyn.Problem.from_examples(product, np.ones(2), data=WeightedTable.uniform({"x": X, "y": Y}))
    c = X @ Y / (X @ X)
    theta = np.array([1.6, c / 1.6])
    u, v = theta[::-1] / np.linalg.norm(theta), np.array([theta[0], -theta[1]]) / np.linalg.norm(theta)
    Hs = np.stack([jax.hessian(product)(theta, {"x": x, "y": y}) for x, y in zip(X, Y, strict=True)])
    K = np.einsum("i,nij,j->n", u, Hs, u)
    found = quietly(prob, theta, BATCH)
    p, lam = found.factors[0], K.mean()
    assert found.flat == 1 and found.flat_curved and found.thresholds[0] == 0.0 and found.valley_coupling > 0
    assert abs(found.transverse_thresholds[0] / (2 * lam / ((1 - p) * lam**2 + p * np.mean(K**2))) - 1) <= 1e-12

    def distance(th):
        return (th[:, 0] * th[:, 1] - c) / np.linalg.norm(th, axis=1)

    eps = 1e-3
    for factor, sign in ((0.98, -1), (1.02, 1)):
        eta = factor * found.transverse_thresholds[0]
        assert eta < 0.999 * found.gd_threshold
        plus, minus, base = (runs(prob, theta + s * eps * u, eta) for s in (1, -1, 0))
        assert np.sqrt(np.mean(((base - theta) @ v) ** 2)) <= eps / 100
        own = ((distance(plus) ** 2 + distance(minus) ** 2) / 2 - distance(base) ** 2) / eps**2
        T = second_moment_map(np.concatenate([Hs.mean(axis=0)[None], Hs]), np.r_[1 - p, np.full(4, p / 4)], eta)
        C = np.outer(u, u).reshape(-1)
        for _ in range(STEPS):
            C = T @ C
        got, se = mean_se(own)
        assert abs(got - u @ C.reshape(2, 2) @ u) <= 4 * se and sign * (got - 1) > 8 * se
