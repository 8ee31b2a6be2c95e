"""Forward DP over (current token, count of ones) for binary first-order chains (docs/models/markov.md §3.3).

For predictors whose logit at position n depends only on (n, x_n, S_n), S_n = #ones in x_1..x_n:
α_1(x, s) = π_x [s = x],  α_{n+1}(y, s + y) = Σ_x α_n(x, s) P(x, y),
L = (1/N) Σ_n Σ_{x,s} α_n(x, s) Σ_y P(x, y) CE(y, σ(logit(n, x, s))). The occupation measure α depends on
the chain only, so it is computed once (O(N²)) and the loss is one vectorised sum over an (N, 2, N+1) grid.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn.exact._chains import Chain


def _require_binary_first_order(chain: Chain) -> None:
    if chain.V != 2 or chain.order != 1:
        raise ValueError(f"the count DP needs a binary first-order chain (got V={chain.V}, order={chain.order})")


def count_occupancy(chain: Chain, N: int) -> Float[Array, "N 2 N+1"]:
    """α_n(x, s) = P(x_n = x, S_n = s) for n = 1..N (row n−1)."""
    _require_binary_first_order(chain)
    P = chain.kernel
    alpha0 = jnp.zeros((2, N + 1)).at[0, 0].set(chain.init[0]).at[1, 1].set(chain.init[1])

    def step(alpha, _):
        to0 = jnp.sum(alpha * P[:, 0][:, None], axis=0)  # next token 0: count unchanged
        to1 = jnp.sum(alpha * P[:, 1][:, None], axis=0)  # next token 1: count + 1
        return jnp.stack([to0, jnp.concatenate([jnp.zeros(1), to1[:-1]])]), alpha

    _, alphas = jax.lax.scan(step, alpha0, None, length=N)
    return alphas


def count_grid(N: int) -> tuple[Array, Array, Array]:
    """Broadcast (n, x, s) index arrays of shape (N, 2, N+1), n = 1..N."""
    n = jnp.arange(1, N + 1)[:, None, None]
    x = jnp.arange(2)[None, :, None]
    s = jnp.arange(N + 1)[None, None, :]
    n, x, s = jnp.broadcast_arrays(n, x, s)
    return n, x, s


def occupancy_loss(chain: Chain, occupancy: Array, logits: Array) -> Float[Array, ""]:
    """(1/N) Σ α_n(x, s) Σ_y P(x, y) CE(y, σ(logit)) for logits on the (N, 2, N+1) grid."""
    p1 = chain.kernel[:, 1][None, :, None]
    ce = -(p1 * jax.nn.log_sigmoid(logits) + (1.0 - p1) * jax.nn.log_sigmoid(-logits))
    return jnp.sum(occupancy * ce) / occupancy.shape[0]


def count_dp_loss(chain: Chain, N: int, logit: Callable[[Array, Array, Array], Array]) -> Float[Array, ""]:
    """Exact mean next-token cross-entropy over positions 1..N of a binary first-order chain, for a predictor
    whose logit at position n depends only on (n, x_n, S_n), S_n the count of ones in x_1..x_n:
    L = (1/N) Σ_n Σ_{x,s} α_n(x, s) Σ_y P(x, y) CE(y, σ(logit(n, x, s))), with the occupation measure
    α_n(x, s) = P(x_n = x, S_n = s) from the forward DP (O(N²) terms instead of 2^N sequences).

    **Arguments:**

    - ``chain``: a binary first-order ``Chain`` (ValueError otherwise).
    - ``N``: the number of predicted positions.
    - ``logit``: ``logit(n, x, s)``, vectorised over broadcast integer index arrays of shape (N, 2, N+1)
      (n = 1..N), returning logit P(x_{n+1} = 1) of the same shape.
    """
    return occupancy_loss(chain, count_occupancy(chain, N), logit(*count_grid(N)))
