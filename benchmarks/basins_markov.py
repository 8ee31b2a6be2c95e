"""Benchmark: basin-of-attraction maps of the canonical Markov (e, w) model
(docs/models/markov.md §2.2, §3.2, §4.4).

What it measures
----------------
1. popdyn's basin map ``popdyn.basin_map(Canonical(p, q), Grid.square("w", "e", -3, 3, n), method=...)`` for
   ``method="flow"`` (diffrax Tsit5, rtol=1e-8, atol=1e-10, t1=1e4, stops at the steady state
   ‖θ̇‖ < atol + rtol‖θ‖) and ``method="gd"`` (plain GD, lr=0.5, 2000 steps) on n×n grids (default 256 and 512):

   * wall (cold): the first call in the process, JAX tracing and XLA compilation included;
   * wall (warm): an identical second call, which reuses the compiled solver (``eqx.filter_jit`` caches it per
     problem and settings); whatever tracing/compilation JAX still reports in that call (through
     ``jax.monitoring``: jaxpr tracing, lowering to MLIR, backend compilation, cache retrieval) is subtracted,
     giving "compute" = wall (warm) − trace/compile, i.e. the compile-excluded time. µs/point and points/s are given
     for the compute time (headline) and for the cold wall.

2. The baseline a researcher would write today: a Python loop of ``scipy.integrate.solve_ivp`` (RK45, same
   rtol/atol, t_span (0, 1e4), terminal event ‖f(y)‖ − (atol + rtol‖y‖) = 0, i.e. the same steady-state rule)
   with the profiled-loss vector field written in NumPy from the closed forms of §3.2:
   ∂L/∂e = 2e c(w) ℓ'(A), ∂L/∂w = 4|w| e² ℓ'(A), ℓ'(A) = π1(σ(f1*) − (1−q)), A = c(w)e², c(w) = 1 + 2w|w|,
   f0* = ln u (§2.2), f1* = f0* + A. It runs on a random subset (fixed seed) of the largest grid's
   initialisations; its end points are labelled (global if |c(w)e² − A*| < 1e-3, local if |e| < 1e-3 at a local
   minimum of the line e = 0, saddle if within 1e-3 of (0, −1/√2), otherwise unresolved) and compared with
   popdyn's flow (and, for information, GD) labels of the same points. Ratio = popdyn µs/point ÷ baseline
   µs/point; speed-up = its inverse. Two targets are checked and printed: ≥ 100× less time per initialisation than
   the baseline, and a 512×512 GD map (2000 steps) in under 30 s.

3. Agreement of popdyn's flow (and GD) labels with the closed-form ``Canonical.predicted_basin`` (vmapped) over
   the whole grid.

4. The results go into the section "## Markov (e,w) basin maps" of ``benchmarks/RESULTS.md`` (created if missing;
   the section is replaced, other sections kept), with machine information, date and the exact command line; the
   headline figures for ``benchmarks.run_all``'s summary go to ``benchmarks/results/basins_markov.json``.

How to run (from the repository root, on a quiet machine; float64 throughout)
-----------------------------------------------------------------------------
    python -m benchmarks.basins_markov                       # 256 and 512, 200 baseline points, p = q = 0.1
    python -m benchmarks.basins_markov --also-09             # additionally (p, q) = (0.9, 0.9)
    python -m benchmarks.basins_markov --quick               # 32 and 64, 20 baseline points; writes nothing
    python -m benchmarks.basins_markov --quick --results /tmp/r.md
Options: --sizes N [N ...], --baseline-points K, --p P --q Q, --lr, --steps, --seed, --results PATH.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import jax
import numpy as np

import popdyn
from benchmarks._common import REPO, finish_section, headline_row, make_headline, parser, publish, run_header
from popdyn.tasks.markov import ATTRACTORS, Canonical

from ._markov_basins import ATOL, HI, LO, RTOL, T1, run_baseline, timed_basin_map

SECTION = "## Markov (e,w) basin maps"


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------
def names_of(labels: np.ndarray, names) -> np.ndarray:
    """Integer labels → attractor names ("unresolved" for −1)."""
    table = np.array(list(names) + ["unresolved"], dtype=object)
    return table[np.where(labels < 0, len(names), labels)]


def disagreements(a: np.ndarray, b: np.ndarray) -> str:
    pairs = collections.Counter((x, y) for x, y in zip(a, b, strict=False) if x != y)
    return ", ".join(f"{x}→{y}: {n}" for (x, y), n in pairs.most_common()) or "none"


def fmt_s(x: float) -> str:
    return f"{x:.2f} s" if x >= 0.1 else f"{x * 1e3:.1f} ms"


def fmt_us(x: float) -> str:
    return f"{x:,.1f}" if x < 1e4 else f"{x:,.0f}"


# ---------------------------------------------------------------------------------------------------------------
# One (p, q)
# ---------------------------------------------------------------------------------------------------------------
def bench_pq(p: float, q: float, args) -> dict:
    prob = Canonical(p, q)
    print(f"\n=== (p, q) = ({p:g}, {q:g}),  A* = {prob.optimal_gap():.6f} ===", flush=True)
    predict = jax.jit(jax.vmap(prob.predicted_basin))
    methods = {"flow": {}, "gd": {"lr": args.lr, "steps": args.steps}}
    rows, checks, maps = [], [], {}
    for n in args.sizes:
        grid = popdyn.Grid.square("w", "e", LO, HI, n)
        theta = grid.points(prob)
        pred = names_of(np.asarray(predict(theta)), ATTRACTORS)
        for method, kw in methods.items():
            bm, cold, cold_c = timed_basin_map(prob, grid, method, **kw)
            bm2, warm, warm_c = timed_basin_map(prob, grid, method, **kw)
            same = bool(np.array_equal(bm.labels, bm2.labels))
            npts = n * n
            compute = max(warm - warm_c, 1e-9)
            got = names_of(bm.labels.ravel(), bm.attractors)
            agree = float(np.mean(got == pred))
            status = collections.Counter(popdyn.STATUS_NAMES[s] for s in bm.status.ravel())
            row = {
                "p": p,
                "q": q,
                "method": method,
                "n": n,
                "points": npts,
                "cold": cold,
                "cold_compile": cold_c,
                "warm": warm,
                "warm_compile": warm_c,
                "compute": compute,
                "us_compute": compute / npts * 1e6,
                "us_cold": cold / npts * 1e6,
                "pps": npts / compute,
                "agree_pred": agree,
                "fractions": bm.fractions,
                "status": dict(status),
                "repeat_identical": same,
                "disagree_pred": disagreements(pred, got),
            }
            rows.append(row)
            maps[(method, n)] = (grid, bm)
            fr = ", ".join(f"{k} {v:.4f}" for k, v in bm.fractions.items())
            print(
                f"{method:4s} {n:4d}²={npts:7d} pts | cold {fmt_s(cold)} (trace+compile {fmt_s(cold_c)}) | "
                f"warm {fmt_s(warm)} (trace+compile {fmt_s(warm_c)}) → compute {fmt_s(compute)}, "
                f"{row['us_compute']:.2f} µs/pt, {row['pps']:,.0f} pts/s",
                flush=True,
            )
            print(
                f"      fractions: {fr}; status: {dict(status)}; agreement with predicted_basin {agree:.6f}"
                + ("" if agree == 1 else f" (predicted→popdyn: {row['disagree_pred']})")
                + ("" if same else "; WARNING: the two runs gave different labels"),
                flush=True,
            )

    # ---- baseline on a random subset of the largest grid -------------------------------------------------------
    n_big = max(args.sizes)
    grid, bm_flow = maps[("flow", n_big)]
    _, bm_gd = maps[("gd", n_big)]
    theta = grid.points(prob)
    e_all, w_all = np.asarray(theta["e"]), np.asarray(theta["w"])
    k = min(args.baseline_points, e_all.size)
    idx = np.sort(np.random.default_rng(args.seed).choice(e_all.size, size=k, replace=False))
    labels, ends, steady, nfev, bwall = run_baseline(p, q, e_all[idx], w_all[idx], f"solve_ivp ({p:g},{q:g})")
    base_names = names_of(labels, ATTRACTORS)
    flow_names = names_of(bm_flow.labels.ravel()[idx], bm_flow.attractors)
    gd_names = names_of(bm_gd.labels.ravel()[idx], bm_gd.attractors)
    pred_names = names_of(np.asarray(predict(jax.tree_util.tree_map(lambda x: x[idx], theta))), ATTRACTORS)
    # end-point distance to popdyn's flow end points
    fe = bm_flow.final["e"].ravel()[idx]
    fw = bm_flow.final["w"].ravel()[idx]
    dist = np.hypot(ends[:, 0] - fe, ends[:, 1] - fw)
    base = {
        "points": k,
        "grid": n_big,
        "seed": args.seed,
        "wall": bwall,
        "us": bwall / k * 1e6,
        "steady": int(steady.sum()),
        "nfev_median": float(np.median(nfev)),
        "nfev_max": int(nfev.max()),
        "agree_flow": float(np.mean(base_names == flow_names)),
        "agree_gd": float(np.mean(base_names == gd_names)),
        "agree_pred": float(np.mean(base_names == pred_names)),
        "disagree_flow": disagreements(base_names, flow_names),
        "disagree_gd": disagreements(base_names, gd_names),
        "fractions": {name: float(np.mean(base_names == name)) for name in (*ATTRACTORS, "unresolved")},
        "end_dist_median": float(np.median(dist)),
        "end_dist_max": float(np.max(dist)),
    }
    print(
        f"baseline solve_ivp RK45: {k} points of the {n_big}² grid (seed {args.seed}) in {fmt_s(bwall)} → "
        f"{base['us']:,.0f} µs/pt; steady {base['steady']}/{k}; RHS evaluations median {base['nfev_median']:.0f}, "
        f"max {base['nfev_max']}",
        flush=True,
    )
    print(
        f"      labels agree with popdyn flow {base['agree_flow']:.4f} ({base['disagree_flow']}), "
        f"with popdyn GD {base['agree_gd']:.4f} ({base['disagree_gd']}), "
        f"with predicted_basin {base['agree_pred']:.4f}; ‖end point − popdyn flow end point‖ median "
        f"{base['end_dist_median']:.2e}, max {base['end_dist_max']:.2e}",
        flush=True,
    )

    for row in rows:
        row["ratio"] = row["us_compute"] / base["us"]
        row["speedup"] = base["us"] / row["us_compute"]
        row["speedup_cold"] = base["us"] / row["us_cold"]
    for row in rows:
        checks.append(
            (
                f"{row['method']} {row['n']}²: popdyn/baseline time per point ≤ 1/100 (compile excluded)",
                row["ratio"] <= 0.01,
                f"ratio {row['ratio']:.2e} (speed-up {row['speedup']:,.0f}×; cold wall: {row['speedup_cold']:,.0f}×)",
            )
        )
    for row in rows:
        if row["method"] == "gd" and row["n"] == 512 and args.steps == 2000:
            checks.append(
                (
                    "512² GD map, 2000 steps, under 30 s (cold wall, compile included)",
                    row["cold"] < 30,
                    f"cold {row['cold']:.2f} s, warm {row['warm']:.2f} s",
                )
            )
    for name, ok, detail in checks:
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}: {detail}", flush=True)
    return {"p": p, "q": q, "rows": rows, "baseline": base, "checks": checks}


# ---------------------------------------------------------------------------------------------------------------
# RESULTS.md
# ---------------------------------------------------------------------------------------------------------------
def render(results: list[dict], info: dict, args, command: str, date: str, total: float) -> str:
    out = [SECTION, ""]
    out.append(f"Written by `python -m benchmarks.basins_markov` on {date} (total run {total:.0f} s).  ")
    out.append(f"Command: `{command}`")
    out.append("")
    out.append(
        f'Grid: `Grid.square("w", "e", {LO:g}, {HI:g}, n)` (rows e, columns w). Flow: `basin_map(method="flow")` '
        f"(Tsit5, rtol={RTOL:g}, atol={ATOL:g}, t1={T1:g}, steady state ‖θ̇‖ < atol + rtol‖θ‖). "
        f'GD: `basin_map(method="gd", lr={args.lr:g}, steps={args.steps})`. float64. '
        "*wall (cold)*: first call, compilation included. *wall (warm)*: identical second call, reusing the "
        "compiled solver; *compute* = wall (warm) − any trace/lower/compile time `jax.monitoring` still reports "
        "in that call. µs/point and speed-up use *compute*; "
        "the last column uses the cold wall. Baseline: Python loop of `scipy.integrate.solve_ivp` (RK45, same "
        "rtol/atol, t_span (0, 1e4), terminal event on the same steady-state rule) on the NumPy closed-form "
        "profiled field of docs/models/markov.md §3.2, over a random subset of the largest grid."
    )
    out.append("")
    out.append(
        "| (p, q) | method | grid | points | wall (cold) | wall (warm) | trace+compile in warm | compute "
        "| µs/point | points/s | baseline µs/point | speed-up | speed-up (cold wall) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for res in results:
        b = res["baseline"]
        for r in res["rows"]:
            out.append(
                f"| ({r['p']:g}, {r['q']:g}) | {r['method']} | {r['n']}×{r['n']} | {r['points']:,} | "
                f"{r['cold']:.2f} s | {r['warm']:.2f} s | {r['warm_compile']:.2f} s | {r['compute']:.2f} s | "
                f"{r['us_compute']:.2f} | {r['pps']:,.0f} | {fmt_us(b['us'])} | {r['speedup']:,.0f}× | "
                f"{r['speedup_cold']:,.0f}× |"
            )
        out.append(
            f"| ({res['p']:g}, {res['q']:g}) | solve_ivp RK45 (baseline) | {b['points']} of {b['grid']}×{b['grid']} "
            f"| {b['points']} | {b['wall']:.2f} s | – | – | {b['wall']:.2f} s | {fmt_us(b['us'])} | "
            f"{b['points'] / b['wall']:,.1f} | {fmt_us(b['us'])} | 1× | 1× |"
        )
    out.append("")
    out.append("Label checks and basin fractions:")
    out.append("")
    for res in results:
        b = res["baseline"]
        tag = f"(p, q) = ({res['p']:g}, {res['q']:g})"
        out.append(
            f"- {tag}, baseline on {b['points']} points (seed {b['seed']}): reached the steady state "
            f"{b['steady']}/{b['points']}; labels agree with popdyn flow **{b['agree_flow']:.4f}** "
            f"(baseline→popdyn disagreements: {b['disagree_flow']}), with popdyn GD {b['agree_gd']:.4f} "
            f"({b['disagree_gd']}), with `predicted_basin` {b['agree_pred']:.4f}; end-point distance to popdyn's "
            f"flow end points median {b['end_dist_median']:.1e}, max {b['end_dist_max']:.1e}; RHS evaluations per "
            f"point median {b['nfev_median']:.0f}, max {b['nfev_max']}."
        )
        for r in res["rows"]:
            fr = ", ".join(f"{k} {v:.4f}" for k, v in r["fractions"].items())
            st = ", ".join(f"{k} {v}" for k, v in r["status"].items())
            dis = "" if r["agree_pred"] == 1 else f" (predicted→popdyn: {r['disagree_pred']})"
            out.append(
                f"- {tag}, {r['method']} {r['n']}×{r['n']}: agreement with `predicted_basin` "
                f"**{r['agree_pred']:.6f}**{dis}; fractions: {fr}; status: {st}."
            )
    out.append("")
    out.append(
        "Target checks (≥ 100× less time per initialisation than the baseline; 512×512 GD map with 2000 steps "
        "under 30 s):"
    )
    out.append("")
    for res in results:
        for name, ok, detail in res["checks"]:
            out.append(f"- ({res['p']:g}, {res['q']:g}) {'PASS' if ok else '**FAIL**'}: {name} — {detail}")
    return finish_section(out, info)


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="grid sizes n (n×n); default 256 512")
    ap.add_argument("--baseline-points", type=int, default=None, help="solve_ivp points; default 200")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="sizes 32 64 and 20 baseline points, to check the script; writes no results unless --results",
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file to update (default benchmarks/RESULTS.md; with --quick: none)",
    )
    ap.add_argument("--p", type=float, default=0.1)
    ap.add_argument("--q", type=float, default=0.1)
    ap.add_argument("--also-09", action="store_true", help="also benchmark (p, q) = (0.9, 0.9)")
    ap.add_argument("--lr", type=float, default=0.5, help="GD learning rate (default 0.5)")
    ap.add_argument("--steps", type=int, default=2000, help="GD steps (default 2000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the baseline subset")
    args = ap.parse_args(argv)
    if args.sizes is None:
        args.sizes = [32, 64] if args.quick else [256, 512]
    if args.baseline_points is None:
        args.baseline_points = 20 if args.quick else 200
    if args.results is None and not args.quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    if min(args.sizes) < 2 or args.baseline_points < 1:
        ap.error("sizes must be ≥ 2 and --baseline-points ≥ 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header("basins_markov", argv)
    pqs = [(args.p, args.q)] + ([(0.9, 0.9)] if args.also_09 and (args.p, args.q) != (0.9, 0.9) else [])
    t0 = time.perf_counter()
    results = [bench_pq(p, q, args) for p, q in pqs]
    total = time.perf_counter() - t0
    section = render(results, info, args, command, date, total)
    publish(section, SECTION, args.results, headline(results, args, command, date, info, total))
    return 0


def headline(results: list[dict], args, command: str, date: str, info: dict, total: float) -> dict:
    """Headline figures for run_all's summary: time per initialisation of each map at the largest grid against the
    solve_ivp loop's (compile excluded)."""
    rows, checks = [], []
    for res in results:
        b, n = res["baseline"], max(args.sizes)
        for r in res["rows"]:
            if r["n"] == n:
                rows.append(
                    headline_row(
                        "markov",
                        f"basin map of Canonical({r['p']:g}, {r['q']:g}), {r['method']}, {n}×{n} grid: time per "
                        "initialisation (compile excluded)",
                        f'`basin_map(method="{r["method"]}")`',
                        r["us_compute"] * 1e-6,
                        f"`solve_ivp` RK45 loop ({b['points']} points)",
                        b["us"] * 1e-6,
                        note=f"cold wall (compile included): {r['speedup_cold']:,.0f}× faster than the baseline",
                    )
                )
        checks += [(f"({res['p']:g}, {res['q']:g}) {name}", ok) for name, ok, _ in res["checks"]]
        checks.append(
            (
                f"({res['p']:g}, {res['q']:g}) baseline labels agree with popdyn flow on ≥ 99% of "
                f"{res['baseline']['points']} points",
                res["baseline"]["agree_flow"] >= 0.99,
            )
        )
    return make_headline("basins_markov", SECTION, command, date, info, args.quick, total, rows, checks)


if __name__ == "__main__":
    raise SystemExit(main())
