"""Sequence classes of Scan and Snap (docs/models/scan_snap.md §1, §6, §7).

A class n is a triple (P(·|n), query token ψ(n), next token): the T−1 contextual tokens are i.i.d. from
P(·|n) over the vocabulary [M], then the query token ψ(n), then the next token (the label). Classes are
drawn with weights π_n (uniform in the paper). Tokens are 0..M−1; every field is a NumPy array, so a
``Classes`` is static data for the jitted model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float, Int

from popdyn import _validate

_ATOL = 1e-9


def distinct_mask(probs):
    """G_DT(n) as a K×M mask: l is distinct for n iff n is the only class with P(l|n) > 0 (§1). Works on
    NumPy and JAX arrays alike."""
    support = probs > 0
    return support & (support.sum(axis=0) == 1)[None, :]


@dataclass(frozen=True, eq=False)
class Classes:
    """K sequence classes over a vocabulary of M tokens.

    ``probs[k]`` is P(·|k) (row-stochastic, K×M), ``query[k]`` = ψ(k), ``label[k]`` the next token of
    class k (distinct across classes), ``weights[k]`` = π_k.
    """

    probs: Float[np.ndarray, "K M"]
    query: Int[np.ndarray, " K"]
    label: Int[np.ndarray, " K"]
    weights: Float[np.ndarray, " K"]

    @property
    def K(self) -> int:
        return self.probs.shape[0]

    @property
    def M(self) -> int:
        return self.probs.shape[1]

    def distinct(self) -> Int[np.ndarray, "K M"]:
        """G_DT(n) as a K×M mask (§1); see ``distinct_mask``."""
        return distinct_mask(self.probs)

    def common(self) -> Int[np.ndarray, " M"]:
        """G_CT as an M-mask: tokens in the support of more than one class (§1)."""
        return (self.probs > 0).sum(axis=0) > 1


def make_classes(probs, query, label, weights=None, *, M: int | None = None) -> Classes:
    """Validated ``Classes``: P rows are distributions over [M], tokens lie in [M], labels are distinct,
    weights are a distribution (default uniform, as in Theorem 1); ValueError naming the field otherwise.

    **Arguments:**

    - ``probs``: the K × M matrix of P(l | n), one row-stochastic row per class (K ≥ 1, M ≥ 2).
    - ``query``: the query token ψ(n) of each class, K integers in [M].
    - ``label``: the next token of each class, K distinct integers in [M].
    - ``weights``: the class probabilities π_n (None: uniform).
    - ``M``: the vocabulary size, checked against the columns of ``probs`` (None: read from ``probs``).
    """
    probs = _validate.float_array("probs", probs)
    if probs.ndim != 2 or probs.shape[0] < 1 or probs.shape[1] < 2:
        raise ValueError(f"probs has shape {probs.shape}: must be K×M with K >= 1 classes and M >= 2 tokens")
    K, M_probs = probs.shape
    if M is not None and _validate.int_at_least("M", M, 2) != M_probs:
        raise ValueError(f"M={M} is invalid: probs has {M_probs} columns, one per token")
    if not np.all(np.isfinite(probs)) or probs.min() < 0:
        raise ValueError(f"probs has an entry {probs.min()!r} out of range: P(l|n) must lie in [0, 1]")
    sums = probs.sum(axis=1)
    if np.max(np.abs(sums - 1)) > _ATOL:
        k = int(np.argmax(np.abs(sums - 1)))
        raise ValueError(f"probs[{k}] sums to {sums[k]!r}: each P(·|n) must sum to 1")
    query, label = (_tokens(name, v, K, M_probs) for name, v in (("query", query), ("label", label)))
    if len(set(label.tolist())) != K:
        raise ValueError(
            f"label={label.tolist()} is invalid: next tokens must be distinct (a class is indexed by its next token)"
        )
    if weights is None:
        weights = np.full(K, 1.0 / K)
    weights = _validate.float_array("weights", weights)
    if weights.shape != (K,) or not np.all(np.isfinite(weights)) or weights.min() < 0 or abs(weights.sum() - 1) > _ATOL:
        raise ValueError(
            f"weights={weights.tolist()} is invalid: must be {K} non-negative class probabilities summing to 1"
        )
    return Classes(probs=probs, query=query, label=label, weights=weights)


def _tokens(name: str, value, K: int, M: int) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged: no array at all
        raise ValueError(f"{name}={value!r} is invalid: must be {K} integer tokens in 0..{M - 1}") from None
    if arr.shape != (K,) or not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() >= M:
        raise ValueError(f"{name}={arr.tolist()} is invalid: must be {K} integer tokens in 0..{M - 1}")
    return arr.astype(np.int32)


def dataset2(
    n_query: int,
    n_next_per_query: int,
    *,
    n_common: int = 10,
    n_common_per_query: int = 0,
    n_distinct: int = 10,
    common_weight: float = 1.0,
    distinct_range: tuple[float, float] = (0.1, 1.0),
) -> Classes:
    """The authors' ``Dataset2`` layout (§7): [global common | per-query common | distinct per next token |
    query tokens | next tokens], K = n_query · n_next_per_query classes, uniform class weights.

    P(·|n) is the normalised concatenation of ``common_weight`` per common token (global, then the
    class's per-query ones) and linspace(``distinct_range``, n_distinct) on the class's own distinct tokens.

    **Arguments:**

    - ``n_query``: the number of query tokens; ``n_next_per_query``: next tokens (classes) per query token.
    - ``n_common``: common tokens shared by every class; ``n_common_per_query``: common tokens shared by the
      classes of one query token.
    - ``n_distinct``: distinct tokens per class.
    - ``common_weight``: the unnormalised weight of each common token (> 0).
    - ``distinct_range``: the (lowest, highest) unnormalised weight of a class's distinct tokens (> 0).
    """
    n_query = _validate.int_at_least("n_query", n_query, 1)
    per = _validate.int_at_least("n_next_per_query", n_next_per_query, 1)
    n_common = _validate.int_at_least("n_common", n_common, 0)
    n_cpq = _validate.int_at_least("n_common_per_query", n_common_per_query, 0)
    n_distinct = _validate.int_at_least("n_distinct", n_distinct, 1)
    common_weight = _validate.positive("common_weight", common_weight)
    lo, hi = _validate.interval("distinct_range", distinct_range)
    if lo <= 0:
        raise ValueError(f"distinct_range=({lo}, {hi}) is invalid: weights must be positive")
    K = n_query * per
    first_cpq = n_common
    first_distinct = first_cpq + n_query * n_cpq
    first_query = first_distinct + K * n_distinct
    first_next = first_query + n_query
    M = first_next + K
    probs = np.zeros((K, M))
    query = np.empty(K, dtype=np.int32)
    for k in range(K):
        q = k // per
        probs[k, :n_common] = common_weight
        probs[k, first_cpq + q * n_cpq : first_cpq + (q + 1) * n_cpq] = common_weight
        probs[k, first_distinct + k * n_distinct : first_distinct + (k + 1) * n_distinct] = np.linspace(
            lo, hi, n_distinct
        )
        query[k] = first_query + q
    probs /= probs.sum(axis=1, keepdims=True)
    return make_classes(probs, query, np.arange(first_next, M, dtype=np.int32))


def syn_small() -> Classes:
    """Syn-Small of Fig. 4 as the authors ran it (§6): K = 2 classes, each with its own query token,
    10 common tokens (1/15.5 each), 10 distinct tokens per class (k/155, k = 1..10), M = 34."""
    return dataset2(n_query=2, n_next_per_query=1)


def syn_medium(n_query: int) -> Classes:
    """Syn-Medium of Fig. 6 (§6): ``n_query`` ∈ {1, 3, 5, 10} query tokens with 2 next tokens each
    (K = 2·n_query), 10 global common tokens, 10 distinct per class; M = 10 + 10K + n_query + K.

    **Arguments:**

    - ``n_query``: the number of query tokens (≥ 1; the paper's grid is 1, 3, 5, 10).
    """
    return dataset2(n_query=n_query, n_next_per_query=2)
