"""Benchmark: basin-map throughput of the canonical Markov (e, w) model from 10² to 10⁶ initialisations — how the cost
grows with the number of initialisations, against the scipy ``solve_ivp`` loop, in one run.

What it measures (float64, default JAX backend = the CPU here)
-------------------------------------------------------------
For each size n in --sizes (default 10², 10³, 10⁴, 10⁵, 10⁶) and each method in --methods (default "flow" and
"gd"), ``popdyn.basin_map(Canonical(p, q), Grid.square("w", "e", -3, 3, s), method=...)`` on an s×s grid with
s = round(√n) (so 100, 1,024, 10,000, 99,856 and 1,000,000 points), with ``benchmarks.basins_markov``'s settings
(flow: Tsit5, rtol 1e-8, atol 1e-10, t1 1e4, stop at the steady state; GD: lr 0.5, 2000 steps; default chunks of
16,384 points).
Each (method, n) runs in a fresh subprocess, so that

* wall (cold) is the first call in a fresh process (compilation included) and wall (warm) an identical second call;
  compute = wall (warm) − any tracing/compilation ``jax.monitoring`` still reports in it
  (``benchmarks._markov_basins.timed_basin_map``); points/s = n ÷ compute;
* peak memory is that size's own: the process's ``ru_maxrss`` at the end (imports included), next to its resident
  memory just before the first call (so the map's own share is the difference).

The growth of the cost is summarised by the log-log slope of compute time against n over n ≥ --fit-from (default
10⁴; 1 = linear) — the check: close to linear beyond 10⁴ initialisations (pass: within [0.9, 1.1]). Figure:
``throughput.png`` next to the results file (time and points/s against n, log-log, with the baseline).

Baseline: ``benchmarks._markov_basins.run_baseline`` (a Python loop of ``scipy.integrate.solve_ivp`` RK45 on the
NumPy closed-form field, same tolerances and steady-state rule) on --baseline-points random points (seed --seed) of the
largest flow grid; its points/s against popdyn's at every size, and its labels against popdyn's flow labels of the
same points. Check of every flow map: its labels against the closed-form ``Canonical.predicted_basin``.

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.throughput              # ~4 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.throughput --quick      # 10² and 10⁴, 20 baseline points; writes nothing
    python -m benchmarks.throughput --quick --results /tmp/r.md     # also /tmp/throughput.png
Options: --sizes, --methods, --baseline-points, --fit-from, --p, --q, --seed, --results PATH. The section written
is "## Basin-map throughput: 10² to 10⁶ initialisations" (other sections of the file are kept); the headline figures
go to ``benchmarks/results/throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._common import (
    REPO,
    accelerator,
    finish_section,
    fmt_ratio,
    fmt_time,
    headline_row,
    make_headline,
    parser,
    peak_rss_gb,
    publish,
    run_header,
)

SECTION = "## Basin-map throughput: 10² to 10⁶ initialisations"  # on the CPU; an accelerator's run adds its name
MARK = "THROUGHPUT-RESULT "  # prefix of the worker's one-line JSON answer on stdout
SLOPE_OK = (0.9, 1.1)  # "close to linear": the fitted exponent of time against n
AGREE_MIN = 0.99  # flow labels against predicted_basin and against the baseline


def side(n: int) -> int:
    """Grid side for about n points."""
    return max(2, round(math.sqrt(n)))


def subset(n_points: int, k: int, seed: int) -> np.ndarray:
    """The baseline's k random grid indices (sorted), the same in the parent and in the worker."""
    return np.sort(np.random.default_rng(seed).choice(n_points, size=min(k, n_points), replace=False))


def rss_now_gb() -> float:
    """Current resident memory of this process (VmRSS), GB."""
    with open("/proc/self/status") as fh:
        kib = next(int(ln.split()[1]) for ln in fh if ln.startswith("VmRSS:"))
    return kib * 1024 / 1e9


