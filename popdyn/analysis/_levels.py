"""Loss levels at the problem's own scale and precision: which end points share a level, and how a level is named
(docs/basins.md, "Labels: by theory or by features")."""

from __future__ import annotations

import numpy as np

LEVEL_TOL = 1e-6
"""Levels closer than LEVEL_TOL·|L| are one (names show 6 significant digits, so two levels never share a name);
also the coarsest resolution of a level, LEVEL_TOL·max(S, |L|), S the largest |L| at the run's starts."""
FLOOR_TOL = 1e-12
"""The finest resolution of a level, FLOOR_TOL·S: L's round-off on a landscape of scale S (about 4,500 ε·S)."""
NEWTON_FACTOR = 4.0
"""Safety factor on an end point's Newton decrement δL in its resolution (``resolution``)."""


def resolution(loss: np.ndarray, decrement: np.ndarray, scale: float) -> np.ndarray:
    """How precisely each end point's loss gives the level of the critical point it stopped at:

        r = min(LEVEL_TOL·max(S, |L|), max(FLOOR_TOL·S, NEWTON_FACTOR·δL)),

    δL the point's Newton decrement (``popdyn.curvature.newton_decrement``, the spread of L its stopping leaves) and
    S = ``scale``: round-off levels of one minimum (L = 1e-16 and 3e-16, each with δL ≈ L) are one level, while two
    minima far below the starts' scale (L = 0 and 0.01 on a grid whose corners reach L = 1e5) stay two. A
    non-finite δL gives the coarsest resolution.

    **Arguments:** ``loss`` the end points' losses; ``decrement`` their Newton decrements; ``scale`` S ≥ 0."""
    coarse = LEVEL_TOL * np.maximum(scale, np.abs(loss))
    fine = np.maximum(FLOOR_TOL * scale, NEWTON_FACTOR * np.abs(decrement))
    return np.where(np.isfinite(decrement), np.minimum(coarse, fine), coarse)


def shown_level(level: float, floor: float) -> float:
    """The level a name shows: 0 where |L| ≤ ``floor`` (the level's resolution: a minimum reached at round-off,
    L = 1.1e-16 or 2.7e-16, is "L=0" at every point of a sweep), else L."""
    return 0.0 if abs(level) <= floor else level


def level_groups(
    values: np.ndarray, floor: float | np.ndarray, tol: float = LEVEL_TOL
) -> tuple[np.ndarray, np.ndarray]:
    """(order, group): ``order`` sorts ``values``; ``group[i]`` numbers the level of ``values[order[i]]`` from 0, a
    new level starting wherever two sorted neighbours differ by more than max(tol·|value|, the larger ``floor`` of
    the two); ``floor`` is one resolution for every value or one per value."""
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    res = np.broadcast_to(np.asarray(floor, dtype=float), values.shape)[order]
    gaps = np.diff(ranked) > np.maximum(tol * np.abs(ranked[1:]), np.maximum(res[:-1], res[1:]))
    return order, np.concatenate([[0], np.cumsum(gaps)]).astype(int)
