"""Run every benchmark in turn, each in its own process, then write the section "## Summary: popdyn against the
baselines" right after the header of ``benchmarks/RESULTS.md``.

What it runs, in this order (``python -m benchmarks.<name>``; all of them have a --quick mode, which is passed
through)
---------------------------------------------------------------------------------------------------------------
    basins_markov     Markov (e, w) basin maps, flow and GD, against a solve_ivp loop              ~1 min
    markov_full_mc    Markov full model: exact loss+gradient against Monte Carlo                    ~20 s
    decision_lists    decision lists: exact paths, Theorem 1 T*, Theorem 2 λ_max                    ~6 min
    scan_snap         Scan and Snap: exact vs Monte Carlo, exact GD vs the authors' SGD             ~40 s
    scb               sparse contextual bigrams: one exact step at Fig. 5 scale                     ~3 min
    teacher           bilinear teacher: exact vs Monte Carlo, exact GD vs online SGD                ~30 s
    throughput        basin-map throughput from 10² to 10⁶ initialisations                          ~4 min
    engine_overhead   the GD and flow engines against hand-written jitted kernels                   ~20 min
    lanes             lanes against one vmapped batch: executed and needed work                     ~5 min
    cli_startup       start-up of the command line with JAX's persistent compilation cache          ~1 min
    basins_phases     a grid-1000 basin-map command split into its phases, cold and warm            ~30 s
    user_model_costs  a user model: cold first call of a flow and GD per step against hand-written JAX  ~1 min
    sweep_stack       a user model's phase diagram, points stacked, against a loop over points      ~2 min
    sgd_noise         SGD's exact gradient noise and η*(B) against Monte Carlo and SGD ensembles    ~1 min
    sgd_band          SGD's band of uncertain starts: its width against √(η/B), measured            ~2.5 min
(times on 2 CPU cores; engine_overhead peaks at ~13 GB of memory, ``--skip engine_overhead`` leaves it out).

What it does
------------
1. Runs each benchmark (or --only NAME ..., minus --skip NAME ...) with --quick when given and the results file when
   it is not the default. Each benchmark replaces its own section of the results file (engine_overhead: its
   section is written by hand from its JSON file) and writes its headline figures — what popdyn computed and in how
   many seconds, what the baseline computed and in how many seconds, and its PASS/FAIL checks — to
   ``results/<name>.json`` next to it (``_common.make_headline``). A benchmark that fails does not stop the others;
   the failures are named at the end and the exit status is 1.
2. Reads every ``results/<name>.json`` there (also those of benchmarks not run this time, with their own dates) and
   writes the summary: one row per task (markov, decision-list, scan-snap, scb, teacher: the exact loss+gradient
   against Monte Carlo at the same precision) plus the throughput row (basin maps against the ``solve_ivp`` loop),
   each with popdyn's time, the baseline's time and baseline ÷ popdyn, the checks and a link to the detailed section;
   then every other comparison the benchmarks report; the total wall time of this run, the machine, and whether a GPU
   was used.

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.run_all                          # everything, ~40 min on 2 cores
    python -m benchmarks.run_all --skip engine_overhead   # ~20 min; its rows come from its last run
    python -m benchmarks.run_all --only scan_snap teacher
    python -m benchmarks.run_all --summary-only           # rebuild the summary from the JSON files, run nothing
    python -m benchmarks.run_all --quick                  # every benchmark's --quick, into a temporary directory
    python -m benchmarks.run_all --quick --results /tmp/r.md
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import (
    REPO,
    SUMMARY_EPS,
    finish_section,
    fmt_ratio,
    fmt_time,
    gpu_note,
    json_path,
    parser,
    run_header,
    write_section,
)

BENCHMARKS = (
    "basins_markov",
    "markov_full_mc",
    "decision_lists",
    "scan_snap",
    "scb",
    "teacher",
    "throughput",
    "engine_overhead",
    "lanes",
    "cli_startup",
    "basins_phases",
    "user_model_costs",
    "sweep_stack",
    "sgd_noise",
    "sgd_band",
)
JSON_ONLY = ("engine_overhead",)  # writes its headline file (--json PATH), not a section of the results file
TASKS = ("markov", "decision-list", "scan-snap", "scb", "teacher", "throughput", "engine-overhead", "sgd-noise")
SECTION = "## Summary: popdyn against the baselines"
DEFAULT_RESULTS = REPO / "benchmarks" / "RESULTS.md"


def run_benchmark(name: str, quick: bool, results: Path) -> tuple[int, float]:
    """Run one benchmark in its own process from the repository root (output shown as it goes), with --results
    (--json for a benchmark in JSON_ONLY) unless it is the benchmark's own default: (exit code, wall seconds)."""
    default = not quick and results.resolve() == DEFAULT_RESULTS
    target = json_path(results, name) if name in JSON_ONLY else results
    where = (
        []
        if default
        else [
            "--json" if name in JSON_ONLY else "--results",
            os.path.relpath(target, REPO) if target.is_relative_to(REPO) else str(target),
        ]
    )
    cmd = [sys.executable, "-m", f"benchmarks.{name}", *(["--quick"] if quick else []), *where]
    print(f"\n{'=' * 100}\n=== {name}: {' '.join(cmd[1:])}\n{'=' * 100}", flush=True)
    t0 = time.perf_counter()
    try:
        code = subprocess.run(cmd, cwd=REPO).returncode
    except OSError as exc:  # the interpreter could not be started: a failure of this benchmark, not of the others
        print(f"=== {name}: could not start: {exc}", flush=True)
        code = -1
    wall = time.perf_counter() - t0
    print(f"=== {name}: exit code {code}, {fmt_time(wall)}", flush=True)
    return code, wall


