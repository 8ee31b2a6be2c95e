"""Gaussian kernels of the leaky-ReLU family σ(z) = max(z, αz), α ∈ [0, 1] (docs/models/teacher.md §3.3, §3.5, §3.6).

For (u, v) centred Gaussian with stds a, b and covariance c, Q = √(a²b² − c²) and θ = atan2(Q, c):
K(a, b, c) = E[σ(u)σ(v)] = αc + (1−α)²(Q + (π − θ)c)/(2π) and E[σ(u)²] = κa², κ = (1+α²)/2. Derivatives
come from the bounded analytic partials of §3.5 (``jax.custom_jvp``), so they stay finite at ρ = ±1 (the
teacher) and at a = 0 or b = 0 (zero initialisation), where sqrt/arccos would give NaN or inf.
"""

from __future__ import annotations

import math
from typing import overload

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

ZERO_INITS = ("limit", "c0=0", "c0=1")
"""Conventions for the derivative at w_m = 0 (a = 0), §3.6; see ``zero_partials``."""

Partials = tuple[Float[Array, "..."], Float[Array, "..."]]
Scalar = float | Float[Array, ""]


@overload
def kappa(alpha: float) -> float: ...
@overload
def kappa(alpha: Float[Array, ""]) -> Float[Array, ""]: ...
def kappa(alpha: Scalar) -> Scalar:
    """κ = (1 + α²)/2, so that E[σ(u)²] = κa² for u ~ N(0, a²) (§3.3).

    **Arguments:**

    - ``alpha``: the leaky slope α ∈ [0, 1] (1: linear, 0: ReLU); may be traced.
    """
    return 0.5 * (1.0 + alpha * alpha)


def _safe_sqrt(x):
    """√max(x, 0) with derivative 0 (not inf or NaN) where x ≤ 0."""
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def _angle(a, b, c):
    """(Q, θ, live): Q = √(a²b² − c²), θ = atan2(Q, c); where ab = 0 (live False) θ = π/2, i.e. ρ = 0."""
    live = (a > 0) & (b > 0)
    ab = jnp.where(live, a * b, 1.0)
    cl = jnp.where(live, c, 0.0)
    Q = _safe_sqrt(ab * ab - cl * cl)
    return jnp.where(live, Q, 0.0), jnp.arctan2(Q, cl), live


def _relu_part(a, b, c):
    """2π E[relu(u)relu(v)] = Q + (π − θ)c (Cho–Saul arc-cosine kernel of degree 1, §3.3)."""
    Q, theta, _ = _angle(a, b, c)
    return Q + (math.pi - theta) * c


@jax.custom_jvp
def _kfun(a, b, c, alpha, ka0, kc0):
    return alpha * c + (1.0 - alpha) ** 2 * _relu_part(a, b, c) / (2.0 * math.pi)


@_kfun.defjvp
def _kfun_jvp(primals, tangents):
    a, b, c, alpha, ka0, kc0 = primals
    da, db, dc, dalpha, _, _ = tangents  # ka0, kc0 only supply derivative values: K does not depend on them
    g = (1.0 - alpha) ** 2 / (2.0 * math.pi)
    Q, theta, live = _angle(a, b, c)
    sin = jnp.where(live, Q / jnp.where(live, a * b, 1.0), 1.0)  # sin θ; 1 (ρ = 0) where ab = 0
    zero = a == 0
    Ka = jnp.where(zero, ka0, g * b * sin)  # (1−α)²Q/(2πa)
    Kb = g * a * sin  # (1−α)²Q/(2πb)
    Kc = jnp.where(zero, kc0, alpha + g * (math.pi - theta))
    Kalpha = c - (1.0 - alpha) * (Q + (math.pi - theta) * c) / math.pi
    return _kfun(a, b, c, alpha, ka0, kc0), Ka * da + Kb * db + Kc * dc + Kalpha * dalpha


def limit_partials(b: Float[Array, "..."], rho: Float[Array, "..."], alpha: Scalar) -> Partials:
    """(∂K/∂a, ∂K/∂c) in the limit a → 0 at fixed correlation ρ = c/(ab) (§3.5):
    ((1−α)² b sin θ/(2π), α + (1−α)²(π − θ)/(2π)), θ = arccos ρ (ρ clipped to [−1, 1]).

    **Arguments:**

    - ``b``: the std of v; ``rho``: the fixed correlation ρ (they broadcast together).
    - ``alpha``: the leaky slope α ∈ [0, 1] (1: linear, 0: ReLU); may be traced.
    """
    rho = jnp.clip(rho, -1.0, 1.0)
    sin = _safe_sqrt(1.0 - rho * rho)
    g = (1.0 - alpha) ** 2 / (2.0 * math.pi)
    return g * b * sin, alpha + g * (math.pi - jnp.arctan2(sin, rho))


