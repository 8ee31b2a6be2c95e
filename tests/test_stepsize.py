"""Step-size audits (λ_max along GD against 1/η and 2/η) and hitting times / rates (docs/models/markov.md §4.6)."""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import Status
from popdyn.analysis import asymptotic_rate, hitting_time, local_rate
from popdyn.tasks.markov import Canonical

THETA0 = {"e": jnp.asarray(1.0), "w": jnp.asarray(0.5)}
STEPS = 400


def _lambda_star(prob, e, w):
    """§4.6: λ_max at Γ* = [u*v*/(u*+v*)](4e²c² + 16w²e⁴), u* = π1q(1−q), v* = π0p(1−p)."""
    p, q = float(prob.p), float(prob.q)
    c = 1 + 2 * w * abs(w)
    u, v = prob.pi1 * q * (1 - q), prob.pi0 * p * (1 - p)
    return u * v / (u + v) * (4 * e**2 * c**2 + 16 * w**2 * e**4)


@pytest.fixture(scope="module")
def prob():
    return Canonical(0.1, 0.1)


@pytest.fixture(scope="module")
def runs(prob):
    out = {}
    for lr in (0.5, 3.0):
        traj = popdyn.gradient_descent(prob, THETA0, lr=lr, steps=STEPS, save_params=True)
        out[lr] = (traj, popdyn.step_size_audit(prob, traj, lr))
    return out


@pytest.mark.slow
def test_stable_run_is_not_flagged(prob, runs):
    traj, a = runs[0.5]
    assert isinstance(a, popdyn.StepSizeAudit)
    assert a.lr == 0.5
    assert a.ts.shape == a.lambda_max.shape == (STEPS + 1,)
    assert not bool(a.flagged)
    assert bool(a.monotone_safe)
    assert not bool(a.diverged)
    assert int(a.loss_rises) == 0
    assert np.all(np.diff(np.asarray(traj.loss)) <= 1e-15)
    assert int(traj.status) == Status.CONVERGED == int(a.status)
    assert abs(float(traj.loss[-1]) - prob.entropy_rate()) < 1e-9
    assert math.isnan(float(a.first_above_2_over_lr))
    assert math.isnan(float(a.first_above_1_over_lr))  # max λ_max ≈ 1.76 < 1/η = 2
    assert float(a.max_lambda) == pytest.approx(float(np.max(a.lambda_max)), abs=0)
    assert 1.0 < float(a.max_lambda) <= 2.0


def test_unstable_run_is_flagged_and_diverges(prob, runs):
    traj, a = runs[3.0]
    assert bool(a.flagged)
    assert bool(a.diverged)
    assert int(traj.status) == Status.DIVERGED == int(a.status)
    assert int(a.loss_rises) > 0
    assert not bool(a.monotone_safe)
    t2 = float(a.first_above_2_over_lr)
    t1 = float(a.first_above_1_over_lr)
    assert math.isfinite(t2) and 0 <= t2 <= STEPS
    assert math.isfinite(t1) and t1 <= t2
    # the first record past 2/η really is the first one
    lam = np.asarray(a.lambda_max)
    k = int(np.flatnonzero(np.asarray(a.ts) == t2)[0])
    assert lam[k] > 2 / 3.0 and np.all(lam[:k] <= 2 / 3.0)
    assert float(a.max_lambda) > 2 / 3.0


@pytest.mark.slow
@pytest.mark.parametrize("lr", [0.5, 3.0])
def test_audit_lambda_max_matches_recomputation(prob, runs, lr):
    traj, a = runs[lr]
    idx = np.array([0, 1, 2, 10, 100, STEPS])
    theta = {k: v[idx] for k, v in traj.params.items()}
    np.testing.assert_allclose(a.lambda_max[idx], np.asarray(popdyn.lambda_max(prob, theta)), rtol=1e-12, atol=0)
    np.testing.assert_array_equal(a.ts[idx], idx.astype(float))


