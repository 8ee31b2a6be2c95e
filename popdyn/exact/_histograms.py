"""Exact expectations over token histograms: n-subsets of [L] (distinct tokens) or n-multisets (i.i.d.
tokens), chunked (docs/models/decision_lists.md §1 (F3), §3 B).

A model whose output depends on a sequence only through its histogram h has
E_s[f(s)] = Σ_h P(h) f(h): C(L, n) subsets or C(L+n−1, n) multisets instead of L^n sequences. A table row
holds the distinct tokens of h padded to n slots, their log-counts (−inf on padding) and P(h).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from math import comb, lgamma, log

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from popdyn import _validate

MAX_HISTOGRAMS = 6_000_000
"""Largest table built by default (C(30, 8) = 5,852,925 subsets fits)."""


def count_histograms(L: int, n: int, distinct: bool) -> int:
    """C(L, n) subsets or C(L+n−1, n) multisets."""
    return comb(L, n) if distinct else comb(L + n - 1, n)


def check_histograms(L: int, n: int, distinct: bool, limit: int = MAX_HISTOGRAMS) -> int:
    """The table size, or ValueError naming n when it exceeds ``limit``."""
    total = count_histograms(L, n, distinct)
    if total > limit:
        kind = f"C({L}, {n}) subsets" if distinct else f"C({L + n - 1}, {n}) multisets"
        raise ValueError(
            f"n={n} is too large for exact histogram enumeration at L={L}: {kind} = {total} exceed the limit of {limit}"
        )
    return total


class Histograms(eqx.Module):
    """The histogram table of a sequence law, padded into chunks of ``chunk`` rows (padding has P = 0).

    Rows hold the distinct tokens of h padded to n slots, their log-counts (−inf on padding) and P(h), for
    a uniformly random n-subset of [L] (``distinct``) or n i.i.d. tokens with probabilities ``token_probs``
    (default uniform): P(h) = n!/Π h_b! · Π p_b^{h_b}, the multinomial law.
    """

    tokens: Int[Array, "C chunk n"]
    logc: Float[Array, "C chunk n"]
    prob: Float[Array, "C chunk"]
    valid: Bool[Array, "C chunk"]
    size: int = eqx.field(static=True)

    def __init__(
        self,
        L: int,
        n: int,
        distinct: bool,
        chunk: int = 8192,
        limit: int = MAX_HISTOGRAMS,
        token_probs: Sequence[float] | Float[ArrayLike, " L"] | None = None,
    ):
        chunk = _validate.int_at_least("chunk", chunk, 1)
        self.size = check_histograms(L, n, distinct, limit)
        if token_probs is None:
            logp = np.full(L, -log(L))
        elif distinct:
            raise ValueError("token_probs is only defined for i.i.d. tokens (distinct=False)")
        else:
            p = np.asarray(token_probs, dtype=float)
            if p.shape != (L,) or not np.all(p > 0) or abs(p.sum() - 1) > 1e-9:
                raise ValueError(
                    f"token_probs={p.tolist()} is invalid: must be {L} positive probabilities summing to 1"
                )
            logp = np.log(p)
        if distinct:
            tokens = np.array(list(itertools.combinations(range(L), n)), dtype=np.int32).reshape(-1, n)
            logc = np.zeros(tokens.shape)
            prob = np.full(len(tokens), 1.0 / len(tokens))
        else:
            rows = list(itertools.combinations_with_replacement(range(L), n))
            tokens = np.zeros((len(rows), n), dtype=np.int32)
            logc = np.full((len(rows), n), -np.inf)
            prob = np.empty(len(rows))
            for r, ms in enumerate(rows):
                vals, counts = np.unique(ms, return_counts=True)
                tokens[r, : len(vals)] = vals
                logc[r, : len(vals)] = np.log(counts)
                prob[r] = np.exp(lgamma(n + 1) - sum(lgamma(k + 1) for k in counts) + counts @ logp[vals])
        chunk = min(chunk, self.size)
        n_chunks = -(-self.size // chunk)
        pad = n_chunks * chunk - self.size

        def padded(x, fill):
            x = np.concatenate([x, np.full((pad, *x.shape[1:]), fill, dtype=x.dtype)])
            return jnp.asarray(x.reshape(n_chunks, chunk, *x.shape[1:]))

        self.tokens, self.logc = padded(tokens, 0), padded(logc, 0.0)
        self.prob, self.valid = padded(prob, 0.0), padded(np.ones(self.size, bool), False)

    def expectation(self, fn: Callable[[Int[Array, " n"], Float[Array, " n"]], Float[Array, ""]]) -> Float[Array, ""]:
        """Σ_h P(h)·fn(tokens_h, logc_h), chunk by chunk inside one ``lax.scan``; the chunk body is
        rematerialised (``jax.checkpoint``) so reverse mode keeps one chunk's intermediates, not all of them
        (without it the gradient at C(30, 8) asks XLA for ~33 GB)."""

        @jax.checkpoint
        def body(acc, xs):
            t, lc, p = xs
            return acc + jnp.sum(p * jax.vmap(fn)(t, lc)), None

        acc, _ = jax.lax.scan(body, jnp.zeros((), self.prob.dtype), (self.tokens, self.logc, self.prob))
        return acc

    def minimum(self, fn: Callable[[Int[Array, " n"], Float[Array, " n"]], Float[Array, ""]]) -> Float[Array, ""]:
        """min_h fn(tokens_h, logc_h) over every histogram of positive probability."""

        def body(acc, xs):
            t, lc, ok = xs
            return jnp.minimum(acc, jnp.min(jnp.where(ok, jax.vmap(fn)(t, lc), jnp.inf))), None

        acc, _ = jax.lax.scan(body, jnp.full((), jnp.inf, self.prob.dtype), (self.tokens, self.logc, self.valid))
        return acc
