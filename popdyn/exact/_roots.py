"""Bracketed root finding that jits and vmaps (used for closed-form limits of flows)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float


def bisect(
    f: Callable[[Array], Array], lo: Float[Array, ""], hi: Float[Array, ""], iters: int = 200
) -> Float[Array, ""]:
    """Root of a continuous ``f`` on [lo, hi] with f(lo)·f(hi) ≤ 0, by ``iters`` halvings.

    Each halving keeps the half [a, m] or [m, b] whose ends differ in sign; the midpoint of the last bracket is
    returned. 200 halvings of any float64 bracket reach adjacent floats, so the result is exact to rounding.
    Returns NaN when the bracket does not straddle a sign change. Jits and vmaps (a ``lax.fori_loop``).

    **Arguments:**

    - ``f``: a scalar function of a scalar array, continuous on [lo, hi].
    - ``lo``, ``hi``: the bracket's ends (scalar arrays).
    - ``iters``: the number of halvings.
    """
    flo = f(lo)

    def body(_, state):
        a, b, fa = state
        m = 0.5 * (a + b)
        fm = f(m)
        left = jnp.sign(fm) == jnp.sign(fa)
        return jnp.where(left, m, a), jnp.where(left, b, m), jnp.where(left, fm, fa)

    a, b, _ = jax.lax.fori_loop(0, iters, body, (lo, hi, flo))
    ok = jnp.sign(flo) * jnp.sign(f(hi)) <= 0
    return jnp.where(ok, 0.5 * (a + b), jnp.nan)