def test_lambda_max_at_the_end_matches_section_4_6(prob, runs):
    traj, a = runs[0.5]
    e, w = float(traj.params["e"][-1]), float(traj.params["w"][-1])
    assert float(prob.gap({"e": e, "w": w})) == pytest.approx(prob.optimal_gap(), abs=1e-8)  # on Γ*
    assert float(a.lambda_max[-1]) == pytest.approx(_lambda_star(prob, e, w), abs=1e-8)
    # and this run stayed below the GD stability edge 2/λ_max at its limit
    assert 0.5 < 2.0 / float(a.lambda_max[-1])


@pytest.mark.slow
def test_batched_audit_gives_per_run_arrays(prob, runs):
    theta0 = {"e": jnp.array([1.0, 0.3]), "w": jnp.array([0.5, -1.2])}
    traj = popdyn.gradient_descent(prob, theta0, lr=0.5, steps=STEPS, save_params=True)
    a = popdyn.step_size_audit(prob, traj, 0.5)
    assert a.ts.shape == a.lambda_max.shape == (2, STEPS + 1)
    for name in ("max_lambda", "first_above_1_over_lr", "first_above_2_over_lr", "loss_rises", "status"):
        assert np.shape(getattr(a, name)) == (2,), name
    assert np.shape(a.flagged) == np.shape(a.monotone_safe) == np.shape(a.diverged) == (2,)
    # row 0 is the single run from the same θ0
    _, single = runs[0.5]
    np.testing.assert_allclose(a.lambda_max[0], single.lambda_max, rtol=1e-12, atol=0)
    assert a.max_lambda[0] == pytest.approx(float(single.max_lambda), rel=1e-12)
    assert a.loss_rises[0] == int(single.loss_rises)
    # row 1 is its own run
    idx = np.array([0, 50, STEPS])
    theta = {k: v[1, idx] for k, v in traj.params.items()}
    np.testing.assert_allclose(a.lambda_max[1, idx], np.asarray(popdyn.lambda_max(prob, theta)), rtol=1e-12)
    np.testing.assert_allclose(a.max_lambda, np.max(a.lambda_max, axis=-1), rtol=0, atol=0)
    assert not np.allclose(a.lambda_max[0], a.lambda_max[1])


@pytest.mark.slow
def test_audit_rejects_missing_params_and_bad_lr(prob, runs):
    """The runs of the fixture's settings: with saved parameters it is the fixture's compiled loop; without, the one
    of test_descent.py's records test (the test session's compilation cache)."""
    traj = popdyn.gradient_descent(prob, THETA0, lr=0.5, steps=STEPS, record_every=20)
    assert traj.params is None
    with pytest.raises(ValueError, match="save_params"):
        popdyn.step_size_audit(prob, traj, 0.5)
    traj, _ = runs[0.5]
    for lr in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lr"):
            popdyn.step_size_audit(prob, traj, lr)


# ---- hitting times and rates ------------------------------------------------------------------
def _quadratic(curvature: float):
    """L(x) = ½λx² in one coordinate: λ_max = λ everywhere."""
    return popdyn.Problem.from_loss(
        lambda t, d: 0.5 * d["lam"] * t["x"] ** 2, {"x": jnp.asarray(1.0)}, data={"lam": curvature}
    )


