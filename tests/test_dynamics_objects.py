"""Dynamics as objects (docs/dynamics.md): GradientFlow and GradientDescent carry every setting of a run, the
Trajectory carries the dynamics, the analyses take an object and read its settings, and a new dynamics is one class
(the docs' own example, executed here)."""

import re
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import popdyn
from popdyn.dynamics import AbstractDynamics, GradientDescent, GradientFlow, SaveAt, Steady, pid_controller
from popdyn.tasks.markov import Canonical

PROB = Canonical(0.9, 0.9)
STARTS = {"e": jnp.array([0.5, -1.0, 1.5, 0.1]), "w": jnp.array([0.3, 1.2, -0.8, 2.0])}
# the basin maps' 5 × 5 grid and the hitting times' 6 starts of tests/data/record_golden.py's Markov cases: runs with
# their settings on these batches are its compiled programs (shared through the test session's compilation cache)
GRID = popdyn.Grid.square("e", "w", -2.0, 2.0, 5)
SIX = {"e": jnp.array([0.5, -1.0, 1.5, 0.1, 0.8, -0.3]), "w": jnp.array([0.3, 1.2, -0.8, 2.0, -0.5, 0.9])}
# the settings that two tests run: the same object compiles its programs once
FLOW_SAVED = GradientFlow(
    t1=50.0,
    solver=diffrax.Dopri5(),
    controller=pid_controller(1e-9, 1e-11),
    stopping=Steady(rtol=1e-9, atol=1e-11),
    save=SaveAt(ts=5, params=True),
)
GD_END = GradientDescent(lr=0.5, steps=300, lanes=8, lane_steps=32)  # the recorded GD basin map's settings
DOCS = Path(__file__).parent.parent / "docs" / "dynamics.md"


def _same(a: popdyn.Trajectory, b: popdyn.Trajectory) -> None:
    for name in ("final", "final_loss", "status", "t_final", "ts", "loss", "grad_norm", "params", "n_steps"):
        jax.tree_util.tree_map(
            lambda x, y, name=name: np.testing.assert_array_equal(x, y, err_msg=name, strict=True),
            getattr(a, name),
            getattr(b, name),
        )


@pytest.mark.slow
def test_the_convenience_functions_are_the_objects_run():
    flow = FLOW_SAVED
    traj = flow.run(PROB, STARTS)
    assert traj.dynamics is flow
    _same(
        traj,
        popdyn.gradient_flow(
            PROB, STARTS, t1=50.0, solver=diffrax.Dopri5(), rtol=1e-9, atol=1e-11, ts=5, save_params=True
        ),
    )
    gd = GradientDescent(lr=0.3, steps=40, momentum=0.5, save=SaveAt(every=8))
    traj = gd.run(PROB, STARTS)
    assert traj.dynamics is gd and traj.loss.shape == (4, 6)
    _same(traj, popdyn.gradient_descent(PROB, STARTS, lr=0.3, steps=40, momentum=0.5, record_every=8))


@pytest.mark.slow
def test_objects_save_end_points_by_default():
    traj = GD_END.run(PROB, GRID.points(PROB))
    assert traj.loss.shape == (25, 2) and traj.params is None
    traj = GradientFlow(t1=20.0).run(PROB, GRID.points(PROB))
    assert traj.ts.shape == (25, 2) and traj.params is None


@pytest.mark.slow
def test_analyses_take_a_dynamics_object_and_match_the_method_names():
    gd = GD_END
    by_object = popdyn.basin_map(PROB, GRID, gd)
    by_name = popdyn.basin_map(PROB, GRID, "gd", lr=0.5, steps=300, lanes=8, lane_steps=32)
    for name in ("labels", "times", "status"):
        np.testing.assert_array_equal(getattr(by_object, name), getattr(by_name, name), strict=True)
    assert by_object.attractors == by_name.attractors and by_object.method == "gd"
    target = popdyn.LossBelow(PROB, 0.4)
    by_object = popdyn.hitting_times(PROB, SIX, target, GradientFlow(t1=200.0))
    by_name = popdyn.hitting_times(PROB, SIX, target, "flow", t1=200.0)
    np.testing.assert_array_equal(by_object.times, by_name.times, strict=True)
    np.testing.assert_array_equal(by_object.status, by_name.status, strict=True)
    assert by_object.reached.any()


@pytest.mark.parametrize("setting", [{"t1": 5.0}, {"lr": 0.2}, {"rtol": 1e-6}])
def test_a_setting_beside_an_object_is_refused(setting):
    name = next(iter(setting))
    with pytest.raises(ValueError, match=f"{name}: settings of the dynamics"):
        popdyn.basin_map(PROB, GRID, GradientFlow(), **setting)
    with pytest.raises(ValueError, match=f"{name}: settings of the dynamics"):
        popdyn.hitting_times(PROB, STARTS, popdyn.LossBelow(PROB, 0.4), GradientDescent(), **setting)


