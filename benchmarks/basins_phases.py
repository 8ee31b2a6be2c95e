"""Benchmark: where the wall time of a large basin-map command goes. ``popdyn basins markov --grid 1000 --method gd``
run as a fresh process, once with an empty compilation cache and once warm, split into its phases.

What it measures
----------------
The command runs as a subprocess whose phases are timed by wrappers put around popdyn's own functions before the
command starts (nothing in popdyn is changed): the interpreter and imports (process start to the command's entry
point), the descent (``popdyn._batching.map_chunks`` inside ``gradient_descent``: every chunk, compile included),
the end-of-run classification (``popdyn.dynamics._trajectory.finish``: Newton and saddle tests, end-point losses),
the labelling (``label_end_points``), writing the outputs (``Result.write``: summary, npz, PNG) and the rest
(arguments, checks, the closed-form comparison once the dynamics are done). The closed-form check runs in a
thread beside the descent; its duration is shown but it is not a phase of its own. The process wall time is
taken by this script from spawn to exit.

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.basins_phases            # ~1 min; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.basins_phases --quick    # --grid 200; writes nothing unless --results
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import finish_section, make_headline, popdyn_env, publish, quick_or_full, run_header

SCRIPT = "basins_phases"
HEADING = "## Basin map at grid 1000: time per phase"

CHILD = r"""
import json, sys, time
spawned = float(sys.argv[1]); marks = {}
import popdyn._cli, popdyn.io, popdyn.analysis._basins as basins, popdyn.dynamics._descent as descent
import popdyn.jobs.markov._commands as commands

def timed(module, name, phase):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        t = time.time()
        try:
            return inner(*args, **kwargs)
        finally:
            marks[phase] = marks.get(phase, 0.0) + time.time() - t
    setattr(module, name, wrapper)

timed(descent, "map_chunks", "descent")
timed(descent, "finish", "classification")
timed(basins, "label_end_points", "labelling")
timed(commands, "_closed_form_basins", "closed-form check (beside the descent)")
timed(popdyn.io.Result, "write", "writing outputs")
marks["interpreter and imports"] = time.time() - spawned
code = 0
try:
    popdyn._cli.main(sys.argv[3:])
except SystemExit as stop:
    code = stop.code or 0
with open(sys.argv[2], "w") as f:
    json.dump(marks, f)
sys.exit(code)
"""


def run_once(job: list[str], cache: str, tmp: str, tag: str) -> dict[str, float]:
    """Phase times of one run of ``popdyn JOB`` as a fresh process, with its wall time from spawn to exit."""
    marks = Path(tmp) / f"{tag}.json"
    spawned = time.time()
    argv = [sys.executable, "-c", CHILD, repr(spawned), str(marks), *job, "--out", f"{tmp}/{tag}"]
    subprocess.run(argv, env=popdyn_env(cache), cwd=tmp, check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - spawned
    phases = json.loads(marks.read_text())
    beside = {k: phases.pop(k) for k in list(phases) if "beside" in k}
    phases["rest"] = wall - sum(phases.values())
    return {"wall": wall, **phases, **beside}


def main(argv=None) -> int:
    args = quick_or_full(__doc__, "--grid 200", argv)
    command, date, info = run_header(SCRIPT, argv)
    job = ["basins", "markov", "--grid", "200" if args.quick else "1000", "--method", "gd", "--quiet"]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        runs = {"first run (empty cache)": run_once(job, cache, tmp, "cold")}
        runs["warm run"] = run_once(job, cache, tmp, "warm")
    names = list(runs["warm run"])
    shares = {run: 1 - r["descent"] / r["wall"] for run, r in runs.items()}
    for run, r in runs.items():
        times = ", ".join(f"{k} {v:.2f} s" for k, v in r.items())
        print(f"{run}: {times}; outside the descent {shares[run]:.0%}")
    lines = [
        HEADING,
        "",
        f"`popdyn {' '.join(job)}` (10⁶ initialisations, Canonical(0.1, 0.1), 2000 steps of GD at η = 0.5) as a "
        "fresh process, timed from spawn to exit, its phases timed by wrappers around popdyn's functions "
        "(the script's docstring says which). Measured by `python -m benchmarks.basins_phases` in one run.",
        "",
        "| phase | " + " | ".join(runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    lines += [f"| {k} | " + " | ".join(f"{r[k]:.2f} s" for r in runs.values()) + " |" for k in names]
    lines += ["| **outside the descent** | " + " | ".join(f"**{s:.0%}**" for s in shares.values()) + " |"]
    lines += [
        "",
        "The closed-form check runs in a thread during the descent, so its time is part of the other phases' "
        "wall time, not added to it.",
        "",
        f"Command: `{command}` ({date}).",
    ]
    checks = [(f"{run}: under 10% of the wall time outside the descent", s < 0.1) for run, s in shares.items()]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, time.perf_counter() - t_start, [], checks)
    head["runs"] = runs
    publish(finish_section(lines, info), HEADING, args.results, head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
