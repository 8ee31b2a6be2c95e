"""A researcher's own model, built from a plain loss function (docs/problem.md): every engine feature, flat and
pytree θ, the contract's checks, manifolds of minima, exact hitting times, basin fractions, step-size sweeps."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _quick_codegen_a import quick_codegen_env
from scipy.stats import norm

import popdyn
from popdyn import Status
from popdyn.plot import plot_basin_map


@functools.cache
def factorization(d: int, k: int, seed: int = 0):
    """L(U) = ‖UUᵀ − M‖²_F / 4 for U ∈ R^{d×k} (flat θ), M PSD with distinct eigenvalues μ; every local minimum is
    global, at the level Σ_{i>k} μ_i² / 4 (the best rank-k approximation). One Problem per (d, k, seed): the tests
    on the same instance reuse its compiled programs."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    mu = np.linspace(2.0, 0.5, d)
    M = (Q * mu) @ Q.T

    def loss(u):
        U = u.reshape(d, k)
        return jnp.sum((U @ U.T - M) ** 2) / 4.0

    return popdyn.Problem.from_loss(loss, init=jnp.zeros(d * k)), float(np.sum(mu[k:] ** 2) / 4.0)


DLN = popdyn.Problem.from_loss(
    lambda th: 0.5 * (th["a"] * th["b"] - 1.0) ** 2,
    init=lambda key: dict(zip("ab", 0.1 + 0.01 * jax.random.normal(key, (2,)), strict=False)),
)
"""A depth-2 scalar linear network, L = (ab − 1)²/2: a pytree θ. From a = b, s = a² solves s' = −2s(s − 1)."""


# ---- the contract ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_from_loss_gives_every_engine_feature_for_a_flat_theta():
    prob, level = factorization(3, 2)
    # 64 starts, end points only: the flow of the 8 × 8 basin map below and of the basin-fraction tests on this
    # problem (one compiled solver)
    theta0 = jax.random.normal(jax.random.PRNGKey(0), (64, 6))
    flow = popdyn.gradient_flow(prob, theta0, t1=1e4, ts=None)
    gd = popdyn.gradient_descent(prob, theta0[:16], lr=0.05, steps=400, save_params=True, record_every=50)
    assert flow.final.shape == (64, 6) and gd.final.shape == (16, 6)
    np.testing.assert_allclose(flow.final_loss, level, rtol=1e-9)
    lam = np.asarray(popdyn.lambda_max(prob, flow.final))
    spec = np.asarray(popdyn.hessian_spectrum(prob, flow.final))
    np.testing.assert_allclose(lam, spec[:, -1], rtol=1e-12)
    audit = popdyn.step_size_audit(prob, gd, 0.05)
    assert audit.lambda_max.shape == (16, 9)
    bm = popdyn.basin_map(prob, popdyn.Grid.square("[0]", "[3]", -1.0, 1.0, 8, base=np.full(6, 0.4)))
    assert bm.labels.shape == (8, 8) and bm.final.shape == (8, 8, 6)
    fig = plot_basin_map(bm, prob)
    assert fig.axes


