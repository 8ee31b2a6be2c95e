"""Per-initialisation outcome codes shared by gradient flow and gradient descent."""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int


class Status(enum.IntEnum):
    """Outcome of one initialisation. Nothing is ever dropped: every point gets exactly one code.

    CONVERGED: the point became steady (the scale-aware rule of ``popdyn.dynamics._stopping``, or ‖∇L‖ < ``gtol``
    when given) where the Hessian has no negative eigenvalue.
    SADDLE: steady, but the Hessian has a negative eigenvalue (λ_min < −saddle_tol·ρ, ρ = max(|λ_min|, |λ_max|)
    the curvature scale at the point), or the higher-order probe found L falling at a degenerate critical point.
    MAX_STEPS: the budget (t1, max_steps or GD steps) ran out before the point was steady.
    DIVERGED: ‖θ‖ exceeded the divergence bound.
    NAN: the loss, gradient or parameters became NaN/inf.
    SOLVER_FAILED: the ODE solver stopped for another reason (e.g. step size collapse).
    CONVERGED_LATE: the budget ran out, but the end point passes the Newton test (within LATE_FACTOR × the state
    tolerance of a critical point with no negative curvature, ``popdyn.dynamics._stopping.converged_late``).
    REACHED: the run's target condition ``until(θ) ≤ 0`` was met (hitting-time runs); ``t_final`` is its time.
    DEGENERATE: steady (or late) at a critical point whose Hessian has no negative eigenvalue but zero ones
    (|λ| ≤ saddle_tol·ρ), where the higher-order probe of ``popdyn.dynamics._degenerate`` could not tell a minimum
    from a saddle: the second-order test is inconclusive, so the point is not called a minimum.
    """

    CONVERGED = 0
    SADDLE = 1
    MAX_STEPS = 2
    DIVERGED = 3
    NAN = 4
    SOLVER_FAILED = 5
    CONVERGED_LATE = 6
    REACHED = 7
    DEGENERATE = 8


AT_MINIMUM = (Status.CONVERGED, Status.CONVERGED_LATE)
"""Codes of points that ended at a minimum (the late ones after the Newton test)."""
RESOLVED = (Status.CONVERGED, Status.SADDLE, Status.CONVERGED_LATE, Status.DEGENERATE)
"""Codes of points whose end point is a critical point, so it can be labelled by an attractor (DEGENERATE ones
under their own "degenerate" names, never as minima)."""

STATUS_NAMES = tuple(s.name.lower() for s in Status)


def negative(
    lam: Array | np.ndarray, lam_min: Array | np.ndarray, lam_max: Array | np.ndarray, saddle_tol: float
) -> Array | np.ndarray:
    """Whether the eigenvalue(s) ``lam`` count as negative: λ < −saddle_tol·ρ with ρ = max(|λ_min|, |λ_max|), the
    curvature scale of the point itself (no absolute floor: the test is unchanged when L is multiplied by any c > 0;
    at ρ = 0 nothing is negative). Broadcasts, so it serves one λ_min or a whole spectrum. On NumPy inputs it
    computes in NumPy (the same IEEE operations, and no program compiled for each new shape)."""
    xp = jnp if any(isinstance(x, jax.Array) for x in (lam, lam_min, lam_max)) else np
    rho = xp.maximum(xp.abs(lam_min), xp.abs(lam_max))
    return xp.asarray(lam) < -saddle_tol * rho


def refine_saddles(status: Int[Array, " B"], lam_min: Array, lam_max: Array, saddle_tol: float) -> Int[Array, " B"]:
    """Mark converged points whose Hessian has λ_min < −saddle_tol·max(|λ_min|, |λ_max|) as SADDLE."""
    is_saddle = negative(lam_min, lam_min, lam_max, saddle_tol)
    return jnp.where((status == Status.CONVERGED) & is_saddle, int(Status.SADDLE), status)


def count(status: Int[Array | np.ndarray, "*B"]) -> dict[str, int]:
    """Number of points per status name (any shape: a batch, or a basin map's grid)."""
    codes = np.asarray(status)  # on the host: counting runs no compiled program
    return {name: int(np.sum(codes == code)) for code, name in enumerate(STATUS_NAMES)}


def finite_tree(*leaves) -> Bool[Array, ""]:
    """True when every array given is entirely finite."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
