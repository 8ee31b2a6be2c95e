"""When is a point steady? The scale-aware stopping rule shared by gradient flow and gradient descent
(docs/dynamics.md, "Stopping rules").

With the flow's field f = −τ⊙P(∇L) and its Jacobian J, the quadratic model along f puts the nearest
critical point at distance ‖f‖³/(−fᵀJf) = ‖f‖/R from θ (R the curvature along f). A point is steady when
that distance is within the state tolerance δ = atol + rtol‖θ‖ — ‖f‖ ≤ δ·R — or when ‖f‖ has fallen to round-off
relative to its start, ‖f‖ ≤ ROUNDOFF·ε·‖f(θ0)‖. Both are invariant under rescaling L, unlike ‖∇L‖ < gtol: a
steep minimum is not missed because its gradient floor (curvature × solver error) sits above an
absolute threshold, and a flat landscape is not called converged because its gradient is small.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.flatten_util
import jax.numpy as jnp
import optax
from jaxtyping import Array, Bool, Float

from popdyn.curvature import EXACT_MAX_DIM, hessian_matrix
from popdyn.problem import Problem, Theta

ROUNDOFF = 1e3
"""The speed floor, in units of the dtype's ε times the starting speed: 1e3·ε ≈ 2e-13 in float64."""


def speed_floor(speed0: Float[Array, ""]) -> Float[Array, ""]:
    """ROUNDOFF·ε·‖f(θ0)‖: the speed below which f is round-off relative to where the run started."""
    return ROUNDOFF * jnp.finfo(speed0.dtype).eps * speed0


def along(field: Callable[[Theta], Theta], y: Theta) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(‖f‖, R) at θ = ``y``: the speed and the curvature along f, R = −fᵀJf/‖f‖² (one Jacobian-vector product)."""
    f, jf = jax.jvp(field, (y,), (field(y),))
    speed2 = optax.tree.vdot(f, f)
    return jnp.sqrt(speed2), -optax.tree.vdot(f, jf) / jnp.maximum(speed2, jnp.finfo(speed2.dtype).tiny)


def rule(speed: Array, curvature: Array, tol: Array, floor: Array) -> Bool[Array, "..."]:
    """The rule from its parts: ‖f‖ ≤ tol·R (that is ‖f‖³ ≤ tol·(−fᵀJf)) or ‖f‖ ≤ floor."""
    return (speed <= tol * curvature) | (speed <= floor)


def steady(
    field: Callable[[Theta], Theta], y: Theta, tol: Float[Array, ""], floor: Float[Array, ""], gtol: float | None = None
) -> Bool[Array, ""]:
    """The stopping rule at θ = ``y``; with ``gtol`` the absolute ‖f‖ < gtol instead."""
    if gtol is not None:
        return optax.tree.norm(field(y)) < gtol
    return rule(*along(field, y), tol, floor)


def state_tol(y: Theta, rtol: float, atol: float) -> Float[Array, ""]:
    """δ = atol + rtol‖θ‖, the distance within which two states are the same (diffrax's steady-state scale)."""
    return atol + rtol * optax.tree.norm(y)


LATE_FACTOR = 10.0
"""A point at the end of its budget counts as converged late when its Newton distance is ≤ LATE_FACTOR·δ."""


def newton_distance(prob: Problem, y: Theta) -> tuple[Array, Array, Array]:
    """(d, λ_min, λ_max): d = ‖H⁺∇L‖ is the Newton step to the nearest critical point of the quadratic model at θ,
    with eigenvalues below 1e-8·λ_max counted as that cut-off (a gradient along a flat direction is a long
    way to go, not none); λ_min, λ_max the extreme Hessian eigenvalues. Dense: for up to ``EXACT_MAX_DIM``
    parameters."""
    g = jax.flatten_util.ravel_pytree(jax.grad(prob.loss)(y))[0]
    lam, V = jnp.linalg.eigh(hessian_matrix(prob, y))
    cut = jnp.maximum(1e-8 * jnp.abs(lam[-1]), jnp.finfo(lam.dtype).tiny)
    c = V.T @ g
    return jnp.linalg.norm(c / jnp.maximum(lam, cut)), lam[0], lam[-1]


def converged_late(prob: Problem, y: Theta, rtol: float, atol: float, saddle_tol: float) -> Bool[Array, ""]:
    """Whether a point whose budget ran out sits at a minimum after all: no curvature below
    −saddle_tol·max(1, |λ_max|) and Newton distance ≤ LATE_FACTOR·(atol + rtol‖θ‖)."""
    tol = LATE_FACTOR * state_tol(y, rtol, atol)
    if prob.n_params() > EXACT_MAX_DIM:  # the rule along −∇L with the looser tolerance; no dense Hessian
        field = lambda z: jax.tree_util.tree_map(jnp.negative, jax.grad(prob.loss)(z))  # noqa: E731
        return steady(field, y, tol, jnp.zeros(()))
    d, lam_min, lam_max = newton_distance(prob, y)
    return (d <= tol) & (lam_min >= -saddle_tol * jnp.maximum(1.0, jnp.abs(lam_max)))
