"""Basins of attraction: fractions from any batch of initialisations, and maps over 2-D slices (docs/basins.md).

Each initialisation is run to its end (any dynamics, batched and chunked) and labelled by the attractor it
reaches, by a labeller (``popdyn.analysis._labellers``): by default the problem's theory residuals where it has
them (residual < ``tol``), else the loss level and Morse index of the end point (number of negative Hessian
eigenvalues), which names a manifold of minima once however it is spread in θ; a user featuriser or the end
point's position (``features="position"``) are the alternatives, and any ``AbstractLabeller`` replaces them. Only
resolved points are labelled (converged, converged late, at a saddle, degenerate); label −1 marks the rest,
counted and reported, never dropped.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import equinox as eqx
import jax
import numpy as np
from jaxtyping import ArrayLike, Float, PyTree

from popdyn import _validate, dynamics
from popdyn._batching import as_batch, check_chunk_size
from popdyn.analysis._labellers import AbstractLabeller, Labels, default_labeller, loss_scale
from popdyn.analysis._slices import AbstractSlice
from popdyn.dynamics import AbstractDynamics, Trajectory, gradient_descent
from popdyn.dynamics._base import run_options
from popdyn.dynamics._status import count
from popdyn.problem import Problem, Theta, ThetaLike

UNRESOLVED = "unresolved"
"""The key under which ``fractions`` (of ``BasinFractions`` and ``BasinMap``) gives the share of starts that reached
no attractor (label −1)."""


@dataclass(frozen=True)
class BasinFractions:
    """Per initialisation (leading axis n): the attractor label (−1: unresolved), the time (flow) or step (GD)
    at which it stopped (NaN when unresolved), its status and end point; ``attractors`` names the labels;
    ``loss_scale`` is max |L(θ0)| over the starts, the scale of loss levels (``popdyn.analysis._unresolved``);
    ``trajectory`` is the run behind them, one flat axis of starts (for analyses of the runs themselves, such as
    ``popdyn.analysis.budget_report``)."""

    method: str
    labels: np.ndarray
    attractors: tuple[str, ...]
    times: np.ndarray
    status: np.ndarray
    final: PyTree[Float[np.ndarray, "..."]]
    loss_scale: float = float("nan")
    trajectory: Trajectory | None = None

    @property
    def n(self) -> int:
        """Number of initialisations."""
        return int(self.labels.size)

    @property
    def fractions(self) -> dict[str, float]:
        """Fraction of all points per attractor name, plus "unresolved"."""
        out = {name: float(np.sum(self.labels == i)) / self.n for i, name in enumerate(self.attractors)}
        out[UNRESOLVED] = float(np.sum(self.labels < 0)) / self.n
        return out

    @property
    def stderr(self) -> dict[str, float]:
        """Binomial standard error √(f(1−f)/n) of each entry of ``fractions``."""
        return {k: math.sqrt(f * (1.0 - f) / self.n) for k, f in self.fractions.items()}

    @property
    def resolved_fraction(self) -> float:
        """Fraction of points that reached a labelled attractor."""
        return float(np.mean(self.labels >= 0))

    @property
    def fractions_of_resolved(self) -> dict[str, float]:
        """Fractions among resolved points only (NaN when none is resolved): what a theory's partition predicts."""
        k = int(np.sum(self.labels >= 0))
        return {
            name: (float(np.sum(self.labels == i)) / k if k else float("nan")) for i, name in enumerate(self.attractors)
        }

    def status_counts(self) -> dict[str, int]:
        """How many initialisations ended in each status."""
        return count(self.status)


@dataclass(frozen=True)
class BasinMap(BasinFractions):
    """A basin map over ``grid`` (any slice, ``popdyn.analysis._slices``): every per-point array has its shape
    (ny, nx)."""

    grid: AbstractSlice | None = None


