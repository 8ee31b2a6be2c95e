"""Structured reduction for V = cP and column-structured W (docs/models/decision_lists.md §3 C).

With V = cP fixed the loss splits by columns of W (§1 Fact 3). Column a is *column-structured* when all its
distractor entries W[b, a], b ∉ L_a, equal one value ω. Its loss ℒ_a then depends only on the list length m,
the list coordinates w_i = W[a_i, a] (list order, w_m = W[a, a]) and ω, and is an exact finite sum over
presence patterns.

Both laws are written as one table of configurations of the histogram h restricted to column a:

* list slot counts k_i = h_{a_i} (k_m ≥ 1, as the query a is present);
* distractor groups (v_t, g_t): g_t distractor tokens, each seen v_t times;
* the number L − #present of absent labels, the LDT slot (first i with k_i > 0) and the weight
  E-mass × h_a/n of the configuration.

Per token, α_b = h_b e^{W[b,a]}/Z with Z = Σ_i k_i e^{w_i} + Σ_t g_t v_t e^ω, and (F4) gives
ℓ = log(Σ_i e^{cα_i} + Σ_t g_t e^{c v_t e^ω/Z} + L − #present) − c α_LDT.

ω is one coordinate standing for L − m real entries: ∂ℒ_a/∂ω is the SUM of the partial derivatives over those
entries (the reduced gradient flow divides it by L − m, §3 C).
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from math import comb, factorial, prod
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from popdyn import _validate
from popdyn.tasks.decision_list._data import validate_lists, validate_sizes

STRUCTURE_RTOL = 1e-12


class _Table(NamedTuple):
    """Configurations (rows) of one column's histogram; −inf encodes log 0."""

    log_k: np.ndarray  # (N, m) log slot counts
    ldt: np.ndarray  # (N, m) one-hot of the label-determining slot
    log_v: np.ndarray  # (N, D) log per-token count of each distractor group
    log_g: np.ndarray  # (N, D) log number of tokens in each distractor group
    log_free: np.ndarray  # (N,) log(L − #present distinct tokens)
    weight: np.ndarray  # (N,) P(configuration) × h_a / n


