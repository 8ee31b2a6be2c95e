"""Loss levels at the problem's own scale: which end points share a level, and how a level is named
(docs/basins.md, "Labels: by theory or by features")."""

from __future__ import annotations

import numpy as np

LEVEL_TOL = 1e-6
"""Loss levels of end points closer than LEVEL_TOL·max(S, |L|) are one level (default featuriser), S the largest
|L| at the run's starts: relative to the problem's own loss scale, so labels do not change when L is scaled, and
round-off levels of one minimum (L = 1e-16 and 3e-16 on a landscape of scale 1) are one level."""


def shown_level(level: float, scale: float) -> float:
    """The level a name shows: 0 where |L| ≤ LEVEL_TOL·``scale``, the level's resolution at the run's loss scale
    (a minimum reached at round-off, L = 1.1e-16 or 2.7e-16, is "L=0" at every point of a sweep), else L."""
    return 0.0 if abs(level) <= LEVEL_TOL * scale else level


def level_groups(values: np.ndarray, scale: float, tol: float = LEVEL_TOL) -> tuple[np.ndarray, np.ndarray]:
    """(order, group): ``order`` sorts ``values``; ``group[i]`` numbers the level of ``values[order[i]]`` from 0, a
    new level starting wherever two sorted neighbours differ by more than tol·max(``scale``, |value|)."""
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    gaps = np.diff(ranked) > tol * np.maximum(scale, np.abs(ranked[1:]))
    return order, np.concatenate([[0], np.cumsum(gaps)]).astype(int)
