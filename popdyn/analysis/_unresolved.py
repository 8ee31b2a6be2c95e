"""Where the unresolved runs of a basin analysis are going (docs/basins.md, "Unresolved runs").

A run that ended neither at a steady point nor in a failure (its budget ran out) is grouped by what it is doing at
its end point θ. When it moves outward, the cosine between θ and its direction of motion f = −∇L above ``OUTWARD``,
and the loss along the ray sθ falls to a limit as s grows, it escapes to infinity: L(sθ) at s = ``RAY_SCALES``[-1]
estimates the level it tends to (for saturating units such as sigmoids, that limit is the loss of the hard-threshold
network, reached exactly in floating point), and runs are grouped by that level. The others are still moving at a
level of their own, grouped at the coarser ``PLATEAU_TOL``. Diverged, NaN and failed runs form a group each.
Levels are relative to the loss scale of the run's starts, as the names of resolved attractors are
(``popdyn.analysis._levels``).
"""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from popdyn.analysis._basins import BasinFractions
from popdyn.analysis._levels import LEVEL_TOL, level_groups, shown_level
from popdyn.dynamics import STATUS_NAMES, Status
from popdyn.problem import Problem, Theta

OUTWARD = 0.5
"""A run whose direction of motion makes a cosine above OUTWARD with θ itself moves outward (‖θ‖ grows)."""

RAY_SCALES = 2.0 ** np.arange(0, 41, 4)
"""The scales s at which the loss along the ray sθ is read: 1 to 2⁴⁰."""

PLATEAU_TOL = 2e-2
"""Runs still moving at levels closer than PLATEAU_TOL·max(S, |L|) are one group (S the loss scale of the starts)."""

FAILED = (Status.DIVERGED, Status.NAN, Status.SOLVER_FAILED)


@dataclass(frozen=True)
class UnresolvedGroups:
    """Per start (leading axis n): the group of an unresolved run (−1 for a resolved one) and the groups' names,
    e.g. "‖θ‖ → ∞, L → 0", "‖θ‖ → ∞, L → 0.0625", "moving at L ≈ 0.31", "diverged"."""

    groups: np.ndarray
    names: tuple[str, ...]

    @property
    def fractions(self) -> dict[str, float]:
        """Fraction of all starts in each group."""
        n = max(int(self.groups.size), 1)
        return {name: float(np.sum(self.groups == i)) / n for i, name in enumerate(self.names)}


@eqx.filter_jit
def ray_profile(prob: Problem, final: Theta) -> tuple[jax.Array, jax.Array]:
    """(cosine between θ and −∇L(θ), L(sθ) for every s in ``RAY_SCALES``) at each end point."""

    def one(theta):
        x, unravel = ravel_pytree(theta)
        f = -ravel_pytree(jax.grad(prob.loss)(theta))[0]
        top = jnp.maximum(jnp.max(jnp.abs(x)), jnp.max(jnp.abs(f)))
        xs, fs = x / jnp.where(top > 0, top, 1.0), f / jnp.where(top > 0, top, 1.0)  # one scale: no over/underflow
        cos = jnp.vdot(xs, fs) / jnp.maximum(jnp.linalg.norm(xs) * jnp.linalg.norm(fs), jnp.finfo(x.dtype).tiny)
        along = jax.vmap(lambda s: prob.loss(unravel(s * x)))(jnp.asarray(RAY_SCALES, x.dtype))
        return cos, along

    return jax.vmap(one)(final)


def outward(cos: np.ndarray, along: np.ndarray, scale: float) -> np.ndarray:
    """Which end points escape to infinity, from ``ray_profile``'s (cosine, L along the ray) at each: the direction of
    motion makes a cosine above ``OUTWARD`` with θ, and L(sθ) never rises by more than LEVEL_TOL·``scale`` (a rise
    at round-off is no rise) and tends to a finite level."""
    rises = np.diff(along, axis=1) > LEVEL_TOL * scale
    falling = ~np.any(rises, axis=1) & np.isfinite(along[:, -1])
    return (cos > OUTWARD) & falling


def _named(values: np.ndarray, scale: float, tol: float, name) -> tuple[np.ndarray, list[str]]:
    """Group ``values`` into levels at tol·max(``scale``, |L|) (``level_groups``) and name each group by
    ``name(level shown)``, 0 within LEVEL_TOL·``scale``."""
    order, group = level_groups(values, tol * scale, tol)
    ids = np.empty(values.size, int)
    ids[order] = group
    names = [name(shown_level(float(np.median(values[ids == g])), LEVEL_TOL * scale)) for g in range(group[-1] + 1)]
    return ids, names


def group_unresolved(prob: Problem, result: BasinFractions) -> UnresolvedGroups:
    """Group the unresolved starts of ``result`` by what their runs are doing at the end (see the module).

    **Arguments:**

    - ``prob``: the Problem the runs were on.
    - ``result``: a basin analysis (``basin_fractions`` or ``basin_map``): its end points, statuses and the loss
      scale of its starts, which sets the levels' resolution.
    """
    scale = result.loss_scale if np.isfinite(result.loss_scale) else 0.0
    labels, status = np.ravel(result.labels), np.ravel(result.status)
    groups, names = np.full(labels.size, -1), list[str]()
    for code in FAILED:
        hit = (labels < 0) & (status == code)
        if hit.any():
            groups[hit], names = len(names), [*names, STATUS_NAMES[code].replace("_", " ")]
    moving = np.flatnonzero((labels < 0) & ~np.isin(status, FAILED))
    if moving.size:
        final = jax.tree_util.tree_map(
            lambda v: np.reshape(v, (labels.size, *np.shape(v)[result.labels.ndim :])), result.final
        )
        cos, along = (np.asarray(a) for a in ray_profile(prob, jax.tree_util.tree_map(lambda v: v[moving], final)))
        escaping = outward(cos, along, scale)
        for sel, values, tol, name in (
            (escaping, along[:, -1], LEVEL_TOL, lambda v: f"‖θ‖ → ∞, L → {v:.6g}"),
            (~escaping, along[:, 0], PLATEAU_TOL, lambda v: f"moving at L ≈ {v:.3g}"),
        ):
            if sel.any():
                ids, new = _named(values[sel], scale, tol, name)
                groups[moving[sel]] = len(names) + ids
                names += new
    return UnresolvedGroups(groups=groups.reshape(result.labels.shape), names=tuple(names))
