"""Shared helpers of the benchmark scripts: machine information, the run header, and writing one
script's section of ``benchmarks/RESULTS.md`` while keeping the others."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS_HEADER = (
    "# popdyn benchmarks\n\n"
    "Measured results written by the scripts in `benchmarks/`; each script replaces its own section when re-run.\n"
)

def machine_info() -> dict:
    import diffrax
    import jaxlib

    info = {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or "(empty)",
        "uname": " ".join(platform.uname()),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "diffrax": diffrax.__version__,
        "numpy": np.__version__,
        "devices": str(jax.devices()),
    }
    try:
        import scipy

        info["scipy"] = scipy.__version__  # the baselines' solve_ivp / eigsh
    except ImportError:
        pass
    try:
        info["load_avg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            models = [ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")]
        if models:
            info["cpu_model"] = models[0]
    except OSError:
        pass
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.strip()
        info["git"] = head + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace (or append) the block under ``heading`` in ``path``, keeping every other section."""
    text = path.read_text() if path.exists() else RESULTS_HEADER
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == heading), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
        before = "\n".join(lines[:start]).rstrip("\n")
        after = "\n".join(lines[end:]).strip("\n")
        new = (before + "\n\n" if before else "") + section.rstrip("\n") + "\n" + ("\n" + after + "\n" if after else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def run_header(name: str, argv: list[str] | None) -> tuple[str, str, dict]:
    """Print and return the command line, the ISO date and the machine information of this run."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *args])
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    info = machine_info()
    print(f"{name} benchmark, {date}\n{command}")
    for k, v in info.items():
        print(f"  {k}: {v}")
    return command, date, info


def finish_section(lines: list[str], info: dict) -> str:
    """Close a RESULTS.md section: a blank line, the "Machine:" block, and the joined text."""
    return "\n".join([*lines, "", "Machine:", "", *(f"- {k}: {v}" for k, v in info.items()), ""])


def parser(doc: str):
    """An argument parser whose description is the script docstring's first paragraph."""
    import argparse

    return argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)


def publish(section: str, heading: str, results: str | Path | None) -> None:
    """Print the section (without its machine block) and write it into ``results`` when given."""
    print("\n" + section.split("\nMachine:")[0].rstrip())
    if results is not None:
        write_section(Path(results), heading, section)
        print(f"\nwrote section '{heading}' to {results}")
    else:
        print("\n(--quick: no results file written; pass --results PATH to write one)")
