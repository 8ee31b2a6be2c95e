"""Benchmark: command-line start-up. The wall time of a small ``popdyn`` command run as a fresh process, the
first time (empty compilation cache), the second time (the same command: its programs come from JAX's
persistent cache) and with another data parameter, against the same command with the cache turned off.

What it measures
----------------
Each run is ``popdyn basins markov --grid 64 --method gd --steps 500 --quiet`` (by default) as a subprocess
with ``POPDYN_CACHE_DIR`` set to a fresh temporary folder (or ``off``), timed from start to exit. Reported:
the first run, the second run and their ratio, the run with ``--p 0.3`` after them, the cache-off run, the time
of ``popdyn basins markov --help`` (start-up without computing) and of importing the job's modules.

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.cli_startup            # ~1 min; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.cli_startup --quick    # the same, --grid 16; writes nothing unless --results
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO, finish_section, make_headline, popdyn_env, publish, quick_or_full, run_header

SCRIPT = "cli_startup"
HEADING = "## Command-line start-up"


def timed(argv: list[str], cache: str, cwd: str) -> float:
    """Seconds from start to exit of ``python -m popdyn._cli ARGV`` with POPDYN_CACHE_DIR=cache."""
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "popdyn._cli", *argv],
        env=popdyn_env(cache),
        cwd=cwd,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def main(argv=None) -> int:
    args = quick_or_full(__doc__, "--grid 16", argv)
    command, date, info = run_header(SCRIPT, argv)
    job = ["basins", "markov", "--grid", "16" if args.quick else "64", "--method", "gd", "--steps", "500", "--quiet"]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        rows = {
            "first run (empty cache)": timed([*job, "--out", f"{tmp}/a"], cache, tmp),
            "second run (same command)": timed([*job, "--out", f"{tmp}/b"], cache, tmp),
            "another --p (0.3)": timed([*job, "--p", "0.3", "--out", f"{tmp}/c"], cache, tmp),
            "cache off": timed([*job, "--out", f"{tmp}/d"], "off", tmp),
            "--help (no computing)": timed(["basins", "markov", "--help"], "off", tmp),
        }
        env = dict(os.environ, PYTHONPATH=str(REPO))
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import popdyn._cli, popdyn.jobs.markov._commands, popdyn.io"], env=env, check=True
        )
        rows["interpreter + imports of the job"] = time.perf_counter() - t0
    ratio = rows["second run (same command)"] / rows["first run (empty cache)"]
    for name, sec in rows.items():
        print(f"  {name:34s} {sec:6.2f} s")
    print(f"  second / first = {ratio:.2f}")
    lines = [
        HEADING,
        "",
        f"`popdyn {' '.join(job)}` as a fresh process, timed from start to exit, with JAX's persistent "
        'compilation cache in an empty folder (`POPDYN_CACHE_DIR`; docs/jobs.md, "A fast command line"). '
        "Measured by `python -m benchmarks.cli_startup` in one run.",
        "",
        "| run | seconds |",
        "|---|---|",
    ]
    lines += [f"| {name} | {sec:.2f} |" for name, sec in rows.items()]
    lines += ["", f"Second run ÷ first run: **{ratio:.2f}**.", "", f"Command: `{command}` ({date})."]
    checks = [("second run at most a third of the first", ratio <= 1 / 3)]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, time.perf_counter() - t_start, [], checks)
    head["runs"] = rows
    publish(finish_section(lines, info), HEADING, args.results, head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