@pytest.mark.slow
def test_the_audit_reads_the_runs_rate_and_momentum():
    """Six starts and rates, 30 steps at momentum 0.5: the recorded audit case's run (tests/data/record_golden.py)."""
    lrs = np.array([0.2, 0.5, 1.0, 2.5, 0.7, 1.2])
    traj = GradientDescent(lr=lrs, steps=30, momentum=0.5, save=SaveAt(every=1, params=True)).run(PROB, SIX)
    audit = popdyn.step_size_audit(PROB, traj)
    np.testing.assert_array_equal(audit.lr, lrs)
    assert audit.momentum == 0.5
    given = popdyn.step_size_audit(PROB, traj, lrs, momentum=0.5)
    np.testing.assert_array_equal(given.lambda_max, audit.lambda_max)
    with pytest.raises(ValueError, match="differs from the run's lr"):
        popdyn.step_size_audit(PROB, traj, 0.2)
    with pytest.raises(ValueError, match="differs from the run's momentum"):
        popdyn.step_size_audit(PROB, traj, momentum=0.0)
    flow = FLOW_SAVED.run(PROB, STARTS)
    with pytest.raises(ValueError, match="lr is required"):
        popdyn.step_size_audit(PROB, flow)


@pytest.mark.slow
def test_each_start_runs_an_optimizer_factory_at_its_own_rate():
    """Adam at six rates in one call is the six one-rate runs (a factory is called with each start's rate). Six
    starts, 50 steps recorded every 10: the recorded Adam case's loop (tests/data/record_golden.py)."""
    lrs = np.array([0.01, 0.05, 0.1, 0.3, 0.02, 0.2])
    both = GradientDescent(lr=lrs, steps=50, optimizer=optax.adam, save=SaveAt(every=10)).run(PROB, SIX)
    for i, lr in enumerate(lrs):
        one = jax.tree_util.tree_map(lambda x, i=i: x[i], SIX)
        alone = GradientDescent(lr=float(lr), steps=50, optimizer=optax.adam, save=SaveAt(every=10)).run(PROB, one)
        np.testing.assert_allclose(both.loss[i], alone.loss, rtol=1e-14, atol=0)
        for key in SIX:
            np.testing.assert_allclose(both.final[key][i], alone.final[key], rtol=1e-14, atol=1e-300)
    built = GradientDescent(lr=lrs, steps=50, optimizer=optax.adam(0.1))
    with pytest.raises(ValueError, match="per-initialisation learning rates need an optimizer given as a factory"):
        built.run(PROB, SIX)


@pytest.mark.validation
@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: GradientFlow(t1=-1.0), "t1"),
        (lambda: GradientFlow(max_steps=0), "max_steps"),
        (lambda: GradientFlow(solver="tsit5"), "solver"),
        (lambda: GradientFlow(controller=diffrax.ConstantStepSize()), "controller"),
        (lambda: GradientFlow(save=SaveAt(every=2)), "every"),
        (lambda: GradientFlow(target=3.0), "target"),
        (lambda: GradientDescent(lr=0.0), "lr"),
        (lambda: GradientDescent(steps=10, save=SaveAt(every=3)), "record_every"),
        (lambda: GradientDescent(save=SaveAt(ts=4)), "ts"),
        (lambda: GradientDescent(momentum=1.0), "momentum"),
        (lambda: GradientDescent(momentum=0.5, optimizer=optax.adam), "momentum"),
        (lambda: GradientDescent(optimizer=3), "optimizer"),
        (lambda: GradientDescent(lanes=0), "lanes"),
        (lambda: Steady(rtol=0.0), "rtol"),
        (lambda: Steady(gtol=-1.0), "gtol"),
        (lambda: SaveAt(every=0), "every"),
        (lambda: pid_controller(icoeff=0.0), "icoeff"),
    ],
)
def test_objects_refuse_bad_settings_when_made(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def _docs_example() -> type:
    """The class of docs/dynamics.md's "Your own dynamics" section, executed from the page itself."""
    section = DOCS.read_text().split("## Your own dynamics", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    namespace: dict = {}
    exec(compile(code.group(1), str(DOCS), "exec"), namespace)
    return namespace["PreconditionedFlow"]


@pytest.mark.slow
def test_a_new_dynamics_is_one_class_and_runs_through_the_analyses():
    """The docs' preconditioned flow θ̇ = −A⁻¹∇L on ½θᵀAθ is θ(t) = e^{−t}θ0 whatever A's conditioning: the time to
    ‖θ‖ ≤ ε is ln(‖θ0‖/ε), and the basin of its one minimum is the whole plane."""
    flow_class = _docs_example()
    assert issubclass(flow_class, AbstractDynamics)
    a = jnp.array([[1e3, 2.0], [2.0, 1e-2]])
    prob = popdyn.Problem.from_loss(lambda t: 0.5 * t @ a @ t, jnp.zeros(2))
    starts = jnp.array([[1.0, 2.0], [-3.0, 0.5], [0.2, -0.1]])
    eps = 1e-3
    dynamics = flow_class(matrix=a, t1=100.0)
    hits = popdyn.hitting_times(prob, starts, popdyn.Distance(jnp.zeros(2), eps), dynamics)
    expected = np.log(np.linalg.norm(starts, axis=1) / eps)
    np.testing.assert_allclose(hits.times, expected, rtol=1e-6)
    traj = dynamics.run(prob, starts)
    assert traj.dynamics is dynamics and list(np.asarray(traj.status)) == [int(popdyn.Status.CONVERGED)] * 3
    bf = popdyn.basin_fractions(prob, starts, dynamics)
    assert bf.fractions_of_resolved == {"min L=0": 1.0} and bf.method == "PreconditionedFlow"
