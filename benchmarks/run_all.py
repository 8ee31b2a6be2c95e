"""Run every benchmark script, each in its own subprocess and in sequence, then write the section "## Summary: popdyn
against the baselines" right after the header of ``benchmarks/RESULTS.md``.

What it does
------------
1. Runs ``benchmarks/<name>.py`` for each name in SCRIPTS (or --only NAME ..., minus --skip NAME ...), passing
   --quick through (every script has it) and --results. Each script replaces its own section of the results file and
   writes its headline figures — what popdyn computed and in how many seconds, what the baseline computed and in how
   many seconds, and its PASS/FAIL checks — to ``results/<name>.json`` next to it (``_common.make_headline``).
2. Reads every ``results/<name>.json`` there (also those of scripts not run this time, with their own dates) and
   writes the summary: one row per task (markov, decision-list, scan-snap, scb, teacher: the exact loss+gradient
   against Monte Carlo at the same precision) plus the throughput row (basin maps against the ``solve_ivp`` loop),
   each with popdyn's time, the baseline's time and baseline ÷ popdyn, the checks and a link to the detailed section;
   then every other comparison the scripts report; the total wall time of this run, the machine, and whether a GPU
   was used.

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.run_all                          # everything, ~21 min on 2 cores (decision_lists ~9 min)
    python -m benchmarks.run_all --skip decision_lists    # ~12 min; its row comes from its last run
    python -m benchmarks.run_all --only scan_snap teacher
    python -m benchmarks.run_all --summary-only           # rebuild the summary from the JSON files, run nothing
    python -m benchmarks.run_all --quick                  # every script's --quick, into a temporary directory
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

SCRIPTS = ("basins_markov", "markov_full_mc", "decision_lists", "scan_snap", "scb", "teacher", "throughput")
TASKS = ("markov", "decision-list", "scan-snap", "scb", "teacher", "throughput")
SECTION = "## Summary: popdyn against the baselines"
DEFAULT_RESULTS = REPO / "benchmarks" / "RESULTS.md"


def run_script(name: str, quick: bool, results: Path) -> tuple[int, float]:
    """Run one benchmark script in its own process from the repository root (output shown as it goes), with
    --results unless it is the script's own default: (exit code, wall seconds)."""
    default = not quick and results.resolve() == DEFAULT_RESULTS
    where = (
        []
        if default
        else ["--results", os.path.relpath(results, REPO) if results.is_relative_to(REPO) else str(results)]
    )
    cmd = [sys.executable, "-m", f"benchmarks.{name}", *(["--quick"] if quick else []), *where]
    print(f"\n{'=' * 100}\n=== {name}: {' '.join(cmd[1:])}\n{'=' * 100}", flush=True)
    t0 = time.perf_counter()
    code = subprocess.run(cmd, cwd=REPO).returncode
    wall = time.perf_counter() - t0
    print(f"=== {name}: exit code {code}, {fmt_time(wall)}", flush=True)
    return code, wall


def load_headlines(results: Path) -> dict[str, dict]:
    """Every script's headline file next to ``results`` that exists: name → its JSON."""
    out = {}
    for name in SCRIPTS:
        path = json_path(results, name)
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces → hyphens."""
    return "#" + re.sub(r"[^\w\- ]", "", heading.lstrip("# ").strip().lower()).replace(" ", "-")


def source(h: dict) -> str:
    """Link to a script's detailed section, with its date and whether it was a --quick run."""
    title = h["heading"].lstrip("# ")
    return (
        f"[{title}]({anchor(h['heading'])}) (`{h['script']}.py`, {h['date'][:10]}"
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
    """One row per task: the row each script marks primary."""
    out = [
        "| task | comparison | popdyn | baseline | popdyn time | baseline time | baseline ÷ popdyn | checks | "
        "details |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        found = [(h, r) for h in heads.values() for r in h["rows"] if r["task"] == task and r["primary"]]
        if not found:
            out.append(f"| {task} | no headline file yet: run its script | | | | | | | |")
            continue
        h, r = found[0]
        out.append(
            f"| **{task}** | {r['comparison']} | {r['popdyn']} | {r['baseline']} | {fmt_time(r['popdyn_s'])} "
            f"| {fmt_time(r['baseline_s'])} | **{fmt_ratio(r['speedup'])}** | {checks_cell(h)} | {source(h)} |"
        )
    return out


def all_rows(heads: dict[str, dict]) -> list[str]:
    """Every comparison of every script, by task."""
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
        f"This run: {runs}" + (f"; **total wall time {fmt_time(total)}**" if ran else "") + ". Rows of scripts not "
        "run now come from their last run (date in the last column). Every script runs in its own process, one "
        "after the other.",
        "",
        f"{gpu_note()} Machine: {info.get('cpu_model', info['processor'])}, {info['cpu_count']} cores, jax "
        f"{info['jax']} (details at the end of this section and of each section).",
        "",
        f"Per task: popdyn's exact loss + gradient (warm, compile excluded) against the Monte-Carlo estimate of the "
        f"same gradient with relative RMSE ε = {SUMMARY_EPS:g} (B(ε) samples × measured time per sample; sampling "
        "excluded where the script says so, scb: whole preconditioned steps), and basin-map throughput against a "
        "`scipy.integrate.solve_ivp` loop. *baseline ÷ popdyn* > 1 means popdyn is that many times faster.",
        "",
    ]
    out += summary_table(heads)
    out += ["", "All comparisons the scripts report (SGD loops, solvers, brute force; times warm unless noted):", ""]
    out += all_rows(heads)
    out += [
        "",
        "Checks (every exact value against its Monte-Carlo estimate within ~4 standard errors, label "
        "agreements, linear growth of the throughput): "
        + ("all PASS." if not failed else "**FAIL**: " + "; ".join(f"`{s}`: {c}" for s, c in failed) + "."),
        "",
    ]
    out += [
        f"- `{h['script']}.py`: {checks_cell(h)}, run wall {fmt_time(h['wall_s'])}, peak RSS "
        f"{h['peak_rss_gb']:.2f} GB, {h['date']}" + (" (--quick)" if h["quick"] else "")
        for h in heads.values()
    ]
    missing = [n for n in SCRIPTS if n not in heads]
    if missing:
        out += [
            "",
            "No headline file yet for: " + ", ".join(f"`{n}.py`" for n in missing) + " (run them to fill their rows).",
        ]
    return finish_section(out, info)


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="pass --quick to every script; without --results the files go to a temporary directory",
    )
    ap.add_argument("--only", nargs="+", choices=SCRIPTS, default=None, metavar="NAME", help="run only these scripts")
    ap.add_argument("--skip", nargs="+", choices=SCRIPTS, default=[], metavar="NAME", help="do not run these")
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
    names = [] if args.summary_only else [n for n in (args.only or SCRIPTS) if n not in args.skip]
    t0 = time.perf_counter()
    ran = {name: run_script(name, args.quick, args.results) for name in names}
    total = time.perf_counter() - t0
    section = render(load_headlines(args.results), ran, total, command, date, info)
    write_section(args.results, SECTION, section, first=True)
    print("\n" + section.split("\nMachine:")[0].rstrip() + f"\n\nwrote section '{SECTION}' to {args.results}")
    return 0 if all(code == 0 for code, _ in ran.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