@pytest.mark.parametrize(
    ("eta_lam", "mu", "verdict", "status"),
    [
        (0.2, 0.25, "held", Status.CONVERGED),  # ηλ ≤ (1 − √μ)² = 0.25: real roots, no oscillation
        (0.5, 0.25, "between", Status.CONVERGED),  # complex roots: it oscillates, and converges
        (3.0, 0.9, "between", Status.CONVERGED),  # past 2/η, yet below 2(1 + μ)/η = 3.8/η: stable
        (3.9, 0.9, "diverged", Status.DIVERGED),  # past 2(1 + μ)/η
    ],
)
def test_heavy_ball_thresholds_are_those_of_the_recursion(eta_lam, mu, verdict, status):
    """With momentum μ the audit compares λ_max with (1 − √μ)²/η and 2(1 + μ)/η [derived, docs/dynamics.md]:
    a heavy-ball run on ½λx² oscillates exactly above the first and diverges exactly above the second."""
    prob = _quadratic(1.0)
    traj = popdyn.gradient_descent(prob, {"x": jnp.asarray(1.0)}, lr=eta_lam, steps=600, momentum=mu, save_params=True)
    audit = popdyn.step_size_audit(prob, traj, eta_lam, momentum=mu)
    assert int(traj.status) == status
    assert audit.row().verdict == verdict
    assert (audit.loss_rises == 0) == (verdict == "held")
    assert audit.monotone_threshold == pytest.approx((1 - math.sqrt(mu)) ** 2 / eta_lam)
    assert audit.stability_threshold == pytest.approx(2 * (1 + mu) / eta_lam)
    as_plain = dataclasses.replace(traj, dynamics=None)  # a record that forgot its momentum, read as plain GD:
    plain = popdyn.step_size_audit(prob, as_plain, eta_lam)  # the stable 3.0 run would be "unstable"
    assert bool(plain.flagged) == (eta_lam > 2)
    row = audit.row()
    assert row.momentum == mu and row.stability_threshold == pytest.approx(2 * (1 + mu) / eta_lam)
    names = ["momentum", "monotone_threshold", "stability_threshold"]
    assert list(audit.summary()) == list(row.json()) and list(row.json())[5:8] == names  # with μ: its thresholds


def test_hitting_time_on_exponential_decay():
    d0, r = 3.0, 0.7
    ts = np.linspace(0.0, 40.0, 4001)
    dist = d0 * np.exp(-r * ts)
    for eps in (1e-2, 1e-5, 1e-9):
        assert hitting_time(ts, dist, eps) == pytest.approx(math.log(d0 / eps) / r, abs=1e-6)
    # already inside at the first record
    assert hitting_time(ts, dist, 10.0) == 0.0
    # never reached
    assert math.isnan(hitting_time(ts, dist, 1e-20))
    # non-finite records (a run that stopped early) are ignored
    dist_nan = dist.copy()
    dist_nan[2000:] = np.nan
    assert math.isnan(hitting_time(ts, dist_nan, 1e-9))
    assert hitting_time(ts, dist_nan, 1e-2) == pytest.approx(math.log(d0 / 1e-2) / r, abs=1e-6)


def test_hitting_time_is_the_last_entry():
    """First time after which dist stays ≤ ε, not the first crossing."""
    ts = np.array([0.0, 1.0, 2.0, 3.0])
    dist = np.array([1.0, 1e-4, 1.0, 1e-4])
    assert hitting_time(ts, dist, 1e-2) == pytest.approx(2.5, abs=1e-12)


def test_asymptotic_rate_recovers_r():
    r = 0.37
    ts = np.linspace(0.0, 60.0, 601)
    dist = 2.0 * np.exp(-r * ts)
    assert asymptotic_rate(ts, dist, hi=1e-2, lo=1e-8) == pytest.approx(r, rel=1e-9)
    assert math.isnan(asymptotic_rate(ts, dist, hi=1e-30, lo=1e-40))  # fewer than 3 records in the window


def test_local_rate_at_global_minimum_is_lambda_star():
    prob = Canonical(0.1, 0.1)
    for w in (0.5, -0.3, 2.0):
        e = math.sqrt(prob.optimal_gap() / (1 + 2 * w * abs(w)))
        rate = local_rate(prob, {"e": jnp.asarray(e), "w": jnp.asarray(w)})
        assert rate == pytest.approx(_lambda_star(prob, e, w), rel=1e-9)


@pytest.mark.parametrize("p,q", [(0.9, 0.9), (0.5, 0.8)])
def test_local_rate_at_local_minimum(p, q):
    """§4.6: at (0, w) with p+q > 1 and c(w) > 0, e decays at rate 2c(w)·π0π1(p+q−1)."""
    prob = Canonical(p, q)
    for w in (0.5, -0.3, 1.5):
        rate = local_rate(prob, {"e": jnp.asarray(0.0), "w": jnp.asarray(w)})
        c = 1 + 2 * w * abs(w)
        assert rate == pytest.approx(2 * c * prob.pi0 * prob.pi1 * (p + q - 1), rel=1e-9)


