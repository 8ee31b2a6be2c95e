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
import optimistix as optx
from jaxtyping import Array, Bool, Float

from popdyn.curvature import EXACT_MAX_DIM, hessian_matrix
from popdyn.dynamics.status import negative
from popdyn.problem import Problem, Theta

ROUNDOFF = 1e3
"""The speed floor, in units of the dtype's ε times the starting speed: 1e3·ε ≈ 2e-13 in float64."""


def speed_floor(speed0: Float[Array, ""]) -> Float[Array, ""]:
    """ROUNDOFF·ε·‖f(θ0)‖: the speed below which f is round-off relative to where the run started."""
    return ROUNDOFF * jnp.finfo(speed0.dtype).eps * speed0


def _exponent(tree: Theta) -> Array:
    """e with max|x| in [2^(e−1), 2^e) over all leaves (0 for an all-zero tree): multiplying by 2^−e is exact."""
    top = jnp.max(jnp.stack([jnp.max(jnp.abs(x)) for x in jax.tree_util.tree_leaves(tree)]))
    return jnp.frexp(top)[1]


def _scaled(tree: Theta, e: Array) -> Theta:
    return jax.tree_util.tree_map(lambda x: jnp.ldexp(x, -e), tree)


def norm(tree: Theta) -> Float[Array, ""]:
    """‖x‖₂ without squaring tiny or huge numbers: 2^e·‖x·2^−e‖ with 2^e ≥ max|x| a power of two. Bit for bit
    ``optax.tree.norm`` wherever its squares neither underflow nor overflow (scaling by 2^−e is exact), and right
    for any finite x, from the smallest subnormal to the largest float."""
    e = _exponent(tree)
    return jnp.ldexp(optax.tree.norm(_scaled(tree, e)), e)


def rms_norm(tree: Theta) -> Float[Array, ""]:
    """diffrax's error norm (``optimistix.rms_norm``) on x·2^−e, times 2^e: bit for bit the same where its squares are
    representable, and finite for any finite x (its own squares overflow above ~1e154 and vanish below ~1e-154,
    e.g. in the initial step selection of a flow whose L is multiplied by 1e200)."""
    e = _exponent(tree)
    return jnp.ldexp(optx.rms_norm(_scaled(tree, e)), e)


def along(field: Callable[[Theta], Theta], y: Theta) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(‖f‖, R) at θ = ``y``: the speed and the curvature along f, R = −fᵀJf/‖f‖² (one Jacobian-vector product).

    Computed from u = f·2^−e with max|u| in [½, 1): ‖f‖ = 2^e‖u‖ and R = −uᵀJu/‖u‖², since J is linear. Nothing of
    the size of ‖f‖² is formed, so neither test underflows or overflows for any scale of L, and the results are bit
    for bit those of f itself where its squares are representable."""
    f = field(y)
    e = _exponent(f)
    u = _scaled(f, e)
    ju = jax.jvp(field, (y,), (u,))[1]
    u2 = optax.tree.vdot(u, u)
    return jnp.ldexp(jnp.sqrt(u2), e), -optax.tree.vdot(u, ju) / jnp.maximum(u2, jnp.finfo(u2.dtype).tiny)


def rule(speed: Array, curvature: Array, tol: Array, floor: Array) -> Bool[Array, "..."]:
    """The rule from its parts: ‖f‖ ≤ tol·R (that is ‖f‖³ ≤ tol·(−fᵀJf)) or ‖f‖ ≤ floor."""
    return (speed <= tol * curvature) | (speed <= floor)


def steady(
    field: Callable[[Theta], Theta], y: Theta, tol: Float[Array, ""], floor: Float[Array, ""], gtol: float | None = None
) -> Bool[Array, ""]:
    """The stopping rule at θ = ``y``; with ``gtol`` the absolute ‖f‖ < gtol instead."""
    if gtol is not None:
        return norm(field(y)) < gtol
    return rule(*along(field, y), tol, floor)


def state_tol(y: Theta, rtol: float, atol: float) -> Float[Array, ""]:
    """δ = atol + rtol‖θ‖, the distance within which two states are the same (diffrax's steady-state scale)."""
    return atol + rtol * norm(y)


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
    −saddle_tol·max(|λ_min|, |λ_max|) and Newton distance ≤ LATE_FACTOR·(atol + rtol‖θ‖)."""
    tol = LATE_FACTOR * state_tol(y, rtol, atol)
    if prob.n_params() > EXACT_MAX_DIM:  # the rule along −∇L with the looser tolerance; no dense Hessian
        field = lambda z: jax.tree_util.tree_map(jnp.negative, jax.grad(prob.loss)(z))  # noqa: E731
        return steady(field, y, tol, jnp.zeros(()))
    d, lam_min, lam_max = newton_distance(prob, y)
    return (d <= tol) & ~negative(lam_min, lam_min, lam_max, saddle_tol)