@pytest.mark.slow
def test_from_loss_with_a_pytree_theta_data_leaves_and_an_honoured_key():
    def loss(th, data):
        return 0.5 * (th["a"] * th["b"] - data["target"]) ** 2

    prob = popdyn.Problem.from_loss(loss, init={"a": 0.5, "b": 0.5}, data={"target": 2.0}, init_scale=0.1)
    a, b = prob.init(jax.random.PRNGKey(1)), prob.init(jax.random.PRNGKey(2))
    assert float(a["a"]) != float(b["a"])
    assert abs(float(a["a"]) - 0.5) < 0.5
    traj = popdyn.gradient_flow(prob, {"a": 1.0, "b": 0.5}, t1=100.0)
    assert float(traj.final["a"] * traj.final["b"]) == pytest.approx(2.0, abs=1e-7)
    # the data are leaves: another target compiles nothing new, and problems stack and vmap
    f = jax.jit(lambda p, th: jax.grad(p.loss)(th))
    other = popdyn.Problem.from_loss(loss, init={"a": 0.5, "b": 0.5}, data={"target": 3.0}, init_scale=0.1)
    f(prob, a)
    before = f._cache_size()
    f(other, a)
    assert f._cache_size() == before
    stack = jax.tree_util.tree_map(lambda *x: jnp.stack(x), prob, other)
    g = jax.vmap(lambda p: p.loss({"a": jnp.array(1.0), "b": jnp.array(1.0)}))(stack)
    np.testing.assert_allclose(g, [0.5, 2.0], rtol=1e-15)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(attractors={"one": lambda u: jnp.sum(u**2) < 1.0}), "boolean"),
        (dict(attractors={"two": lambda u: u}), "float scalar"),
        (dict(init=lambda key: jnp.zeros(3, dtype=jnp.int32)), "dtype int32"),
    ],
)
@pytest.mark.validation
def test_the_contract_is_checked_where_a_problem_enters(bad, match):
    kwargs = dict(init=jnp.zeros(3)) | bad
    with pytest.raises(ValueError, match=match):
        popdyn.Problem.from_loss(lambda u: jnp.sum(u.astype(float) ** 2), **kwargs)


@pytest.mark.slow
@pytest.mark.validation
def test_a_plain_function_or_a_negative_residual_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="from_loss"):
        popdyn.gradient_flow(lambda u: jnp.sum(u**2), jnp.ones(2))
    with pytest.raises(ValueError, match="init"):
        popdyn.Problem.from_loss(lambda u: jnp.sum(u**2), init="zeros")
    prob = popdyn.Problem.from_loss(
        lambda u: jnp.sum(u**2), init=jnp.zeros(2), attractors={"origin": lambda u: jnp.sum(u**2) - 1.0}
    )
    with pytest.raises(ValueError, match="'origin'.*>= 0"):  # the labeller's check, whatever the run: 5 GD steps
        popdyn.basin_fractions(prob, jnp.ones((4, 2)), "gd", steps=5)


# ---- no silent stalls ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("d, k", [(3, 2), (4, 2), (4, 3), (5, 1)])
def test_every_start_on_a_manifold_of_minima_is_counted_there(d, k):
    """UUᵀ ≈ M: minima form a manifold (U ↦ UO, O orthogonal), where ‖∇L‖ levels off at curvature × solver
    tolerance. With default settings every random start is resolved and lands on the one minimum level."""
    prob, level = factorization(d, k)
    bf = popdyn.basin_fractions(prob, 64, seed=1)
    assert bf.status_counts()["max_steps"] == 0 and bf.fractions["unresolved"] == 0.0
    assert bf.attractors == (f"min L={level:.6g}",)
    assert bf.fractions[bf.attractors[0]] == 1.0
    np.testing.assert_allclose([prob.loss(u) for u in bf.final[:4]], level, rtol=1e-9)
    assert np.all(np.isin(bf.status, (int(Status.CONVERGED), int(Status.CONVERGED_LATE))))


@pytest.mark.slow
def test_a_run_short_of_its_budget_is_unresolved_and_summaries_say_so():
    prob, level = factorization(3, 2)
    bf = popdyn.basin_fractions(prob, 64, "gd", lr=0.01, steps=20, seed=3)
    assert bf.fractions["unresolved"] > 0.5 and bf.resolved_fraction == pytest.approx(1 - bf.fractions["unresolved"])
    assert np.all(bf.status[bf.labels < 0] == int(Status.MAX_STEPS))
    assert all(math.isnan(v) or 0 <= v <= 1 for v in bf.fractions_of_resolved.values())


