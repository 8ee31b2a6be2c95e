"""The Result of a basin-map job (docs/jobs.md): its arrays (labels, the two axes, times, status, attractor names
and any job-specific arrays) in ``basins.npz`` and the map as ``basins.png``."""

from __future__ import annotations

import numpy as np

from popdyn.analysis import BasinMap, UnresolvedGroups
from popdyn.io import Result
from popdyn.plot import plot_basin_map
from popdyn.problem import Problem


def basin_result(
    bm: BasinMap,
    prob: Problem,
    title: str,
    inputs: dict,
    results: dict,
    axes: tuple[str, str] = ("x", "y"),
    *,
    unresolved: UnresolvedGroups | None = None,
    **arrays,
) -> Result:
    """``Result(inputs, results)`` with the map's arrays under ``basins`` (the axes named ``axes``) and its
    figure (with the groups of ``unresolved`` runs in its legend); ``arrays`` adds job-specific arrays (e.g.
    closed-form labels)."""
    if bm.grid is None:
        raise ValueError("bm.grid is None: a basin-map job's result needs the map's grid")
    basins = {
        "labels": bm.labels,
        axes[0]: bm.grid.xs,
        axes[1]: bm.grid.ys,
        "times": bm.times,
        "status": bm.status,
        "attractors": np.array(bm.attractors),
        **arrays,
    }
    return Result(
        inputs, results, arrays={"basins": basins}, figures={"basins": plot_basin_map(bm, prob, title, unresolved)}
    )
