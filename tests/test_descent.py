"""Gradient descent: exact update rule, records, optax, per-block rates, statuses, batching."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import popdyn
from popdyn import Status
from popdyn.tasks.markov import Canonical


def coupled(t):
    """½(ew − 1)² + ½(b − e)² + w⁴/4: three blocks, each one's gradient depending on the others."""
    return 0.5 * (t["e"] * t["w"] - 1.0) ** 2 + 0.5 * (t["b"] - t["e"]) ** 2 + 0.25 * t["w"] ** 4


# the update rules, optimizers, hooks and records are the engine's whatever the loss: the tests of them run on this
# small three-block loss, which compiles fast; the tests of statuses use the Markov model's known critical points
COUPLED = popdyn.Problem.from_loss(coupled, {"e": 0.0, "w": 0.0, "b": 0.0})
GRAD = jax.jit(jax.grad(coupled))  # the hand-written loops' gradient: one program, not op by op


def test_plain_gd_is_the_exact_update_rule():
    prob = COUPLED
    theta = {"e": jnp.asarray(0.7), "w": jnp.asarray(-0.4), "b": jnp.asarray(0.2)}
    traj = popdyn.gradient_descent(prob, theta, lr=0.3, steps=5, save_params=True)
    ref = dict(theta)
    for k in range(5):
        g = GRAD(ref)
        ref = {n: ref[n] - 0.3 * g[n] for n in ref}
        for n in ref:
            assert abs(float(traj.params[n][k + 1]) - float(ref[n])) < 1e-15
    np.testing.assert_array_equal(np.asarray(traj.ts), np.arange(6.0))
    assert abs(float(traj.loss[-1]) - float(prob.loss(ref))) < 1e-15


