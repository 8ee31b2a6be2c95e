"""Basin-of-attraction maps over a 2-D slice of initialisations (DESIGN.md, layer 4).

Each grid point is run to its end (gradient flow or gradient descent, batched and chunked) and
labelled by the attractor it reaches: by proximity to the problem's known attractors where theory
gives them (residual < ``tol``), otherwise by clustering end points; label −1 marks a point that
diverged, hit NaN or did not converge within the budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from popdyn import _validate
from popdyn.analysis.cluster import cluster_points
from popdyn.batching import check_chunk_size
from popdyn.analysis.grid import Grid
from popdyn.dynamics import Status, Trajectory, gradient_descent, gradient_flow
from popdyn.problem import Problem

UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class BasinMap:
    """Labels (ny, nx) index ``attractors``; −1 is unresolved. ``times`` is the time (flow) or step
    (GD) at which a point reached its steady state (NaN when unresolved)."""

    grid: Grid
    method: str
    labels: np.ndarray
    attractors: tuple[str, ...]
    times: np.ndarray
    status: np.ndarray
    final: dict

    @property
    def fractions(self) -> dict[str, float]:
        """Fraction of grid points per attractor name, plus "unresolved"."""
        n = self.labels.size
        out = {name: float(np.sum(self.labels == i)) / n for i, name in enumerate(self.attractors)}
        out[UNRESOLVED] = float(np.sum(self.labels < 0)) / n
        return out


@eqx.filter_jit
def _attractor_residuals(prob: Problem, final) -> jax.Array:
    """(B, n_attractors) residuals, compiled once per problem (not once per basin_map call)."""
    return jnp.stack([jax.vmap(fn)(final) for fn in prob.attractors().values()], axis=-1)


def _theory_labels(prob: Problem, final, ok: np.ndarray, tol: float) -> tuple[np.ndarray, tuple[str, ...]]:
    names = tuple(prob.attractors())
    if not names:
        return np.full(ok.shape, -1), names
    R = np.asarray(_attractor_residuals(prob, final))
    R = np.where(np.isfinite(R), R, np.inf)
    best = np.argmin(R, axis=-1)
    hit = np.take_along_axis(R, best[:, None], axis=-1)[:, 0] < tol
    return np.where(ok & hit, best, -1), names


def _cluster_labels(final, status: np.ndarray, todo: np.ndarray, radius: float, start: int):
    """Label the points in ``todo`` by clustering their end points; minima and saddles apart."""
    flat = np.asarray(jax.vmap(lambda t: ravel_pytree(t)[0])(final))
    labels = np.full(len(status), -1)
    names: list[str] = []
    for code, kind in ((Status.CONVERGED, "min"), (Status.SADDLE, "saddle")):
        idx = np.flatnonzero(todo & (status == code))
        if idx.size == 0:
            continue
        ids = cluster_points(flat[idx], radius)
        for k in range(ids.max() + 1):
            labels[idx[ids == k]] = start + len(names)
            names.append(f"{kind}{k}")
    return labels, tuple(names)


def basin_map(
    prob: Problem,
    grid: Grid,
    method: str = "flow",
    *,
    t1: float = 1e4,
    lr: float = 0.1,
    steps: int = 2000,
    tol: float = 1e-3,
    cluster_radius: float = 1e-2,
    use_theory: bool = True,
    chunk_size: int | None = 16384,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
    **dynamics_kwargs,
) -> BasinMap:
    """Label every initialisation of ``grid`` by the attractor it reaches.

    ``method="flow"`` integrates gradient flow to ``t1``; ``"gd"`` runs ``steps`` of GD at ``lr``.
    Converged points are matched to ``prob.attractors()`` (residual < ``tol``); the rest, or all of
    them with ``use_theory=False``, are clustered at ``cluster_radius`` (minima and saddles apart,
    named "min0", "saddle0", …). Extra keywords go to ``gradient_flow`` / ``gradient_descent``.

    The grid runs in chunks of ``chunk_size`` points, each spread over all of ``jax.devices()`` (several
    hosts: call ``jax.distributed.initialize()`` first). ``checkpoint`` names a directory where each
    finished chunk is saved; running again with the same directory and inputs loads those chunks instead
    of recomputing them, with the same result bit for bit, and a directory written for other inputs is
    refused (``popdyn.checkpoint``). Labelling (``tol``, ``cluster_radius``, ``use_theory``) happens after
    the chunks, so it may change between runs sharing a checkpoint.
    """
    if not isinstance(grid, Grid):
        raise ValueError(f"grid={grid!r} is invalid: must be a popdyn.Grid")
    _validate.choice("method", method, ("flow", "gd"))
    _validate.positive("tol", tol)
    _validate.positive("cluster_radius", cluster_radius)
    check_chunk_size(chunk_size)
    theta = grid.points(prob)
    if method == "flow":
        traj: Trajectory = gradient_flow(prob, theta, t1=t1, ts=None, chunk_size=chunk_size, progress=progress,
                                         checkpoint=checkpoint, **dynamics_kwargs)
    else:
        rec = dynamics_kwargs.pop("record_every", steps)
        traj = gradient_descent(prob, theta, lr=lr, steps=steps, record_every=rec, chunk_size=chunk_size,
                                progress=progress, checkpoint=checkpoint, **dynamics_kwargs)
    status = np.asarray(traj.status)
    ok = (status == Status.CONVERGED) | (status == Status.SADDLE)
    labels, names = _theory_labels(prob, traj.final, ok, tol) if use_theory else (np.full(ok.shape, -1), ())
    todo = ok & (labels < 0)
    if todo.any():
        extra, extra_names = _cluster_labels(traj.final, status, todo, cluster_radius, len(names))
        labels = np.where(todo, extra, labels)
        names = names + extra_names
    shape = grid.shape
    times = np.where(labels >= 0, np.asarray(traj.t_final), np.nan)
    final = {k: np.asarray(v).reshape(shape + np.shape(v)[1:]) for k, v in traj.final.items()}
    return BasinMap(grid=grid, method=method, labels=labels.reshape(shape), attractors=names,
                    times=times.reshape(shape), status=status.reshape(shape), final=final)
