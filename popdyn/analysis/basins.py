"""Basins of attraction: fractions from any batch of initialisations, and maps over 2-D slices (docs/basins.md).

Each initialisation is run to its end (gradient flow or gradient descent, batched and chunked) and labelled
by the attractor it reaches: by the problem's theory residuals where it has them (residual < ``tol``), else
by features of the end point — by default its loss level and Morse index (number of negative Hessian
eigenvalues), which names a manifold of minima once however it is spread in θ; a user featuriser or the
end point's position (``features="position"``) are the alternatives. Only resolved points are labelled
(converged, converged late, or at a saddle); label −1 marks the rest, counted and reported, never dropped.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import ArrayLike, Float, PyTree

from popdyn import _validate, dynamics
from popdyn.analysis.cluster import cluster_points
from popdyn.analysis.grid import Grid
from popdyn.analysis.levels import level_groups, shown_level
from popdyn.batching import as_batch, check_chunk_size
from popdyn.curvature import EXACT_MAX_DIM, extreme_eigenvalues, hessian_spectrum
from popdyn.dynamics import AbstractDynamics, Status, Trajectory, gradient_descent
from popdyn.dynamics.base import run_options
from popdyn.dynamics.status import RESOLVED, count, negative
from popdyn.problem import Problem, Theta, ThetaLike

UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class BasinFractions:
    """Per initialisation (leading axis n): the attractor label (−1: unresolved), the time (flow) or step (GD)
    at which it stopped (NaN when unresolved), its status and end point; ``attractors`` names the labels;
    ``loss_scale`` is max |L(θ0)| over the starts, the scale of loss levels (``popdyn.analysis.unresolved``)."""

    method: str
    labels: np.ndarray
    attractors: tuple[str, ...]
    times: np.ndarray
    status: np.ndarray
    final: PyTree[Float[np.ndarray, "..."]]
    loss_scale: float = float("nan")

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
    """A basin map over ``grid``: every per-point array has the grid's shape (ny, nx)."""

    grid: Grid | None = None


@eqx.filter_jit
def _attractor_residuals(prob: Problem, final) -> jax.Array:
    """(B, n_attractors) residuals, compiled once per problem (not once per call)."""
    return jnp.stack([jax.vmap(fn)(final) for fn in prob.attractors().values()], axis=-1)


def _theory_labels(prob: Problem, final, ok: np.ndarray, tol: float) -> tuple[np.ndarray, tuple[str, ...]]:
    names = tuple(prob.attractors())
    if not names:
        return np.full(ok.shape, -1), names
    R = np.asarray(_attractor_residuals(prob, final))
    bad = np.isfinite(R) & (R < 0)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"attractor residual {names[j]!r} returned {R[i, j]!r} at an end point: residuals must be "
            "floats >= 0 that vanish on the attractor"
        )
    R = np.where(np.isfinite(R), R, np.inf)
    within = ok[:, None] & (R < tol)
    both = within.sum(axis=-1) > 1
    if both.any():
        pair = [names[j] for j in np.flatnonzero(within[np.argmax(both)])[:2]]
        warnings.warn(
            f"{int(both.sum())} end point(s) lie within tol={tol:g} of two attractors ({pair[0]!r} and {pair[1]!r} "
            "at the first): their residuals overlap there, so the label is ambiguous; each is given the attractor "
            "of the smaller residual (on a tie, the first listed). Make the residuals vanish on disjoint sets",
            stacklevel=4,
        )
    best = np.argmin(R, axis=-1)
    hit = np.take_along_axis(R, best[:, None], axis=-1)[:, 0] < tol
    return np.where(ok & hit, best, -1), names


def morse_index(prob: Problem, theta: Theta, saddle_tol: float = 1e-7) -> np.ndarray:
    """Number of Hessian eigenvalues below −saddle_tol·ρ, ρ = max(|λ_min|, |λ_max|) (the saddle test of
    ``popdyn.dynamics.status.negative``), at each point of a batch (exact spectrum up to ``EXACT_MAX_DIM``
    parameters; above, 0 or 1 from Lanczos λ_min)."""
    batch, _ = as_batch(prob, theta)
    if prob.n_params() <= EXACT_MAX_DIM:
        ev = np.asarray(hessian_spectrum(prob, batch))
        return np.sum(np.asarray(negative(ev, ev[:, :1], ev[:, -1:], saddle_tol)), axis=-1)
    lo, hi = (np.asarray(v) for v in extreme_eigenvalues(prob, batch))
    return np.asarray(negative(lo, lo, hi, saddle_tol)).astype(int)


