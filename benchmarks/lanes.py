"""Benchmark: lanes that do not wait. Executed work against needed work, and time per point, of the same batch run
as one vmapped batch (every member runs as long as the slowest one) and through lanes (a finished point frees its
lane for the next one), in the same run.

What it measures
----------------
For each case the engine runs the same points twice or more in this process:

* **one vmapped batch**: ``lanes=n`` (no refill). Per point i the steps it needs, n_i: ``Trajectory.n_steps`` for
  the flow (diffrax's steps until the point's own stop); for GD the first step at which the point is steady, from a
  run recording every step (untimed). Executed = n × max n_i (flow: the vmapped while loop runs until its slowest
  member stops) or n × steps (GD: the scan runs every step for every point).
* **lanes, width W** (the default W = 1024 and a narrower one): executed = ``popdyn.dynamics._lanes.executed_work``
  replayed from the lane run's own per-point step counts (rounds × width × the longest segment of each round,
  idle lanes included), which is what ``run_lanes`` counts.

Reported per row: needed = Σ n_i (from the batch run), executed, executed ÷ needed (1 = no waiting), the warm
time (best of ``--repeats``, compile excluded) and µs per point, and the largest difference of the end losses from
the batch run's, relative to the loss scale (lanes restart the flow's step-size controller at segment ends; GD in
lanes stops at the first segment end where the point is steady).

Cases: Markov flow (``Canonical(0.9, 0.9)``, 64² (e, w) grid on [-2, 2]², t1 = 1e4), Markov GD (the same grid,
2,000 steps at η = 0.1, end points only as in basin maps), and the reduced decision-list (e, w, a) flow of
``popdyn basins decision-list`` (``ReducedDecisionList(L=10, n=3, lengths=(2,), c=theorem1_c)``, 32² grid of its
zero-column-sum plane plus the origin, t1 = 100).

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.lanes                  # ~5 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.lanes --quick          # 16² grids, 200 GD steps; writes nothing unless --results
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import numpy as np

import popdyn
from benchmarks._common import (
    REPO,
    finish_section,
    fmt_n,
    make_headline,
    parser,
    publish,
    run_header,
    warm_times,
)
from popdyn.dynamics._lanes import executed_work
from popdyn.tasks.markov import Canonical

SCRIPT = "lanes"
HEADING = "## Lanes: executed work against needed work"
SEGMENT = 64  # the engine's default lane_steps


def cases(args) -> dict:
    """name → (description, points, run(points, **engine options) → Trajectory, GD steps or None)."""
    markov = Canonical(0.9, 0.9)
    grid = popdyn.Grid.square("e", "w", -2, 2, args.markov_grid).points(markov)
    from popdyn.jobs.decision_list.commands import plane_to_column
    from popdyn.tasks.decision_list._reduced_flow import ReducedDecisionList
    from popdyn.tasks.decision_list._theorems import theorem1_c

    dl = ReducedDecisionList(10, 3, (2,), theorem1_c(10, 3, 2, "distinct"), "distinct")
    xs = np.linspace(-3.0, 3.0, args.dl_grid)
    X, Y = np.meshgrid(xs, xs)
    plane = plane_to_column(np.append(X.ravel(), 0.0), np.append(Y.ravel(), 0.0), 10)
    steps = args.gd_steps
    return {
        "Markov flow": (
            f"Canonical(0.9, 0.9), {args.markov_grid}² grid, t1 = 1e4",
            grid,
            lambda th, **kw: popdyn.gradient_flow(markov, th, t1=1e4, ts=None, **kw),
            None,
        ),
        "Markov GD": (
            f"the same grid, {steps:,} steps at η = 0.1, end points only",
            grid,
            lambda th, **kw: popdyn.gradient_descent(markov, th, lr=0.1, steps=steps, **({"record_every": steps} | kw)),
            steps,
        ),
        "decision-list flow": (
            f"reduced (e, w, a) flow, {args.dl_grid}² plane + origin, t1 = 100",
            plane,
            lambda th, **kw: popdyn.gradient_flow(dl, th, t1=100.0, ts=None, **kw),
            None,
        ),
    }


def bench(name: str, desc: str, points, run, steps, args) -> dict:
    n = int(np.asarray(jax.tree_util.tree_leaves(points)[0]).shape[0])
    print(f"\n=== {name}: {desc}, {n:,} points ===", flush=True)
    rows = []
    secs = warm_times(lambda: run(points, lanes=n), repeats=args.repeats)
    batch = run(points, lanes=n)
    if steps is None:
        need = np.asarray(batch.n_steps)
        executed = n * int(need.max())
    else:
        need = np.asarray(run(points, lanes=n, record_every=1).t_final).astype(int)
        executed = n * steps
    needed = int(need.sum())
    scale = max(1.0, float(np.max(np.abs(np.asarray(batch.final_loss)))))
    rows.append({"how": "one vmapped batch", "executed": executed, "seconds": float(secs.min()), "max_dloss": 0.0})
    for width in args.widths:
        if width >= n:
            continue
        secs = warm_times(lambda width=width: run(points, lanes=width), repeats=args.repeats)
        tr = run(points, lanes=width)
        rows.append(
            {
                "how": f"lanes, width {width:,}",
                "seconds": float(secs.min()),
                "executed": executed_work(np.asarray(tr.n_steps), width, SEGMENT),
                "max_dloss": float(np.max(np.abs(np.asarray(tr.final_loss) - np.asarray(batch.final_loss))) / scale),
            }
        )
    for r in rows:
        r |= {"ratio": r["executed"] / needed, "us_per_point": r["seconds"] / n * 1e6}
        print(
            f"  {r['how']:20s} executed {r['executed']:>12,} / needed {needed:,} = {r['ratio']:5.2f}; "
            f"{r['seconds']:7.3f} s, {r['us_per_point']:8.1f} µs/point; max |Δ end loss| {r['max_dloss']:.1e}",
            flush=True,
        )
    q = np.percentile(need, [50, 100])
    return {
        "case": name,
        "desc": desc,
        "points": n,
        "needed": needed,
        "mean": float(need.mean()),
        "median": float(q[0]),
        "max": int(q[1]),
        "rows": rows,
    }


def section(results: list[dict], info: dict, command: str, date: str) -> str:
    lines = [
        HEADING,
        "",
        "Under `vmap` every member of a batch runs as long as the slowest one; lanes refill a finished point's lane "
        'with the next one (docs/dynamics.md, "Lanes"). Both ways are run on the same points in one run of '
        "`python -m benchmarks.lanes`. *Needed* is the sum of the steps each point needs (flow: its solver steps "
        "until its own stop; GD: its first steady step); *executed* is batch size × the slowest point for the "
        "vmapped batch and the lanes' own work (rounds × width × the longest segment of each round, idle lanes "
        "included) for lanes. Times are warm (best of several calls, compile excluded).",
        "",
        "| case | points | steps needed per point | how | executed ÷ needed | time | µs/point | max \\|Δ end loss\\| |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in results:
        for r in c["rows"]:
            lines.append(
                f"| {c['case']} ({c['desc']}) | {c['points']:,} | mean {c['mean']:.1f}, median "
                f"{c['median']:.0f}, max {c['max']:,} | {r['how']} | {r['ratio']:.2f} | {r['seconds']:.2f} s | "
                f"{fmt_n(r['us_per_point'])} | {r['max_dloss']:.1e} |"
            )
    lines += ["", f"Command: `{command}` ({date})."]
    return finish_section(lines, info)


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="16² grids, 200 GD steps; writes nothing unless --results")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--widths", type=int, nargs="+", default=[1024, 256], help="lane widths to compare")
    ap.add_argument("--results", type=Path, default=None, help="default benchmarks/RESULTS.md; --quick: none")
    args = ap.parse_args(argv)
    args.markov_grid, args.dl_grid = (16, 16) if args.quick else (64, 32)
    args.gd_steps = 200 if args.quick else 2000
    if args.quick:
        args.widths = [w for w in args.widths if w < 256] or [64]
    if args.results is None and not args.quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    command, date, info = run_header(SCRIPT, argv)
    t0 = time.perf_counter()
    results = [bench(name, *spec, args) for name, spec in cases(args).items()]
    checks = [
        (
            f"{c['case']}: lanes execute less than the vmapped batch",
            all(r["ratio"] < c["rows"][0]["ratio"] for r in c["rows"][1:]),
        )
        for c in results
    ]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, time.perf_counter() - t0, [], checks)
    head["cases"] = results
    publish(section(results, info, command, date), HEADING, args.results, head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
