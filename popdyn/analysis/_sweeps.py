"""Phase diagrams: basin fractions as functions of one or two data parameters (docs/jobs.md, "Sweeps").

``basin_sweep`` runs one dynamics from the same starts (or the same keys) over the problems of a parameter grid and
returns a typed ``Sweep``: per point, each attractor's share of the resolved runs with its standard error, the
resolved share, the median stopping time and the median λ_max at the resolved end points. Data parameters are
array leaves of a Problem, so every point reuses the programs compiled for the first one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from jaxtyping import Float

from popdyn._batching import check_chunk_size
from popdyn.analysis._basins import BasinFractions, fractions_of, resolve_labeller, starts
from popdyn.analysis._budget import BudgetReport, budget_report, flow_time_unit
from popdyn.analysis._labellers import AbstractLabeller
from popdyn.curvature import lambda_max
from popdyn.dynamics import AbstractDynamics, GradientFlow, Trajectory
from popdyn.dynamics._stack import run_each
from popdyn.problem import Problem, Theta

Axes = tuple[tuple[str, Float[np.ndarray, " n"]], ...]
"""The swept parameters: (name, values) per axis, the last axis fastest."""


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep.

    **Arguments:**

    - ``values``: {parameter: value} at the point.
    - ``fractions``: each attractor's share of the resolved runs.
    - ``resolved_fraction``: the share of runs that resolved.
    - ``time_median``: the median stopping time of the resolved runs (NaN when none; None when not measured).
    - ``stderr``: the binomial standard error of each share among the resolved runs (None when not measured).
    - ``status_counts``: runs per status (None when not measured).
    - ``lambda_max_median``: the median λ_max at the resolved end points (None when not measured).
    - ``budget``: how far the runs that ran out of budget got (``popdyn.analysis.budget_report``; None when not
      measured). Not part of ``record``.
    """

    values: dict[str, float | int]
    fractions: dict[str, float]
    resolved_fraction: float
    time_median: float | None
    stderr: dict[str, float] | None = None
    status_counts: dict[str, int] | None = None
    lambda_max_median: float | None = None
    budget: BudgetReport | None = None

    def record(self) -> dict[str, Any]:
        """The point as summary.json writes it: what was measured, in a fixed order."""
        out: dict[str, Any] = {"values": self.values, "fractions": self.fractions}
        out |= {} if self.stderr is None else {"stderr": self.stderr}
        out["resolved_fraction"] = self.resolved_fraction
        out |= {} if self.status_counts is None else {"status_counts": self.status_counts}
        out["time_median"] = self.time_median
        out |= {} if self.lambda_max_median is None else {"lambda_max_median": self.lambda_max_median}
        return out


@dataclass(frozen=True)
class Sweep:
    """A sweep over the grid of ``axes`` (row-major, the last axis fastest): its ``points`` and the names of every
    attractor seen at any of them, in the order first seen; the grids below have the grid's ``shape``."""

    axes: Axes
    points: tuple[SweepPoint, ...]
    attractors: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """Values per axis."""
        return tuple(len(v) for _, v in self.axes)

    @property
    def fractions(self) -> dict[str, np.ndarray]:
        """Per attractor, its share of the resolved runs at every point (NaN where none resolved)."""
        return {
            a: np.array([p.fractions.get(a, 0.0) if p.resolved_fraction > 0 else np.nan for p in self.points]).reshape(
                self.shape
            )
            for a in self.attractors
        }

    @property
    def resolved(self) -> np.ndarray:
        """The resolved share at every point."""
        return np.array([p.resolved_fraction for p in self.points]).reshape(self.shape)

    @property
    def time_median(self) -> np.ndarray | None:
        """The median stopping time at every point (NaN where not reported); None when no point reports it."""
        return self._grid("time_median")

    @property
    def lambda_max_median(self) -> np.ndarray | None:
        """The median λ_max at every point's resolved end points; None when not measured."""
        return self._grid("lambda_max_median")

    def _grid(self, name: str) -> np.ndarray | None:
        values = [getattr(p, name) for p in self.points]
        if all(v is None for v in values):
            return None
        return np.array([np.nan if v is None else v for v in values]).reshape(self.shape)


