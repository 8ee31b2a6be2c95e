"""``popdyn demo``: the main job on embedded defaults (docs/jobs.md): Markov (e, w) basin maps for p + q < 1 and
p + q > 1, a convergence table and a step-size audit, each written into its own folder."""

from __future__ import annotations

import time
from pathlib import Path

from popdyn import _validate
from popdyn.jobs.markov.commands import basins_markov, converge_markov, stepsize_markov


def demo(out: Path, grid: int = 96, progress: bool = True) -> list[str]:
    """Run the four parts, write each into ``out/<part>`` and return the summary lines."""
    n = _validate.int_at_least("grid", grid, 2)
    parts = [
        ("basins-pq-lt-1", "basins", lambda: basins_markov(0.1, 0.1, n, progress=progress)),
        ("basins-pq-gt-1", "basins", lambda: basins_markov(0.9, 0.9, n, progress=progress)),
        ("converge", "converge", lambda: converge_markov(0.1, 0.1, n_init=6)),
        ("stepsize", "stepsize", lambda: stepsize_markov(0.1, 0.1)),
    ]
    lines = []
    for name, command, job in parts:
        t0 = time.perf_counter()
        res = job()
        res.write(Path(out) / name, command, time.perf_counter() - t0)
        lines += res.lines + [""]
    return lines
