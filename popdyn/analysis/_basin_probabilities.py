"""Basin maps as probabilities: several runs from every start of a slice (SGD's seeds), and for each start the share
of its runs that end in each attractor's basin (docs/sgd.md, "Basin maps as probabilities").

SGD does not come to rest: after its steps a run jitters about a minimum, so it is labelled by where it ended, the
attractor whose basin holds its end point (the end point settled by a deterministic dynamics, the gradient flow
by default, and labelled as ``basin_map`` labels). GD and the flow send a start to one attractor; SGD sends it to
attractor k with a probability p_k(θ0), which the S runs from θ0 estimate as p̂_k = (runs ending in k)/S with
binomial standard error √(p̂_k(1 − p̂_k)/S). Far from the GD separatrix p̂ is 0 or 1, GD's label; across it p̂
rises through a band of uncertain starts. Near a saddle with unstable rate μ (L ≈ −μu²/2 along the unstable
direction u), SGD's step u ← (1 + ημ)u − ηξ, with ξ the minibatch noise along u of variance σ²/B, amplifies the
start and the noise alike, so the run ends on the side of u0 − η Σ_k (1 + ημ)^{−(k+1)} ξ_k: nearly a Gaussian of
variance s² = η²σ²/B · Σ_k (1 + ημ)^{−2(k+1)} = ησ²/(Bμ(2 + ημ)). Hence p(u0) ≈ Φ(u0/s), a band whose width scales
as √(η/B) and closes onto GD's map as η → 0 [derived].
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import jax
import numpy as np

from popdyn._batching import check_chunk_size
from popdyn.analysis._basins import UNRESOLVED, basin_fractions
from popdyn.analysis._labellers import AbstractLabeller
from popdyn.analysis._slices import AbstractSlice
from popdyn.dynamics import AbstractDynamics, GradientFlow, Status
from popdyn.dynamics._status import RESOLVED
from popdyn.problem import Problem, Theta, ThetaLike

ENDED = (Status.MAX_STEPS, *RESOLVED)
"""Statuses of runs that ended where they may be labelled: their steps done (SGD's usual end) or at rest. A run that
diverged, turned non-finite or failed stays unresolved."""


@dataclass(frozen=True)
class BasinProbabilities:
    """Per start of ``grid``, the probability of each attractor over its ``seeds`` runs.

    ``probabilities`` has the grid's shape plus one axis over ``attractors`` and then "unresolved" (runs that ended
    in no attractor's basin, or did not end: diverged, non-finite), summing to 1 at every start. ``labels`` and
    ``status`` are every run's (grid's shape plus one axis of seeds): the attractor index (−1: unresolved) and the
    status of the run itself. ``beside_labels`` (the grid's shape) is where a deterministic dynamics run beside
    (``basin_probabilities(..., beside=GD)``) sends each start, in the same attractors' indices (−1: unresolved), and
    ``beside_method`` its method; both None without one.
    """

    attractors: tuple[str, ...]
    probabilities: np.ndarray
    labels: np.ndarray
    status: np.ndarray
    grid: AbstractSlice
    beside_labels: np.ndarray | None = None
    beside_method: str | None = None

    @property
    def seeds(self) -> int:
        """S, the number of runs from each start."""
        return int(self.labels.shape[-1])

    def _index(self, name: str) -> int:
        names = (*self.attractors, UNRESOLVED)
        if name not in names:
            raise ValueError(f"name={name!r} is not an attractor of this map: one of {list(names)}")
        return names.index(name)

    def probability(self, name: str) -> np.ndarray:
        """p̂ of attractor ``name`` (or "unresolved") at every start, shaped like the grid."""
        return self.probabilities[..., self._index(name)]

    def stderr(self, name: str) -> np.ndarray:
        """The binomial standard error √(p̂(1 − p̂)/S) of ``probability(name)``."""
        p = self.probability(name)
        return np.sqrt(p * (1.0 - p) / self.seeds)

    def uncertain(self, level: float = 0.1) -> np.ndarray:
        """True where no outcome has probability above 1 − ``level``: the band of starts whose attractor SGD
        leaves to chance."""
        return np.max(self.probabilities, axis=-1) <= 1.0 - level


def _settled_labels(
    prob: Problem, ends: ThetaLike, ended: np.ndarray, settle: AbstractDynamics, **labelling
) -> tuple[tuple[str, ...], np.ndarray]:
    """(The attractors' names; every run's label, −1 where it did not end): the end points ``ends`` of the runs that
    ended (the True entries of ``ended``) settled by ``settle`` and labelled by ``basin_fractions`` with the keywords
    ``labelling``. When no run ended, nothing is settled and no attractor is named."""
    every = np.full(ended.shape, -1)
    if not ended.any():
        return (), every
    settled = basin_fractions(prob, ends, settle, **labelling)
    every[ended] = settled.labels
    return settled.attractors, every


def basin_probabilities(
    prob: Problem,
    grid: AbstractSlice,
    method: AbstractDynamics,
    *,
    settle: AbstractDynamics | None = None,
    beside: AbstractDynamics | None = None,
    labeller: AbstractLabeller | None = None,
    tol: float | None = None,
    use_theory: bool | None = None,
    features: str | Callable[[Theta], jax.Array] | None = None,
    cluster_radius: float | None = None,
    chunk_size: int | None = 16384,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
) -> BasinProbabilities:
    """The probability of each attractor from every start of ``grid``, over the ``method.runs_per_start`` runs the
    dynamics makes from each start (``popdyn.dynamics.SGD(seeds=S)``).

    Every run that ended (``ENDED``) has its end point settled by ``settle`` and labelled as ``basin_fractions``
    labels, and counts for the attractor whose basin holds that point; the others (diverged, non-finite, failed)
    count as unresolved and take no part in the labelling (a diverged end point's loss would set the scale at which
    ``LossLevels`` tells levels apart, and name attractors that no counted run reaches). With ``beside``, one run of
    that dynamics from every start (GD, say) is settled and labelled in the same call, so its labels name the same
    attractors (``beside_labels``).

    **Arguments:**

    - ``prob``: the problem (for SGD, one that declares its examples).
    - ``grid``: a 2-D slice (``popdyn.Grid`` or any ``AbstractSlice``).
    - ``method``: the dynamics whose runs are counted; with one run per start, its labels as 0/1 probabilities.
    - ``settle``: the deterministic dynamics that carries each end point to its attractor (default
      ``GradientFlow()``).
    - ``beside``: a dynamics with one run per start whose map to compare with (its separatrix is drawn by
      ``popdyn.plot.plot_basin_probabilities``), or None.
    - ``labeller``, ``tol``, ``use_theory``, ``features``, ``cluster_radius``: how settled end points are named, as
      for ``basin_fractions``.
    - ``chunk_size``, ``progress``: as for ``basin_fractions``, for both runs; ``checkpoint``: a directory for
      ``method``'s chunks (the settling is recomputed).
    """
    if not isinstance(grid, AbstractSlice):
        raise ValueError(f"grid={grid!r} is invalid: must be a popdyn.Grid or another slice (AbstractSlice)")
    for name, value in (("method", method), ("settle", settle), ("beside", beside)):
        if value is not None and not isinstance(value, AbstractDynamics):
            raise ValueError(
                f"{name}={value!r} is invalid: must be a dynamics object, e.g. popdyn.dynamics.SGD(seeds=S)"
            )
    if beside is not None and beside.runs_per_start != 1:
        raise ValueError(f"beside={type(beside).__name__} makes {beside.runs_per_start} runs per start: must make one")
    check_chunk_size(chunk_size)
    starts = grid.points(prob)
    runs = method.end_points().run(prob, starts, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)
    ends, status = runs.final, np.asarray(runs.status)
    if beside is not None:
        other = beside.end_points().run(prob, starts, chunk_size=chunk_size, progress=progress)
        ends = jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b]), ends, other.final)
        status = np.concatenate([status, np.asarray(other.status)])
    ended = np.isin(status, [int(x) for x in ENDED])
    attractors, every = _settled_labels(
        prob,
        jax.tree_util.tree_map(lambda x: np.asarray(x)[ended], ends),
        ended,
        settle or GradientFlow(),
        labeller=labeller,
        tol=tol,
        use_theory=use_theory,
        features=features,
        cluster_radius=cluster_radius,
        chunk_size=chunk_size,
        progress=progress,
    )
    seeds, k, n = method.runs_per_start, len(attractors), math.prod(grid.shape)
    labels = every[: n * seeds].reshape(n, seeds)
    counts = [np.sum(labels == i, axis=1) for i in range(k)] + [np.sum(labels < 0, axis=1)]
    shape = (*grid.shape, seeds)
    return BasinProbabilities(
        attractors=attractors,
        probabilities=(np.stack(counts, axis=-1) / seeds).reshape(*grid.shape, k + 1),
        labels=labels.reshape(shape),
        status=status[: n * seeds].reshape(shape),
        grid=grid,
        beside_labels=None if beside is None else every[n * seeds :].reshape(grid.shape),
        beside_method=None if beside is None else beside.method,
    )
