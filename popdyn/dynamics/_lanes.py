"""Lanes that do not wait: a batch of initialisations run through a fixed number of vmapped lanes, each lane taking
the next initialisation from the queue as soon as its point is finished (docs/dynamics.md, "Lanes").

Under ``vmap`` a loop runs every member as long as its slowest one. Here the work is cut into segments (a fixed
number of solver or GD steps); after each segment finished lanes write their point's result and load the next point,
so executed work is about the sum of what each point needs, not batch size × the slowest point. A point's segments
start at multiples of its own step count, whatever lane it runs in, so its arithmetic does not depend on the lane
it ran in or on the queue's order; only XLA's vectorisation of the lane batch can change the last bits (on CPU,
widths 8 and 16 agree bit for bit; 7 and 13 differed by 5e-8 relative in 2 of 144 end points).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, PyTree


def _where(mask: Array, a: PyTree, b: PyTree) -> PyTree:
    return jax.tree_util.tree_map(lambda x, y: jnp.where(mask.reshape((-1,) + (1,) * (x.ndim - 1)), x, y), a, b)


def run_lanes(
    start: Callable[[PyTree], PyTree],
    advance: Callable[[PyTree], PyTree],
    finished: Callable[[PyTree], Bool[Array, ""]],
    work: Callable[[PyTree], Int[Array, ""]],
    points: PyTree,
    width: int,
) -> tuple[PyTree, Int[Array, ""]]:
    """Run every point of ``points`` (leading axis n) to the end through ``width`` lanes.

    ``start(point)`` builds a lane's state, ``advance(state)`` runs one segment, ``finished(state)`` says the point
    is done and ``work(state)`` counts the steps its segment took. Returns (the final state of every point, leading
    axis n; the steps executed by all lanes, idle ones included: rounds × width × the longest segment of each round).
    """
    n = jax.tree_util.tree_leaves(points)[0].shape[0]
    w = min(width, n)
    vstart, vadvance, vfinished, vwork = (jax.vmap(f) for f in (start, advance, finished, work))

    def take(idx):
        return vstart(jax.tree_util.tree_map(lambda x: x[jnp.clip(idx, 0, n - 1)], points))

    lane = jnp.arange(w)
    state = take(lane)
    shapes = jax.eval_shape(lambda s: s, state)
    out = jax.tree_util.tree_map(lambda s: jnp.zeros((n,) + s.shape[1:], s.dtype), shapes)

    def cond(carry):
        _, lane, _, _, _ = carry
        return jnp.any(lane < n)

    def body(carry):
        state, lane, nxt, out, executed = carry
        state = vadvance(state)
        active = lane < n
        executed = executed + w * jnp.max(jnp.where(active, vwork(state), 0))
        done = vfinished(state) & active
        slot = jnp.where(done, lane, n)  # n: out of range, dropped
        out = jax.tree_util.tree_map(lambda o, s: o.at[slot].set(s, mode="drop"), out, state)
        rank = jnp.cumsum(done) - 1
        new = jnp.where(done, nxt + rank, lane)
        new = jnp.where(done & (new >= n), n, new)  # the queue is empty: the lane idles
        state = _where(done, take(new), state)
        return state, new, nxt + jnp.sum(done), out, executed

    carry = (
        state,
        lane,
        jnp.asarray(w),
        out,
        jnp.zeros((), jnp.int64 if jax.config.read("jax_enable_x64") else jnp.int32),
    )
    _, _, _, out, executed = jax.lax.while_loop(cond, body, carry)
    return out, executed


MAX_WIDTH = 1024


def lane_width(lanes: int | None, n: int, chunk_size: int | None) -> int | None:
    """The number of lanes for n points run in chunks of ``chunk_size`` (None: one chunk), or None when a chunk
    holds no more points than lanes (one vmapped batch then). ``lanes`` when given, else min(1024, max(64, ⌈m/4⌉))
    for chunks of m points, so that every lane refills a few times (benchmarks/RESULTS.md, "Lanes")."""
    m = min(n, chunk_size or n)
    width = lanes if lanes is not None else min(MAX_WIDTH, max(64, -(-m // 4)))
    return width if m > width else None


def executed_work(needed, width: int, segment: int) -> int:
    """The steps ``run_lanes`` executes for points that need ``needed[i]`` steps each, run ``segment`` at a time
    through ``width`` lanes: Σ over rounds of width × the longest segment of the round (a point takes
    max(1, ⌈needed/segment⌉) rounds; freed lanes take the next points in lane order). For a benchmark's
    executed ÷ needed ratio from the per-point step counts a run reports (``Trajectory.n_steps``)."""
    needed = [int(x) for x in np.asarray(needed).ravel()]
    w = min(width, len(needed))
    queue = iter(needed)
    lanes = [next(queue) for _ in range(w)]
    total = 0
    while any(x is not None for x in lanes):
        segs = [0 if x is None else min(segment, x) for x in lanes]
        total += w * max(segs)
        lanes = [None if x is None else x - s for x, s in zip(lanes, segs, strict=False)]
        lanes = [next(queue, None) if x == 0 else x for x in lanes]
    return total
