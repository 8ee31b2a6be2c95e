"""Forward DP over (current token, count of ones) for binary first-order chains (spec markov.md §3.3).

For predictors whose logit at position n depends only on (n, x_n, S_n), S_n = #ones in x_1..x_n:
α_1(x, s) = π_x [s = x],  α_{n+1}(y, s + y) = Σ_x α_n(x, s) P(x, y),
L = (1/N) Σ_n Σ_{x,s} α_n(x, s) Σ_y P(x, y) CE(y, σ(logit(n, x, s))). O(N²) work instead of 2^N.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn.exact.chains import Chain


def count_dp_loss(
    chain: Chain, N: int, logit: Callable[[Array, Array, Array], Array]
) -> Float[Array, ""]:
    """Exact mean next-token cross-entropy over positions 1..N of a binary first-order chain.

    ``logit(n, x, s)`` is vectorised over arrays x, s of shape (2, N+1) and returns logit P(x_{n+1} = 1).
    """
    if chain.V != 2 or chain.order != 1:
        raise ValueError(f"the count DP needs a binary first-order chain (got V={chain.V}, order={chain.order})")
    P = chain.kernel
    x = jnp.broadcast_to(jnp.arange(2)[:, None], (2, N + 1))
    s = jnp.broadcast_to(jnp.arange(N + 1)[None, :], (2, N + 1))
    alpha0 = jnp.zeros((2, N + 1)).at[0, 0].set(chain.init[0]).at[1, 1].set(chain.init[1])

    def step(alpha, n):
        f = logit(n, x, s)
        ce = -(P[:, 1][:, None] * jax.nn.log_sigmoid(f) + P[:, 0][:, None] * jax.nn.log_sigmoid(-f))
        loss_n = jnp.sum(alpha * ce)
        to0 = jnp.sum(alpha * P[:, 0][:, None], axis=0)  # next token 0: count unchanged
        to1 = jnp.sum(alpha * P[:, 1][:, None], axis=0)  # next token 1: count + 1
        new = jnp.stack([to0, jnp.concatenate([jnp.zeros(1), to1[:-1]])])
        return new, loss_n

    _, losses = jax.lax.scan(step, alpha0, jnp.arange(1, N + 1), unroll=min(N, 32))
    return jnp.mean(losses)
