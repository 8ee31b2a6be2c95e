"""Perfect classification (PC) in closed form for V = cP, c > 0 (docs/models/decision_lists.md §4).

With V = cP the logits of query a are z[π(b)] = c·α_b for present b and 0 for labels whose preimage is absent (F4),
and α_b ∝ h_b·e^{W[b,a]} > 0 (F1). So query a is classified correctly iff its label-determining token a* has strictly
the largest α among the present tokens. Taking, for each rule j that can fire and each token b, the worst admissible
histogram (a_j present once, b as often as possible) gives the exact criterion [derived]:

    PC  ⇔  for every column a, rule j of L_a that fires with positive probability and token b:
           W[a_j, a] − W[b, a] > log κ_j(b),

where κ_j(b) is the largest count b can have in a sequence whose LDT for query a is a_j (log 0 = −∞, no constraint).
Let R_j = [L] ∖ {a_1..a_j, a} (later list entries and distractors) and e = 1[j < m] (whether a itself must be present
besides a_j):

* D_iid: rule j fires iff n ≥ 1 + e; then κ_j(a) = n − 1 if j < m, κ_j(b) = n − 1 − e on R_j, 0 elsewhere.
* D_distinct: rule j fires iff n ≥ 1 + e and j ≤ L − n + 1 (room for the n − 1 − e other tokens outside
  {a_1..a_j, a}); then κ_j = min(1, κ_j^iid).

For D_distinct with n ≥ 3 and L ≥ n + M − 1 every rule fires and κ = 1 on R_j ∪ {a}, which is the strict chain
W[a_1,a] > … > W[a_m,a] > max_{b∉L_a} W[b,a] of §4; for D_iid it is §4's log(n−1)/log(n−2) gap rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popdyn.tasks.decision_list._data import validate_lists, validate_sizes


def _validate_W(W) -> np.ndarray:
    """W as a finite float64 L×L array with L ≥ 2; ValueError otherwise."""
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 2:
        raise ValueError(f"W has shape {W.shape}: must be a square L×L matrix with L >= 2")
    if not np.all(np.isfinite(W)):
        raise ValueError("W is invalid: all entries must be finite")
    return W


def log_max_counts(L: int, n: int, lst: Sequence[int], j: int, distribution: str) -> np.ndarray:
    """log κ_j(b) for b = 0..L−1: the log of the largest count of b in a sequence whose LDT for query a = lst[−1] is
    a_j = lst[j−1], held once (module docstring, §4); −inf where b cannot be present or rule j never fires."""
    m, a = len(lst), lst[-1]
    early = int(j < m)
    if n < 1 + early or (distribution == "distinct" and j > L - n + 1):
        return np.full(L, -np.inf)
    counts = np.full(L, n - 1 - early, dtype=float)
    counts[list(lst[:j])] = 0
    if early:
        counts[a] = n - 1
    if distribution == "distinct":
        counts = np.minimum(counts, 1)
    with np.errstate(divide="ignore"):
        return np.log(counts)


def pc_slacks(W, lists: Sequence[Sequence[int]], n: int, distribution: str = "distinct") -> np.ndarray:
    """Per column a: min over firing rules j and tokens b of W[a_j,a] − W[b,a] − log κ_j(b) (§4; +inf if no constraint).
    V = cP with c > 0 classifies perfectly iff every entry is > 0; κ_j(b) is the largest count token b can have in
    a sequence whose label-determining token for query a is a_j (the module docstring).

    **Arguments:**

    - ``W``: the L × L attention matrix (finite).
    - ``lists``: the decision lists (``validate_lists``).
    - ``n``: the sequence length; ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.

    Returns the L slacks, one per column a.
    """
    W = _validate_W(W)
    L, n, distribution = validate_sizes(W.shape[0], n, distribution)
    lists = validate_lists(lists, L)
    out = np.full(L, np.inf)
    for a, lst in enumerate(lists):
        for j in range(1, len(lst) + 1):
            gaps = W[lst[j - 1], a] - W[:, a] - log_max_counts(L, n, lst, j, distribution)
            out[a] = min(out[a], gaps.min())
    return out


def pc_closed_form(W, lists: Sequence[Sequence[int]], n: int, distribution: str = "distinct") -> bool:
    """Whether W with V = cP (any c > 0) classifies every admissible (query, sequence) strictly correctly (§4):
    every entry of ``pc_slacks`` is > 0. Exact for both sequence laws and every size, without enumeration.

    **Arguments:**

    - ``W``: the L × L attention matrix (finite).
    - ``lists``: the decision lists (``validate_lists``).
    - ``n``: the sequence length; ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.
    """
    return bool(np.all(pc_slacks(W, lists, n, distribution) > 0))