def _budget(prob: Problem, traj: Trajectory | None, dynamics: AbstractDynamics) -> BudgetReport | None:
    """``budget_report`` of a point's run, where its dynamics is one it reads (``flow_time_unit``)."""
    return None if traj is None or flow_time_unit(dynamics) is None else budget_report(prob, traj)


def grid_points(axes: Axes) -> list[dict[str, float]]:
    """The points of the grid of ``axes`` as {name: value}, row-major with the last axis fastest."""
    mesh = np.array(np.meshgrid(*[v for _, v in axes], indexing="ij")).reshape(len(axes), -1).T
    return [{name: float(v) for (name, _), v in zip(axes, vals, strict=False)} for vals in mesh]


def basin_sweep(
    problems: Sequence[Problem],
    axes: Axes,
    inits: Theta | int,
    dynamics: AbstractDynamics | None = None,
    *,
    labeller: AbstractLabeller | None = None,
    seed: int = 0,
    chunk_size: int | None = 16384,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
    stack: bool = False,
) -> Sweep:
    """Basin fractions at every point of a parameter grid.

    **Arguments:**

    - ``problems``: the problem at every point of the grid of ``axes`` (row-major, the last axis fastest).
    - ``axes``: (name, values) per swept parameter, one or two.
    - ``inits``: the starts, one batch for every point; or a number n of draws of each point's own init with the
      same n keys (split from ``seed``), so a swept value that sets the init draws its own starts.
    - ``dynamics``: the dynamics run at every point (default ``GradientFlow()``), to its end points.
    - ``labeller``: what names the attractors (default: ``popdyn.analysis.default_labeller()``).
    - ``chunk_size``, ``progress``: as ``basin_fractions``; ``checkpoint``: a folder where finished chunks are saved
      and resumed from (one subfolder per point when the points run one after another).
    - ``stack``: run the points stacked (``AbstractDynamics.run_stack``): problems of one static structure (data
      numbers as array leaves, the same shapes) then run with ``GradientFlow`` or ``GradientDescent`` in one
      compiled program per chunk of ``chunk_size`` runs, every start of every point. GD's runs are bit for bit those
      of each point run alone, the flow's end points agree to the solver's tolerance. The stacked program compiles
      for every number of points and is larger than one point's: on 2 CPU cores a first call took 28–50 % longer
      than the loop and a warm one 1.24–1.45× less (benchmarks/RESULTS.md, "A phase diagram"), so by default
      (False) the points run one after another, every one reusing the programs compiled for the first.
    """
    dynamics = GradientFlow() if dynamics is None else dynamics
    grid = grid_points(axes)
    if len(problems) != len(grid):
        raise ValueError(f"problems has {len(problems)} entries: the grid of axes has {len(grid)} points")
    check_chunk_size(chunk_size)
    labeller = resolve_labeller(labeller, None, None, None, None)
    run = dynamics.end_points()
    theta0s = [starts(prob, inits, seed) for prob in problems]
    each = run.run_stack if stack else partial(run_each, run)
    trajs = each(problems, theta0s, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)
    names: list[str] = []
    points: list[SweepPoint] = []
    for values, prob, traj in zip(grid, problems, trajs, strict=True):
        bf = fractions_of(prob, traj, labeller, dynamics.method)
        names += [a for a in bf.attractors if a not in names]
        points.append(_point(prob, values, bf, dynamics))
    return Sweep(axes=tuple(axes), points=tuple(points), attractors=tuple(names))


def _point(prob: Problem, values: dict[str, float], bf: BasinFractions, dynamics: AbstractDynamics) -> SweepPoint:
    """A sweep's point from the basin fractions ``bf`` of its problem ``prob`` at the parameter ``values``."""
    ok = bf.labels >= 0
    lam = np.where(ok, np.asarray(lambda_max(prob, bf.final)), np.nan)  # one shape for every value
    k = int(ok.sum())
    frac = bf.fractions_of_resolved
    return SweepPoint(
        values=values,
        fractions=frac,
        stderr={a: (float(np.sqrt(f * (1 - f) / k)) if k else float("nan")) for a, f in frac.items()},
        resolved_fraction=bf.resolved_fraction,
        status_counts=bf.status_counts(),
        time_median=float(np.nanmedian(bf.times)) if ok.any() else float("nan"),
        lambda_max_median=float(np.nanmedian(lam)) if ok.any() else float("nan"),
        budget=_budget(prob, bf.trajectory, dynamics),
    )
