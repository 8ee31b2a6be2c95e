"""The Markov models' training examples: one sequence of the chain (docs/models/markov.md §6).

The authors' training draws sequences x_1..x_{N+1} of the chain and predicts each x_{n+1} from x_1..x_n,
n = 1..N, with the cross-entropy of the token that actually follows. As per-example data (docs/problem.md,
"Per-example data") one example is one such sequence, of probability P(x) = P(x_1..x_k) ∏_n K(x_{n−k+1..n}, x_{n+1}):

* ``sequence_table``: all V^{N+1} sequences (any chain: the full transformer, the attention scalar);
* ``transition_table``: for the canonical model, whose loss of a sequence depends on its transition counts
  n_ab = #{n ≤ N : x_n = a, x_{n+1} = b} only, the exact law of the counts of a binary first-order chain, O(N²)
  rows instead of 2^{N+1} sequences.

A sequence's own loss averages the observed next tokens, while the population losses average the next token
analytically (``popdyn.exact.expectation``): both have the same mean, but only the former is what one training
sequence contributes to SGD.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int
from scipy.special import gammaln

from popdyn.exact import Chain, sequences
from popdyn.exact._tables import WeightedTable


def sequence_table(chain: Chain, N: int, max_sequences: int, owner: str) -> WeightedTable:
    """Every sequence x_1..x_{N+1} of ``chain`` (rows, int32, first token most significant) with its probability
    P(x) = exp(``chain.log_weight(x)``): one training sequence with its N targets.

    **Arguments:**

    - ``chain``: the ``Chain`` (its numbers may be traced).
    - ``N``: the number of predicted positions; a sequence has N + 1 tokens.
    - ``max_sequences``: the largest V^{N+1} enumerated; above it a ValueError names ``owner``, N and the limit.
    - ``owner``: the problem's name, for the error.
    """
    V, length = chain.V, N + 1
    total = V**length
    if total > max_sequences:
        n_max = 0
        while V ** (n_max + 2) <= max_sequences:
            n_max += 1
        raise ValueError(
            f"{owner}.examples(): one training example is a sequence x_1..x_{{N+1}} with its N next tokens, and its "
            f"{V}^{length} = {total} sequences at N={N} exceed the limit max_sequences={max_sequences} of exact "
            f"enumeration (N <= {n_max} for V = {V}); the population loss needs no examples"
        )
    x = sequences(V, length, jnp.arange(total, dtype=jnp.int32)).astype(jnp.int32)
    return WeightedTable(x, _probabilities(chain, x))


@eqx.filter_jit
def _probabilities(chain: Chain, x: Int[Array, "S L"]) -> Float[Array, " S"]:
    """P(x) of each sequence (one compiled call: eagerly, the per-token steps would dispatch one by one).

    **Arguments:** ``chain`` the ``Chain``; ``x`` the sequences, one per row.
    """
    return jnp.exp(jax.vmap(chain.log_weight)(x))


def next_token_loss(logits: Float[Array, " N"], targets: Int[Array, " N"]) -> Float[Array, ""]:
    """(1/N) Σ_n CE(y_n, σ(f_n)) = −(1/N) Σ_n [y_n ln σ(f_n) + (1 − y_n) ln σ(−f_n)]: the binary cross-entropy of
    one sequence's observed next tokens.

    **Arguments:**

    - ``logits``: f_n = logit P(x_{n+1} = 1 | x_1..x_n), n = 1..N.
    - ``targets``: the observed next tokens y_n = x_{n+1} ∈ {0, 1}.
    """
    y = targets.astype(logits.dtype)
    return -jnp.mean(y * jax.nn.log_sigmoid(logits) + (1.0 - y) * jax.nn.log_sigmoid(-logits))


def _log_compositions(n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """ln #(ways to split n + r tokens into r non-empty runs, in order) = ln C(n + r − 1, r − 1): n is the number of
    self-transitions inside the runs. For r = 0 the count is 1 if n = 0 and 0 (ln 0 = −inf) otherwise.

    **Arguments:** ``n`` and ``r``, integer arrays of the same shape.
    """
    safe = np.maximum(r, 1)
    out = gammaln(n + safe) - gammaln(n + 1.0) - gammaln(safe)
    return np.where(r > 0, out, np.where(n == 0, 0.0, -np.inf))


@functools.lru_cache(maxsize=8)
def transition_counts(N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The support of (x_1, n_00, n_01, n_10, n_11) over binary sequences x_1..x_{N+1}, with ln of the number of
    sequences behind each row (read-only NumPy arrays: first token (R,), counts (R, 4), log-multiplicity (R,)).

    [derived] A sequence starting with a is a run of a's, then alternating runs: with r_0 runs of 0 and r_1 runs
    of 1, n_01 = r_1 and n_10 = r_0 − 1 from a = 0 (n_10 = r_0 and n_01 = r_1 − 1 from a = 1), and a run of length
    ℓ holds ℓ − 1 self-transitions, so the runs of b share their n_bb self-transitions in
    C(n_bb + r_b − 1, r_b − 1) ways: the number of sequences is the product of the two. R ≈ N².

    **Arguments:**

    - ``N``: the number of transitions (predicted positions), ≥ 1.
    """
    first, counts, logm = [], [], []
    for n01 in range(N + 1):
        for n10 in range(max(n01 - 1, 0), n01 + 2):
            rest = N - n01 - n10
            if rest < 0:
                continue
            n00 = np.arange(rest + 1)
            n11 = rest - n00
            for a, runs0, runs1, ok in ((0, n10 + 1, n01, n01 - n10 in (0, 1)), (1, n10, n01 + 1, n10 - n01 in (0, 1))):
                if not ok:
                    continue
                lm = _log_compositions(n00, np.full_like(n00, runs0)) + _log_compositions(n11, np.full_like(n11, runs1))
                keep = np.isfinite(lm)
                first.append(np.full(int(keep.sum()), a))
                counts.append(np.stack([n00, np.full_like(n00, n01), np.full_like(n00, n10), n11], axis=1)[keep])
                logm.append(lm[keep])
    out = (
        np.concatenate(first).astype(np.int32),
        np.concatenate(counts).astype(np.int32),
        np.concatenate(logm),
    )
    for arr in out:
        arr.setflags(write=False)
    return out


