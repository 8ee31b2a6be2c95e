"""Perfect-classification closed forms for V = cP (docs/models/decision_lists.md §4) against brute force over [L]^n."""

import itertools

import jax
import numpy as np
import pytest

from popdyn.tasks.decision_list._brute_force import brute_force_margin
from popdyn.tasks.decision_list._classification import log_max_counts, pc_closed_form, pc_slacks
from popdyn.tasks.decision_list._data import random_lists, random_perm

DISTS = ("distinct", "iid")
# L ∈ {5, 6}, n ∈ {2, 3, 4}, M ∈ {2, 3}; plus distinct cases outside n ≥ 3, L ≥ n + M − 1 with longer lists
CONFIGS = [*itertools.product((5, 6), (2, 3, 4), (2, 3), DISTS), (5, 3, 4, "distinct"), (6, 4, 4, "distinct")]


def _perm_matrix(perm):
    L = len(perm)
    P = np.zeros((L, L))
    P[list(perm), range(L)] = 1
    return P


def _brute_pc(L, n, lists, perm, dist, Ws, cs):
    """Brute-force PC (margin > 0) for a batch of W with V = cP, one row per c in ``cs``."""
    P = _perm_matrix(perm)

    def one(W, c):
        return brute_force_margin(W, c * P, L, n, lists, perm, dist)

    margin = jax.jit(jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(None, 0)))
    return np.asarray(margin(Ws, np.asarray(cs, dtype=float))) > 0


def _pushed(rng, L, n, lists, dist, size):
    """W whose §4 constraints hold or fail by 1e-9 or by O(1): each firing rule's entry W[a_j, a] is set just above
    (or, in about one column in eight, just below) its tightest competitor, processing j = m, …, 1."""
    Ws = rng.normal(scale=2.0, size=(size, L, L))
    for W in Ws:
        for a, lst in enumerate(lists):
            violate = rng.integers(1, len(lst) + 1) if rng.random() < 0.12 else 0
            for j in range(len(lst), 0, -1):
                logk = log_max_counts(L, n, lst, j, dist)
                if np.all(np.isneginf(logk)):
                    continue
                slack = 1e-9 if rng.random() < 0.5 else rng.uniform(0.0, 1.0)
                W[lst[j - 1], a] = np.max(W[:, a] + logk) + (-slack if j == violate else slack)
    return Ws


def _sorted_columns(rng, L, lists, size):
    """Random normal columns rearranged into the chain order of §4 (list order, then distractors), one column in
    eight left unsorted."""
    Ws = rng.normal(scale=2.0, size=(size, L, L))
    for W in Ws:
        for a, lst in enumerate(lists):
            if rng.random() < 0.875:
                others = [b for b in rng.permutation(L) if b not in lst]
                W[[*lst, *others], a] = np.sort(W[:, a])[::-1]
    return Ws


def _column_structured(rng, L, lists, size):
    """Column-structured W (all distractors of column a share ω_a) on an integer grid, so exact ties occur."""
    Ws = np.empty((size, L, L))
    for W in Ws:
        for a, lst in enumerate(lists):
            W[:, a] = rng.integers(-2, 3)
            W[list(lst), a] = rng.integers(-2, 3, size=len(lst))
    return Ws


@pytest.mark.parametrize("L,n,M,dist", CONFIGS)
def test_closed_form_equals_brute_force(L, n, M, dist):
    seed = 1000 * L + 100 * n + 10 * M + DISTS.index(dist)
    rng = np.random.default_rng(seed)
    lists, perm = random_lists(L, M, seed), random_perm(L, seed)
    Ws = np.concatenate(
        [
            rng.normal(scale=2.0, size=(24, L, L)),
            _pushed(rng, L, n, lists, dist, 64),
            _sorted_columns(rng, L, lists, 24),
            _column_structured(rng, L, lists, 24),
        ]
    )
    closed = np.array([pc_closed_form(W, lists, n, dist) for W in Ws])
    for brute in _brute_pc(L, n, lists, perm, dist, Ws, (1.0, 5.0)):
        np.testing.assert_array_equal(closed, brute)
    assert 0.15 < closed.mean() < 0.85  # both outcomes are exercised


@pytest.mark.parametrize("L,n,M", [(5, 3, 3), (6, 4, 3), (6, 3, 2), (7, 4, 4)])
def test_distinct_is_the_strict_chain_inside_the_size_condition(L, n, M):
    """§4: for n ≥ 3 and L ≥ n + M − 1, PC ⇔ W[a_1,a] > … > W[a_m,a] > max over distractors, column by column."""
    assert n >= 3 and L >= n + M - 1
    rng = np.random.default_rng(L + n + M)
    lists = random_lists(L, M, 3)
    Ws = np.concatenate([_sorted_columns(rng, L, lists, 200), _column_structured(rng, L, lists, 200)])

    def chain(W):
        for a, lst in enumerate(lists):
            col = W[:, a]
            others = [b for b in range(L) if b not in lst]
            if np.any(np.diff(col[list(lst)]) >= 0) or (others and col[a] <= col[others].max()):
                return False
        return True

    expected = [chain(W) for W in Ws]
    assert 0 < sum(expected) < len(Ws)
    assert [pc_closed_form(W, lists, n) for W in Ws] == expected