def _level_labels(
    prob: Problem, final, final_loss, status: np.ndarray, todo: np.ndarray, start: int, scale: float
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Label the points in ``todo`` by (kind, loss level): names "min L=…", "saddle(k) L=…" (k the Morse index;
    "saddle(0)" for a saddle found by the higher-order probe), "degenerate L=…" (status DEGENERATE, never a min).
    Levels closer than LEVEL_TOL·max(``scale``, |L|) are one (``scale``: the loss scale of the run's starts); a
    name shows the median level to 6 significant digits, or 0 within LEVEL_TOL·``scale`` of it (``shown_level``)."""
    labels = np.full(len(todo), -1)
    idx = np.flatnonzero(todo)
    if idx.size == 0:
        return labels, ()
    sub = jax.tree_util.tree_map(lambda x: x[idx], final)
    loss = np.asarray(final_loss)[idx]
    index = morse_index(prob, sub)
    codes = status[idx]
    kind = np.where(codes == Status.DEGENERATE, 2, np.where((index == 0) & (codes == Status.SADDLE), 1, 0))
    keys = sorted(set(zip(index.tolist(), kind.tolist(), strict=True)))
    names: list[str] = []
    for k, sub_kind in keys:
        sel = np.flatnonzero((index == k) & (kind == sub_kind))
        ranked, group = level_groups(loss[sel], scale)
        order = sel[ranked]
        prefix = ("min" if k == 0 else f"saddle({k})", "saddle(0)", "degenerate")[sub_kind]
        for g in range(group[-1] + 1):
            members = order[group == g]
            labels[idx[members]] = start + len(names)
            names.append(f"{prefix} L={shown_level(float(np.median(loss[members])), scale):.6g}")
    return labels, tuple(names)


def _cluster_labels(points: np.ndarray, status: np.ndarray, todo: np.ndarray, radius: float, start: int):
    """Label the points in ``todo`` by clustering ``points`` (positions or features); minima and saddles apart."""
    labels = np.full(len(status), -1)
    names: list[str] = []
    groups = (((Status.CONVERGED, Status.CONVERGED_LATE), "min"), ((Status.SADDLE,), "saddle"))
    for codes, kind in groups + (((Status.DEGENERATE,), "degenerate"),):
        idx = np.flatnonzero(todo & np.isin(status, codes))
        if idx.size == 0:
            continue
        ids = cluster_points(points[idx], radius)
        for k in range(ids.max() + 1):
            labels[idx[ids == k]] = start + len(names)
            names.append(f"{kind}{k}")
    return labels, tuple(names)


def loss_scale(traj: Trajectory) -> float:
    """S = max |L(θ0)| over the run's starts (its first record), the scale that sets the resolution of loss levels."""
    start_loss = np.abs(np.asarray(traj.loss)[..., 0])
    return float(np.max(start_loss, initial=0.0, where=np.isfinite(start_loss)))


def label_end_points(
    prob: Problem,
    traj: Trajectory,
    *,
    tol: float = 1e-3,
    use_theory: bool = True,
    features: str | Callable = "level",
    cluster_radius: float = 1e-2,
) -> tuple[np.ndarray, tuple]:
    """(labels, attractor names) for the end points of a batched run: theory residuals first, then features
    (``"level"``: loss level and Morse index; ``"position"``: clusters of θ at ``cluster_radius``; or a function
    θ → feature vector, clustered at ``cluster_radius``). Only resolved points get a label ≥ 0."""
    status = np.asarray(traj.status)
    ok = np.isin(status, RESOLVED)
    labels, names = _theory_labels(prob, traj.final, ok, tol) if use_theory else (np.full(ok.shape, -1), ())
    todo = ok & (labels < 0)
    if todo.any():
        if features == "level":
            scale = loss_scale(traj)
            extra, extra_names = _level_labels(prob, traj.final, traj.final_loss, status, todo, len(names), scale)
        else:
            # not "level", so "position" or a function θ → features (basin_fractions checks the name)
            fn = (lambda t: ravel_pytree(t)[0]) if features == "position" else cast(Callable, features)
            pts = np.asarray(jax.vmap(lambda t: jnp.atleast_1d(jnp.ravel(fn(t))))(traj.final))
            extra, extra_names = _cluster_labels(pts, status, todo, cluster_radius, len(names))
        labels = np.where(todo, extra, labels)
        names = names + extra_names
    return labels, names


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


def _check(method, tol, cluster_radius, features, chunk_size) -> None:
    if not isinstance(method, AbstractDynamics):
        _validate.choice("method", method, ("flow", "gd"))
    _validate.positive("tol", tol)
    _validate.positive("cluster_radius", cluster_radius)
    if not (callable(features) or features in ("level", "position")):
        raise ValueError(f"features={features!r} is invalid: must be 'level', 'position' or a function θ -> features")
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
    tol: float = 1e-3,
    use_theory: bool = True,
    features: str | Callable[[Theta], jax.Array] = "level",
    cluster_radius: float = 1e-2,
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
    extra keywords go to ``gradient_flow`` / ``gradient_descent``. End points are labelled by ``label_end_points``
    (theory residuals < ``tol`` where the problem has attractors, else ``features``). ``fractions`` come with
    binomial standard errors (``stderr``); unresolved points are counted in ``fractions["unresolved"]`` and left out
    of ``fractions_of_resolved``. Chunks and checkpoints as in ``AbstractDynamics.run``.
    """
    _check(method, tol, cluster_radius, features, chunk_size)
    if isinstance(inits, (int, np.integer)) and not isinstance(inits, bool):
        n = _validate.int_at_least("inits", inits, 1)
        keys = jax.random.split(jax.random.PRNGKey(_validate.seed("seed", seed)), n)
        inits = _draw(prob, keys)
    theta, batched = as_batch(prob, inits)
    if not batched:
        raise ValueError("inits is a single θ: basin_fractions needs a batch (a leading axis) or a number of draws")
    traj = _run(prob, theta, method, t1, lr, steps, chunk_size, progress, checkpoint, dict(dynamics_kwargs))
    labels, names = label_end_points(
        prob, traj, tol=tol, use_theory=use_theory, features=features, cluster_radius=cluster_radius
    )
    times = np.where(labels >= 0, np.asarray(traj.t_final), np.nan)
    final = jax.tree_util.tree_map(np.asarray, traj.final)
    return BasinFractions(
        method=method if isinstance(method, str) else method.method,
        loss_scale=loss_scale(traj),
        labels=labels,
        attractors=names,
        times=times,
        status=np.asarray(traj.status),
        final=final,
    )


def basin_map(prob: Problem, grid: Grid, method: str | AbstractDynamics = "flow", **options) -> BasinMap:
    """Label every initialisation of ``grid`` (a 2-D slice through any two coordinates of θ) by the attractor it
    reaches: ``basin_fractions(prob, grid.points(prob), method, **options)`` (same options: t1, lr, steps, tol,
    use_theory, features, cluster_radius, chunk_size, progress, checkpoint and those of the dynamics), every
    per-point array shaped like the grid.

    The grid runs in chunks of ``chunk_size`` points, each spread over the process's devices (several
    processes share the chunks: call ``popdyn.distributed.initialize`` first, docs/distributed.md).
    ``checkpoint`` names a directory where each finished chunk is saved; running again with the same
    directory and inputs loads those chunks instead of recomputing them, with the same result bit for bit,
    and a directory written for other inputs is refused (``popdyn.checkpoint``). Labelling (``tol``,
    ``features``, ``use_theory``) happens after the chunks, so it may change between runs sharing a checkpoint.
    """
    if not isinstance(grid, Grid):
        raise ValueError(f"grid={grid!r} is invalid: must be a popdyn.Grid")
    if "seed" in options:
        raise ValueError("seed is not an option of basin_map: its initialisations are the grid's points")
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
        grid=grid,
    )