def label_end_points(
    prob: Problem,
    traj: Trajectory,
    labeller: AbstractLabeller | None = None,
    *,
    tol: float | None = None,
    use_theory: bool | None = None,
    features: str | Callable | None = None,
    cluster_radius: float | None = None,
) -> Labels:
    """(labels, attractor names) for the end points of a batched run, by ``labeller`` (``popdyn.analysis._labellers``),
    or by the one the keywords name (``default_labeller``: theory residuals < ``tol`` first, then ``features``:
    ``"level"``, loss level and Morse index; ``"position"``, clusters of θ at ``cluster_radius``; or a function
    θ → feature vector, clustered at ``cluster_radius``). Only resolved points get a label ≥ 0 (or the statuses a
    given labeller declares).

    **Arguments:** ``prob`` the problem; ``traj`` its batched run; ``labeller`` an ``AbstractLabeller`` or None;
    ``tol`` (1e-3), ``use_theory`` (True), ``features`` ("level"), ``cluster_radius`` (1e-2): the default labeller's
    settings, refused beside a ``labeller``."""
    return resolve_labeller(labeller, tol, use_theory, features, cluster_radius)(prob, traj)


def resolve_labeller(labeller, tol, use_theory, features, cluster_radius) -> AbstractLabeller:
    """``labeller``, or the default one with the settings given (None: their defaults)."""
    given = {"tol": tol, "use_theory": use_theory, "features": features, "cluster_radius": cluster_radius}
    if labeller is not None:
        if not isinstance(labeller, AbstractLabeller):
            raise ValueError(f"labeller={labeller!r} is invalid: must be a popdyn.analysis labeller (AbstractLabeller)")
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise ValueError(f"{extra[0]} is a setting of the default labeller: give it to the labeller instead")
        return labeller
    tol = _validate.positive("tol", 1e-3 if tol is None else tol)
    return default_labeller(
        tol,
        True if use_theory is None else use_theory,
        "level" if features is None else features,
        1e-2 if cluster_radius is None else cluster_radius,
    )


@eqx.filter_jit
def _draw(prob: Problem, keys: jax.Array) -> Theta:
    return jax.vmap(prob.init)(keys)


def _run(prob, theta, method, t1, lr, steps, chunk_size, progress, checkpoint, dynamics_kwargs) -> Trajectory:
    if isinstance(method, AbstractDynamics):
        run_options(method, dynamics_kwargs, t1=t1, lr=lr, steps=steps)
        return method.end_points().run(prob, theta, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)
    t1, lr, steps = 1e4 if t1 is None else t1, 0.1 if lr is None else lr, 2000 if steps is None else steps
    if method == "flow":
        return dynamics.gradient_flow(
            prob,
            theta,
            t1=t1,
            ts=None,
            chunk_size=chunk_size,
            progress=progress,
            checkpoint=checkpoint,
            **dynamics_kwargs,
        )
    rec = dynamics_kwargs.pop("record_every", steps)
    return gradient_descent(
        prob,
        theta,
        lr=lr,
        steps=steps,
        record_every=rec,
        chunk_size=chunk_size,
        progress=progress,
        checkpoint=checkpoint,
        **dynamics_kwargs,
    )


def _check(method, chunk_size) -> None:
    if not isinstance(method, AbstractDynamics):
        _validate.choice("method", method, ("flow", "gd"))
    check_chunk_size(chunk_size)


def basin_fractions(
    prob: Problem,
    inits: ThetaLike | int,
    method: str | AbstractDynamics = "flow",
    *,
    seed: int = 0,
    t1: float | None = None,
    lr: float | Float[ArrayLike, " B"] | None = None,
    steps: int | None = None,
    labeller: AbstractLabeller | None = None,
    tol: float | None = None,
    use_theory: bool | None = None,
    features: str | Callable[[Theta], jax.Array] | None = None,
    cluster_radius: float | None = None,
    chunk_size: int | None = 16384,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
    **dynamics_kwargs,
) -> BasinFractions:
    """Basin fractions from a batch of initialisations ``inits`` (any θ pytree with a leading batch axis), or from
    ``inits`` = n draws of ``prob.init`` with keys split from ``seed``.

    ``method`` is a dynamics object (``popdyn.dynamics.GradientFlow()``, ``GradientDescent(lr=…)`` or one of your
    own), run to its end points, with its own settings; or, as a shortcut, ``"flow"`` (gradient flow to ``t1``,
    default 1e4) or ``"gd"`` (``steps`` of GD at ``lr``, a number or one per point; defaults 2000 and 0.1), where
    extra keywords go to ``gradient_flow`` / ``gradient_descent``. End points are named by ``labeller``
    (``popdyn.analysis._labellers``), or by the default one that ``tol``, ``use_theory``, ``features`` and
    ``cluster_radius`` set (``label_end_points``: theory residuals < ``tol`` where the problem has attractors, else
    ``features``). ``fractions`` come with
    binomial standard errors (``stderr``); unresolved points are counted in ``fractions["unresolved"]`` and left out
    of ``fractions_of_resolved``. Chunks and checkpoints as in ``AbstractDynamics.run``.
    """
    _check(method, chunk_size)
    labeller = resolve_labeller(labeller, tol, use_theory, features, cluster_radius)
    theta = starts(prob, inits, seed)
    traj = _run(prob, theta, method, t1, lr, steps, chunk_size, progress, checkpoint, dict(dynamics_kwargs))
    return fractions_of(prob, traj, labeller, method if isinstance(method, str) else method.method)


