"""Markov chains as exact data distributions over token sequences (docs/models/markov.md §1.1–§1.2).

A chain of order k over V states is an initial law of its first k tokens (a table over the V^k
contexts) and a kernel K[c, y] = P(x_{n+1} = y | last k tokens = c). A context index reads the k
tokens as a base-V number, oldest token most significant (§1.2).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from popdyn import _validate
from popdyn.exact._markov_chain import binary_kernel, stationary_distribution, validate_transition_matrix


class Chain(eqx.Module):
    """An order-k, V-state chain: ``init`` (V^k,) law of x_1..x_k, ``kernel`` (V^k, V) next-token law.

    Contexts are indexed in base V, oldest token most significant. Build one with ``Chain.binary(p, q)``,
    ``Chain.from_matrix(P)`` or ``Chain.binary_order_k(probs)`` rather than from its fields.

    **Arguments:**

    - ``init``: the law of the first k tokens, over the V^k contexts.
    - ``kernel``: row c the law of the next token after context c.
    - ``V``: the number of states; ``order``: k.
    """

    init: Float[Array, " C"]
    kernel: Float[Array, "C V"]
    V: int = eqx.field(static=True)
    order: int = eqx.field(static=True)

    @classmethod
    def binary(cls, p: float, q: float) -> Chain:
        """First-order binary chain P = [[1−p, p], [q, 1−q]], started from π (§1.1)."""
        p, q = _validate.open_unit("p", p), _validate.open_unit("q", q)
        return cls.from_matrix(binary_kernel(p, q))

    @classmethod
    def from_matrix(cls, P) -> Chain:
        """First-order chain with a validated V×V transition matrix, started from its stationary law."""
        P = validate_transition_matrix(P)
        return cls(jnp.asarray(stationary_distribution(P)), jnp.asarray(P), P.shape[0], 1)

    @classmethod
    def binary_order_k(cls, probs) -> Chain:
        """Binary chain of order k = log2(len(probs)): P(x_{n+1} = 1 | context c) = probs[c]; the first k
        bits are i.i.d. Bernoulli(1/2) (Local-to-Global's ``--chain random``, §1.2)."""
        probs = _validate.float_array("probs", probs)
        k = int(round(np.log2(probs.size))) if probs.size else 0
        if probs.ndim != 1 or probs.size < 2 or 2**k != probs.size:
            raise ValueError(f"probs has shape {probs.shape}: must hold 2^k probabilities, k >= 1")
        bad = np.flatnonzero((probs < 0) | (probs > 1) | ~np.isfinite(probs))
        if bad.size:
            raise ValueError(f"probs[{bad[0]}]={float(probs[bad[0]])!r} is out of range: must lie in [0, 1]")
        kernel = np.stack([1.0 - probs, probs], axis=1)
        return cls(jnp.full(2**k, 0.5**k), jnp.asarray(kernel), 2, k)

    @classmethod
    def random_binary_order_k(cls, k: int, key: Array) -> Chain:
        """p_c ~ U(0, 1) i.i.d. over the 2^k contexts (§1.2)."""
        k = _validate.int_at_least("k", k, 1)
        return cls.binary_order_k(np.asarray(jax.random.uniform(key, (2**k,), dtype=jnp.float64)))

    def context(self, tokens: Int[Array, "... k"]) -> Int[Array, "..."]:
        """Context index of the last ``order`` tokens, oldest most significant."""
        weights = self.V ** jnp.arange(self.order - 1, -1, -1)
        return jnp.sum(tokens[..., -self.order :] * weights, axis=-1)

    def log_weight(self, x: Int[Array, " N"]) -> Float[Array, ""]:
        """ln P(x_1..x_N) for N ≥ order."""
        k = self.order
        lp = jnp.log(self.init[self.context(x[:k])])
        windows = jnp.stack([x[i : x.shape[0] - k + i] for i in range(k)], axis=-1)  # contexts x_{n-k+1..n}
        nxt = x[k:]
        return lp + jnp.sum(jnp.log(self.kernel[self.context(windows), nxt]))

    def next_token_probs(self, x: Int[Array, " N"]) -> Float[Array, "N V"]:
        """Row n−1 is P(x_{n+1} = · | x_1..x_n), n = 1..N (inside the first k tokens: the initial law's
        conditional)."""
        N, k, V = x.shape[0], self.order, self.V
        rows = []
        init = self.init.reshape((V,) * k)
        for n in range(1, N + 1):
            if n >= k:
                rows.append(self.kernel[self.context(x[n - k : n])])
            else:  # conditional of the initial law of x_1..x_k
                marg = init.sum(axis=tuple(range(n + 1, k))) if n + 1 < k else init
                joint = marg[tuple(x[:n])]
                rows.append(joint / jnp.sum(joint))
        return jnp.stack(rows)


def sample(chain: Chain, n_seq: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n_seq`` sequences x_1..x_length from the chain with NumPy (for Monte-Carlo checks of the exact
    sums): the first ``order`` tokens from the chain's initial law over contexts, each next token from the
    kernel's row of the last ``order`` tokens.

    **Arguments:**

    - ``chain``: the ``Chain``.
    - ``n_seq``: the number of sequences; ``length``: tokens per sequence (≥ the chain's order).
    - ``rng``: a NumPy ``Generator``.

    Returns an int64 array of shape (n_seq, length).
    """
    V, k = chain.V, chain.order
    init, kernel = np.asarray(chain.init), np.asarray(chain.kernel)
    first = rng.choice(init.size, size=n_seq, p=init / init.sum())
    X = np.empty((n_seq, length), dtype=np.int64)
    for i in range(k):
        X[:, i] = (first // V ** (k - 1 - i)) % V
    weights = V ** np.arange(k - 1, -1, -1)
    cum = np.cumsum(kernel, axis=1)
    for n in range(k, length):
        ctx = (X[:, n - k : n] * weights).sum(axis=1)
        u = rng.random(n_seq)[:, None]
        X[:, n] = np.minimum((u > cum[ctx]).sum(axis=1), V - 1)
    return X
