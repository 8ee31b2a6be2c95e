"""How far runs that ran out of budget got, in the problem's own time scale (docs/dynamics.md, "Runs that ran out of
budget"): the soft committee machine's plateau, a slow quadratic whose answer is known, scale invariance, and the
commands' budget line."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _budget_models import bowl, scm, scm_loss
from jax.scipy.special import erf

import popdyn
from popdyn.analysis import Motion, budget_report
from popdyn.curvature import krylov_pairs
from popdyn.dynamics._status import AT_MINIMUM
from popdyn.jobs._budget import budget_lines

SCM_T1 = 300.0
"""A horizon inside the soft committee machine's plateau at N = 50 (it ends at t ≈ 10³)."""


def test_the_soft_committee_machines_closed_form_matches_monte_carlo():
    """ε(W) of ``_budget_models.scm_loss`` against the mean of ½(Σ g(w·x/√N) − Σ g(b·x/√N))² over 2¹⁶ Gaussian
    inputs, within 4 standard errors, at a random W."""
    prob = scm(n=50)
    W = prob.init(jax.random.PRNGKey(3))["W"] * 10.0  # order-one fields
    B = prob.data["B"]
    x = jax.random.normal(jax.random.PRNGKey(4), (1 << 16, 50))
    g = lambda u: erf(u / jnp.sqrt(2.0))  # noqa: E731
    err = 0.5 * (jnp.sum(g(x @ W.T / jnp.sqrt(50.0)), 1) - jnp.sum(g(x @ B.T / jnp.sqrt(50.0)), 1)) ** 2
    exact = float(scm_loss({"W": W}, prob.data))
    assert abs(float(jnp.mean(err)) - exact) < 4 * float(jnp.std(err)) / np.sqrt(err.size), exact


@pytest.mark.slow  # an end-to-end run (about 40 CPU-seconds, most of it compiling the flow)
def test_runs_cut_short_on_the_soft_committee_machines_plateau_get_a_horizon_that_resolves_them():
    """From 8 small random starts the flow stops at t = 300 on the symmetric plateau: every run ran out of time
    while still moving, near a plateau (negative curvature: the escape time scale is 1/|λ_min|), and rerunning
    from the same starts to the suggested t1 ends most of them at the teacher (L = 0)."""
    prob = scm(n=50)
    starts = jax.vmap(prob.init)(jax.random.split(jax.random.PRNGKey(0), 8))
    traj = popdyn.GradientFlow(t1=SCM_T1).run(prob, starts)
    report = budget_report(prob, traj)
    assert report.ran_out.all() and np.all(report.motion == Motion.PLATEAU)
    lam_min = np.asarray(popdyn.analysis.lambda_min(prob, traj.final))
    np.testing.assert_allclose(report.time_scale, -1.0 / lam_min, rtol=1e-10)
    summary = report.summary()
    assert summary.motion == "plateau" and summary.ran_out == 8 and summary.horizon == SCM_T1
    (name, t1), *_ = summary.settings
    assert name == "t1" and t1 > SCM_T1
    again = popdyn.GradientFlow(t1=t1).run(prob, starts)
    at_min = np.isin(np.asarray(again.status), AT_MINIMUM)
    assert at_min.mean() >= 0.75, (t1, np.asarray(again.status))
    assert np.all(np.asarray(again.final_loss)[at_min] < 1e-10 * summary.level)


BOWL_LAM = 1e-4
BOWL_STARTS = {"x": jnp.array([[1.0, 2.0], [-3.0, 0.5]])}