@pytest.mark.slow
def test_a_tiny_scale_landscape_is_not_called_converged_at_the_start():
    """L(θ) = 1e-12·(ab − 1)²/2: the gradient at the start is ~1e-12, under any absolute tolerance; the scale-aware
    rule still runs the flow to the minimum ab = 1. The start (0.3, 0.4) in a batch of the sweep's 64 starts below:
    the scale is a data leaf, so this is the sweep's compiled solver."""
    prob = _product_problem(1.0, scale=1e-12)
    traj = popdyn.gradient_flow(prob, {"a": np.full(64, 0.3), "b": np.full(64, 0.4)}, t1=1e14, ts=None)
    assert np.all(np.asarray(traj.status) == Status.CONVERGED)
    assert np.all(np.asarray(traj.t_final) > 1e11)
    assert np.asarray(traj.final["a"] * traj.final["b"]) == pytest.approx(np.ones(64), abs=1e-6)


# ---- exact hitting times ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_flow_hitting_times_match_the_logistic_closed_form():
    a0 = np.array([0.05, 0.1, 0.3, 0.7])
    eps = 1e-6
    s0, s = a0**2, 1.0 - math.sqrt(2 * eps)
    exact = 0.5 * np.log((1 / s0 - 1) / (1 / s - 1))
    # and, not at step ends: the times vary smoothly with a0 (no ripples), compared with the closed form's slope; both
    # sets of starts in one batch
    a = np.linspace(0.2, 0.21, 11)
    starts = np.concatenate([a0, a])
    ht = popdyn.hitting_times(DLN, {"a": starts, "b": starts}, popdyn.LossBelow(DLN, eps), t1=100.0)
    assert np.all(ht.reached)
    np.testing.assert_allclose(ht.times[: a0.size], exact, rtol=1e-6)
    t = ht.times[a0.size :]
    np.testing.assert_allclose(t, 0.5 * np.log((1 / a**2 - 1) / (1 / s - 1)), rtol=1e-6)
    # a target never met is NaN with the status saying why (the same starts and target class: the same program)
    never = popdyn.hitting_times(DLN, {"a": starts, "b": starts}, popdyn.LossBelow(DLN, -1.0), t1=100.0)
    assert np.all(np.isnan(never.times)) and np.all(never.status == int(Status.CONVERGED))


@pytest.mark.slow
def test_hitting_times_on_a_quadratic_flow_and_gd_are_exact():
    lam = np.array([2.0, 0.5])
    prob = popdyn.Problem.from_loss(lambda x: 0.5 * jnp.sum(lam * x**2), init=jnp.ones(2))
    x0 = np.array([[3.0, 0.0], [0.0, 2.0], [1.0, 0.0]])
    ht = popdyn.hitting_times(prob, x0, popdyn.Distance(jnp.zeros(2), 1e-3), t1=1e3)
    exact = np.log(np.array([3.0, 2.0, 1.0]) / 1e-3) / np.array([2.0, 0.5, 2.0])
    np.testing.assert_allclose(ht.times, exact, rtol=1e-6)
    # GD: |x_k| = (1 − ηλ)^k |x_0|, first k with |x_k| ≤ ε
    gd = popdyn.hitting_times(prob, x0, popdyn.Distance(jnp.zeros(2), 1e-3), method="gd", lr=0.1, steps=500)
    k = np.ceil(np.log(1e-3 / np.array([3.0, 2.0, 1.0])) / np.log(1 - 0.1 * np.array([2.0, 0.5, 2.0])))
    np.testing.assert_array_equal(gd.times, k)
    # a target already met at the start is met at time 0 (one never met: the logistic test above)
    ht = popdyn.hitting_times(prob, np.array([[1e-4, 0.0], [1.0, 1.0]]), popdyn.GradNormBelow(prob, 1e-2), t1=1e3)
    assert ht.times[0] == 0.0 and np.isfinite(ht.times[1])