def starts(prob: Problem, inits: ThetaLike | int, seed: int = 0) -> Theta:
    """The batch of starts ``inits`` (a leading axis), or ``inits`` = n draws of ``prob.init`` with keys split from
    ``seed`` (the same n keys for every problem); a single θ is refused."""
    if isinstance(inits, (int, np.integer)) and not isinstance(inits, bool):
        n = _validate.int_at_least("inits", inits, 1)
        keys = jax.random.split(jax.random.PRNGKey(_validate.seed("seed", seed)), n)
        inits = _draw(prob, keys)
    theta, batched = as_batch(prob, inits)
    if not batched:
        raise ValueError("inits is a single θ: basin_fractions needs a batch (a leading axis) or a number of draws")
    return theta


def fractions_of(prob: Problem, traj: Trajectory, labeller: AbstractLabeller, method: str) -> BasinFractions:
    """``basin_fractions``' record of a batched run ``traj`` of ``prob``, its end points named by ``labeller``;
    ``method`` names the dynamics that ran."""
    labels, names = labeller(prob, traj)
    times = np.where(labels >= 0, np.asarray(traj.t_final), np.nan)
    final = jax.tree_util.tree_map(np.asarray, traj.final)
    return BasinFractions(
        method=method,
        loss_scale=loss_scale(traj),
        labels=labels,
        attractors=names,
        times=times,
        status=np.asarray(traj.status),
        final=final,
        trajectory=traj,
    )


def basin_map(prob: Problem, grid: AbstractSlice, method: str | AbstractDynamics = "flow", **options) -> BasinMap:
    """Label every initialisation of ``grid`` (a 2-D slice: a ``popdyn.Grid`` through any two coordinates of θ, or
    any ``AbstractSlice``) by the attractor it reaches: ``basin_fractions(prob, grid.points(prob), method,
    **options)`` (same options: t1, lr, steps, labeller, tol, use_theory, features, cluster_radius, chunk_size,
    progress, checkpoint and those of the dynamics), every per-point array shaped like the grid.

    The grid runs in chunks of ``chunk_size`` points, each spread over the process's devices (several
    processes share the chunks: call ``popdyn.distributed.initialize`` first, docs/distributed.md).
    ``checkpoint`` names a directory where each finished chunk is saved; running again with the same
    directory and inputs loads those chunks instead of recomputing them, with the same result bit for bit,
    and a directory written for other inputs is refused (``popdyn._checkpoint``). Labelling (``tol``,
    ``features``, ``use_theory``) happens after the chunks, so it may change between runs sharing a checkpoint.
    """
    if not isinstance(grid, AbstractSlice):
        raise ValueError(f"grid={grid!r} is invalid: must be a popdyn.Grid or another slice (AbstractSlice)")
    if "seed" in options:
        raise ValueError("seed is not an option of basin_map: its initialisations are the grid's points")
    if isinstance(method, AbstractDynamics) and method.runs_per_start != 1:
        raise ValueError(
            f"method={type(method).__name__} makes {method.runs_per_start} runs from each start: a basin map labels "
            "one run per grid point; for the probability of each attractor from every start over its runs, use "
            "basin_probabilities(prob, grid, method), or give it one run per start (SGD: seeds=1)"
        )
    bf = basin_fractions(prob, grid.points(prob), method, **options)
    shape = grid.shape
    final = jax.tree_util.tree_map(lambda v: v.reshape(shape + v.shape[1:]), bf.final)
    return BasinMap(
        method=bf.method,
        labels=bf.labels.reshape(shape),
        attractors=bf.attractors,
        times=bf.times.reshape(shape),
        status=bf.status.reshape(shape),
        final=final,
        loss_scale=bf.loss_scale,
        trajectory=bf.trajectory,
        grid=grid,
    )