@pytest.mark.parametrize("method", ["flow", "gd"])
@pytest.mark.slow
def test_a_slow_quadratics_time_scale_is_one_over_its_curvature_and_its_horizon_the_known_one(method):
    """L = ½λ‖θ‖², λ = 10⁻⁴: the flow (or GD, whose horizon is steps·η) stops at T = 1 far from the minimum. The
    report: relaxing, τ = 1/λ to round-off, r = 2λT (the loss falls by 2λT of its height L over another T), and
    T* = T + ln(‖θ_T‖/atol)/λ, the time at which ‖θ‖ = ‖θ_T‖e^{−λt} reaches the stopping rule's tolerance: a flow
    from θ_T to T* − T ends at the minimum, one to 0.8(T* − T) does not."""
    prob = bowl(BOWL_LAM)
    starts = BOWL_STARTS
    dyn = popdyn.GradientFlow(t1=1.0) if method == "flow" else popdyn.GradientDescent(lr=0.5, steps=2)
    traj = dyn.run(prob, starts)
    report = budget_report(prob, traj)
    assert report.ran_out.all() and np.all(report.motion == Motion.RELAXING)
    np.testing.assert_allclose(report.horizon, 1.0, rtol=1e-15)
    np.testing.assert_allclose(report.time_scale, 1.0 / BOWL_LAM, rtol=1e-12)
    np.testing.assert_allclose(report.rate, 2.0 * BOWL_LAM, rtol=1e-10)
    norm = np.linalg.norm(np.asarray(traj.final["x"]), axis=1)
    np.testing.assert_allclose(report.needed, 1.0 + np.log(norm / dyn.stopping.atol) / BOWL_LAM, rtol=1e-8)
    extra = report.needed - 1.0
    for share, ends in ((1.0, True), (0.8, False)):
        rerun = popdyn.GradientFlow(t1=share * float(extra.max())).run(prob, traj.final)
        assert bool(np.isin(np.asarray(rerun.status), AT_MINIMUM).all()) is ends, (share, rerun.status)
    if method == "gd":  # the steps that stand for T*
        np.testing.assert_array_equal(report.steps, np.ceil(report.needed / 0.5))


def _tilted(theta, data):
    """A saddle at the origin between two wells, times data["c"]: c·((x² − 1)²/4 + y²/2 + 0.1y³)."""
    x, y = theta["x"], theta["y"]
    return data["c"] * ((x**2 - 1.0) ** 2 / 4 + y**2 / 2 + 0.1 * y**3)


@pytest.mark.slow
def test_scaling_the_loss_divides_the_time_scales_and_keeps_the_rate():
    """c·L run to t1/c has the same end points; its report has the same motions and rates r, time scales and
    horizons divided by c, heights times c. Starts near the saddle are on a plateau, the others relax."""
    starts = {"x": jnp.array([1e-4, -2e-4, 0.6, 2.0]), "y": jnp.array([0.5, -0.3, 0.2, 0.1])}
    reports = {}
    for c in (1.0, 1e3, 1e-3):
        prob = popdyn.Problem.from_loss(_tilted, {"x": 0.0, "y": 0.0}, data={"c": c})
        reports[c] = budget_report(prob, popdyn.GradientFlow(t1=2.0 / c).run(prob, starts))
    base = reports[1.0]
    assert list(base.motion) == [Motion.PLATEAU, Motion.PLATEAU, Motion.RELAXING, Motion.RELAXING]
    for c, rep in reports.items():  # the flows themselves are scale-covariant: the end points agree to round-off
        np.testing.assert_array_equal(rep.motion, base.motion)
        np.testing.assert_allclose(rep.rate, base.rate, rtol=1e-12)
        np.testing.assert_allclose(rep.time_scale * c, base.time_scale, rtol=1e-12)
        np.testing.assert_allclose(rep.needed * c, base.needed, rtol=1e-12)
        np.testing.assert_allclose(rep.height / c, base.height, rtol=1e-12)


def _slope_or_logistic(theta, data):
    """a = 0: ½x² + y, a flat direction (y) the gradient points along; a = 1: log(1 + e^{−x}), no minimum."""
    a, x, y = data["a"], theta["x"], theta["y"]
    return (1.0 - a) * (0.5 * x**2 + y) + a * jnp.logaddexp(0.0, -x)


