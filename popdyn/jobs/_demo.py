"""``popdyn demo``: the main job on embedded defaults (docs/jobs.md): Markov (e, w) basin maps for p + q < 1 and
p + q > 1, a convergence table and a step-size audit, each written into its own folder."""

from __future__ import annotations

import time
from pathlib import Path

from popdyn import _validate
from popdyn.io import produce
from popdyn.jobs.markov._commands import basins_markov, converge_markov, stepsize_markov

PARTS = (("basins-pq-lt-1", "basins"), ("basins-pq-gt-1", "basins"), ("converge", "converge"), ("stepsize", "stepsize"))
"""The demo's sub-folders of ``out`` and the command each holds (task markov)."""


def demo(out: Path, grid: int = 96, progress: bool = True) -> list[str]:
    """Run the four parts, then write each into ``out/<part>`` (nothing is written when a part fails or the run
    is interrupted) and return the summary lines."""
    n = _validate.int_at_least("grid", grid, 2)
    jobs = (
        lambda: basins_markov(0.1, 0.1, n, progress=progress),
        lambda: basins_markov(0.9, 0.9, n, progress=progress),
        lambda: converge_markov(0.1, 0.1, n_init=6),
        lambda: stepsize_markov(0.1, 0.1),
    )
    done = []
    for job in jobs:
        t0 = time.perf_counter()
        done.append((produce(job), time.perf_counter() - t0))
    lines = []
    for (name, command), (res, wall) in zip(PARTS, done, strict=False):
        res.write(Path(out) / name, command, wall)
        lines += res.lines + [""]
    return lines