def _log(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        return np.log(x)


def _partitions(K: int, max_parts: int, largest: int | None = None):
    """Integer partitions of K (non-increasing tuples) with at most ``max_parts`` parts."""
    largest = K if largest is None else largest
    if K == 0:
        yield ()
        return
    if max_parts == 0:
        return
    for first in range(min(K, largest), 0, -1):
        for rest in _partitions(K - first, max_parts - 1, first):
            yield (first, *rest)


def _rows_distinct(L: int, n: int, m: int):
    """(F5): present slots U ∪ {m}, k = n−1−|U| distractors, weight C(L−m, k) / (L·C(L−1, n−1))."""
    total = L * comb(L - 1, n - 1)
    for mask in itertools.product((0, 1), repeat=m - 1):
        k = n - 1 - sum(mask)
        if 0 <= k <= L - m:
            yield (*mask, 1), {1: k} if k else {}, L - n, comb(L - m, k) / total


def _rows_iid(L: int, n: int, m: int):
    """§3 C D_iid: slot counts (k_1..k_m), k_m ≥ 1, Σk ≤ n, and a partition λ of K = n − Σk into at most
    L − m parts; P = n!/(Πk_i! Πλ_r!) L^{−n} (L−m)!/((L−m−len λ)! Π_v mult_v(λ)!), weighted by k_m/n."""
    for ks in itertools.product(range(n + 1), repeat=m):
        if ks[-1] == 0 or sum(ks) > n:
            continue
        for lam in _partitions(n - sum(ks), L - m):
            groups = Counter(lam)
            count = factorial(n) // prod(factorial(k) for k in (*ks, *lam))
            count *= factorial(L - m) // factorial(L - m - len(lam))
            count //= prod(factorial(g) for g in groups.values())
            present = sum(k > 0 for k in ks) + len(lam)
            yield ks, groups, L - present, count * ks[-1] / (n * L**n)


@functools.cache
def _table(L: int, n: int, m: int, distribution: str) -> _Table:
    rows = list((_rows_distinct if distribution == "distinct" else _rows_iid)(L, n, m))
    D = max(1, max(len(groups) for _, groups, _, _ in rows))
    ks = np.array([r[0] for r in rows], dtype=float)
    v = np.ones((len(rows), D))
    g = np.zeros((len(rows), D))
    for row, (_, groups, _, _) in enumerate(rows):
        for t, (value, mult) in enumerate(sorted(groups.items())):
            v[row, t], g[row, t] = value, mult
    ldt = np.zeros_like(ks)
    ldt[np.arange(len(rows)), np.argmax(ks > 0, axis=1)] = 1.0
    return _Table(
        log_k=_log(ks),
        ldt=ldt,
        log_v=_log(v),
        log_g=_log(g),
        log_free=_log([r[2] for r in rows]),
        weight=np.array([r[3] for r in rows]),
    )


@functools.partial(jax.jit, static_argnames=("L", "n", "distribution"))
def column_loss(
    w: Float[Array, " m"],
    omega: Float[Array, ""],
    *,
    L: int,
    n: int,
    c: float | Float[Array, ""],
    distribution: str = "distinct",
) -> Float[Array, ""]:
    """Per-column loss ℒ_a (§3 C: (F5) for ``"distinct"``, the partition sum for ``"iid"``).

    ``w[i] = W[a_{i+1}, a]`` in list order (the last is W[a, a]) and ``omega`` is the shared distractor value;
    m = len(w). Exact finite sum, jit/grad/vmap-able in (w, omega, c); stable for large c (log-sum-exp).

    **Arguments:**

    - ``w``: column a's entries on its list, shape (m,), 1 ≤ m ≤ L.
    - ``omega``: the value shared by the column's L − m distractor entries.
    - ``L``, ``n``: the number of tokens and the sequence length (static: a new value compiles anew).
    - ``c``: the scale of V = cP (may be traced).
    - ``distribution``: the sequence law, one of ``DISTRIBUTIONS`` (static).
    """
    L, n, distribution = validate_sizes(L, n, distribution)
    m = w.shape[0]
    if not 1 <= m <= L:
        raise ValueError(f"len(w)={m} is out of range: a list has 1 <= m <= L={L} entries")
    t = _table(L, n, m, distribution)
    log_slot = t.log_k + w  # log(k_i e^{w_i}); −inf for absent slots
    log_z = jax.nn.logsumexp(jnp.concatenate([log_slot, t.log_g + t.log_v + omega], axis=1), axis=1)
    alpha_slot = jnp.exp(log_slot - log_z[:, None])  # per-token attention of each list token (0 if absent)
    alpha_group = jnp.exp(t.log_v + omega - log_z[:, None])  # per-token attention of a distractor
    log_norm = jax.nn.logsumexp(
        jnp.concatenate(
            [jnp.where(t.log_k > -np.inf, c * alpha_slot, -jnp.inf), t.log_g + c * alpha_group, t.log_free[:, None]],
            axis=1,
        ),
        axis=1,
    )
    return jnp.sum(t.weight * (log_norm - c * jnp.sum(t.ldt * alpha_slot, axis=1)))


def _column_split(W: np.ndarray, lst: tuple[int, ...]) -> tuple[np.ndarray, float, bool]:
    """(w in list order, ω, structured?) for the column of W indexed by the list's own token."""
    col = W[:, lst[-1]]
    w = col[list(lst)]
    d = np.delete(col, list(lst))
    if d.size == 0:
        return w, 0.0, True
    structured = np.ptp(d) <= STRUCTURE_RTOL * max(1.0, float(np.max(np.abs(d))))
    return w, float(d[0]), bool(structured)


def _matrix(W, lists) -> tuple[np.ndarray, tuple[tuple[int, ...], ...]]:
    W = np.asarray(W, dtype=float)
    lists = validate_lists(lists, len(lists))
    L = len(lists)
    if W.shape != (L, L):
        raise ValueError(f"W.shape={W.shape} is invalid: must be (L, L) = ({L}, {L}) for {L} lists")
    return W, lists


def is_column_structured(W: Float[ArrayLike, "L L"], lists) -> bool:
    """True iff in every column a the distractor entries W[b, a], b ∉ L_a, are equal (to relative 1e-12): the
    structure (§3 C) that gradient flow from W = 0 keeps, under which the loss is a sum of per-column losses.

    **Arguments:**

    - ``W``: the L × L attention matrix.
    - ``lists``: the decision lists, one per token.
    """
    W, lists = _matrix(W, lists)
    return all(_column_split(W, lst)[2] for lst in lists)


def columns_from_matrix(W: Float[ArrayLike, "L L"], lists) -> list[tuple[np.ndarray, float]]:
    """For each column a: (w = W[L_a, a] in list order, ω = the shared distractor value; 0.0 if m = L).

    Raises ValueError if some column is not column-structured (docs/models/decision_lists.md §3 C).
    """
    W, lists = _matrix(W, lists)
    out = []
    for a, lst in enumerate(lists):
        w, omega, structured = _column_split(W, lst)
        if not structured:
            raise ValueError(
                f"W[:, {a}] is not column-structured: its distractor entries (rows not in lists[{a}]={lst}) "
                f"must all be equal, to relative {STRUCTURE_RTOL}"
            )
        out.append((w, omega))
    return out


def structured_total_loss(
    W: Float[ArrayLike, "L L"], lists, *, L: int, n: int, c: float, distribution: str = "distinct"
) -> Float[Array, ""]:
    """ℒ(W, cP) = Σ_a ℒ_a(column a) for a concrete column-structured W (§3 C, §1 Fact 3): each column split into
    its list entries and its shared distractor value and summed with ``column_loss``. ValueError if some column is
    not column-structured (``is_column_structured``).

    **Arguments:**

    - ``W``: the L × L attention matrix.
    - ``lists``: the decision lists, one per token.
    - ``L``, ``n``: the number of tokens and the sequence length.
    - ``c``: the scale of V = cP.
    - ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.
    """
    L = _validate.int_at_least("L", L, 2)
    if len(lists) != L:
        raise ValueError(f"lists has {len(lists)} entries: must have one list per token, i.e. L={L}")
    return sum(
        column_loss(jnp.asarray(w), jnp.asarray(omega), L=L, n=n, c=c, distribution=distribution)
        for w, omega in columns_from_matrix(W, lists)
    )
