"""Lanes that do not wait (docs/dynamics.md, "Lanes"): finished points free their lane for the next one, the work
executed is close to the work needed, and results do not depend on the lane layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import Status
from popdyn.dynamics._lanes import executed_work, run_lanes


def test_run_lanes_runs_every_point_once_and_counts_the_work():
    """Toy lanes: point i needs need[i] unit steps, done 3 per segment. Every point ends with its own count, and the
    work executed is rounds × width × the longest segment of each round, as ``executed_work`` replays it."""
    need = jnp.array([1, 9, 2, 2, 7, 3, 1, 1, 4, 8], dtype=jnp.int32)
    start = lambda n: {"left": n, "did": jnp.int32(0), "seg": jnp.int32(0)}  # noqa: E731
    three = jnp.int32(3)

    def advance(s):
        seg = jnp.minimum(three, s["left"])
        return {"left": s["left"] - seg, "did": s["did"] + seg, "seg": seg}

    out, executed = jax.jit(lambda p: run_lanes(start, advance, lambda s: s["left"] == 0, lambda s: s["seg"], p, 3))(
        need
    )
    np.testing.assert_array_equal(out["did"], need)
    total = executed_work(need, 3, 3)
    assert int(executed) == total == 3 * (3 + 3 + 3 + 1 + 3 + 3 + 2)  # the longest segment of each of 7 rounds
    assert total < len(need) * 3 * 3  # less than every point running as long as the slowest (9 → 3 segments)


@pytest.mark.parametrize("width, segment", [(1, 2), (4, 3), (7, 5), (20, 4)])
def test_executed_work_replays_the_lane_schedule(width, segment):
    """``executed_work`` from the per-point step counts equals the work ``run_lanes`` counts, zero-step points
    included (they take one round)."""
    need = jnp.asarray(np.random.default_rng(width).integers(0, 23, size=17), dtype=jnp.int32)
    seg_ = jnp.int32(segment)
    start = lambda n: {"left": n, "seg": jnp.int32(0), "begun": jnp.bool_(False)}  # noqa: E731

    def advance(s):
        seg = jnp.minimum(seg_, s["left"])
        return {"left": s["left"] - seg, "seg": seg, "begun": jnp.bool_(True)}

    _, executed = jax.jit(
        lambda p: run_lanes(start, advance, lambda s: s["begun"] & (s["left"] == 0), lambda s: s["seg"], p, width)
    )(need)
    assert int(executed) == executed_work(need, width, segment)


def double_well(t):
    """(x² − 1)²/4 + y²/2: minima at (±1, 0), a saddle at the origin reached from every start with x = 0."""
    return 0.25 * (t["x"] ** 2 - 1) ** 2 + 0.5 * t["y"] ** 2


# a small model compiles fast and still gives every kind of end: minima, the saddle (the grid's line x = 0) and, for
# GD at lr = 0.5, divergence from the outer columns; the points need different numbers of steps, so lanes refill
# at different times
PROB = popdyn.Problem.from_loss(double_well, {"x": 0.0, "y": 0.0})
GRID = popdyn.Grid.square("x", "y", -3.0, 3.0, 13)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["flow", "gd"])
def test_lane_results_do_not_depend_on_the_lane_width(method):
    """Two lane widths give the same end points, statuses, step counts and times, bit for bit; the vmapped batch
    (one lane per point) the same statuses and end points within the solver's tolerance."""
    theta = GRID.points(PROB)
    if method == "flow":
        runs = [popdyn.gradient_flow(PROB, theta, t1=1e4, ts=None, lanes=w, lane_steps=16) for w in (8, 16, 10**6)]
    else:
        runs = [
            popdyn.gradient_descent(PROB, theta, lr=0.5, steps=600, record_every=600, lanes=w, lane_steps=16)
            for w in (8, 16, 10**6)
        ]
    a, b, whole = runs
    for k in ("x", "y"):
        np.testing.assert_array_equal(a.final[k], b.final[k])
    np.testing.assert_array_equal(a.status, b.status)
    np.testing.assert_array_equal(a.n_steps, b.n_steps)
    np.testing.assert_array_equal(a.t_final, b.t_final)
    # against every point run in one vmapped batch: the same statuses, end points within the solver's tolerance
    np.testing.assert_array_equal(a.status, whole.status)
    ok = np.isin(a.status, [int(Status.CONVERGED), int(Status.SADDLE)])
    assert ok.mean() > 0.5
    for k in ("x", "y"):
        np.testing.assert_allclose(a.final[k][ok], whole.final[k][ok], atol=1e-6)
    if method == "gd":  # a lane stops at the first segment end where its point is steady
        assert np.all(a.n_steps[ok] % 16 == 0) and a.n_steps[ok].mean() < 0.5 * whole.n_steps[ok].mean()