# ---------------------------------------------------------------------------------------------------------------
# Worker: one (method, n) in a fresh process
# ---------------------------------------------------------------------------------------------------------------
def worker(method: str, s: int, p: float, q: float, k: int, seed: int, chunk: int | None) -> dict:
    """Cold and warm ``basin_map`` on the s×s grid (chunks of ``chunk`` points; None: the library's default); flow
    labels at the baseline's indices; memory."""
    import jax

    import popdyn
    from popdyn.tasks.markov import ATTRACTORS, Canonical

    from ._markov_basins import HI, LO, timed_basin_map

    prob = Canonical(p, q)
    grid = popdyn.Grid.square("w", "e", LO, HI, s)
    kw = {} if method == "flow" else {"lr": 0.5, "steps": 2000}
    kw |= {} if chunk is None else {"chunk_size": chunk}
    rss_before = rss_now_gb()
    bm, cold, cold_c = timed_basin_map(prob, grid, method, **kw)
    bm, warm, warm_c = timed_basin_map(prob, grid, method, **kw)
    out = {
        "method": method,
        "side": s,
        "n": s * s,
        "cold": cold,
        "cold_compile": cold_c,
        "warm": warm,
        "warm_compile": warm_c,
        "compute": max(warm - warm_c, 1e-9),
        "rss_before_gb": rss_before,
        "peak_rss_gb": peak_rss_gb(),
        "fractions": bm.fractions,
    }
    if method == "flow":
        predicted = np.asarray(jax.jit(jax.vmap(prob.predicted_basin))(grid.points(prob))).ravel()
        predicted = np.where(predicted < 0, -1, predicted)
        names = list(bm.attractors)
        mapped = np.array(
            [ATTRACTORS.index(names[i]) if i >= 0 and names[i] in ATTRACTORS else -1 for i in bm.labels.ravel()]
        )
        out["agree_pred"] = float(np.mean(mapped == predicted))
        out["subset_labels"] = mapped[subset(s * s, k, seed)].tolist()
    return out


def run_worker(method: str, n: int, args, timeout: float | None = None) -> dict:
    """One worker subprocess; its JSON answer. ``timeout``: seconds after which the worker is killed
    (``subprocess.TimeoutExpired``); None: no limit."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.throughput",
        "--worker",
        method,
        str(side(n)),
        "--p",
        str(args.p),
        "--q",
        str(args.q),
        "--baseline-points",
        str(args.baseline_points),
        "--seed",
        str(args.seed),
        *(["--chunk-size", str(args.chunk_size)] if args.chunk_size else []),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)), None)
    if proc.returncode or line is None:
        raise RuntimeError(f"worker {method} n={n} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    r = json.loads(line[len(MARK) :])
    r["pps"] = r["n"] / r["compute"]
    print(
        f"{method:4s} {r['side']:5d}² = {r['n']:>9,} points: cold {fmt_time(r['cold'])}, warm {fmt_time(r['warm'])} "
        f"(trace+compile {fmt_time(r['warm_compile'])}) → {r['pps']:,.0f} points/s; peak RSS "
        f"{r['peak_rss_gb']:.2f} GB (before the map {r['rss_before_gb']:.2f} GB)"
        + (f"; agreement with predicted_basin {r['agree_pred']:.6f}" if "agree_pred" in r else ""),
        flush=True,
    )
    return r


# ---------------------------------------------------------------------------------------------------------------
# Parent: sizes, baseline, fit, figure
# ---------------------------------------------------------------------------------------------------------------
def baseline(args, flow_big: dict) -> dict:
    """solve_ivp loop on the baseline subset of the largest flow grid, labels against popdyn's."""
    from ._markov_basins import HI, LO, run_baseline

    s = flow_big["side"]
    xs, ys = np.linspace(LO, HI, s), np.linspace(LO, HI, s)
    W, E = np.meshgrid(xs, ys)  # Grid.points' row-major order: y (= e) slow, x (= w) fast
    idx = subset(s * s, args.baseline_points, args.seed)
    labels, _, steady, nfev, wall = run_baseline(args.p, args.q, E.ravel()[idx], W.ravel()[idx], "solve_ivp")
    agree = float(np.mean(labels == np.asarray(flow_big["subset_labels"])))
    r = {
        "points": len(idx),
        "side": s,
        "wall": wall,
        "pps": len(idx) / wall,
        "steady": int(steady.sum()),
        "nfev_median": float(np.median(nfev)),
        "agree_flow": agree,
    }
    print(
        f"baseline solve_ivp RK45: {len(idx)} points of the {s}² grid in {fmt_time(wall)} → {r['pps']:,.1f} "
        f"points/s; labels agree with popdyn flow {agree:.4f}",
        flush=True,
    )
    return r


