"""Theorem constants (docs/models/decision_lists.md §5, §6) against their tables, enumeration and brute force."""

import itertools
import math

import numpy as np
import pytest

from popdyn.tasks.decision_list._brute_force import brute_force_loss
from popdyn.tasks.decision_list._data import ldt, random_lists, random_perm
from popdyn.tasks.decision_list._theorems import (
    delta_gamma,
    initial_loss_cP,
    theorem1_bound,
    theorem1_bounds,
    theorem1_c,
    theorem2_A_range,
    theorem2_c,
    theorem2_eps_star,
    theorem2_feasible,
    theorem2_instance,
    theorem2_T_range,
)


def _sig(x: float, k: int) -> float:
    """x rounded to k significant figures."""
    return float(f"{x:.{k}g}")


# §5 table: (L, n, M, δ, c, T_1 with γ = δ, T_1 with γ = δ/L)
THEOREM1_TABLE = [
    (10, 3, 2, 0.2222, 124.3, 15.6, 156),
    (20, 5, 3, 0.1754, 341.5, 22.8, 457),
    (30, 8, 3, 0.1897, 573.9, 18.6, 558),
    (30, 3, 2, 0.0690, 591.8, 34.1, 1020),
]


@pytest.mark.parametrize("L,n,M,delta,c,T1_delta,T1", THEOREM1_TABLE)
def test_theorem1_table(L, n, M, delta, c, T1_delta, T1):
    out = theorem1_bounds(L, n, M)
    assert round(out.delta, 4) == delta
    assert round(out.c, 1) == c and out.c == theorem1_c(L, n, M)
    assert round(out.T1_gamma_eq_delta, 1) == T1_delta
    assert _sig(out.T1, 3) == T1
    assert out.gamma == pytest.approx(out.delta / L, rel=1e-15)


def test_theorem1_bound_with_delta_gamma_one():
    """§5 warning: with δ = γ = 1 the bound 4M/log L is 4.01 at (20,3,3) and 4.7 at (30,3,4)."""
    assert round(theorem1_bound(20, 3, 3, 1.0), 2) == 4.01
    assert round(theorem1_bound(30, 3, 4, 1.0), 1) == 4.7


@pytest.mark.parametrize("L,n,M", [(10, 3, 2), (20, 5, 3), (12, 4, 5), (9, 7, 3), (7, 2, 1), (15, 1, 4)])
def test_delta_distinct_closed_form(L, n, M):
    """§5: δ = min(π_{M−1}, π_M) = min(C(L−M,n−2), C(L−M,n−1))/C(L−1,n−1) for M ≥ 2 (L ≥ n+M−1), δ = 1 for M = 1;
    for n = 1 only the last rule of each list can fire, so δ = 1."""
    assert L >= n + M - 1
    total = math.comb(L - 1, n - 1)
    expected = 1.0 if M == 1 else min(math.comb(L - M, n - 2) if n >= 2 else math.inf, math.comb(L - M, n - 1)) / total
    delta, gamma = delta_gamma(L, n, M)
    assert delta == pytest.approx(expected, rel=1e-15)
    assert gamma == pytest.approx(expected / L, rel=1e-15)


def _enumerated_delta_gamma(L, n, M, dist):
    """δ and γ by enumerating [L]^n for random lists with every length 1..M (the §5 definitions, literally)."""
    lists = random_lists(L, M, L + n + M)
    seqs = [s for s in itertools.product(range(L), repeat=n) if dist == "iid" or len(set(s)) == n]
    deltas, gammas = [], []
    for a, lst in enumerate(lists):
        for t in lst:
            fired = [s for s in seqs if a in s and ldt(lst, set(s)) == t]
            if fired:  # rules of positive probability only
                deltas.append(len(fired) / sum(a in s for s in seqs))
                gammas.append(sum(s.count(a) for s in fired) / (n * len(seqs)))
    return min(deltas), min(gammas)


@pytest.mark.parametrize("dist", ["distinct", "iid"])
@pytest.mark.parametrize("L,n,M", [(5, 1, 3), (5, 2, 3), (5, 3, 3), (5, 4, 3), (5, 4, 4), (6, 3, 4), (6, 4, 2)])
def test_delta_gamma_equal_enumeration(L, n, M, dist):
    """Both laws, inside and outside L ≥ n + M − 1 (where some rules never fire and are left out of the minimum)."""
    np.testing.assert_allclose(delta_gamma(L, n, M, dist), _enumerated_delta_gamma(L, n, M, dist), rtol=1e-13)


