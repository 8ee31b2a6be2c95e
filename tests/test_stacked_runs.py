"""Several problems at once (docs/dynamics.md, "Several problems at once"): problems that differ only in their data
run stacked, every start of every problem in one compiled program per chunk; GD's runs are bit for bit those of each
problem run alone, the flow's agree to its stopping tolerance, and a sweep's fractions are those of each point."""

import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn.analysis import basin_sweep
from popdyn.dynamics import GradientDescent, GradientFlow, SaveAt

TILTS = (-0.3, 0.2, 0.4)


def _tilted(th, c):
    """A tilted double well in x times a bowl in y: isolated minima near x = ±1."""
    return (th["x"] ** 2 - 1.0) ** 2 + c * th["x"] + 0.5 * th["y"] ** 2


def _problems(tilts=TILTS):
    return [popdyn.Problem.from_loss(_tilted, init={"x": 0.0, "y": 0.0}, data=jnp.asarray(c)) for c in tilts]


STARTS = {"x": jnp.linspace(-1.6, 1.6, 12), "y": jnp.linspace(0.5, -0.5, 12)}


@pytest.mark.parametrize("save", [SaveAt(), SaveAt(every=50)])
def test_gd_on_a_stack_is_each_problem_run_alone_bit_for_bit(save):
    """End points only (lanes) and every 50 steps recorded: the same end points, losses, statuses and times."""
    gd = GradientDescent(lr=0.05, steps=400, save=save)
    problems = _problems()
    stacked = gd.run_stack(problems, [STARTS] * len(problems))
    for prob, traj in zip(problems, stacked, strict=True):
        alone = gd.run(prob, STARTS)
        for name in ("status", "t_final", "loss", "final_loss"):
            np.testing.assert_array_equal(np.asarray(getattr(traj, name)), np.asarray(getattr(alone, name)), name)
        for k in ("x", "y"):
            np.testing.assert_array_equal(np.asarray(traj.final[k]), np.asarray(alone.final[k]))
        assert traj.dynamics == gd


@pytest.mark.slow  # the flow compiled alone and stacked: ~15 s
def test_the_flow_on_a_stack_agrees_with_each_problem_run_alone_to_its_tolerance():
    """The statuses are equal and the end points differ by at most twice the stopping rule's state tolerance
    δ = atol + rtol·‖θ‖ (both stopped within δ of the same minimum): the vectorised program may round differently,
    and the adaptive step carries that into the path."""
    flow = GradientFlow().end_points()
    problems = _problems()
    for prob, traj in zip(problems, flow.run_stack(problems, [STARTS] * len(problems)), strict=True):
        alone = flow.run(prob, STARTS)
        np.testing.assert_array_equal(np.asarray(traj.status), np.asarray(alone.status))
        a = np.stack([np.asarray(traj.final[k]) for k in ("x", "y")], axis=1)
        b = np.stack([np.asarray(alone.final[k]) for k in ("x", "y")], axis=1)
        delta = flow.stopping.atol + flow.stopping.rtol * np.linalg.norm(b, axis=1)
        assert np.all(np.linalg.norm(a - b, axis=1) <= 2 * delta)


@pytest.mark.slow  # a stacked flow compiled and logged: ~10 s
def test_a_sweep_is_one_compiled_program_and_its_fractions_are_each_points(caplog):
    """A sweep over three tilts compiles the stacked program at most once and no per-problem solver; every point's
    fractions (its two minima) are those of ``basin_fractions`` at that tilt alone (GD, whose runs are the same bit
    for bit)."""
    problems = _problems()
    axes = (("c", np.asarray(TILTS)),)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        basin_sweep(problems, axes, STARTS, stack=True)
    names = [r.getMessage() for r in caplog.records if "Finished XLA compilation" in r.getMessage()]
    assert sum("jit(stacked_call)" in m for m in names) <= 1  # 0 when an earlier test compiled the same stack
    assert not any("jit(_solve_lanes)" in m or "jit(_solve_batch)" in m for m in names)  # no program per problem
    gd = GradientDescent(lr=0.05, steps=400)
    sweep = basin_sweep(problems, axes, STARTS, gd, stack=True)
    for prob, point in zip(problems, sweep.points, strict=True):
        alone = popdyn.basin_fractions(prob, STARTS, gd)
        assert point.fractions == alone.fractions_of_resolved and point.resolved_fraction == alone.resolved_fraction
    assert all(len(point.fractions) == 2 for point in sweep.points)


@pytest.mark.slow  # two problems compiled apart: ~7 s
def test_problems_of_different_structure_run_one_after_another(tmp_path):
    """A static field that differs (here the loss function itself) cannot stack: each problem runs alone, with
    its checkpoint in a folder of its own."""
    other = popdyn.Problem.from_loss(lambda th: _tilted(th, 0.1), init={"x": 0.0, "y": 0.0})
    problems = [_problems()[0], other]
    gd = GradientDescent(lr=0.05, steps=100)
    runs = gd.run_stack(problems, [STARTS, STARTS], chunk_size=8, checkpoint=tmp_path)
    for prob, traj in zip(problems, runs, strict=True):
        np.testing.assert_array_equal(np.asarray(traj.final["x"]), np.asarray(gd.run(prob, STARTS).final["x"]))
    assert sorted(os.listdir(tmp_path)) == ["point-00000", "point-00001"]
    with pytest.raises(ValueError, match="theta0s has 1 batches: must have one per problem"):
        gd.run_stack(problems, [STARTS])


def test_a_stacked_run_resumes_from_its_checkpoint_bit_for_bit(tmp_path):
    """A stack runs in chunks of ``chunk_size`` runs (here 8 over 3 problems: 2 starts a chunk), saved and loaded
    like any run's chunks: the second call computes nothing and returns the same end points."""
    gd = GradientDescent(lr=0.05, steps=100)
    problems = _problems()
    first = gd.run_stack(problems, [STARTS] * 3, chunk_size=8, checkpoint=tmp_path)
    assert len([f for f in os.listdir(tmp_path) if f.startswith("chunk")]) == 6
    again = gd.run_stack(problems, [STARTS] * 3, chunk_size=8, checkpoint=tmp_path)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(np.asarray(a.final["x"]), np.asarray(b.final["x"]))