def zero_partials(zero_init: str, b: Float[Array, "..."], rho: Float[Array, "..."], alpha: Scalar) -> Partials:
    """(∂K/∂a, ∂K/∂c) used where a = 0 (w_m = 0), per convention (§3.6) [our choice of names]:

    * "limit": the one-sided limit along the teacher, ``limit_partials(b, rho)`` with ρ the correlation the
      entry would have with w_m ∥ v*_m (the limit of the gradient at W = δV*, δ → 0+);
    * "c0=0" / "c0=1": the expectation form E[(σ(u) − y)σ'(u)∂u] with relu'(0) = c0, i.e.
      σ'(0) = α + (1−α)c0 (for ReLU c0 = σ'(0); for leaky ReLU c0 = 0 is a strict ``x > 0`` test, σ'(0) = α,
      and c0 = 1 a ``x >= 0`` test, σ'(0) = 1). By Stein's lemma ∂K/∂c = σ'(0)(1+α)/2 and ∂K/∂a = 0.

    For the identity (α = 1) all three give (0, 1).

    **Arguments:**

    - ``zero_init``: one of ``ZERO_INITS``.
    - ``b``: the std of v; ``rho``: the correlation used by "limit" (they broadcast together).
    - ``alpha``: the leaky slope α ∈ [0, 1] (1: linear, 0: ReLU); may be traced.
    """
    if zero_init == "limit":
        return limit_partials(b, rho, alpha)
    c0 = {"c0=0": 0.0, "c0=1": 1.0}[zero_init]
    slope = (alpha + (1.0 - alpha) * c0) * 0.5 * (1.0 + alpha)
    return jnp.zeros_like(b), jnp.full_like(b, slope)


def kfun(
    a: Float[Array, "..."], b: Float[Array, "..."], c: Float[Array, "..."], alpha: Scalar, zero: Partials | None = None
) -> Float[Array, "..."]:
    """K(a, b, c) = E[σ(u)σ(v)] = αc + (1−α)²(Q + (π − θ)c)/(2π) (§3.3); broadcasts over a, b, c.

    Partials (§3.5): ∂K/∂a = (1−α)²Q/(2πa), ∂K/∂b = (1−α)²Q/(2πb), ∂K/∂c = α + (1−α)²(π − θ)/(2π), all bounded.
    Where ab = 0 the correlation is undefined; the partials are those at fixed c = 0 (ρ = 0), except that
    where a = 0 ``zero`` = (∂K/∂a, ∂K/∂c) is used when given (``zero_partials``). ∂K/∂α = c − (1−α)(Q + (π − θ)c)/π,
    so α may be traced (one compilation for every α).

    **Arguments:**

    - ``a``, ``b``: the stds of u and v (≥ 0); ``c``: their covariance (|c| ≤ ab); they broadcast together.
    - ``alpha``: the leaky slope α ∈ [0, 1] (1: linear, 0: ReLU); may be traced.
    - ``zero``: (∂K/∂a, ∂K/∂c) to use where a = 0 (``zero_partials``; None: the limit at ρ = 0).
    """
    a, b, c, alpha = jnp.broadcast_arrays(*(jnp.asarray(x, dtype=jnp.result_type(float)) for x in (a, b, c, alpha)))
    if zero is None:
        zero = limit_partials(b, jnp.zeros_like(b), alpha)
    ka0, kc0 = (jnp.broadcast_to(z, a.shape) for z in zero)
    return _kfun(a, b, c, alpha, ka0, kc0)


def entry_loss(
    a: Float[Array, "..."], b: Float[Array, "..."], c: Float[Array, "..."], alpha: Scalar, zero: Partials | None = None
) -> Float[Array, "..."]:
    """l(a, b, c) = ½(κa² + κb² − 2K(a, b, c)) = ½E(σ(u) − σ(v))² (§3.4), the loss of one output entry: u the
    student's pre-activation, v the teacher's.

    **Arguments:**

    - ``a``, ``b``: the stds of u and v (≥ 0); ``c``: their covariance (|c| ≤ ab); they broadcast together.
    - ``alpha``: the leaky slope α ∈ [0, 1] (1: linear, 0: ReLU); may be traced.
    - ``zero``: (∂K/∂a, ∂K/∂c) to use where a = 0 (``zero_partials``; None: the limit at ρ = 0).
    """
    k = kappa(alpha)
    return 0.5 * (k * a * a + k * b * b - 2.0 * kfun(a, b, c, alpha, zero))


def norm_toward(x: Float[Array, "... n"], u: Float[Array, "... n"]) -> Float[Array, "..."]:
    """‖x‖ over the last axis, with gradient x/‖x‖ where x ≠ 0 and the unit direction ``u`` where x = 0 (the
    one-sided derivative along u; used for a = σ‖w_m‖‖s_j‖ at w_m = 0, u = v*_m/‖v*_m‖, §3.6).

    **Arguments:**

    - ``x``: the vectors, along the last axis.
    - ``u``: the unit directions used as the gradient where x = 0 (broadcast against ``x``).
    """
    return _norm_toward(x, u)


@jax.custom_jvp
def _norm_toward(x, u):
    return _safe_sqrt(jnp.sum(x * x, axis=-1))


@_norm_toward.defjvp
def _norm_toward_jvp(primals, tangents):
    x, u = primals
    dx, _ = tangents
    n2 = jnp.sum(x * x, axis=-1, keepdims=True)
    pos = n2 > 0
    n = jnp.sqrt(jnp.where(pos, n2, 1.0))
    direction = jnp.where(pos, x / n, u)
    return _norm_toward(x, u), jnp.sum(direction * dx, axis=-1)