def test_initial_loss_matches_brute_force():
    """§5: ℒ(0, cP) = log(n + (L−n)e^{−c/n}) for any lists and π (D_distinct)."""
    L, n, c = 6, 3, 4.0
    for seed in range(3):
        lists, perm = random_lists(L, 3, seed), random_perm(L, seed)
        P = np.zeros((L, L))
        P[list(perm), range(L)] = 1
        brute = float(brute_force_loss(np.zeros((L, L)), c * P, L, n, lists, perm))
        assert abs(initial_loss_cP(L, n, c) - brute) < 1e-12


def test_initial_loss_limits():
    assert initial_loss_cP(7, 3, 0.0) == pytest.approx(math.log(7), rel=1e-15)
    assert initial_loss_cP(7, 3, 1e6) == math.log(3)
    assert initial_loss_cP(7, 7, 5.0) == math.log(7)
    assert initial_loss_cP(7, 3, 2.0) == pytest.approx(math.log(3 + 4 * math.exp(-2 / 3)), rel=1e-15)


@pytest.mark.parametrize(
    "L,n,M,eps", [(23, 20, 1, 3.3), (10, 3, 2, 0.5), (10, 1, 1, 0.1), (10, 1, 1, 1e-3), (5, 5, 2, 1.0), (40, 2, 3, 2.0)]
)
def test_theorem2_c_is_the_fixed_point(L, n, M, eps):
    """c = 10n²ℒ_0(c)/δ + 4εn to 1e-12 relative, and the map c ↦ c − rhs(c) changes sign only there."""
    delta, _ = delta_gamma(L, n, M)

    def rhs(x):
        return 10 * n**2 * initial_loss_cP(L, n, x) / delta + 4 * eps * n

    c = theorem2_c(L, n, M, eps)
    assert abs(c - rhs(c)) <= 1e-12 * c
    assert (1 - 1e-9) * c < rhs((1 - 1e-9) * c) or L == n  # rhs is flat when L = n
    assert (1 + 1e-9) * c > rhs((1 + 1e-9) * c)


def test_theorem2_c_varies_with_initial_loss():
    """n = 1: ℒ_0(c) = log(1 + (L−1)e^{−c}) is far from log n at the root, so the fixed point is genuinely nonlinear."""
    c = theorem2_c(10, 1, 1, 0.1)
    assert initial_loss_cP(10, 1, c) > 1e-3
    assert c == pytest.approx(10 * math.log1p(9 * math.exp(-c)) + 0.4, rel=1e-13)


def _within_rounding(f, x, half_unit_x, target, half_unit_target):
    """Whether the tabulated target (± its half unit) is reached by the monotone f over x ± its half unit."""
    lo, hi = sorted((f(x - half_unit_x), f(x + half_unit_x)))
    return lo - half_unit_target <= target <= hi + half_unit_target


def test_theorem2_table_23_20_1():
    """§6 sanity run (L,n,m) = (23,20,1): δ = 1, c = 12249, ε = 3.33; ℒ_0 = 3.029 and A ∈ (1.908, 2.031)."""
    out = theorem2_instance(23, 20, 1)
    assert out.delta == 1.0 and out.m == 1 and out.feasible
    assert abs(out.c - 12249) < 1
    assert out.L0 == pytest.approx(math.log(20), abs=1e-12)
    assert round(out.eps, 2) == 3.33 and out.eps == theorem2_eps_star(20, out.L0)
    assert theorem2_c(23, 20, 1, out.eps) == pytest.approx(out.c, rel=1e-13)
    # the table's ℒ_0 = 3.029 is the loss at the perturbed V_0 = cP + Δ; ε stays the one above
    for k, target in enumerate((1.908, 2.031)):
        assert _within_rounding(lambda L0, k=k: theorem2_A_range(L0, 20, out.eps, 1)[k], 3.029, 5e-4, target, 5e-4)


def test_theorem2_table_32_29_2():
    """§6 sanity run (L,n,m) = (32,29,2): δ = 3/31, c = 2.93e5; ℒ_0 = 3.362 and A ∈ (2.2267, 2.2398)."""
    out = theorem2_instance(32, 29, 2)
    assert out.delta == pytest.approx(3 / 31, rel=1e-15) and out.m == 2 and out.feasible
    assert _sig(out.c, 3) == 2.93e5
    assert out.L0 == pytest.approx(math.log(29), abs=1e-12)
    for k, target in enumerate((2.2267, 2.2398)):
        assert _within_rounding(lambda L0, k=k: theorem2_A_range(L0, 29, out.eps, 2)[k], 3.362, 5e-4, target, 5e-5)


# §6 table rows with the half unit of each tabulated entry: (L, n, m, ℒ_0, A-range, λ_max(θ_0), T-range)
THEOREM2_ROWS = [
    (23, 20, 1, (3.029, 5e-4), ((1.908, 2.031), 5e-4), (1.20e3, 5.0), ((1877, 2000), 0.5)),
    (32, 29, 2, (3.362, 5e-4), ((2.2267, 2.2398), 5e-5), (1.80e5, 500.0), ((4.865e5, 4.894e5), 50.0)),
]


