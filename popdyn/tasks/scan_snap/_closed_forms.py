"""Closed forms of the Scan-and-Snap decoder and attention dynamics (docs/models/scan_snap.md §4–§5).

x := M h throughout. Lemma 6's implicit equation is solved as g(x) = expm1(x) + (M−1)x − Mη_Y t = 0, which has
no cancellation for small t and no overflow for large t (the root satisfies e^x ≤ Mη_Y t + 1). g is increasing
and convex, so Newton's method started from an upper bound, min(log1p(Mη_Y t), Mη_Y t/(M−1)), decreases
monotonically to the root; 8 iterations reach machine precision for M ∈ [2, 1e9] and Mη_Y t ∈ [1e-300, 1e300],
and we run ``_NEWTON_ITERS``. One last Newton step outside ``stop_gradient`` gives exact implicit derivatives.

Parameters given as Python numbers are validated (ValueError naming the parameter, value and allowed range);
traced or array arguments are not, so every function can be jitted or vmapped (flags must stay static).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from popdyn import _validate

_NEWTON_ITERS = 20
_SCALARS = (bool, int, float, np.integer, np.floating)


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, _SCALARS):  # closed forms take any size (the paper's M → ∞ limits)
        _validate.int_at_least(name, value, minimum, maximum=None)


def _check_positive(name: str, value, *, allow_zero: bool = False) -> None:
    if isinstance(value, _SCALARS):
        _validate.positive(name, value, allow_zero=allow_zero)


def _check(t=None, K=None, M=None, eta_y=None, eta_z=None, C0=None) -> None:
    if t is not None:
        _check_positive("t", t, allow_zero=True)
    if K is not None:
        _check_int("K", K, 1)
    if M is not None:
        _check_int("M", M, 2)
    for name, value in (("eta_y", eta_y), ("eta_z", eta_z), ("C0", C0)):
        if value is not None:
            _check_positive(name, value)


def _float(t: ArrayLike) -> Array:
    return jnp.asarray(t, dtype=jnp.result_type(float))


def _h_step(h: Array, M, eta_y) -> Array:
    return h + eta_y / (M - 1 + jnp.exp(M * h))


def h_star(steps: int, M, eta_y) -> Float[Array, " steps_plus_1"]:
    """h*(0) = 0, h*(s) = h*(s−1) + η_Y/(M−1+e^{M h*(s−1)}) for s = 0..steps (§4, Lemma 5): the exact decoder of
    GD from Y = 0, whose logits are (M−1)h*(s) on the class's token and −h*(s) elsewhere.

    **Arguments:**

    - ``steps``: the number of GD steps (≥ 0); the result has steps + 1 entries.
    - ``M``: the vocabulary size (≥ 2).
    - ``eta_y``: the decoder rate η_Y > 0.
    """
    _validate.int_at_least("steps", steps, 0)
    _check(M=M, eta_y=eta_y)
    return _h_star(steps, M, eta_y)


@partial(jax.jit, static_argnums=0)
def _h_star(steps: int, M, eta_y) -> Array:
    def body(h, _):
        nxt = _h_step(h, M, eta_y)
        return nxt, nxt

    h0 = jnp.zeros((), jnp.result_type(float))
    _, hs = jax.lax.scan(body, h0, None, length=steps)
    return jnp.concatenate([h0[None], hs])


@jax.jit
def _h_star_at(s: Array, M, eta_y) -> Array:
    """h*(s) elementwise for an integer array s (the Lemma 5 recursion, run to max(s))."""
    h0 = jnp.zeros(s.shape, jnp.result_type(float))
    return jax.lax.fori_loop(0, jnp.max(s, initial=0), lambda i, h: jnp.where(i < s, _h_step(h, M, eta_y), h), h0)


def h(t: Float[ArrayLike, "*t"], M, eta_y) -> Float[Array, "*t"]:
    """The h ≥ 0 with e^{Mh} + (M−1)Mh = Mη_Y t + 1, i.e. dh/dt = η_Y/(M−1+e^{Mh}), h(0) = 0 (§4, Lemma 6): the
    continuous-time decoder, solved by Newton's method to machine precision with exact implicit derivatives.

    **Arguments:**

    - ``t``: time(s) ≥ 0, any shape; the result has the same shape.
    - ``M``: the vocabulary size (≥ 2).
    - ``eta_y``: the decoder rate η_Y > 0.
    """
    _check(t=t, M=M, eta_y=eta_y)
    return _h(_float(t), M, eta_y)


@jax.jit
def _h(t: Array, M, eta_y) -> Array:
    m1 = M - 1

    def newton(x, c):
        return x - (jnp.expm1(x) + m1 * x - c) / (jnp.exp(x) + m1)

    c = M * eta_y * t
    c0 = jax.lax.stop_gradient(c)
    x0 = jnp.minimum(jnp.log1p(c0), c0 / m1)
    x = jax.lax.stop_gradient(jax.lax.fori_loop(0, _NEWTON_ITERS, lambda _, x: newton(x, c0), x0))
    return newton(x, c) / M


def x_star(M) -> Float[Array, ""]:
    """The larger root x* = (1+ω_1) ln M of e^x = (M−1)x, which exists iff M−1 > e (§4, Lemma 8).

    **Arguments:**

    - ``M``: the vocabulary size (≥ 4, the smallest integer with M − 1 > e).
    """
    _check_int("M", M, 4)  # 4 is the smallest integer M with M − 1 > e
    return _x_star(M)


@jax.jit
def _x_star(M) -> Array:
    # f(x) = x − ln x − ln(M−1) is convex and f(2L+1) > 0 for L = ln(M−1) > 0: Newton from the right is monotone.
    L = jnp.log(_float(M) - 1)
    return jax.lax.fori_loop(0, _NEWTON_ITERS, lambda _, x: x - (x - jnp.log(x) - L) / (1 - 1 / x), 2 * L + 1)


def omega_1(M) -> Float[Array, ""]:
    """ω_1 = x*/ln M − 1, so that x* = (1+ω_1) ln M (§4, Lemma 8); it enters the sharp transition time.

    **Arguments:**

    - ``M``: the vocabulary size (≥ 4).
    """
    return x_star(M) / jnp.log(_float(M)) - 1


def gamma(t: Float[ArrayLike, "*t"], K, M, eta_y, discrete: bool = False) -> Float[Array, "*t"]:
    """γ(t) = (M−1)² h(t/K)/(M−1+e^{M h(t/K)}), with h*(⌈t/K⌉) if ``discrete`` (§4, Eq. 85): the speed-control
    coefficient of the attention's gradient, growing like η_Y t/K and then decaying like K ln(Mη_Y t/K)/(η_Y t).

    **Arguments:**

    - ``t``: time(s) ≥ 0, any shape; the result has the same shape.
    - ``K``: the number of classes (≥ 1); ``M``: the vocabulary size (≥ 2).
    - ``eta_y``: the decoder rate η_Y > 0.
    - ``discrete``: use the GD decoder h* of Lemma 5 instead of the flow's h.
    """
    _check(t=t, K=K, M=M, eta_y=eta_y)
    t = _float(t)
    hk = _h_star_at(jnp.ceil(t / K).astype(int), M, eta_y) if discrete else _h(t / K, M, eta_y)
    return (M - 1.0) ** 2 * hk / (M - 1 + jnp.exp(M * hk))


def Gamma(t: Float[ArrayLike, "*t"], K, M, eta_y, eta_z) -> Float[Array, "*t"]:
    """Γ(t) = η_Z ∫_0^t γ = (η_Z/η_Y) K (M−1)² h(t/K)²/2, exact for Lemma 6's h (§5, Sec. 6).

    **Arguments:**

    - ``t``: time(s) ≥ 0, any shape; the result has the same shape.
    - ``K``: the number of classes (≥ 1); ``M``: the vocabulary size (≥ 2).
    - ``eta_y``, ``eta_z``: the decoder and attention rates η_Y, η_Z > 0.
    """
    _check(t=t, K=K, M=M, eta_y=eta_y, eta_z=eta_z)
    return eta_z / eta_y * K * (M - 1.0) ** 2 * _h(_float(t) / K, M, eta_y) ** 2 / 2


def B_n(t: Float[ArrayLike, "*t"], K, M, eta_y, eta_z, C0, anchored: bool = False) -> Float[Array, "*t"]:
    """B_n = ¼ ln(C0 + 4Γ(t)) as in Eq. (129), or ¼ ln(1 + 4Γ/C0) with B_n(0) = 0 if ``anchored`` (§5, Sec. 6): the
    fall of the common token's logit in the snap stage.

    **Arguments:**

    - ``t``: time(s) ≥ 0, any shape; the result has the same shape.
    - ``K``: the number of classes (≥ 1); ``M``: the vocabulary size (≥ 2).
    - ``eta_y``, ``eta_z``: the decoder and attention rates η_Y, η_Z > 0.
    - ``C0``: the constant C_0 > 0 (ρ_0⁴/K in the paper's approximation).
    - ``anchored``: subtract the value at t = 0, so that B_n(0) = 0.
    """
    _check(C0=C0)
    G = Gamma(t, K, M, eta_y, eta_z)
    return jnp.log1p(4 * G / C0) / 4 if anchored else jnp.log(C0 + 4 * G) / 4


def snap_logit(t: Float[ArrayLike, "*t"], K, M, eta_y, eta_z, C0) -> Float[Array, "*t"]:
    """z(t) = −¼ ln(1 + 4Γ(t)/C0), the exact solution of ż = −C0⁻¹ η_Z γ(t) e^{4z}, z(0) = 0 (§5, Sec. 6): the
    common token's logit under Theorem 4's approximations.

    **Arguments:**

    - ``t``: time(s) ≥ 0, any shape; the result has the same shape.
    - ``K``: the number of classes (≥ 1); ``M``: the vocabulary size (≥ 2).
    - ``eta_y``, ``eta_z``: the decoder and attention rates η_Y, η_Z > 0.
    - ``C0``: the constant C_0 > 0 (ρ_0⁴/K in the paper's approximation).
    """
    return -B_n(t, K, M, eta_y, eta_z, C0, anchored=True)


def transition_time(K, M, eta_y, sharp: bool = False) -> Float[Array, ""]:
    """t_0 = 2K ln M/η_Y, or 2K x*/η_Y = 2(1+ω_1)K ln M/η_Y if ``sharp``; independent of η_Z (§5, Theorem 4): the
    time after which the attention changes only logarithmically slowly.

    **Arguments:**

    - ``K``: the number of classes (≥ 1); ``M``: the vocabulary size (≥ 2).
    - ``eta_y``: the decoder rate η_Y > 0.
    - ``sharp``: the sharper form with x* (needs M ≥ 4).
    """
    _check(K=K, M=M, eta_y=eta_y)
    x = x_star(M) if sharp else jnp.log(_float(M))
    return 2 * K * x / eta_y


def scan_time(K, M, eta_y) -> Float[Array, ""]:
    """t'_0 = K ln M/η_Y, the end of the scan stage (§5, Sec. 6).

    **Arguments:**

    - ``K``: the number of classes (≥ 1); ``M``: the vocabulary size (≥ 2).
    - ``eta_y``: the decoder rate η_Y > 0.
    """
    _check(K=K, M=M, eta_y=eta_y)
    return K * jnp.log(_float(M)) / eta_y
