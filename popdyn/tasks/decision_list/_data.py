"""Decision-list data: lists, label permutation, label-determining tokens and the two sequence laws
(docs/models/decision_lists.md §0, §2).

Tokens are 0..L−1. ``lists[a]`` is the list L_a = (a_1, …, a_m) of token a: distinct entries ending in a.
``perm[b] = π(b)``, the label of token b (P[k, b] = 1 iff k = π(b), so V = cP predicts π(LDT)).
Sequences are n tokens drawn by ``distribution``:

* ``"distinct"`` (default, [our choice]): a uniformly random ordered n-subset (n ≤ L);
* ``"iid"`` ([our choice]): i.i.d. uniform tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np

from popdyn import _validate

DISTRIBUTIONS = ("distinct", "iid")
"""The sequence laws (§2): ``"distinct"``, a uniformly random ordered n-subset; ``"iid"``, i.i.d. uniform tokens."""


def validate_lists(lists: Sequence[Sequence[int]], L: int) -> tuple[tuple[int, ...], ...]:
    """The lists as tuples, checked: one list per token a ∈ [L], non-empty, with distinct entries in [L] ending in
    a; ValueError naming the list otherwise.

    **Arguments:**

    - ``lists``: ``lists[a]`` the list L_a = (a_1, …, a_m) of token a (§0).
    - ``L``: the number of tokens.
    """
    if isinstance(lists, (str, bytes)) or not hasattr(lists, "__iter__"):
        raise ValueError(f"lists={lists!r} is invalid: must be a sequence of L={L} lists of integer tokens")
    checked = tuple(_validate.int_sequence(f"lists[{a}]", lst) for a, lst in enumerate(lists))
    if len(checked) != L:
        raise ValueError(f"lists has {len(checked)} entries: must have one list per token, i.e. L={L}")
    for a, lst in enumerate(checked):
        if not lst:
            raise ValueError(f"lists[{a}]=() is invalid: a list must be non-empty and end in its token {a}")
        if lst[-1] != a:
            raise ValueError(f"lists[{a}]={lst} is invalid: must end in its own token {a}")
        if len(set(lst)) != len(lst):
            raise ValueError(f"lists[{a}]={lst} is invalid: entries must be distinct")
        if min(lst) < 0 or max(lst) >= L:
            raise ValueError(f"lists[{a}]={lst} is invalid: tokens must lie in 0..{L - 1}")
    return checked


def validate_perm(perm: Sequence[int], L: int) -> tuple[int, ...]:
    """The label permutation as a tuple, checked: ``perm[b] = π(b)`` must be a permutation of 0..L−1; ValueError
    otherwise.

    **Arguments:**

    - ``perm``: π, the label of each token (§0).
    - ``L``: the number of tokens.
    """
    perm = _validate.int_sequence("perm", perm)
    if sorted(perm) != list(range(L)):
        raise ValueError(f"perm={perm} is invalid: must be a permutation of 0..{L - 1}")
    return perm


def validate_sizes(L: int, n: int, distribution: str) -> tuple[int, int, str]:
    """L ≥ 2, n ≥ 1, a known distribution, and n ≤ L for distinct tokens."""
    L = _validate.int_at_least("L", L, 2)
    n = _validate.int_at_least("n", n, 1)
    distribution = _validate.choice("distribution", distribution, DISTRIBUTIONS)
    if distribution == "distinct" and n > L:
        raise ValueError(f"n={n} is out of range: distinct tokens need 1 <= n <= L={L}")
    return L, n, distribution


def random_lists(L: int, M: int, seed: int = 0) -> tuple[tuple[int, ...], ...]:
    """Random lists with every length 1..M present: lengths 1..M assigned cyclically to a random order of
    the tokens, earlier entries drawn without replacement from the other tokens (each list ends in its token).

    **Arguments:**

    - ``L``: the number of tokens (≥ 2).
    - ``M``: the longest list, 1 ≤ M ≤ L.
    - ``seed``: the NumPy seed (the same seed gives the same lists).
    """
    L = _validate.int_at_least("L", L, 2)
    M = _validate.int_at_least("M", M, 1)
    if M > L:
        raise ValueError(f"M={M} is out of range: list lengths need 1 <= M <= L={L}")
    rng = np.random.default_rng(_validate.seed("seed", seed))
    lengths = np.empty(L, dtype=int)
    lengths[rng.permutation(L)] = 1 + np.arange(L) % M
    lists = []
    for a in range(L):
        others = np.array([b for b in range(L) if b != a])
        lists.append((*(int(t) for t in rng.choice(others, lengths[a] - 1, replace=False)), a))
    return tuple(lists)


def random_perm(L: int, seed: int = 0) -> tuple[int, ...]:
    """A uniformly random permutation π of 0..L−1, as a tuple (``perm[b] = π(b)``).

    **Arguments:**

    - ``L``: the number of tokens (≥ 2).
    - ``seed``: the NumPy seed.
    """
    L = _validate.int_at_least("L", L, 2)
    return tuple(int(k) for k in np.random.default_rng(_validate.seed("seed", seed)).permutation(L))


def ldt(lst: Sequence[int], present) -> int:
    """The label-determining token: the first entry of ``lst`` present in the sequence, or −1."""
    for t in lst:
        if t in present:
            return t
    return -1


def rule_probabilities(L: int, n: int, m: int, distribution: str = "distinct") -> np.ndarray:
    """P(LDT(a, s) = a_j | a ∈ s) for j = 1..m (§2): the probability that rule j of a length-m list fires, given
    the list's token is in the sequence. Under D_distinct π_j = C(L−1−j, n−2)/C(L−1, n−1) for j < m and
    π_m = C(L−m, n−1)/C(L−1, n−1); under i.i.d. tokens the inclusion–exclusion analogue. They sum to 1.

    **Arguments:**

    - ``L``: the number of tokens; ``n``: the sequence length (≤ L for distinct tokens).
    - ``m``: the list length, 1 ≤ m ≤ L.
    - ``distribution``: one of ``DISTRIBUTIONS``.

    Returns an array of shape (m,).
    """
    L, n, distribution = validate_sizes(L, n, distribution)
    m = _validate.int_at_least("m", m, 1)
    if m > L:
        raise ValueError(f"m={m} is out of range: a list has at most L={L} entries")
    j = np.arange(1, m + 1)
    if distribution == "distinct":
        total = comb(L - 1, n - 1)
        out = [comb(L - 1 - jj, n - 2) if (jj < m and n >= 2) else 0 for jj in j]
        out[-1] = comb(L - m, n - 1)
        return np.array(out, dtype=float) / total
    r = j - 1.0
    probs = (1 - r / L) ** n - 2 * (1 - (r + 1) / L) ** n + (1 - (r + 2) / L) ** n
    probs[-1] = (1 - (m - 1) / L) ** n - (1 - m / L) ** n
    return probs / (1 - (1 - 1 / L) ** n)


def loss_weights(L: int, n: int, m: int, distribution: str = "distinct") -> np.ndarray:
    """ρ_{a,j} = E[(h_a/n)·1{LDT(a, s) = a_j}] for j = 1..m (§2): the weight of rule j of a length-m list in the
    population loss (h_a the count of token a in s); π_j/L under D_distinct (``rule_probabilities``).

    **Arguments:**

    - ``L``: the number of tokens; ``n``: the sequence length (≤ L for distinct tokens).
    - ``m``: the list length.
    - ``distribution``: one of ``DISTRIBUTIONS``.

    Returns an array of shape (m,).
    """
    L, n, distribution = validate_sizes(L, n, distribution)
    if distribution == "distinct":
        return rule_probabilities(L, n, m, distribution) / L
    j = np.arange(1, m + 1, dtype=float)
    out = ((1 - (j - 1) / L) ** (n - 1) - (1 - j / L) ** (n - 1)) / L
    out[-1] = (1 - (m - 1) / L) ** (n - 1) / L
    return out