@pytest.mark.parametrize("L,n,m,L0,A_range,lam,T_range", THEOREM2_ROWS)
def test_theorem2_T_range_table(L, n, m, L0, A_range, lam, T_range):
    """§6: T ∈ [2mℒ_0/(A²η), ε/(2η)] with η = 1/λ_max(θ_0) and A the middle of its range. Each end and the ratio of
    the ends (4mℒ_0/(A²ε), free of λ) match the table to the first-order rounding of the tabulated inputs."""
    (L0, dL0), ((A_lo, A_hi), dA), (lam, dlam), ((T_lo, T_hi), dT) = L0, A_range, lam, T_range
    eps = theorem2_instance(L, n, m).eps
    A = (A_lo + A_hi) / 2
    lo, hi = theorem2_T_range(L0, m, A, 1 / lam, eps)
    assert hi == pytest.approx(eps * lam / 2, rel=1e-15)
    assert abs(hi / T_hi - 1) < dlam / lam + dT / T_hi
    assert abs((lo / hi) / (T_lo / T_hi) - 1) < dT / T_lo + dT / T_hi + dL0 / L0 + 2 * dA / A


@pytest.mark.parametrize("m,n_min", [(1, 19), (2, 29), (3, 38), (4, 45)])
def test_theorem2_smallest_feasible_n(m, n_min):
    """§6: with ℒ_0 ≈ log n, n·ℒ_0² > 162m needs n ≥ 19, 29, 38, 45 for m = 1..4 (instances with L = n + 3)."""
    feasible = [theorem2_instance(n + 3, n, m).feasible for n in range(2, 61)]
    assert feasible == [n >= n_min for n in range(2, 61)]
    assert [theorem2_feasible(n, math.log(n), m) for n in range(2, 61)] == feasible


def test_theorem2_feasibility_is_a_nonempty_A_range_at_eps_star():
    rng = np.random.default_rng(0)
    for n, L0, m in zip(rng.integers(1, 80, 300), rng.uniform(0.1, 6.0, 300), rng.integers(1, 5, 300), strict=False):
        n, m = int(n), int(m)
        A = theorem2_A_range(L0, n, theorem2_eps_star(n, L0), m)
        assert theorem2_feasible(n, L0, m) == (A is not None)
        if A is not None:  # any A in the range gives a non-empty horizon
            assert theorem2_T_range(L0, m, sum(A) / 2, 0.1, theorem2_eps_star(n, L0)) is not None


def test_empty_ranges_are_none():
    assert theorem2_A_range(2.0, 8, 8 * 2.0 / 18, 1) is None  # n = 8: vacuous (§6)
    assert theorem2_T_range(3.0, 1, 1.0, 0.01, 1.0) is None  # A² = 1 < 4mℒ_0/ε = 12
    assert theorem2_T_range(1.0, 1, 2.0, 0.25, 1.0) == (2.0, 2.0)  # A² = 4mℒ_0/ε exactly: a single horizon


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: delta_gamma(1, 1, 1), "L"),
        (lambda: delta_gamma(5, 0, 1), "n"),
        (lambda: delta_gamma(5, 6, 1), "n"),
        (lambda: delta_gamma(5, 3, 0), "M"),
        (lambda: delta_gamma(5, 3, 6), "M"),
        (lambda: delta_gamma(5, 3, 2, "uniform"), "distribution"),
        (lambda: theorem1_c(5, 3, 2.5), "M"),
        (lambda: theorem1_bound(5, 3, 2, 0.0), "gamma"),
        (lambda: theorem1_bounds(5, 3, 2, "iidd"), "distribution"),
        (lambda: initial_loss_cP(5, 6, 1.0), "n"),
        (lambda: initial_loss_cP(5, 3, -1.0), "c"),
        (lambda: initial_loss_cP(5, 3, math.inf), "c"),
        (lambda: theorem2_c(5, 3, 2, 0.0), "eps"),
        (lambda: theorem2_c(5, 3, 2, 1.0, "iid"), "distribution"),
        (lambda: theorem2_feasible(0, 1.0, 1), "n"),
        (lambda: theorem2_feasible(5, 0.0, 1), "L0"),
        (lambda: theorem2_feasible(5, 1.0, 0), "m"),
        (lambda: theorem2_eps_star(5, -1.0), "L0"),
        (lambda: theorem2_A_range(1.0, 5, -1.0, 1), "eps"),
        (lambda: theorem2_T_range(1.0, 1, 0.0, 0.1, 1.0), "A"),
        (lambda: theorem2_T_range(1.0, 1, 1.0, 0.0, 1.0), "eta"),
        (lambda: theorem2_instance(10, 5, 2, m=0), "m"),
    ],
)
def test_bad_input_raises(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}="):
        call()