@pytest.mark.slow
def test_runs_along_a_flat_direction_or_out_to_infinity_have_no_horizon():
    """½x² + y moves along y at unit speed forever (no curvature: flat); the logistic loss moves out, x → ∞, L → 0
    (escaping, its height L − 0). Neither has a time scale or a horizon, and the line says why."""
    starts = {"x": jnp.array([1.0, 2.0]), "y": jnp.array([0.0, 0.0])}
    for a, motion, clause in ((0.0, Motion.FLAT, "2 move along flat directions"), (1.0, Motion.ESCAPING, "2 move out")):
        prob = popdyn.Problem.from_loss(_slope_or_logistic, {"x": 0.0, "y": 0.0}, data={"a": a})
        traj = popdyn.GradientFlow(t1=10.0).run(prob, starts)
        report = budget_report(prob, traj)
        assert np.all(report.motion == motion) and np.all(np.isinf(report.time_scale) & np.isinf(report.needed))
        if motion == Motion.ESCAPING:
            np.testing.assert_allclose(report.height, np.asarray(traj.final_loss), rtol=1e-12)
        summary = report.summary()
        assert summary.motion is None and summary.settings == ()
        (line,) = budget_lines(summary)
        assert "ran out of time at t = 10 while still moving (no finite time scale); " + clause in line, line
        assert "try" not in line


@pytest.mark.slow
def test_krylov_pairs_from_full_iterations_give_the_spectral_measure_of_the_start():
    """sᵀHᵏs = Σ_j (u_j·s)² θ_j^k for k = 0…3 at iters = n, against the dense Hessian of a quartic on ℝ⁶."""
    A = np.random.default_rng(0).standard_normal((6, 6))
    prob = popdyn.Problem.from_loss(lambda t: 0.5 * t @ (A @ A.T) @ t + jnp.sum(t**4) / 4, np.zeros(6))
    theta, start = jnp.arange(6.0) / 5, jnp.array([1.0, -2.0, 0.5, 0.0, 3.0, 1.0])
    ritz, vectors = krylov_pairs(prob, theta, start, iters=6)
    H = np.asarray(popdyn.analysis.hessian_matrix(prob, theta))
    w = np.asarray(vectors @ start) ** 2
    for k in range(4):
        exact = start @ np.linalg.matrix_power(H, k) @ start
        np.testing.assert_allclose(np.sum(w * np.asarray(ritz) ** k), exact, rtol=1e-10)


@pytest.mark.validation
def test_a_dynamics_it_does_not_read_is_refused():
    prob = bowl(BOWL_LAM)
    traj = popdyn.GradientFlow(t1=1.0).run(prob, BOWL_STARTS)
    other = dataclasses.replace(traj, dynamics=popdyn.GradientFlow(time_scales={"x": 2.0}))
    with pytest.raises(ValueError, match="GradientFlow: budget_report reads runs of a plain gradient flow"):
        budget_report(prob, other)


@pytest.mark.slow  # three commands end to end
def test_the_commands_say_how_far_runs_that_ran_out_of_time_got(tmp_path, run_cli):
    """basins, converge and sweep of a user model (the slow bowl, λ = 0.01) at t1 = 10 print one budget line and
    write it under "budget"; at the t1 it suggests every run resolves, and there is no line."""
    common = ["--param", "lam=0.01"]
    runs = {
        "basins": ["basins", "_budget_models:bowl", *common, "--grid", "2"],
        "converge": ["converge", "_budget_models:bowl", *common, "--n-init", "4"],
        "sweep": ["sweep", "_budget_models:bowl", "--vary", "lam=0.01:0.02:2", "--n-init", "2"],
    }
    for name, argv in runs.items():
        code, out, err = run_cli(*argv, "--t1", "10", "--out", str(tmp_path / name))
        assert code == 0, err
        budget = json.loads((tmp_path / name / "summary.json").read_text())["results"]["budget"]
        assert budget["ran_out"] == budget["runs"] == 4 and budget["motion"] == "relaxing", budget
        line = next(x for x in out.splitlines() if "budget:" in x)
        assert line.startswith("  budget: 4 of 4 runs ran out of time at t = 10 while still moving"), line
        assert float(line.split("; try --t1 ")[1]) == budget["settings"]["t1"] > 10, line
    t1 = json.loads((tmp_path / "basins" / "summary.json").read_text())["results"]["budget"]["settings"]["t1"]
    code, out, err = run_cli(*runs["basins"], "--t1", str(t1), "--out", str(tmp_path / "again"))
    assert code == 0 and "budget:" not in out, out
    results = json.loads((tmp_path / "again" / "summary.json").read_text())["results"]
    assert results["fractions"]["unresolved"] == 0.0 and results["budget"]["ran_out"] == 0