def fit_slope(rows: list[dict], key: str, n_min: int) -> tuple[float, list[int]]:
    """Least-squares exponent of ``key`` against n (log-log) over n ≥ n_min (the two largest sizes if fewer than two
    are that large: then it is no test of the growth beyond n_min)."""
    use = [r for r in rows if r["n"] >= n_min]
    use = use if len(use) >= 2 else sorted(rows, key=lambda r: r["n"])[-2:]
    n = np.array([r["n"] for r in use], float)
    t = np.array([r[key] for r in use], float)
    return float(np.polyfit(np.log(n), np.log(t), 1)[0]), [r["n"] for r in use]


def slope_ok(s: dict) -> bool:
    return SLOPE_OK[0] <= s["compute"] <= SLOPE_OK[1]


def figure(rows: list[dict], base: dict, path: Path) -> None:
    """Time and points/s against n (log-log), per method, with a linear guide and the baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for i, method in enumerate(sorted({r["method"] for r in rows})):
        rs = sorted((r for r in rows if r["method"] == method), key=lambda r: r["n"])
        n = np.array([r["n"] for r in rs], float)
        for key, style, label in (("compute", "o-", "warm compute"), ("cold", "s--", "cold wall")):
            ax_t.loglog(n, [r[key] for r in rs], style, color=f"C{i}", label=f"{method}: {label}")
        ax_p.loglog(n, [r["pps"] for r in rs], "o-", color=f"C{i}", label=f"popdyn {method} (warm compute)")
        ax_t.loglog(n, rs[-1]["compute"] * n / n[-1], ":", color=f"C{i}", lw=1, label=f"{method}: ∝ n")
    ax_p.axhline(base["pps"], color="k", ls="--", label=f"solve_ivp loop ({base['points']} points)")
    ax_t.set(xlabel="initialisations n", ylabel="seconds", title="basin map time")
    ax_p.set(xlabel="initialisations n", ylabel="points / s", title="throughput")
    for ax in (ax_t, ax_p):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section_and_figure() -> tuple[str, str]:
    """This run's section heading and figure name: the CPU's are the plain ones, an accelerator's name it, so that
    a run on each keeps its own section of RESULTS.md."""
    kind = accelerator()
    if kind is None:
        return SECTION, "throughput.png"
    return f"{SECTION} on {kind}", "throughput_" + re.sub(r"[^A-Za-z0-9]+", "_", kind).strip("_").lower() + ".png"


def render(rows, base, slopes, fig_name, args, info, command, date, total) -> str:
    out = [
        section_and_figure()[0],
        "",
        f"Written by `python -m benchmarks.throughput` on {date} (total run {total:.0f} s).  ",
        f"Command: `{command}`",
        "",
        f'`basin_map(Canonical({args.p:g}, {args.q:g}), Grid.square("w", "e", -3, 3, s), method)` with s = '
        "round(√n), flow with `benchmarks.basins_markov`'s settings (Tsit5, rtol 1e-8, atol 1e-10, t1 1e4, "
        f"steady-state stop), GD lr 0.5 × 2000 steps, chunks of {args.chunk_size or 16384:,} points; float64, "
        f"{accelerator() or 'CPU'}. Every "
        "(method, n) runs in a fresh subprocess: *cold* = its first call (compilation included), *warm* = an "
        "identical second call, *compute* = warm − any trace/compile time `jax.monitoring` reports in it; points/s = "
        "n ÷ compute. *Peak RSS* = that process's `ru_maxrss` (imports included); *before* = its resident memory "
        "just before the first call. Baseline: the `solve_ivp` RK45 loop of `benchmarks.basins_markov` on "
        f"{base['points']} random points (seed {args.seed}) of the {base['side']}² grid. "
        f"![throughput]({fig_name})",
        "",
        "| method | grid | points | wall (cold) | wall (warm) | trace+compile in warm | compute | µs/point | "
        "points/s | speed-up vs solve_ivp | peak RSS | RSS before |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['method']} | {r['side']}×{r['side']} | {r['n']:,} | {fmt_time(r['cold'])} | "
            f"{fmt_time(r['warm'])} | {fmt_time(r['warm_compile'])} | {fmt_time(r['compute'])} | "
            f"{r['compute'] / r['n'] * 1e6:.2f} | {r['pps']:,.0f} | {fmt_ratio(r['pps'] / base['pps'])} | "
            f"{r['peak_rss_gb']:.2f} GB | {r['rss_before_gb']:.2f} GB |"
        )
    out.append(
        f"| solve_ivp RK45 (baseline) | {base['points']} of {base['side']}² | {base['points']} | "
        f"{fmt_time(base['wall'])} | – | – | {fmt_time(base['wall'])} | {1e6 / base['pps']:,.0f} | "
        f"{base['pps']:,.1f} | 1× | – | – |"
    )
    out += [
        "",
        f"Growth of the cost (log-log slope of time against n; 1 = linear; pass: within "
        f"[{SLOPE_OK[0]}, {SLOPE_OK[1]}] for the warm compute time):",
        "",
    ]
    for method, s in slopes.items():
        verdict = (
            ("PASS" if slope_ok(s) else "**FAIL**")
            if s["tested"]
            else (f"not tested (fewer than two sizes ≥ {args.fit_from:,.0f}; fitted over the two largest)")
        )
        out.append(
            f"- {method}: {verdict} — compute time ∝ n^{s['compute']:.3f}, cold wall ∝ n^{s['cold']:.3f}, "
            "over n = " + ", ".join(f"{n:,}" for n in s["sizes"]) + "."
        )
    out += ["", f"Checks (pass: ≥ {AGREE_MIN:.0%} agreement):", ""]
    for r in rows:
        if "agree_pred" in r:
            out.append(
                f"- flow {r['side']}²: {'PASS' if r['agree_pred'] >= AGREE_MIN else '**FAIL**'} — labels "
                f"agree with `predicted_basin` on {r['agree_pred']:.6f} of the points; fractions "
                + ", ".join(f"{k} {v:.4f}" for k, v in r["fractions"].items())
                + "."
            )
    out.append(
        f"- baseline: {'PASS' if base['agree_flow'] >= AGREE_MIN else '**FAIL**'} — solve_ivp labels agree "
        f"with popdyn's flow labels on {base['agree_flow']:.4f} of its {base['points']} points (reached the "
        f"steady state: {base['steady']}/{base['points']}; RHS evaluations per point median "
        f"{base['nfev_median']:.0f})."
    )
    return finish_section(out, info)


def headline(rows, base, slopes, args, command, date, info, total) -> dict:
    """Headline figures for run_all's summary: time per initialisation at the largest size per method against the
    solve_ivp loop (flow is the throughput row), and the fitted slopes as checks."""
    big = {m: max((r for r in rows if r["method"] == m), key=lambda r: r["n"]) for m in slopes}
    out = [
        headline_row(
            "throughput",
            f"basin map, {m}, {r['n']:,} initialisations: time per initialisation (warm compute)",
            f'`basin_map(method="{m}")`, {r["pps"]:,.0f} points/s',
            r["compute"] / r["n"],
            f"`solve_ivp` loop, {base['pps']:,.1f} points/s",
            1.0 / base["pps"],
            primary=m == "flow",
            note=f"time ∝ n^{slopes[m]['compute']:.3f} over n ≥ {min(slopes[m]['sizes']):,}"
            + ("" if slopes[m]["tested"] else " (below the fit range: no test of the growth)")
            + f"; cold wall {fmt_time(r['cold'])}, peak RSS {r['peak_rss_gb']:.2f} GB",
        )
        for m, r in big.items()
    ]
    checks = [
        (f"{m}: time ∝ n^{s['compute']:.3f} over n ≥ {min(s['sizes']):,}, close to linear", slope_ok(s))
        for m, s in slopes.items()
        if s["tested"]
    ]
    checks += [
        (f"flow {r['side']}²: labels agree with predicted_basin", r["agree_pred"] >= AGREE_MIN)
        for r in rows
        if "agree_pred" in r
    ]
    checks.append(("solve_ivp labels agree with popdyn flow", base["agree_flow"] >= AGREE_MIN))
    return make_headline("throughput", section_and_figure()[0], command, date, info, args.quick, total, out, checks)


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument(
        "--sizes",
        type=float,
        nargs="+",
        default=None,
        help="numbers of initialisations (default 1e2 1e3 1e4 1e5 1e6; --quick 1e2 1e4)",
    )
    ap.add_argument("--methods", nargs="+", choices=("flow", "gd"), default=["flow", "gd"])
    ap.add_argument("--baseline-points", type=int, default=None, help="solve_ivp points (default 200; --quick 20)")
    ap.add_argument("--fit-from", type=float, default=1e4, help="fit the slope over n ≥ this (default 1e4)")
    ap.add_argument("--p", type=float, default=0.1)
    ap.add_argument("--q", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0, help="seed of the baseline subset")
    ap.add_argument("--chunk-size", type=int, default=None, help="points per compiled call (default: the library's)")
    ap.add_argument(
        "--quick", action="store_true", help="sizes 1e2 1e4, 20 baseline points; writes no results unless --results"
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file to update (default benchmarks/RESULTS.md; with --quick: none)",
    )
    ap.add_argument("--worker", nargs=2, metavar=("METHOD", "SIDE"), help=argparse.SUPPRESS)  # one (method, n)
    args = ap.parse_args(argv)
    if args.sizes is None:
        args.sizes = [1e2, 1e4] if args.quick else [1e2, 1e3, 1e4, 1e5, 1e6]
    args.sizes = sorted({int(n) for n in args.sizes})
    if args.baseline_points is None:
        args.baseline_points = 20 if args.quick else 200
    if args.results is None and not args.quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    if min(args.sizes) < 4 or args.baseline_points < 1 or ("flow" not in args.methods and not args.worker):
        ap.error(
            "sizes must be ≥ 4, --baseline-points ≥ 1, and --methods must include flow (the baseline compares "
            "labels with it)"
        )
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        method, s = args.worker[0], int(args.worker[1])
        result = worker(method, s, args.p, args.q, args.baseline_points, args.seed, args.chunk_size)
        print(MARK + json.dumps(result), flush=True)
        return 0
    command, date, info = run_header("throughput", argv)
    t_start = time.perf_counter()
    rows = [run_worker(m, n, args) for m in args.methods for n in args.sizes]
    flow_big = max((r for r in rows if r["method"] == "flow"), key=lambda r: r["n"])
    base = baseline(args, flow_big)
    slopes = {}
    for m in args.methods:
        rs = [r for r in rows if r["method"] == m]
        (sc, sizes), (sw, _) = fit_slope(rs, "compute", args.fit_from), fit_slope(rs, "cold", args.fit_from)
        slopes[m] = {"compute": sc, "cold": sw, "sizes": sizes, "tested": min(sizes) >= args.fit_from}
        print(f"{m}: compute time ∝ n^{sc:.3f}, cold wall ∝ n^{sw:.3f} over n = {sizes}", flush=True)
    heading, fig_name = section_and_figure()
    if args.results is not None:
        figure(rows, base, Path(args.results).parent / fig_name)
    total = time.perf_counter() - t_start
    section = render(rows, base, slopes, fig_name, args, info, command, date, total)
    publish(section, heading, args.results, headline(rows, base, slopes, args, command, date, info, total))
    ok = all(slope_ok(s) for s in slopes.values() if s["tested"]) and base["agree_flow"] >= AGREE_MIN
    return 0 if ok and all(r.get("agree_pred", 1.0) >= AGREE_MIN for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
