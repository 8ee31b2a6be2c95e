"""Exact expectations over all V^N token sequences of a chain, in fixed-size chunks (docs/models/markov.md §3.3).

E[f(X)] = Σ_x P(x) f(x), summed chunk by chunk inside one ``lax.scan`` so memory stays bounded;
sequence i is the base-V expansion of i (first token most significant).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from popdyn.exact._chains import Chain

MAX_SEQUENCES = 2**22
"""Largest V^N enumerated by default (N ≤ 22 binary, N ≤ 13 for V = 3)."""


def check_enumerable(V: int, N: int, max_sequences: int = MAX_SEQUENCES) -> int:
    """V^N, the number of sequences an exact sum over [V]^N visits, or ValueError naming N (and the largest N that
    fits) when it exceeds ``max_sequences``.

    **Arguments:**

    - ``V``: the vocabulary size; ``N``: the sequence length.
    - ``max_sequences``: the largest count allowed (``MAX_SEQUENCES`` by default).
    """
    total = V**N
    if total > max_sequences:
        n_max = 0
        while V ** (n_max + 1) <= max_sequences:
            n_max += 1
        raise ValueError(
            f"N={N} is too large for exact enumeration: {V}^{N} = {total} sequences exceed the limit of "
            f"{max_sequences} (N <= {n_max} for V = {V}); use the DP where it applies"
        )
    return total


def sequences(V: int, N: int, idx: Int[Array, " B"]) -> Int[Array, "B N"]:
    """The sequences with indices ``idx``: sequence i of [V]^N is the N digits of i in base V, first token most
    significant, so ``idx = arange(V**N)`` lists every sequence once, in lexicographic order.

    **Arguments:**

    - ``V``: the vocabulary size; ``N``: the sequence length.
    - ``idx``: integer indices in [0, V^N), shape (B,); the result has shape (B, N).
    """
    powers = V ** jnp.arange(N - 1, -1, -1)
    return (idx[:, None] // powers[None, :]) % V


def expectation(
    fn: Callable[[Int[Array, " N"], Float[Array, "N V"]], Float[Array, ""]],
    chain: Chain,
    N: int,
    chunk: int = 4096,
    max_sequences: int = MAX_SEQUENCES,
) -> Float[Array, ""]:
    """Σ_x P(x) fn(x, next_probs(x)) over all x ∈ [V]^N, where next_probs[n−1] = P(x_{n+1} | x_1..x_n).

    Summed ``chunk`` sequences at a time inside one ``lax.scan``, so memory stays bounded; jit/grad-able in what
    ``fn`` closes over.

    **Arguments:**

    - ``fn``: fn(x, next_probs) → a scalar, for one sequence x (N,) and its next-token laws (N, V).
    - ``chain``: the ``Chain`` the sequences are drawn from.
    - ``N``: the sequence length (≥ the chain's order).
    - ``chunk``: sequences per step.
    - ``max_sequences``: the largest V^N allowed (``MAX_SEQUENCES`` by default; ValueError above it).
    """
    if N < chain.order:
        raise ValueError(f"N={N} is too small: must be at least the chain's order {chain.order}")
    total = check_enumerable(chain.V, N, max_sequences)
    chunk = min(chunk, total)
    n_chunks = -(-total // chunk)

    def one(x):
        return jnp.exp(chain.log_weight(x)) * fn(x, chain.next_token_probs(x))

    def body(acc, c):
        idx = c * chunk + jnp.arange(chunk)
        valid = idx < total
        vals = jax.vmap(one)(sequences(chain.V, N, jnp.where(valid, idx, 0)))
        return acc + jnp.sum(jnp.where(valid, vals, 0.0)), None

    acc, _ = jax.lax.scan(body, jnp.zeros((), jnp.result_type(float)), jnp.arange(n_chunks))
    return acc
