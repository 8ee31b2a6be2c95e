"""SCB reduced systems: the projected 2-D manifold 𝓜 and the unprojected 4-D family against full-matrix
preconditioned GD, their fixed points, eigenvalues and contraction (docs/models/scb.md §4, §10).

References: the full model of test_scb_model (itself checked against brute force), embedded and iterated
with θ ← θ − η·precondition(∇L); the quadratic of §4 for the eigenvalues and its saddle formula.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.tasks.scb import Reduced2D, Reduced4D, SparseBigram, embed_2d, embed_4d, random_instance

EXACT = 1e-14
CANON = SparseBigram(np.array([[0.9, 0.2], [0.1, 0.8]]), np.eye(2))
INST = SparseBigram(*random_instance(jax.random.PRNGKey(8), 4, 5, 2))
STEPS = 200


def alpha(aV, aA):
    return {"alpha_V": jnp.asarray(aV, float), "alpha_A": jnp.asarray(aA, float)}


def family(aV, bV, aA, bA):
    names = ("alpha_V", "beta_V", "alpha_A", "beta_A")
    return {name: jnp.asarray(v, float) for name, v in zip(names, (aV, bV, aA, bA), strict=False)}


def as_matrix(d):
    """A nested {"alpha_V", "alpha_A"} derivative pytree as a 2×2 matrix (row: output, column: input)."""
    names = ("alpha_V", "alpha_A")
    return np.array([[float(d[i][j]) for j in names] for i in names])


@eqx.filter_jit
def full_gd(prob, theta, eta, project):
    """STEPS steps of θ ← θ − η·precondition(∇L(θ), project); the whole trajectory."""

    def step(th, _):
        th = jax.tree_util.tree_map(lambda x, d: x - eta * d, th, prob.precondition(jax.grad(prob.loss)(th), project))
        return th, th

    return jax.lax.scan(step, theta, None, length=STEPS)[1]


@eqx.filter_jit
def reduced_run(red, theta, eta):
    """STEPS steps of ``red.step``; the whole trajectory."""

    def step(th, _):
        th = red.step(th, eta)
        return th, th

    return jax.lax.scan(step, theta, None, length=STEPS)[1]


# ---------------------------------------------------------------- the 2-D manifold


@pytest.mark.slow
@pytest.mark.parametrize("prob", [CANON, INST], ids=["canonical", "random"])
def test_reduced_loss_distances_and_signals_on_manifold(prob):
    """ℓ(α) = L(embed(α)); ‖V − P‖_μ = |1 − α_V|√c, ‖A − Qm‖_μ = |1 − α_A|√(q̄ − 1/T); signals recover α."""
    red = Reduced2D.from_instance(prob)
    c, qd = float(prob.c), float(prob.qbar) - 1 / prob.T
    for aV, aA in [(0.0, 0.0), (1.0, 1.0), (0.3, -0.7), (-1.0, -1.5), (2.0, 0.5), (0.0, -1.0)]:
        theta = embed_2d(prob, alpha(aV, aA))
        np.testing.assert_allclose(red.loss(alpha(aV, aA)), prob.loss(theta), rtol=EXACT)
        np.testing.assert_allclose(
            prob.distances(theta), (abs(1 - aV) * np.sqrt(c), abs(1 - aA) * np.sqrt(qd)), rtol=EXACT, atol=EXACT
        )
        np.testing.assert_allclose(prob.signals(theta), (aV, aA), rtol=EXACT, atol=EXACT)
        np.testing.assert_allclose(theta["A"].sum(axis=0), 1.0, rtol=EXACT)
    np.testing.assert_allclose(red.loss(red.init(None)), prob.loss(prob.init(None)), rtol=EXACT)
    np.testing.assert_allclose(red.L_star, prob.L_star, rtol=EXACT)


def test_reduced_precondition_gives_minus_velocity():
    """G^{-1}∇ℓ = −g(α) with G = diag(c, q̄ − 1/T) (§4)."""
    red = Reduced2D.from_instance(INST)
    for aV, aA in [(0.1, 0.2), (-1.0, -1.5), (1.3, 0.4)]:
        d = red.precondition(jax.grad(red.loss)(alpha(aV, aA)))
        g = red.velocity(alpha(aV, aA))
        for name in ("alpha_V", "alpha_A"):
            np.testing.assert_allclose(d[name], -g[name], rtol=1e-13, atol=EXACT)


@pytest.mark.slow
@pytest.mark.parametrize("prob,eta", [(CANON, 0.5), (INST, 0.5)], ids=["canonical", "random"])
def test_projected_full_gd_matches_2d_recursion(prob, eta):
    """Full-matrix projected preconditioned GD from points of 𝓜 stays on 𝓜 and follows α ← α + ηg(α) to 1e-12."""
    red = Reduced2D.from_instance(prob)
    for a0 in (alpha(0.0, 0.0), alpha(0.4, -0.6)):
        full = full_gd(prob, embed_2d(prob, a0), eta, True)
        reduced = reduced_run(red, a0, eta)
        embedded = jax.vmap(lambda a: embed_2d(prob, a))(reduced)
        for name in ("V", "A"):
            assert float(jnp.max(jnp.abs(full[name] - embedded[name]))) < 1e-12, name
        aV, aA = jax.vmap(prob.signals)(full)
        assert float(jnp.max(jnp.abs(aV - reduced["alpha_V"]))) < 1e-12
        assert float(jnp.max(jnp.abs(aA - reduced["alpha_A"]))) < 1e-12
    # the trajectory from (0, 0) actually moves: the check is not on a fixed point
    assert float(reduced_run(red, alpha(0.0, 0.0), eta)["alpha_V"][-1]) > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("project", [False, True])
def test_no_attention_signal_at_alpha_V_zero(project):
    """At α_V = 0 (V = μ1ᵀ) the preconditioned A-gradient vanishes on 𝓜, with or without Π_T (§4); with Π_T it
    vanishes for any A, without it only while the column sums are 1."""
    for aA in (0.0, 0.7, -1.5, 3.0):
        theta = embed_2d(INST, alpha(0.0, aA))
        d = INST.precondition(jax.grad(INST.loss)(theta), project=project)
        np.testing.assert_allclose(d["A"], 0.0, atol=EXACT)
    A = jax.random.normal(jax.random.PRNGKey(3), (INST.T, INST.N))
    theta = {"V": INST.init(None)["V"], "A": A}
    d = INST.precondition(jax.grad(INST.loss)(theta), project=project)
    if project:
        np.testing.assert_allclose(d["A"], 0.0, atol=EXACT)
    else:  # ‖μ‖²(1ᵀa_k − 1)1: the column sums are pulled back to 1
        np.testing.assert_allclose(d["A"], INST.mu_sq * (A.sum(axis=0) - 1.0) * jnp.ones((INST.T, 1)), rtol=1e-13)


# ---------------------------------------------------------------- fixed points of the 2-D flow


@pytest.mark.slow
@pytest.mark.parametrize("prob", [CANON, INST], ids=["canonical", "random"])
def test_eigenvalues_at_minimum(prob):
    """G^{-1}∇²ℓ(1, 1) = −J(1, 1) has eigenvalues the roots of λ² − (q̄ + c)λ + c/T = 0 (§4, §10)."""
    red = Reduced2D.from_instance(prob)
    one = alpha(1.0, 1.0)
    Hm = as_matrix(jax.hessian(red.loss)(one))
    G = np.diag([red.c, red.qbar - 1 / red.T])
    lam = np.sort(np.linalg.eigvals(np.linalg.solve(G, Hm)).real)
    Jm = as_matrix(jax.jacobian(red.velocity)(one))
    roots = np.sort(np.roots([1.0, -(red.qbar + red.c), red.c / red.T]).real)
    np.testing.assert_allclose(red.eigenvalues_at_minimum(), roots, rtol=1e-13)
    np.testing.assert_allclose(red.eigenvalues_at_minimum(), lam, rtol=1e-13)
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(-Jm).real), lam, rtol=1e-13)
    np.testing.assert_allclose(red.loss(one), red.L_star, rtol=EXACT)
    for g in red.velocity(one).values():
        assert float(g) == 0.0


@pytest.mark.parametrize("prob", [CANON, INST], ids=["canonical", "random"])
def test_saddle_and_start(prob):
    """(0, −1/(Tq̄ − 1)) is a fixed point with det J = −c(q̄ − 1/T) < 0; canonical: (0, −1). From (0, 0):
    g = (1/T, 0) (§4, §10)."""
    red = Reduced2D.from_instance(prob)
    sV, sA = red.saddle()
    if prob is CANON:
        assert (sV, sA) == (0.0, -1.0)
    g = red.velocity(alpha(sV, sA))
    np.testing.assert_allclose([g["alpha_V"], g["alpha_A"]], 0.0, atol=EXACT)
    det = np.linalg.det(as_matrix(jax.jacobian(red.velocity)(alpha(sV, sA))))
    np.testing.assert_allclose(det, -red.c * (red.qbar - 1 / red.T), rtol=1e-13)
    assert float(det) < 0
    g0 = red.velocity(red.init(None))
    np.testing.assert_allclose([g0["alpha_V"], g0["alpha_A"]], [1 / red.T, 0.0], rtol=EXACT, atol=0)


def test_contraction_factor_near_minimum():
    """Near (1, 1) the 2-D GD error contracts by 1 − ηλ_slow per step (§4)."""
    red = Reduced2D.from_instance(CANON)
    eta = 0.5
    lam_slow, lam_fast = red.eigenvalues_at_minimum()
    predicted = 1.0 - eta * lam_slow
    traj = reduced_run(red, alpha(1.0 + 1e-6, 1.0 - 2e-6), eta)
    dist = np.hypot(np.asarray(traj["alpha_V"]) - 1.0, np.asarray(traj["alpha_A"]) - 1.0)
    t1, t2 = 100, 199  # the fast mode (factor 1 − ηλ_fast ≈ 0.44) is gone by t1
    measured = (dist[t2] / dist[t1]) ** (1.0 / (t2 - t1))
    np.testing.assert_allclose(measured, predicted, rtol=1e-7)  # measured 2e-9; the offset 1e-6 bounds nonlinearity
    assert abs(1.0 - eta * lam_fast) < predicted  # the slow mode is the one measured


def test_attractors_and_overlays():
    red = Reduced2D.from_instance(INST)
    res = red.attractors()
    assert float(res["minimum"](alpha(1.0, 1.0))) == 0.0
    assert float(res["saddle"](alpha(*red.saddle()))) == 0.0
    assert float(res["minimum"](alpha(0.0, 1.0))) == 1.0
    ov = red.overlays("alpha_V", "alpha_A", (-2.0, 3.0))
    hyper = next(o for o in ov if o.kind == "line")
    x, y = np.array(hyper.x), np.array(hyper.y)
    ok = np.isfinite(x)
    np.testing.assert_allclose(x[ok] * y[ok], 1.0, rtol=EXACT)
    assert np.isnan(x).sum() == 1  # the two branches are broken at α_V = 0
    pts = {o.label: (o.x[0], o.y[0]) for o in ov if o.kind == "points"}
    assert pts["minimum (1, 1)"] == (1.0, 1.0)
    assert pts["saddle"] == red.saddle()
    swapped = {o.label: (o.x[0], o.y[0]) for o in red.overlays("alpha_A", "alpha_V", (-2.0, 3.0)) if o.kind == "points"}
    assert swapped["saddle"] == red.saddle()[::-1]
    assert red.overlays("alpha_V", "beta_V", (0.0, 1.0)) == []


# ---------------------------------------------------------------- the 4-D family


def test_4d_loss_and_preconditioner():
    """ℓ_4 = L(embed_4d); the explicit map of §4 equals θ − η·G^{-1}∇ℓ_4 (G the μ-Gram of the tangents)."""
    red = Reduced4D.from_instance(INST)
    points = [(0.3, 0.5, -0.2, 0.4), (0.0, 1.0, 0.0, 0.2), (1.0, 0.0, 1.0, 0.0), (-1.1, 2.0, 0.7, -0.3)]
    for th in (family(*pt) for pt in points):
        np.testing.assert_allclose(red.loss(th), INST.loss(embed_4d(INST, th)), rtol=EXACT)
        d = red.precondition(jax.grad(red.loss)(th))
        want = red.step(th, 0.1)
        for name in th:
            np.testing.assert_allclose(th[name] - 0.1 * d[name], want[name], rtol=1e-13, atol=EXACT)
    np.testing.assert_allclose(red.loss(family(1.0, 0.0, 1.0, 0.0)), INST.L_star, rtol=EXACT)
    start = embed_4d(INST, red.init(None))
    init = INST.init(None)
    for name in ("V", "A"):
        np.testing.assert_allclose(start[name], init[name], rtol=EXACT)


@pytest.mark.parametrize("prob,eta", [(CANON, 0.3), (INST, 0.3)], ids=["canonical", "random"])
def test_unprojected_full_gd_matches_4d_recursion(prob, eta):
    """Full-matrix unprojected preconditioned GD from the 4-D family follows the explicit 4-D map to 1e-12."""
    red = Reduced4D.from_instance(prob)
    for th0 in (red.init(None), family(0.2, 0.5, -0.3, 0.4)):
        full = full_gd(prob, embed_4d(prob, th0), eta, False)
        reduced = reduced_run(red, th0, eta)
        embedded = jax.vmap(lambda t: embed_4d(prob, t))(reduced)
        for name in ("V", "A"):
            assert float(jnp.max(jnp.abs(full[name] - embedded[name]))) < 1e-12, name
    # unprojected GD leaves 𝓜 only through the uniform parts, which settle: it reaches the minimum
    aV, aA = jax.vmap(prob.signals)(full)
    assert abs(float(aV[-1]) - 1.0) < 0.1 and abs(float(aA[-1]) - 1.0) < 0.1


@pytest.mark.parametrize("cls", [Reduced2D, Reduced4D])
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"c": 0.0}, r"c=0\.0 is out of range"),
        ({"T": 1}, r"T=1 is out of range"),
        ({"qbar": 0.25}, r"qbar=0\.25 is out of range.*\(0\.25, 1\]"),
        ({"qbar": 1.5}, r"qbar=1\.5 is out of range"),
        ({"mu_sq": 0.0}, r"mu_sq=0\.0 is out of range"),
    ],
)
def test_reduced_validation(cls, kwargs, match):
    args = {"c": 0.2, "qbar": 0.5, "T": 4, "mu_sq": 0.4} | kwargs
    with pytest.raises(ValueError, match=match):
        cls(**args)