# ---- basin fractions in any dimension -------------------------------------------------------------------------
@pytest.mark.slow
def test_basin_fractions_in_three_dimensions_match_the_orthant_partition():
    """L = Σ (x_i² − 1)²/4 has minima at the 8 sign vectors, each basin its orthant; from x0 ~ N(μ, I) the basin of s
    has probability Π Φ(s_i μ_i)."""
    mu = np.array([0.3, -0.2, 0.8])
    signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * 3, indexing="ij")).reshape(3, -1).T
    wells = {f"{s.astype(int)}": (lambda x, s=s: jnp.linalg.norm(x - s)) for s in signs}
    prob = popdyn.Problem.from_loss(lambda x: jnp.sum((x**2 - 1) ** 2) / 4, init=jnp.asarray(mu), attractors=wells)
    bf = popdyn.basin_fractions(prob, 4000, seed=7)
    assert bf.fractions["unresolved"] == 0.0
    for s in signs:
        p = float(np.prod(norm.cdf(s * mu)))
        name = f"{s.astype(int)}"
        assert abs(bf.fractions[name] - p) <= 4 * math.sqrt(p * (1 - p) / bf.n) + 1e-12, (name, bf.fractions[name], p)
        assert bf.stderr[name] == pytest.approx(math.sqrt(bf.fractions[name] * (1 - bf.fractions[name]) / bf.n))
    # without theory: the default featuriser lumps the 8 minima (one loss level, index 0); a user featuriser splits them
    # (the same problem and starts, its attractors unused: the runs above and below are one compiled solver)
    inits = jax.vmap(prob.init)(jax.random.split(jax.random.PRNGKey(7), 4000))
    lumped = popdyn.basin_fractions(prob, inits, use_theory=False)
    assert len(lumped.attractors) == 1 and lumped.attractors[0].startswith("min L=")
    assert lumped.fractions[lumped.attractors[0]] == 1.0
    split = popdyn.basin_fractions(prob, inits, use_theory=False, features=jnp.sign, cluster_radius=0.5)
    assert sorted(split.fractions_of_resolved.values()) == pytest.approx(
        sorted(bf.fractions_of_resolved.values()), abs=0
    )


# ---- step-size audits over a sweep ------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_learning_rate_sweep_is_audited_in_one_call():
    """GD on (ab − 1)²/2 from the unbalanced (2.5, 0.1): the minima ab = 1 have λ_max = a² + b², flatter where
    balanced. A large η crosses 2/λ at the start and settles in a flatter minimum: the edge of stability."""
    lrs = np.array([0.05, 0.2, 0.3, 0.42, 0.6])
    th0 = {"a": np.full(5, 2.5), "b": np.full(5, 0.1)}
    traj = popdyn.gradient_descent(DLN, th0, lr=lrs, steps=400, save_params=True)
    audit = popdyn.step_size_audit(DLN, traj, lrs)
    assert list(audit.verdicts()) == ["held", "between", "edge of stability", "edge of stability", "diverged"]
    a, b = (np.asarray(traj.final[k]) for k in "ab")
    np.testing.assert_allclose(audit.lambda_end[:4], (a**2 + b**2)[:4], rtol=1e-9)
    assert np.all(audit.lambda_end[2:4] < 2 / lrs[2:4]) and np.all(audit.max_lambda[2:4] > 2 / lrs[2:4])
    rows = audit.rows()
    assert [r.verdict for r in rows] == list(audit.verdicts()) and rows[1].lr == 0.2
    assert "edge of stability" in audit.verdict(3) and "settled" in audit.verdict(3)
    single = audit.run(3)
    assert single.lr == pytest.approx(0.42) and single.lambda_max.shape == audit.ts.shape[1:]
    with pytest.raises(ValueError, match="lr"):
        popdyn.step_size_audit(DLN, traj, lrs[:3])