@pytest.mark.parametrize("L,n,M", [(5, 4, 3), (5, 2, 3), (5, 4, 4), (6, 5, 4)])
def test_distinct_chain_is_sufficient_but_not_necessary_outside(L, n, M):
    """§4: outside the size condition the chain still implies PC; swapping a_{M−1} and a in a longest list keeps PC
    iff rule M−1 can never fire, i.e. M − 1 > L − n + 1 (no n-subset avoids a_1..a_{M−2} yet holds a_{M−1} and a)."""
    rng = np.random.default_rng(7 * L + n + M)
    lists, perm = random_lists(L, M, 5), random_perm(L, 5)
    chain = np.stack([_chain_matrix(rng, L, lists) for _ in range(16)])
    a = next(a for a, lst in enumerate(lists) if len(lst) == M)
    broken = chain.copy()
    i, k = lists[a][-2], lists[a][-1]
    broken[:, [i, k], a] = broken[:, [k, i], a]
    brute = _brute_pc(L, n, lists, perm, "distinct", np.concatenate([chain, broken]), (1.0,))[0]
    assert brute[:16].all() and all(pc_closed_form(W, lists, n) for W in chain)
    assert brute[16:].all() if M - 1 > L - n + 1 else not brute[16:].any()
    assert [pc_closed_form(W, lists, n) for W in broken] == list(brute[16:])


def _chain_matrix(rng, L, lists):
    """A W satisfying the strict chain in every column, with random values."""
    W = np.empty((L, L))
    for a, lst in enumerate(lists):
        others = [b for b in rng.permutation(L) if b not in lst]
        W[[*lst, *others], a] = np.sort(rng.normal(scale=2.0, size=L))[::-1]
    return W


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7])
def test_iid_matches_the_gap_rule(n):
    """§4, D_iid: W[a_j,a] − W[a_i,a] > log(n−1) if i = m else log(n−2) for j < i, and W[a_j,a] − W[b,a] > log(n−1)
    if j = m else log(n−2) for each distractor b (log 0 = −inf)."""
    L, M = 6, 4
    rng = np.random.default_rng(n)
    lists = random_lists(L, M, n)
    lg = {k: (np.log(k) if k > 0 else -np.inf) for k in (n - 2, n - 1)}

    def rule(W):
        for a, lst in enumerate(lists):
            m, col = len(lst), W[:, a]
            others = [b for b in range(L) if b not in lst]
            for j in range(1, m + 1):
                for i in range(j + 1, m + 1):
                    if not col[lst[j - 1]] - col[lst[i - 1]] > lg[n - 1 if i == m else n - 2]:
                        return False
                for b in others:
                    if not col[lst[j - 1]] - col[b] > lg[n - 1 if j == m else n - 2]:
                        return False
        return True

    Ws = np.concatenate([_pushed(rng, L, n, lists, "iid", 300), _sorted_columns(rng, L, lists, 100) * 3.0])
    expected = [rule(W) for W in Ws]
    assert 0 < sum(expected) < len(Ws)
    assert [pc_closed_form(W, lists, n, "iid") for W in Ws] == expected


@pytest.mark.parametrize("dist", DISTS)
def test_ties_and_trivial_cases(dist):
    L, lists = 5, random_lists(5, 3, 0)
    for n in (2, 3, 4):  # W = 0 has exact ties: never PC (§4)
        assert not pc_closed_form(np.zeros((L, L)), lists, n, dist)
    assert pc_closed_form(np.zeros((L, L)), lists, 1, dist)  # n = 1: the query is the only token
    assert np.all(pc_slacks(np.zeros((L, L)), lists, 1, dist) == np.inf)
    W = _chain_matrix(np.random.default_rng(0), L, lists)
    assert pc_closed_form(W * 100, lists, 3, dist)


def test_slacks_by_hand():
    """L = 5, lists of lengths ≤ 3: n = 3 is inside the size condition (slack = smallest chain gap); n = 2 is not,
    and there rule j < m only competes with a itself."""
    lists = ((1, 2, 0), (1,), (0, 2), (3,), (4,))
    W = np.zeros((5, 5))
    W[:, 0] = [2.0, 2.25, 3.0, 1.5, -1.0]  # chain broken: W[1,0] < W[2,0]
    W[:, 1] = [0.75, 1.0, 0.0, -2.0, 0.5]
    W[:, 2] = [5.0, 0.0, 4.5, 0.0, -3.0]
    W[3, 3] = W[4, 4] = 2.0
    np.testing.assert_array_equal(pc_slacks(W, lists, 3), [-0.75, 0.25, 0.5, 2.0, 2.0])
    np.testing.assert_array_equal(pc_slacks(W, lists, 2), [0.25, 0.25, 0.5, 2.0, 2.0])
    assert not pc_closed_form(W, lists, 3) and pc_closed_form(W, lists, 2)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"W": np.zeros((3, 4))}, "W"),
        ({"W": np.full((3, 3), np.nan)}, "W"),
        ({"W": np.zeros((1, 1)), "lists": ((0,),)}, "W"),
        ({"n": 0}, "n"),
        ({"n": 4}, "n"),
        ({"n": 2.0}, "n"),
        ({"distribution": "uniform"}, "distribution"),
        ({"lists": ((0,), (1,))}, "lists"),
        ({"lists": ((0,), (1,), (2, 1))}, "lists"),
    ],
)
def test_bad_input_raises(kwargs, name):
    args = {"W": np.zeros((3, 3)), "lists": ((0,), (1,), (2,)), "n": 2, "distribution": "distinct", **kwargs}
    with pytest.raises(ValueError, match=name):
        pc_closed_form(args["W"], args["lists"], args["n"], args["distribution"])