def transition_table(chain: Chain, N: int, max_rows: int, owner: str) -> WeightedTable:
    """The law of the transition counts of one sequence x_1..x_{N+1} of a binary first-order ``chain``: points
    {"counts": (n_00, n_01, n_10, n_11)}, probabilities Σ over the sequences behind them of
    π(x_1) ∏_ab P_ab^{n_ab} (``transition_counts``). A loss that depends on a sequence through these counts only
    has the same per-example gradients on this table as on all 2^{N+1} sequences.

    **Arguments:**

    - ``chain``: a binary first-order ``Chain`` (its numbers may be traced).
    - ``N``: the number of transitions, ≥ 1.
    - ``max_rows``: the largest (N + 1)² allowed (the table has about N² rows); above it a ValueError names
      ``owner``, N and the limit.
    - ``owner``: the problem's name, for the error.
    """
    if (N + 1) ** 2 > max_rows:
        raise ValueError(
            f"{owner}.examples(): the transition counts of one training sequence of N={N} predicted tokens take about "
            f"N² = {N * N} rows, over the limit of {max_rows} (N <= {math.isqrt(max_rows) - 1})"
        )
    if chain.V != 2 or chain.order != 1:
        raise ValueError(
            f"chain is invalid: the transition counts need a binary first-order chain (got V={chain.V}, "
            f"order={chain.order})"
        )
    first, counts, logm = transition_counts(N)
    log_kernel = jnp.log(chain.kernel).reshape(-1)  # (P_00, P_01, P_10, P_11)
    n = jnp.asarray(counts)
    log_p = jnp.sum(jnp.where(n > 0, n * log_kernel, 0.0), axis=1)
    return WeightedTable({"counts": n}, jnp.exp(jnp.asarray(logm) + jnp.log(chain.init)[first] + log_p))