@pytest.mark.slow
def test_float32_is_announced_once():
    """Without jax_enable_x64 every entry point warns (once per process) that results are float32."""
    import subprocess
    import sys

    code = (
        "import warnings, jax.numpy as jnp, popdyn\n"
        "prob = popdyn.Problem.from_loss(lambda u: jnp.sum(u**2), init=jnp.ones(2))\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    popdyn.gradient_descent(prob, jnp.ones(2), steps=2)\n"
        "    popdyn.gradient_flow(prob, jnp.ones(2), t1=1.0)\n"
        "print(sum('float32' in str(x.message) for x in w))\n"
    )
    # compile-bound: cheaper code generation (tests/_quick_codegen_a.py); the count of warnings is what is checked
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=quick_codegen_env()
    )
    assert out.stdout.strip() == "1"


def test_slices_through_any_coordinate_of_any_pytree():
    """A 2-D slice through an entry of a matrix inside a tuple θ, by its path; the rest taken from a whole-θ base."""
    prob = popdyn.Problem.from_loss(
        lambda th: jnp.sum(th[0] ** 2) + jnp.sum(th[1]["U"] ** 2), init=(jnp.zeros(2), {"U": jnp.zeros((2, 3))})
    )
    base = (np.array([1.0, 2.0]), {"U": np.full((2, 3), 5.0)})
    grid = popdyn.Grid("[0][1]", "[1]['U'][1,2]", (-1.0, 1.0), (0.0, 3.0), (2, 3), base=base)
    x, u = grid.points(prob)
    assert x.shape == (6, 2) and u["U"].shape == (6, 2, 3)
    np.testing.assert_array_equal(np.asarray(x[:, 1]).reshape(2, 3), np.broadcast_to(grid.xs, (2, 3)))
    np.testing.assert_array_equal(np.asarray(u["U"][:, 1, 2]).reshape(2, 3), np.broadcast_to(grid.ys[:, None], (2, 3)))
    assert np.all(np.asarray(x[:, 0]) == 1.0) and np.sum(np.asarray(u["U"]) == 5.0) == 6 * 5
    with pytest.raises(ValueError, match=r"\[1\]\['V'\]"):
        popdyn.Grid("[0][1]", "[1]['V'][0,0]", (-1.0, 1.0), (0.0, 3.0), (2, 2)).points(prob)


def _product_loss(th, data):
    return data["scale"] * 0.5 * (th["a"] * th["b"] - data["y"]) ** 2


def _product_problem(y, scale=1.0):
    """scale·½(ab − y)²: one manifold of minima ab = y at L = 0, reached at round-off levels that vary with y. The
    scale is a data leaf: the tiny-scale test above runs this sweep's compiled programs."""
    data = {"y": y, "scale": scale}
    return popdyn.Problem.from_loss(_product_loss, init={"a": 0.0, "b": 0.0}, init_scale=1.0, data=data)


@pytest.mark.slow
def test_a_minimum_reached_at_round_off_has_one_name_at_every_point_of_a_sweep():
    """The sweep of ½(ab − y)² over y = 1, 2, 3 reached the minimum at L = 1.1e-16, 2.7e-16 and 2.4e-16, and named
    three attractors "min L=1.14569e-16", "min L=2.72562e-16", "min L=2.38464e-16"; it is "min L=0" everywhere."""
    from popdyn.jobs._sweep import run_sweep

    sw = run_sweep(_product_problem, [("y", np.linspace(1.0, 3.0, 3))], 64, seed=0)
    assert sw.attractors == ("min L=0",)
    for point in sw.points:
        assert point.fractions == {"min L=0": 1.0} and point.resolved_fraction == 1.0
    prob = _product_problem(2.0)  # a data value of the sweep, and its number of starts: the sweep's programs
    bf = popdyn.basin_fractions(prob, 64, seed=1)
    losses = np.asarray(jax.vmap(prob.loss)(bf.final))
    assert np.all(losses < 1e-12) and np.any(losses > 0)  # round-off levels, not exact zeros: the names snap them
    assert bf.attractors == ("min L=0",)