def test_local_rate_is_nan_at_a_maximum():
    prob = Canonical(0.1, 0.1)
    assert math.isnan(local_rate(prob, {"e": jnp.asarray(0.0), "w": jnp.asarray(0.5)}))


@pytest.mark.slow
def test_stepsize_commands_take_the_momentum_they_audit(run_cli, tmp_path):
    """``--momentum`` reaches both the run and its audit (thresholds recorded), and μ ≥ 1 is refused."""
    import json

    out = tmp_path / "o"
    code, _, err = run_cli("stepsize", "markov", "--momentum", "0.5", "--lr", "0.5", "--steps", "50", "--out", str(out))
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    run = summary["results"]["runs"][0]
    assert summary["inputs"]["momentum"] == 0.5 and run["momentum"] == 0.5
    assert run["stability_threshold"] == pytest.approx(2 * 1.5 / 0.5)
    assert run["monotone_threshold"] == pytest.approx((1 - math.sqrt(0.5)) ** 2 / 0.5)
    code, _, err = run_cli("stepsize", "markov", "--momentum", "1", "--out", str(tmp_path / "bad"))
    assert code == 2 and "momentum=1.0 is out of range" in err and not (tmp_path / "bad").exists()


def test_audit_rows_carry_status_and_final_loss_and_the_figure_names_each_rate_once():
    """Each run's row says how it ended (status, loss at its end point); the figure of eight rates has a legend of
    three line styles over λ_max and one entry per rate over the loss, not 4 × 8 entries."""
    from popdyn.plot import plot_step_size_audit

    prob = _quadratic(1.0)
    lrs = np.linspace(0.2, 2.4, 8)
    traj = popdyn.gradient_descent(prob, {"x": jnp.ones(8)}, lr=lrs, steps=30, save_params=True)
    audit = popdyn.step_size_audit(prob, traj)
    rows = audit.rows()
    assert [r.status for r in rows] == [traj.status_names[s] for s in np.asarray(traj.status)]
    assert {r.status for r in rows} >= {"converged", "max_steps"}  # η = 2.4 > 2/λ: still growing at step 30
    np.testing.assert_array_equal([r.final_loss for r in rows], np.asarray(traj.final_loss))
    assert [list(r) for r in audit.summary()] == [list(r.json()) for r in rows]
    assert "momentum" not in rows[0].json()  # plain GD: no μ fields in summary.json
    losses = list(np.asarray(traj.loss))
    fig = plot_step_size_audit([audit.run(i) for i in range(8)], losses, [f"η = {v:g}" for v in lrs])
    top, bottom = fig.axes[:2]
    assert [t.get_text() for t in top.get_legend().get_texts()] == [
        "λ_max(θ_t)",
        "2/η (stability edge)",
        "1/η (no oscillation)",
    ]
    assert len(bottom.get_legend().get_texts()) == 8


def _bowl(theta, c):
    return 0.5 * c * theta["x"] ** 2


@pytest.mark.parametrize("scale", [1.0, 1e-14])
def test_loss_rises_are_counted_at_the_run_s_own_scale(scale):
    """GD on ½c·x² at η = 2.5/c multiplies L by (1 − 2.5)² = 2.25 each step: it rises at every one of 20 steps,
    whatever c. A rise was once counted only above 1e-12·max(1, |L|), so at c = 1e-14 the early rises (below 1e-12)
    went uncounted; the slack is now relative to the run's own start."""
    prob = popdyn.Problem.from_loss(_bowl, init={"x": 0.0}, data=jnp.asarray(scale))
    traj = popdyn.gradient_descent(prob, {"x": jnp.asarray(1.0)}, lr=2.5 / scale, steps=20, save_params=True)
    loss = np.asarray(traj.loss)
    np.testing.assert_allclose(loss[1:] / loss[:-1], 2.25, rtol=1e-12)
    assert int(popdyn.step_size_audit(prob, traj).loss_rises) == 20
