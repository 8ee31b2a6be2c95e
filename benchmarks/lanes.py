"""Benchmark: lanes that wait. A vmapped batch runs every member as long as its slowest one: diffrax under vmap steps
every lane until all are done (the while_loop body runs for the whole batch), and gradient descent runs all ``steps``
for every point. This script measures how much of the executed work is needed.

What it measures
----------------
For each case, per point i the steps it needs, n_i:

* flow: ``traj.n_steps`` (diffrax's num_steps, accepted + rejected steps until the point's own stop: steady state,
  blow-up, or t1);
* GD: the first recorded step at which the point is steady (``traj.t_final``, resolution ``--gd-record-every``),
  or ``steps`` when it never is.

and, per chunk of the batch as ``map_chunks`` forms it (``chunk_size`` points, the last chunk padded to full size by
repeating its first point), the executed lane-steps = chunk size × max over the chunk of n_i (flow) or chunk size ×
steps (GD): a model of a vmapped chunk (an engine that refills finished lanes executes less, which then shows as a
lower time per needed step). Reported: needed = Σ n_i, executed, the ratio executed/needed (1 = no waiting), and the
warm time per point (best of ``--repeats``, compile excluded) and per executed / needed lane-step, for each chunk size
in ``--chunks`` ("all" = one chunk; default all 1024 256 64) and two point orders: the grid's own order, and the
points sorted by n_i (an oracle ordering from a first run, to show what grouping lanes by length would save).

Cases (defaults):

(a) ``markov-flow``: ``popdyn.gradient_flow(Canonical(0.9, 0.9), Grid.square("e", "w", -2, 2, 64).points(prob),
    t1=1e4, ts=None)``;
(b) ``decision-list-flow``: the reduced decision-list flow of ``popdyn basins decision-list`` (``jobs.
    basins_decision_list``): ``ReducedDecisionList(L=10, n=3, lengths=(2,), c=theorem1_c(10, 3, 2))``, the 32×32
    grid of its zero-column-sum plane (``plane_to_column``) plus the origin, t1 = 100, ts=None (the lanes alone);
(c) ``decision-list-basins``: the same points with the job's records (``first_passage``: 121 record times, θ saved);
(d) ``markov-gd``: ``popdyn.gradient_descent`` on the Markov 64×64 grid, 2,000 steps at η = 0.1.

Which popdyn is measured: the one ``import popdyn`` finds (use PYTHONPATH to point at another copy to compare
engine versions; ``--label`` tags the run in the JSON).

How to run (from the repository root)
-------------------------------------
    python benchmarks/lanes.py                  # all cases, chunks all 1024 256 64; ~10 min on 2 cores
    python benchmarks/lanes.py --quick          # 16² grids, chunks all 64; writes nothing unless --json
    python benchmarks/lanes.py --cases markov-flow --chunks all 512 128 --repeats 5
Writes ``benchmarks/results/lanes.json`` (full run; ``--json`` to choose).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # appended, not prepended: a popdyn on PYTHONPATH (another version) wins
    sys.path.append(str(REPO))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import popdyn  # noqa: E402
from popdyn.tasks.markov import Canonical  # noqa: E402
from benchmarks._common import fmt_time, make_headline, parser, peak_rss_gb, run_header  # noqa: E402
from benchmarks.engine_overhead import popdyn_source  # noqa: E402

SCRIPT = "lanes"
HEADING = "## Lanes that wait (vmapped batches run as long as their slowest member)"
CASES = ("markov-flow", "decision-list-flow", "decision-list-basins", "markov-gd")


def take(theta, idx):
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[idx], theta)


def executed_steps(n_i: np.ndarray, chunk: int | None, per_lane_fixed: int | None = None) -> tuple[int, int]:
    """(executed lane-steps, number of chunks) for the points in this order, chunks as ``map_chunks`` forms them."""
    n = len(n_i)
    size = n if chunk is None else min(chunk, n)
    total, chunks = 0, 0
    for start in range(0, n, size):
        part = n_i[start:start + size]
        total += size * (per_lane_fixed if per_lane_fixed is not None else int(part.max()))
        chunks += 1
    return total, chunks


def time_best(fn, repeats: int) -> tuple[float, list[float], object]:
    out = fn()  # warm (compiles for a new chunk shape)
    jax.block_until_ready(out)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        jax.block_until_ready(out)
        ts.append(time.perf_counter() - t0)
    return min(ts), ts, out


def build(case: str, args):
    """(problem, points, run(points, chunk_size) → Trajectory, needed(traj) → n_i, fixed steps per lane or None)."""
    if case in ("markov-flow", "markov-gd"):
        prob = Canonical(args.p, args.q)
        theta = popdyn.Grid.square("e", "w", -2, 2, args.markov_grid).points(prob)
        if case == "markov-flow":
            def run(th, chunk):
                return popdyn.gradient_flow(prob, th, t1=args.markov_t1, ts=None, chunk_size=chunk, **args.flow_kw)
            return prob, theta, run, lambda tr: np.asarray(tr.n_steps), None, {
                "problem": f"Canonical({args.p:g}, {args.q:g})", "grid": args.markov_grid, "t1": args.markov_t1}

        def run(th, chunk, record_every=args.gd_steps):
            return popdyn.gradient_descent(prob, th, lr=args.gd_lr, steps=args.gd_steps, record_every=record_every,
                                           chunk_size=chunk, **args.gd_kw)

        def needed(tr):  # the first steady record of a run recording every gd_record_every steps (grid order)
            return np.asarray(run(theta, None, args.gd_record_every).t_final).astype(int)

        return prob, theta, run, needed, args.gd_steps, {
            "problem": f"Canonical({args.p:g}, {args.q:g})", "grid": args.markov_grid, "steps": args.gd_steps,
            "lr": args.gd_lr, "needed_resolution_steps": args.gd_record_every}
    from popdyn.tasks.decision_list.jobs import plane_to_column
    from popdyn.tasks.decision_list.reduced_flow import ReducedDecisionList
    from popdyn.tasks.decision_list.theorems import theorem1_c

    c = theorem1_c(args.L, args.n, 2, "distinct")
    prob = ReducedDecisionList(args.L, args.n, (2,), c, "distinct")
    xs = np.linspace(-3.0, 3.0, args.dl_grid)
    X, Y = np.meshgrid(xs, xs)
    theta = plane_to_column(np.append(X.ravel(), 0.0), np.append(Y.ravel(), 0.0), args.L)
    t1 = args.dl_t1
    if case == "decision-list-flow":
        def run(th, chunk):
            return popdyn.gradient_flow(prob, th, t1=t1, ts=None, chunk_size=chunk, **args.flow_kw)
    else:
        times = np.concatenate([[0.0], np.geomspace(t1 * 1e-9, t1, args.dl_records)])

        def run(th, chunk):
            return popdyn.gradient_flow(prob, th, t1=t1, ts=times, save_params=True, chunk_size=chunk, **args.flow_kw)
    return prob, theta, run, lambda tr: np.asarray(tr.n_steps), None, {
        "problem": f"ReducedDecisionList(L={args.L}, n={args.n}, lengths=(2,), c={c:.6g})", "grid": args.dl_grid,
        "points_note": "grid + origin", "t1": t1,
        "records": None if case == "decision-list-flow" else args.dl_records + 1}


def bench_case(case: str, args) -> dict:
    prob, theta, run, needed_fn, fixed, meta = build(case, args)
    n = int(np.asarray(jax.tree_util.tree_leaves(theta)[0]).shape[0])
    print(f"\n=== {case}: {meta}, {n:,} points ===", flush=True)
    traj = run(theta, None)
    n_i = needed_fn(traj)
    status = traj.status_counts()
    order = np.argsort(n_i, kind="stable")
    q = np.percentile(n_i, [0, 10, 50, 90, 100])
    print(f"steps needed per point: min {q[0]:.0f}, p10 {q[1]:.0f}, median {q[2]:.0f}, p90 {q[3]:.0f}, max {q[4]:.0f}, "
          f"mean {n_i.mean():.1f}; status {status}", flush=True)
    rows = []
    for chunk_arg in args.chunks:
        chunk = None if chunk_arg == "all" else int(chunk_arg)
        if chunk is not None and chunk >= n:
            continue
        for order_name, idx in (("grid", np.arange(n)), ("sorted by needed steps", order)):
            if chunk is None and order_name != "grid":
                continue  # one chunk: the order does not change the work
            if fixed is not None and order_name != "grid":
                continue  # GD runs every lane all the steps: the order does not change the work
            pts = take(theta, idx)
            sec, all_s, tr = time_best(lambda: run(pts, chunk), args.repeats)
            ni = n_i[idx]
            execd, chunks = executed_steps(ni, chunk, fixed)
            need = int(ni.sum())
            # consistency: the engine's per-point steps in this order are the same as in the first run
            same = bool(np.array_equal(needed_fn(tr) if fixed is None else ni, ni))
            row = {"chunk": chunk_arg, "order": order_name, "chunks": chunks, "needed": need, "executed": execd,
                   "executed_over_needed": execd / need, "seconds": sec, "seconds_all": all_s,
                   "us_per_point": sec / n * 1e6, "ns_per_executed_lane_step": sec / execd * 1e9,
                   "ns_per_needed_step": sec / need * 1e9, "same_steps_as_first_run": same}
            rows.append(row)
            print(f"  chunk {chunk_arg:>5s}, {order_name:22s}: {chunks:3d} chunk(s), executed/needed "
                  f"{row['executed_over_needed']:6.2f} ({execd:,} / {need:,} lane-steps); {fmt_time(sec)} → "
                  f"{row['us_per_point']:8.1f} µs/point, {row['ns_per_executed_lane_step']:7.1f} ns/executed "
                  "lane-step, "
                  f"{row['ns_per_needed_step']:7.1f} ns/needed step" + ("" if same else "  (steps differ!)"),
                  flush=True)
    return {"case": case, **meta, "points": n, "status": status,
            "needed_steps": {"min": int(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]),
                             "max": int(q[4]), "mean": float(n_i.mean()), "sum": int(n_i.sum())},
            "rows": rows}


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--quick", action="store_true",
                    help="16² grids, 200 GD steps, chunks all 64; writes nothing unless --json")
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--chunks", nargs="+", default=None,
                    help="chunk sizes ('all' = one chunk); default all 1024 256 64")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markov-grid", type=int, default=None, help="default 64")
    ap.add_argument("--markov-t1", type=float, default=1e4)
    ap.add_argument("--p", type=float, default=0.9)
    ap.add_argument("--q", type=float, default=0.9)
    ap.add_argument("--gd-steps", type=int, default=None, help="default 2000")
    ap.add_argument("--gd-lr", type=float, default=0.1)
    ap.add_argument("--gd-record-every", type=int, default=10, help="resolution of the GD steps needed")
    ap.add_argument("--L", type=int, default=10)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--dl-grid", type=int, default=None, help="default 32 (the basins job's)")
    ap.add_argument("--dl-t1", type=float, default=100.0)
    ap.add_argument("--dl-records", type=int, default=120, help="log-spaced records of the basins case (+ t = 0)")
    ap.add_argument("--flow-kw", type=json.loads, default={},
                    help="extra keyword arguments of every gradient_flow call, as JSON (e.g. an engine option "
                         "to compare)")
    ap.add_argument("--gd-kw", type=json.loads, default={}, help="the same for gradient_descent")
    ap.add_argument("--label", default="", help="a tag stored with the run (e.g. the engine version compared)")
    ap.add_argument("--json", type=Path, default=None, help=f"default benchmarks/results/{SCRIPT}.json; --quick: none")
    args = ap.parse_args(argv)
    args.markov_grid = args.markov_grid or (16 if args.quick else 64)
    args.dl_grid = args.dl_grid or (16 if args.quick else 32)
    args.gd_steps = args.gd_steps or (200 if args.quick else 2000)
    args.chunks = args.chunks or (["all", "64"] if args.quick else ["all", "1024", "256", "64"])
    if args.json is None and not args.quick:
        args.json = REPO / "benchmarks" / "results" / f"{SCRIPT}.json"
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header(SCRIPT, argv)
    src = popdyn_source()
    print(f"  popdyn measured: {src}", flush=True)
    t0 = time.perf_counter()
    results = [bench_case(case, args) for case in args.cases]
    total = time.perf_counter() - t0
    print("\nSummary (one chunk, grid order):")
    print(f"  {'case':22s} {'points':>7s} {'needed mean':>11s} {'max':>6s} {'executed/needed':>15s} {'µs/point':>9s}")
    for r in results:
        one = next(x for x in r["rows"] if x["chunk"] == "all")
        print(f"  {r['case']:22s} {r['points']:7,d} {r['needed_steps']['mean']:11.1f} {r['needed_steps']['max']:6d} "
              f"{one['executed_over_needed']:15.2f} {one['us_per_point']:9.1f}")
    checks = [(f"{r['case']}: per-point steps identical in every order and chunking", all(x["same_steps_as_first_run"]
                                                                                          for x in r["rows"]))
              for r in results]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, total, [], checks)
    head.update({"label": args.label, "popdyn_source": src, "settings": vars(args) | {"json": str(args.json)},
                 "cases": results, "peak_rss_gb": peak_rss_gb()})
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(head, indent=1, ensure_ascii=False, default=float) + "\n")
        print(f"\nwrote {args.json}")
    print(f"total {fmt_time(total)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