def test_records_every_k_and_convergence_step():
    prob = Canonical(0.1, 0.1)
    theta = {"e": jnp.asarray(1.0), "w": jnp.asarray(0.5)}
    traj = popdyn.gradient_descent(prob, theta, lr=0.5, steps=400, record_every=20)
    assert traj.loss.shape == (21,) and traj.grad_norm.shape == (21,)
    np.testing.assert_array_equal(np.asarray(traj.ts), np.arange(0, 401, 20.0))
    assert int(traj.status) == Status.CONVERGED
    assert abs(float(traj.loss[-1]) - prob.entropy_rate()) < 1e-12
    gn = np.asarray(traj.grad_norm)
    first = float(traj.t_final)
    assert gn[int(first // 20)] < 1e-9 and (first == 0 or gn[int(first // 20) - 1] >= 1e-9)
    assert np.all(np.diff(np.asarray(traj.loss)) <= 1e-15)  # η = 0.5 < 1/λ_max along this run: monotone
    with pytest.raises(ValueError, match="multiple of record_every"):
        popdyn.gradient_descent(prob, theta, lr=0.5, steps=401, record_every=20)


@pytest.mark.slow
def test_optax_optimizer_matches_hand_written_momentum():
    prob = COUPLED
    theta = {"e": jnp.asarray(0.5), "w": jnp.asarray(0.1), "b": jnp.asarray(0.0)}
    traj = popdyn.gradient_descent(
        prob, theta, lr=0.1, steps=30, optimizer=optax.sgd(0.1, momentum=0.9), save_params=True
    )
    ref, vel = dict(theta), {n: 0.0 for n in theta}
    for _ in range(30):
        g = GRAD(ref)
        vel = {n: 0.9 * vel[n] + g[n] for n in ref}
        ref = {n: ref[n] - 0.1 * vel[n] for n in ref}
    for n in ref:
        assert abs(float(traj.final[n]) - float(ref[n])) < 1e-13
    # a factory is called with lr
    a = popdyn.gradient_descent(prob, theta, lr=0.05, steps=10, optimizer=optax.adam)
    b = popdyn.gradient_descent(prob, theta, lr=0.05, steps=10, optimizer=optax.adam(0.05))
    for n in ref:
        assert float(a.final[n]) == float(b.final[n])


def test_per_block_learning_rates():
    prob = COUPLED
    theta = {"e": jnp.asarray(0.5), "w": jnp.asarray(0.3), "b": jnp.asarray(0.4)}
    traj = popdyn.gradient_descent(prob, theta, lr=0.1, steps=1, time_scales={"b": 5.0, "w": 0.5})
    g = jax.grad(prob.loss)(theta)
    assert abs(float(traj.final["b"]) - (0.4 - 0.5 * float(g["b"]))) < 1e-15
    assert abs(float(traj.final["w"]) - (0.3 - 0.05 * float(g["w"]))) < 1e-15
    assert abs(float(traj.final["e"]) - (0.5 - 0.1 * float(g["e"]))) < 1e-15


@pytest.mark.slow
def test_batch_statuses_and_frozen_divergence():
    """Every point of a batch gets its own status; a diverging point is frozen at its last point within the bound.
    Both batches have four points and the same divergence bound (1e4, far above the converging points' norms), so
    they run one compiled loop."""
    prob = Canonical(0.1, 0.1)
    theta = {"e": jnp.array([1.0, 1.0, jnp.inf, 0.0]), "w": jnp.array([0.5, 0.5, 0.2, 0.5])}
    traj = popdyn.gradient_descent(prob, theta, lr=0.5, steps=200, diverge=1e4)
    st = np.asarray(traj.status)
    assert st[0] == st[1] == Status.CONVERGED
    assert st[2] == Status.NAN
    assert st[3] == Status.SADDLE  # (0, 0.5): a local maximum along e for p+q < 1
    bad = popdyn.gradient_descent(
        prob,
        {"e": jnp.array([1.0, 0.3, 0.5, -1.0]), "w": jnp.array([0.5, 0.1, -0.5, 0.2])},
        lr=3.0,
        steps=200,
        diverge=1e4,
    )
    assert int(bad.status[0]) == Status.DIVERGED
    last = {n: bad.final[n][0] for n in ("e", "w")}
    assert np.hypot(float(last["e"]), float(last["w"])) <= 1e4  # frozen at the last point within the bound
    g = jax.grad(prob.loss)(last)
    assert np.hypot(float(last["e"] - 3.0 * g["e"]), float(last["w"] - 3.0 * g["w"])) > 1e4  # next step blows up


@pytest.mark.validation
def test_unbatched_in_unbatched_out_and_validation():
    """An unbatched start gives unbatched results (the steps and records of the records test above: one compiled
    loop); bad settings are refused, naming the parameter."""
    prob = Canonical(0.1, 0.1)
    traj = popdyn.gradient_descent(prob, {"e": 0.5, "w": 0.2}, lr=0.5, steps=400, record_every=20)
    assert np.shape(traj.final["e"]) == () and np.shape(traj.status) == () and traj.loss.shape == (21,)
    for kw, match in [
        ({"lr": 0.0}, "lr="),
        ({"steps": 0}, "steps="),
        ({"record_every": 0}, "record_every="),
        ({"optimizer": 3}, "optimizer="),
    ]:
        with pytest.raises(ValueError, match=match):
            popdyn.gradient_descent(prob, {"e": 0.5, "w": 0.2}, **{"lr": 0.1, "steps": 10, **kw})


# reference flows, recorded at 0 and t1: tight tolerances, and gtol far below any gradient met before t1 so that no
# point stops early; the two tests below share these settings (one compiled solver)
FLOW_REF = dict(save_params=True, rtol=1e-12, atol=1e-14, gtol=1e-14)


@pytest.mark.slow
def test_gd_approaches_flow_for_small_steps():
    """GD with η → 0 follows the flow: at time T = η·n, positions agree to O(η). Both step sizes run the same 200
    steps recorded every 100 (one compiled loop): T = 2 is step 100 at η = 0.02 and step 200 at η = 0.01."""
    prob = COUPLED
    theta = {"e": jnp.asarray(0.7), "w": jnp.asarray(-0.4), "b": jnp.asarray(0.2)}
    flow = popdyn.gradient_flow(prob, theta, t1=2.0, ts=[0.0, 2.0], **FLOW_REF)
    errs = []
    for lr in (0.02, 0.01):
        gd = popdyn.gradient_descent(prob, theta, lr=lr, steps=200, record_every=100, save_params=True)
        at_2 = int(round(2.0 / lr)) // 100
        assert np.asarray(gd.ts)[at_2] * lr == pytest.approx(2.0)
        errs.append(max(abs(np.asarray(gd.params[n])[at_2] - np.asarray(flow.params[n])[-1]) for n in theta))
    assert errs[1] < 0.6 * errs[0] and errs[1] < 5e-3  # first-order convergence in η


@pytest.mark.slow
def test_precondition_prox_and_noise_are_the_exact_update_rule():
    """θ ← prox(θ − η(P(∇L) + σξ), η) with ξ from one stream per initialisation and step."""
    prob = COUPLED
    theta = {"e": jnp.asarray(0.7), "w": jnp.asarray(-0.4), "b": jnp.asarray(0.2)}

    def precondition(g):
        return {"e": 2.0 * g["e"], "w": g["w"] + g["b"], "b": g["b"]}

    prox = popdyn.dynamics.L1Prox({"w": 0.5})
    lr, steps = 0.2, 6
    traj = popdyn.gradient_descent(
        prob, theta, lr=lr, steps=steps, precondition=precondition, prox=prox, save_params=True
    )
    ref = dict(theta)
    for k in range(steps):
        d = precondition(GRAD(ref))
        ref = {n: ref[n] - lr * d[n] for n in ref}
        ref["w"] = jnp.sign(ref["w"]) * jnp.maximum(jnp.abs(ref["w"]) - lr * 0.5, 0.0)
        for n in ref:
            assert abs(float(traj.params[n][k + 1]) - float(ref[n])) < 1e-15
    # noise: zero-mean, variance σ² per entry and step; the same seed gives the same run, another seed not. One step
    # from 4000 starts: one lane per start (lanes=4000), the plain vmapped batch, whose loop compiles in about half
    # the time of a lane schedule's
    batch = jax.tree_util.tree_map(lambda x: jnp.full(4000, x), theta)
    one_step = dict(lr=lr, steps=1, lanes=4000)
    noisy = popdyn.gradient_descent(prob, batch, noise=0.3, seed=1, **one_step)
    clean = popdyn.gradient_descent(prob, theta, lr=lr, steps=1)
    xi = (np.asarray(clean.final["e"]) - np.asarray(noisy.final["e"])) / lr
    assert abs(xi.mean()) < 4 * 0.3 / np.sqrt(4000) and abs(xi.std() / 0.3 - 1) < 0.05
    again = popdyn.gradient_descent(prob, batch, noise=0.3, seed=1, **one_step)
    other = popdyn.gradient_descent(prob, batch, noise=0.3, seed=2, **one_step)
    np.testing.assert_array_equal(again.final["e"], noisy.final["e"])
    assert not np.allclose(other.final["e"], noisy.final["e"])

    # a stochastic gradient hook replaces ∇L: here ∇L + N(0, 0.3²) drawn from the step's key, i.e. the same
    # law as noise=0.3 (not the same draws)
    def sampled(th, key):
        return jax.tree_util.tree_map(lambda g: g + 0.3 * jax.random.normal(key, g.shape), jax.grad(prob.loss)(th))

    hooked = popdyn.gradient_descent(prob, batch, gradient=sampled, seed=1, **one_step)
    xi = (np.asarray(clean.final["e"]) - np.asarray(hooked.final["e"])) / lr
    assert abs(xi.mean()) < 4 * 0.3 / np.sqrt(4000) and abs(xi.std() / 0.3 - 1) < 0.05
    # per-block levels: only "w" is noisy
    blocks = popdyn.gradient_descent(prob, batch, noise={"w": 0.3}, seed=1, **one_step)
    np.testing.assert_allclose(blocks.final["e"], np.broadcast_to(clean.final["e"], (4000,)), atol=1e-15)
    xi_w = (np.asarray(clean.final["w"]) - np.asarray(blocks.final["w"])) / lr
    assert abs(xi_w.std() / 0.3 - 1) < 0.05
    with pytest.raises(ValueError, match="noise"):
        popdyn.gradient_descent(prob, theta, noise=-1.0)
    with pytest.raises(ValueError, match="noise"):
        popdyn.gradient_descent(prob, theta, noise={"x": 1.0})
    with pytest.raises(ValueError, match="strength"):
        popdyn.dynamics.L1Prox({"w": -1.0})


@pytest.mark.slow
def test_preconditioned_flow():
    """θ̇ = −P(∇L): with P = 2·identity the flow runs twice as fast (the unpreconditioned flow has the settings of the
    reference flow above)."""
    prob = COUPLED
    theta = {"e": jnp.asarray(0.7), "w": jnp.asarray(-0.4), "b": jnp.asarray(0.2)}
    double = lambda g: {k: 2 * v for k, v in g.items()}  # noqa: E731
    fast = popdyn.gradient_flow(prob, theta, t1=1.0, ts=[0.0, 1.0], precondition=double, **FLOW_REF)
    slow = popdyn.gradient_flow(prob, theta, t1=2.0, ts=[0.0, 2.0], **FLOW_REF)
    for k in theta:
        assert abs(float(fast.final[k]) - float(slow.final[k])) < 1e-9


@pytest.mark.slow
def test_metrics_hook_records_user_quantities():
    """metrics(θ) at every record equals the same function of the saved parameters; batched and not."""
    prob = COUPLED
    theta = {"e": jnp.asarray(0.7), "w": jnp.asarray(-0.4), "b": jnp.asarray(0.2)}

    def metrics(th):
        return {"ew": th["e"] * th["w"], "loss2": 2 * prob.loss(th)}

    traj = popdyn.gradient_descent(prob, theta, lr=0.3, steps=12, record_every=3, save_params=True, metrics=metrics)
    np.testing.assert_allclose(traj.metrics["ew"], traj.params["e"] * traj.params["w"], rtol=1e-15)
    np.testing.assert_allclose(traj.metrics["loss2"], 2 * traj.loss, rtol=1e-15)
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x, -x]), theta)
    tb = popdyn.gradient_descent(prob, batch, lr=0.3, steps=12, record_every=3, metrics=metrics)
    assert tb.metrics["ew"].shape == (2, 5) and tb.params is None
    np.testing.assert_allclose(tb.metrics["ew"][0], traj.metrics["ew"], rtol=1e-15)


@pytest.mark.parametrize("lanes", [None, 1])
def test_gd_reaching_its_target_stops_at_the_step_that_met_it(lanes):
    """With ``until``, the end point of a REACHED run is θ_k at its t_final = k (the first step with until ≤ 0), in
    the recorded batch path and through lanes: x_k = (1 − η)^k x_0 on ½x², so the end loss is at the target level
    and one step earlier it was above it."""
    prob = popdyn.Problem.from_loss(lambda x: 0.5 * jnp.sum(x**2), init=jnp.ones(2))
    x0 = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    level = 1e-2
    traj = popdyn.gradient_descent(
        prob, x0, lr=0.1, steps=100, record_every=100, lanes=lanes, lane_steps=4, until=popdyn.LossBelow(prob, level)
    )
    k = np.asarray(traj.t_final)
    assert np.all(np.asarray(traj.status) == Status.REACHED)
    end = 0.5 * np.sum(x0**2, axis=1) * 0.81**k  # ½|x_0|²(1 − η)^(2k)
    np.testing.assert_allclose(np.asarray(traj.final), x0 * 0.9 ** k[:, None], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(traj.final_loss), end, rtol=1e-12)
    assert np.all(end <= level) and np.all(end / 0.81 > level)
