"""Gradient flow: the §4.4 limits by integration, energy conservation, statuses, per-block time scales."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import popdyn
from popdyn import Status
from popdyn.tasks.markov import Canonical

# the closed forms, compiled once for every (p, q) (array leaves of the problem) instead of run op by op
_energy = jax.jit(Canonical.energy)
_limit = jax.jit(Canonical.predicted_limit)
_limits = jax.jit(jax.vmap(Canonical.predicted_limit, in_axes=(None, 0)))
# single recorded runs from the §4.4 starts and the scipy comparison: tight tolerances and 200 records, one compiled
# solver (gtol: far below any gradient met before the scipy comparison's t1)
PRECISE = dict(rtol=1e-11, atol=1e-13, gtol=1e-11, ts=200, save_params=True)

LIMITS = [  # docs/models/markov.md §4.4: (p, q, e0, w0) -> (e_inf, w_inf)
    (0.1, 0.1, 0.5, -0.5, 2.096374, -0.006171),
    (0.1, 0.1, 0.2, 0.2, 1.405676, 0.782303),
    (0.9, 0.9, 0.2, 0.2, 0.0, 0.192709),
    (0.9, 0.9, 0.5, -1.5, 0.933908, -1.737590),
    (0.5, 0.8, 0.1, 0.1, 0.0, 0.099024),
]


@pytest.mark.slow
@pytest.mark.parametrize("p,q,e0,w0,e_inf,w_inf", LIMITS)
def test_flow_reaches_the_tabulated_limits(p, q, e0, w0, e_inf, w_inf):
    prob = Canonical(p, q)
    theta0 = {"e": jnp.asarray(e0), "w": jnp.asarray(w0)}
    traj = popdyn.gradient_flow(prob, theta0, t1=1e5, **PRECISE)
    assert int(traj.status) == Status.CONVERGED
    # the table of §4.4 gives 6 decimals; the flow itself must hit the closed-form limit to 1e-5 (acceptance)
    assert abs(float(traj.final["e"]) - e_inf) < 1e-5 + 5e-7
    assert abs(float(traj.final["w"]) - w_inf) < 1e-5 + 5e-7
    lim = _limit(prob, theta0)
    assert abs(float(traj.final["e"]) - float(lim["e"])) < 1e-5
    assert abs(float(traj.final["w"]) - float(lim["w"])) < 1e-5
    # Lemma 1: the energy is conserved along the profiled flow (to 1e-8)
    E = np.asarray(_energy(prob, traj.params))
    E = E[np.isfinite(np.asarray(traj.ts))]
    assert np.max(np.abs(E - float(_energy(prob, theta0)))) < 1e-8


# tolerances and record count of the batched Markov runs below (the random batch in chunks of four, the status and
# the horizon tests): they share one compiled solver, t1 and the record times being traced
SHARED = dict(ts=8, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_flow_agrees_with_predicted_limit_on_random_batch():
    """The flow ends at the closed-form limit of §4.4 from 64 random starts away from the separatrix."""
    prob = Canonical(0.2, 0.3)
    key = jax.random.PRNGKey(7)
    z = jax.random.uniform(key, (64, 2), minval=-2.5, maxval=2.5)
    theta0 = {"e": z[:, 0], "w": z[:, 1]}
    far = np.asarray(prob.separatrix_distance(theta0)) > 0.05
    traj = popdyn.gradient_flow(prob, theta0, t1=1e5, chunk_size=4, **SHARED)
    lim = _limits(prob, theta0)
    ok = np.asarray(traj.status) == Status.CONVERGED
    assert ok[far].all()
    for k in ("e", "w"):
        err = np.abs(np.asarray(traj.final[k]) - np.asarray(lim[k]))[far]
        assert err.max() < 1e-5, k


@pytest.mark.slow
def test_flow_matches_scipy_reference():
    """An independent integrator (scipy DOP853) on the same autodiff field, at fixed times (records 100 and 199 of
    200: the solver of the tabulated-limits test)."""
    prob = Canonical(0.5, 0.8)
    theta0 = {"e": jnp.asarray(0.7), "w": jnp.asarray(-1.2)}
    ts = np.concatenate([np.linspace(0.0, 2.5, 100, endpoint=False), np.linspace(2.5, 5.0, 100)])
    traj = popdyn.gradient_flow(prob, theta0, t1=5.0, **(PRECISE | {"ts": ts}))
    g = jax.jit(jax.grad(lambda x: prob.loss({"e": x[0], "w": x[1]})))
    ref = solve_ivp(
        lambda t, y: -np.asarray(g(jnp.asarray(y))),
        (0, 5),
        [0.7, -1.2],
        method="DOP853",
        rtol=1e-12,
        atol=1e-14,
        t_eval=[2.5, 5.0],
    )
    assert ts[100] == 2.5 and ts[199] == 5.0
    got = np.stack([np.asarray(traj.params[k])[[100, 199]] for k in ("e", "w")])
    np.testing.assert_allclose(got, ref.y, atol=1e-9)


@pytest.mark.slow
def test_energy_not_conserved_with_trained_bias():
    """§2.3: along (e, w, b) flow dE/dt = −2e²·ḃ, so E changes unless b stays optimal."""
    prob = Canonical(0.1, 0.1, bias="trained")
    theta0 = {"e": jnp.asarray(0.5), "w": jnp.asarray(0.4), "b": jnp.asarray(1.5)}
    traj = popdyn.gradient_flow(
        prob, theta0, t1=50.0, ts=np.linspace(0, 50, 101), save_params=True, rtol=1e-11, atol=1e-13
    )
    E = np.asarray(_energy(prob, traj.params))
    assert np.ptp(E) > 1e-3  # not conserved

    # exact identity at every recorded point: dE/dt = ∇E·θ̇ = −∇E·∇L equals 2e²·∂L/∂b
    def rates(th):
        gE = jax.grad(prob.energy)(th)
        gL = jax.grad(prob.loss)(th)
        return -(gE["e"] * gL["e"] + gE["w"] * gL["w"]), 2 * th["e"] ** 2 * gL["b"]

    lhs, rhs = jax.jit(jax.vmap(rates))(traj.params)
    np.testing.assert_allclose(np.asarray(lhs), np.asarray(rhs), rtol=1e-10, atol=1e-14)
    assert np.max(np.abs(np.asarray(rhs))) > 1e-3


@pytest.mark.slow
def test_status_reports_each_point_without_killing_the_batch():
    """Four points, four fates in one recorded batch: two converge, one is NaN at the start, one starts at a saddle."""
    prob = Canonical(0.1, 0.1)
    theta0 = {"e": jnp.array([1.0, 0.5, jnp.nan, 0.0]), "w": jnp.array([0.5, -0.5, 0.3, 0.5])}
    traj = popdyn.gradient_flow(prob, theta0, t1=1e4, **SHARED)
    st = np.asarray(traj.status)
    assert st[0] == Status.CONVERGED and st[1] == Status.CONVERGED
    assert st[2] == Status.NAN
    # (0, 0.5) is a local maximum along e for p+q<1: steady, but the Hessian has λ_min < 0
    assert st[3] == Status.SADDLE
    # steady at the start: stopped at t = 0 with no steps, recorded at 0 and NaN after (no target set)
    assert float(traj.t_final[3]) == 0.0 and int(traj.n_steps[3]) == 0
    assert np.isfinite(traj.loss[3, 0]) and np.all(np.isnan(traj.loss[3, 1:]))
    assert np.isfinite(np.asarray(traj.final["e"])[[0, 1, 3]]).all()
    assert traj.status_counts() == {
        "converged": 2,
        "saddle": 1,
        "max_steps": 0,
        "diverged": 0,
        "nan": 1,
        "solver_failed": 0,
        "converged_late": 0,
        "reached": 0,
        "degenerate": 0,
    }


def double_well(t):
    """(x² − 1)²/4 + y²/2: minima at (±1, 0), a saddle at the origin."""
    return 0.25 * (t["x"] ** 2 - 1) ** 2 + 0.5 * t["y"] ** 2


@pytest.mark.slow
def test_max_steps_and_inf_padding_are_masked():
    """Points out of steps far from any critical point are MAX_STEPS, and the records they never reached are NaN (a
    small model: the masking is the engine's, whatever the loss)."""
    prob = popdyn.Problem.from_loss(double_well, {"x": 0.0, "y": 0.0})
    theta0 = {"x": jnp.array([2.5, -2.0]), "y": jnp.array([1.0, 0.5])}
    traj = popdyn.gradient_flow(prob, theta0, t1=1e4, ts=16, max_steps=5)
    assert (np.asarray(traj.status) == Status.MAX_STEPS).all()
    ts = np.asarray(traj.ts)
    assert not np.isinf(ts).any() and not np.isinf(np.asarray(traj.loss)).any()
    assert np.isnan(ts[:, -1]).all()  # not reached: NaN, never inf or a fake value


@pytest.mark.slow
def test_kvaerno5_and_time_scales():
    """Kvaerno5 with the bias on a 10x time scale converges to the optimal logits, as the unscaled Tsit5 flow does;
    the scaled field is 10x faster in b at t = 0. The long and the short Kvaerno5 runs share their settings (the same
    tolerances and record count, only t1 and the record times differ, which are traced), so they are one compiled
    solver; the unscaled run has the settings of the energy test above."""
    prob = Canonical(0.1, 0.1, bias="trained")
    theta0 = {"e": jnp.asarray(0.5), "w": jnp.asarray(0.3), "b": jnp.asarray(0.0)}
    stiff = dict(solver="kvaerno5", save_params=True, time_scales={"b": 10.0}, rtol=1e-12, atol=1e-14)
    fast = popdyn.gradient_flow(prob, theta0, t1=1e4, ts=[0.0, 1e4], **stiff)
    plain = popdyn.gradient_flow(
        prob, theta0, t1=1e4, ts=np.linspace(0, 1e4, 101), save_params=True, rtol=1e-11, atol=1e-13
    )
    assert int(fast.status) == int(plain.status) == Status.CONVERGED
    f0, f1 = jax.jit(Canonical.logits)(prob, fast.final)
    assert abs(float(jax.nn.sigmoid(f0)) - 0.1) < 1e-6 and abs(float(jax.nn.sigmoid(f1)) - 0.9) < 1e-6
    # the field really is scaled: at t=0 the b-velocity is 10x the unscaled one
    g = jax.jit(jax.grad(prob.loss))(theta0)
    tiny = popdyn.gradient_flow(prob, theta0, t1=1e-4, ts=[0.0, 1e-4], **stiff)
    db = (float(tiny.params["b"][1]) - 0.0) / 1e-4
    assert abs(db + 10 * float(g["b"])) < 1e-4 * abs(float(g["b"])) * 10
    with pytest.raises(ValueError, match="time_scales"):
        popdyn.gradient_flow(prob, theta0, time_scales={"zz": 1.0})
    assert isinstance(popdyn.dynamics._flow._solver("tsit5"), diffrax.Tsit5)


@pytest.mark.slow
def test_a_new_horizon_or_new_record_times_reuse_the_compiled_solver():
    """t1 and the record times are traced, not static: after one run, other horizons and other times of the same
    count compile nothing (a basin map or a convergence study over t1 pays one compilation). The first run has the
    settings and shape of the tests above, whose solver it reuses."""
    from _props import no_compilation

    prob = Canonical(0.2, 0.3)
    theta0 = {"e": jnp.array([1.0, -0.5, 0.8, -1.5]), "w": jnp.array([0.5, 0.1, -0.3, 1.0])}
    first = popdyn.gradient_flow(prob, theta0, t1=5.0, **SHARED)
    tol = {k: SHARED[k] for k in ("rtol", "atol")}
    runs = {}
    with no_compilation("gradient_flow compiled again for a new t1 or new record times"):
        for t1, ts in ((7.0, 8), (3.0, np.linspace(0.0, 3.0, 8))):
            runs[t1] = popdyn.gradient_flow(prob, theta0, t1=t1, ts=ts, **tol)
    for t1, again in runs.items():  # inspected outside the block: eager indexing compiles small programs
        assert np.asarray(again.ts)[0, -1] == t1 and again.loss.shape == first.loss.shape
        np.testing.assert_array_equal(again.status, Status.MAX_STEPS)  # still moving at these horizons
    np.testing.assert_array_equal(first.status, Status.MAX_STEPS)


def test_flow_input_validation():
    prob = Canonical(0.1, 0.1)
    th = {"e": jnp.asarray(1.0), "w": jnp.asarray(0.5)}
    with pytest.raises(ValueError, match="t1"):
        popdyn.gradient_flow(prob, th, t1=-1.0)
    with pytest.raises(ValueError, match="solver"):
        popdyn.gradient_flow(prob, th, solver="euler9")
    with pytest.raises(ValueError, match="disagree on the batch axis"):
        popdyn.gradient_flow(prob, {"e": jnp.ones(3), "w": jnp.ones(4)})
    with pytest.raises(ValueError, match=r"theta\['w'\] has shape \(3, 2\)"):
        popdyn.gradient_flow(prob, {"e": jnp.ones(3), "w": jnp.ones((3, 2))})


@pytest.mark.slow
def test_points_stopped_at_the_start_keep_their_records_and_leave_the_others_alone():
    """A start that is already steady (or already at its target) is CONVERGED (REACHED) at t = 0 with no steps and
    no records after 0, inside a recorded batch, and every other point's results are those of a run where a moving
    point takes its place. Every run has a loss target, out of reach (level −1) where the steady start is tested,
    and batches of three: one compiled solver (a steady start without a target: the status test above)."""
    prob = popdyn.Problem.from_loss(lambda th: 0.5 * jnp.sum(jnp.array([1.0, 3.0]) * th**2), init=jnp.zeros(2))
    moving = jnp.array([[1.0, -0.5], [0.2, 2.0]])
    batch = jnp.concatenate([moving, jnp.zeros((1, 2))])
    never = popdyn.LossBelow(prob, -1.0)
    alone = popdyn.gradient_flow(prob, jnp.concatenate([moving, jnp.array([[0.5, 0.5]])]), t1=50.0, ts=8, until=never)
    assert int(alone.status[2]) == Status.CONVERGED and int(alone.n_steps[2]) > 0
    with_start = popdyn.gradient_flow(prob, batch, t1=50.0, ts=8, until=never)
    assert int(with_start.status[2]) == Status.CONVERGED
    assert float(with_start.t_final[2]) == 0.0 and int(with_start.n_steps[2]) == 0
    assert np.isfinite(with_start.loss[2, 0]) and np.all(np.isnan(with_start.loss[2, 1:]))
    for name in ("status", "t_final", "n_steps", "loss", "final_loss"):
        np.testing.assert_array_equal(np.asarray(getattr(with_start, name))[:2], np.asarray(getattr(alone, name))[:2])
    reached = popdyn.gradient_flow(prob, batch, t1=50.0, ts=8, until=popdyn.LossBelow(prob, 5e-3))
    assert int(reached.status[2]) == Status.REACHED and float(reached.t_final[2]) == 0.0
    assert np.all(np.isnan(reached.loss[2, 1:]))
    assert np.all(np.asarray(reached.status[:2]) == Status.REACHED) and np.all(np.asarray(reached.t_final[:2]) > 0)
