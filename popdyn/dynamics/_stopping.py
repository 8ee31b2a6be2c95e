"""When is a point steady? The scale-aware stopping rule shared by gradient flow and gradient descent
(docs/dynamics.md, "Stopping rules").

With the flow's field f = −τ⊙P(∇L) and its Jacobian J, the quadratic model of the landscape in the Krylov space
span{f, Jf} puts the nearest critical point at the Newton distance d = ‖T⁻¹‖f‖e₁‖ from θ (T the matrix of −J in that
space: two Lanczos steps, two Jacobian-vector products). A point is steady when that distance is within the state
tolerance δ = atol + rtol‖θ‖ — ‖f‖ ≤ δ·R with R = ‖f‖/d the effective curvature — or when ‖f‖ has fallen to
round-off relative to its start, ‖f‖ ≤ ROUNDOFF·ε·‖f(θ0)‖. Both are invariant under rescaling L, unlike ‖∇L‖ < gtol:
a steep minimum is not missed because its gradient floor (curvature × solver error) sits above an absolute
threshold, and a flat landscape is not called converged because its gradient is small.

One Lanczos step (the curvature along f alone, d = ‖f‖³/(−fᵀJf)) is not enough: near a minimum an explicit solver
leaves a component of f in the stiffest directions at the level of its error tolerance, and that component, weighted
by the large curvature, dominates −fᵀJf while the slow component still has far to go. On
L = ½(x² + 10⁻⁴y²) + x⁴/10 from (1, 1) the one-step rule stopped the flow at t = 1.5·10⁵ with y = 3.8·10⁻⁷, 3800 times
the tolerance; the second Lanczos vector separates the stiff component, and the flow stops within δ.
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
from popdyn.dynamics._status import negative
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


KRYLOV = 2
"""Lanczos steps of the Newton-distance estimate (Jacobian-vector products per evaluation of the rule)."""

FLAT = 1e-8
"""Ritz values below FLAT·max|Ritz value| count as FLAT·max (a component along a flat direction is a long way to go)."""


def along(field: Callable[[Theta], Theta], y: Theta) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(‖f‖, R) at θ = ``y``: the speed, and the effective curvature R = ‖f‖/d, where d = ‖T⁺‖f‖e₁‖ is the Newton
    distance to the nearest critical point of the quadratic model in the Krylov space of f: T = VᵀAV with A = −J and
    V the orthonormal Lanczos basis of span{f, Af, …} (``KRYLOV`` vectors, one Jacobian-vector product each); Ritz
    values are taken by magnitude (a saddle is a critical point too) and raised to ``FLAT``·max of them. A Lanczos
    residual below √ε·‖Av‖ is round-off (f spans an invariant subspace, an eigenvector say) and adds no direction:
    normalised, that noise would be a spurious one. R ≤ 0 when
    the curvature along f itself, f̂ᵀAf̂, is not positive (the point is not approaching a critical point). With one
    vector, R = −fᵀJf/‖f‖², the curvature along f.

    Computed from u = f·2^−e with max|u| in [½, 1), and T divided by a power of two near its largest entry: J is
    linear, so nothing of the size of ‖f‖² or of products of curvatures is formed, and neither test underflows or
    overflows for any scale of L.

    **Arguments:** ``field`` the direction of motion θ ↦ f(θ); ``y`` the point θ."""
    f = field(y)
    e_f = _exponent(f)
    u, unravel = jax.flatten_util.ravel_pytree(_scaled(f, e_f))
    size = jnp.linalg.norm(u)
    tiny = jnp.finfo(u.dtype).tiny
    breakdown = jnp.sqrt(jnp.finfo(u.dtype).eps)  # a residual below √ε·‖Av‖ is round-off (see below)
    basis, images = [u / jnp.maximum(size, tiny)], []
    while True:
        image = -jax.flatten_util.ravel_pytree(jax.jvp(field, (y,), (unravel(basis[-1]),))[1])[0]
        images.append(image)
        if len(basis) == KRYLOV:
            break
        r = image - sum(jnp.vdot(b, image) * b for b in basis)  # full reorthogonalisation against the basis so far
        r = r - sum(jnp.vdot(b, r) * b for b in basis)
        e = _exponent(image)  # both scaled by one power of two (exact) before their norms
        r, norm_r = jnp.ldexp(r, -e), jnp.linalg.norm(jnp.ldexp(image, -e))
        new = jnp.linalg.norm(r) > breakdown * norm_r  # else the space is invariant: r is round-off, no new direction
        basis.append(jnp.where(new, r / jnp.maximum(jnp.linalg.norm(r), tiny), 0.0))
    V, AV = jnp.stack(basis, axis=1), jnp.stack(images, axis=1)
    T = V.T @ AV
    T = 0.5 * (T + T.T)
    k = _exponent(T)
    ritz, Q = jnp.linalg.eigh(jnp.ldexp(T, -k))
    cut = jnp.maximum(FLAT * jnp.max(jnp.abs(ritz)), tiny)
    step = (Q.T[:, 0] * size) / jnp.maximum(jnp.abs(ritz), cut)
    curvature = jnp.ldexp(size / jnp.maximum(jnp.linalg.norm(step), tiny), k)
    speed = jnp.ldexp(size, e_f)
    return speed, jnp.where((T[0, 0] > 0) & (size > 0), curvature, jnp.minimum(T[0, 0], 0.0))


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