def load_headlines(results: Path) -> dict[str, dict]:
    """Every benchmark's headline file next to ``results`` that exists: name → its JSON."""
    out = {}
    for name in BENCHMARKS:
        path = json_path(results, name)
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces → hyphens."""
    return "#" + re.sub(r"[^\w\- ]", "", heading.lstrip("# ").strip().lower()).replace(" ", "-")


def source(h: dict) -> str:
    """Link to a benchmark's detailed section, with its date and whether it was a --quick run."""
    title = h["heading"].lstrip("# ")
    return (
        f"[{title}]({anchor(h['heading'])}) (`benchmarks.{h['script']}`, {h['date'][:10]}"
        + (", **--quick**" if h["quick"] else "")
        + ")"
    )


def checks_cell(h: dict) -> str:
    ok = sum(c["ok"] for c in h["checks"])
    return (
        f"{ok}/{len(h['checks'])} PASS"
        if ok == len(h["checks"])
        else f"**{len(h['checks']) - ok} FAIL** of {len(h['checks'])}"
    )


def summary_table(heads: dict[str, dict]) -> list[str]:
    """One row per task: the row each benchmark marks primary."""
    out = [
        "| task | comparison | popdyn | baseline | popdyn time | baseline time | baseline ÷ popdyn | checks | "
        "details |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        found = [(h, r) for h in heads.values() for r in h["rows"] if r["task"] == task and r["primary"]]
        if not found:
            out.append(f"| {task} | no headline file yet: run its benchmark | | | | | | | |")
            continue
        h, r = found[0]
        out.append(
            f"| **{task}** | {r['comparison']} | {r['popdyn']} | {r['baseline']} | {fmt_time(r['popdyn_s'])} "
            f"| {fmt_time(r['baseline_s'])} | **{fmt_ratio(r['speedup'])}** | {checks_cell(h)} | {source(h)} |"
        )
    return out


def all_rows(heads: dict[str, dict]) -> list[str]:
    """Every comparison of every benchmark, by task."""
    out = [
        "| task | comparison | popdyn | popdyn time | baseline | baseline time | baseline ÷ popdyn | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        for h in heads.values():
            for r in h["rows"]:
                if r["task"] == task:
                    out.append(
                        f"| {task} | {r['comparison']} | {r['popdyn']} | {fmt_time(r['popdyn_s'])} | "
                        f"{r['baseline']} | {fmt_time(r['baseline_s'])} | {fmt_ratio(r['speedup'])} | "
                        f"{r['note']} |"
                    )
    return out


def render(
    heads: dict[str, dict], ran: dict[str, tuple[int, float]], total: float, command: str, date: str, info: dict
) -> str:
    failed = [(h["script"], c["name"]) for h in heads.values() for c in h["checks"] if not c["ok"]]
    runs = (
        ", ".join(
            f"`{n}` {fmt_time(w)}" + ("" if code == 0 else f" (**exit code {code}**)") for n, (code, w) in ran.items()
        )
        or "none (--summary-only)"
    )
    out = [
        SECTION,
        "",
        f"Written by `python -m benchmarks.run_all` on {date}.  ",
        f"Command: `{command}`",
        "",
        f"This run: {runs}" + (f"; **total wall time {fmt_time(total)}**" if ran else "") + ". Rows of benchmarks "
        "not run now come from their last run (date in the last column). Every benchmark runs in its own process, "
        "one after the other.",
        "",
        f"{gpu_note()} Machine: {info.get('cpu_model', info['processor'])}, {info['cpu_count']} cores, jax "
        f"{info['jax']} (details at the end of this section and of each section).",
        "",
        f"Per task: popdyn's exact loss + gradient (warm, compile excluded) against the Monte-Carlo estimate of the "
        f"same gradient with relative RMSE ε = {SUMMARY_EPS:g} (B(ε) samples × measured time per sample; sampling "
        "excluded where the benchmark says so, scb: whole preconditioned steps), basin-map throughput against a "
        "`scipy.integrate.solve_ivp` loop, and the GD and flow engines against hand-written jitted kernels of the "
        "same dynamics. *baseline ÷ popdyn* > 1 means popdyn is that many times faster.",
        "",
    ]
    out += summary_table(heads)
    out += ["", "All comparisons the benchmarks report (SGD loops, solvers, brute force; times warm unless noted):", ""]
    out += all_rows(heads)
    out += [
        "",
        "Checks (every exact value against its Monte-Carlo estimate within ~4 standard errors, label "
        "agreements, linear growth of the throughput, hand kernels reproducing the engines' end points, lanes "
        "executing less than one vmapped batch, the cached second start-up): "
        + ("all PASS." if not failed else "**FAIL**: " + "; ".join(f"`{s}`: {c}" for s, c in failed) + "."),
        "",
    ]
    out += [
        f"- `benchmarks.{h['script']}`: {checks_cell(h)}, run wall {fmt_time(h['wall_s'])}, peak RSS "
        f"{h['peak_rss_gb']:.2f} GB, {h['date']}" + (" (--quick)" if h["quick"] else "")
        for h in heads.values()
    ]
    missing = [n for n in BENCHMARKS if n not in heads]
    if missing:
        out += [
            "",
            "No headline file yet for: "
            + ", ".join(f"`benchmarks.{n}`" for n in missing)
            + " (run them to fill their rows).",
        ]
    return finish_section(out, info)


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="pass --quick to every benchmark; without --results the files go to a temporary directory",
    )
    ap.add_argument("--only", nargs="+", choices=BENCHMARKS, default=None, metavar="NAME", help="run only these")
    ap.add_argument("--skip", nargs="+", choices=BENCHMARKS, default=[], metavar="NAME", help="do not run these")
    ap.add_argument("--summary-only", action="store_true", help="run nothing, rebuild the summary")
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file (default benchmarks/RESULTS.md; with --quick: a temporary directory's)",
    )
    args = ap.parse_args(argv)
    if args.results is None:
        args.results = Path(tempfile.mkdtemp(prefix="popdyn-bench-")) / "RESULTS.md" if args.quick else DEFAULT_RESULTS
    args.results = args.results.resolve()
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header("run_all", argv)
    names = [] if args.summary_only else [n for n in (args.only or BENCHMARKS) if n not in args.skip]
    t0 = time.perf_counter()
    ran = {name: run_benchmark(name, args.quick, args.results) for name in names}
    total = time.perf_counter() - t0
    section = render(load_headlines(args.results), ran, total, command, date, info)
    write_section(args.results, SECTION, section, first=True)
    print("\n" + section.split("\nMachine:")[0].rstrip() + f"\n\nwrote section '{SECTION}' to {args.results}")
    failed = [f"{name} (exit code {code})" for name, (code, _) in ran.items() if code != 0]
    if failed:
        print(f"\n{len(failed)} of {len(ran)} benchmarks failed: {', '.join(failed)}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
