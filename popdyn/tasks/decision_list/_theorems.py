"""Constants of Theorems 1 and 2 (docs/models/decision_lists.md §5, §6).

The abstract does not define δ, γ, the data law or the m of Theorem 2; every definition below that fills such a gap is
[our choice] and says so. Lists are assumed to have every length 1..M present (as ``random_lists`` makes them).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq

from popdyn import _validate
from popdyn.tasks.decision_list._data import loss_weights, rule_probabilities, validate_sizes


def _validate_M(L: int, M: int) -> int:
    """1 ≤ M ≤ L."""
    M = _validate.int_at_least("M", M, 1)
    if M > L:
        raise ValueError(f"M={M} is out of range: list lengths need 1 <= M <= L={L}")
    return M


def _fires(L: int, n: int, m: int, distribution: str) -> np.ndarray:
    """Mask over j = 1..m of the rules of a length-m list with P(E_{a,j}) > 0 (§2): j < m needs n ≥ 2 (a_j and a both
    present) and, for distinct tokens, j ≤ L − n + 1 (room for the others outside a_1..a_j)."""
    j = np.arange(1, m + 1)
    ok = (j == m) | (n >= 2)
    return ok & (j <= L - n + 1) if distribution == "distinct" else ok


def delta_gamma(L: int, n: int, M: int, distribution: str = "distinct") -> tuple[float, float]:
    """(δ, γ) of §5 [our choice]: δ = min P(E_{a,j} | a ∈ s) and γ = min ρ_{a,j} = min E[(h_a/n)·1_{E_{a,j}}], both over
    the rules of positive probability of lists of lengths 1..M. For distinct tokens γ = δ/L, δ = 1 for M = 1 and
    δ = min(π_{M−1}, π_M) for M ≥ 2, n ≥ 2 and L ≥ n + M − 1.

    **Arguments:**

    - ``L``: the number of tokens; ``n``: the sequence length (≤ L for distinct tokens).
    - ``M``: the longest list, 1 ≤ M ≤ L (lists of every length 1..M, as ``random_lists`` makes them).
    - ``distribution``: the sequence law, one of ``DISTRIBUTIONS``.
    """
    L, n, distribution = validate_sizes(L, n, distribution)
    M = _validate_M(L, M)
    deltas, gammas = [], []
    for m in range(1, M + 1):
        mask = _fires(L, n, m, distribution)
        deltas.append(rule_probabilities(L, n, m, distribution)[mask].min())
        gammas.append(loss_weights(L, n, m, distribution)[mask].min())
    return float(min(deltas)), float(min(gammas))


def theorem1_c(L: int, n: int, M: int, distribution: str = "distinct", delta: float | None = None) -> float:
    """c = 4n·log(L)/δ, the value scale of V = cP in Theorem 1 (§5; δ [our choice] unless given).

    **Arguments:**

    - ``L``, ``n``, ``M``, ``distribution``: the instance, as in ``delta_gamma``.
    - ``delta``: δ > 0 to use instead of ``delta_gamma``'s.
    """
    if delta is None:
        delta, _ = delta_gamma(L, n, M, distribution)
    return 4 * n * math.log(L) / _validate.positive("delta", delta)


def theorem1_bound(L: int, n: int, M: int, gamma: float) -> float:
    """T_1 = 4M/(log(L)·γ), Theorem 1's time to perfect classification (§5). n only keeps the (L, n, M) signature of
    this module: the bound does not depend on it."""
    L, n, _ = validate_sizes(L, n, "iid")
    M = _validate_M(L, M)
    gamma = _validate.positive("gamma", gamma)
    return 4 * M / (math.log(L) * gamma)


class Theorem1Bounds(NamedTuple):
    """Theorem 1's constants for lists of lengths 1..M (§5; δ and γ are [our choice], both readings of T_1 too).

    **Fields:**

    - ``delta``: δ = min P(E_{a,j} | a ∈ s) over the rules of positive probability (``delta_gamma``).
    - ``gamma``: γ = min ρ_{a,j} (= δ/L for distinct tokens).
    - ``c``: c = 4n·log(L)/δ, the value scale of V = cP (``theorem1_c``).
    - ``T1``: T_1 = 4M/(log(L)·γ), the time to perfect classification.
    - ``T1_gamma_eq_delta``: T_1 with the weaker reading γ = δ.
    """

    delta: float
    gamma: float
    c: float
    T1: float
    T1_gamma_eq_delta: float


def theorem1_bounds(L: int, n: int, M: int, distribution: str = "distinct") -> Theorem1Bounds:
    """δ, γ, c and both readings of T_1 (§5): ``T1`` with γ = min ρ_{a,j} (= δ/L for distinct tokens) and
    ``T1_gamma_eq_delta`` with the weaker reading γ = δ [our choice, both].

    **Arguments:** ``L`` tokens; ``n`` sequence length; ``M`` longest list (lists of every length 1..M);
    ``distribution`` "distinct" or "iid" (§2)."""
    delta, gamma = delta_gamma(L, n, M, distribution)
    return Theorem1Bounds(
        delta=delta,
        gamma=gamma,
        c=theorem1_c(L, n, M, distribution),
        T1=theorem1_bound(L, n, M, gamma),
        T1_gamma_eq_delta=theorem1_bound(L, n, M, delta),
    )


def initial_loss_cP(L: int, n: int, c: float) -> float:
    """ℒ(0, cP) = log(n + (L−n)e^{−c/n}) under D_distinct (§5), as log n + log1p((L−n)/n·e^{−c/n}) (c ≥ 0)."""
    L, n, _ = validate_sizes(L, n, "distinct")
    c = _validate.positive("c", c, allow_zero=True)
    return math.log(n) + math.log1p((L - n) / n * math.exp(-c / n))


def _solve_c(L: int, n: int, slope: float, offset: float) -> float:
    """The root of c = slope·ℒ(0, cP)(c) + offset (slope > 0). The right side decreases in c and lies in
    [slope·log n, slope·log L] + offset, so the root is unique and bracketed there (§6)."""

    def excess(c: float) -> float:
        return c - slope * initial_loss_cP(L, n, c) - offset

    lo, hi = slope * math.log(n) + offset, slope * math.log(L) + offset
    if excess(lo) >= 0:
        return lo
    return brentq(excess, lo, hi, xtol=1e-300, rtol=1e-15, maxiter=500)


def _validate_distinct(distribution: str) -> str:
    """Theorem 2's constants are defined for D_distinct only: under D_iid its fixed point generally has no solution
    (§2, reason 3)."""
    return _validate.choice("distribution", distribution, ("distinct",))


def theorem2_c(L: int, n: int, M: int, eps: float, distribution: str = "distinct") -> float:
    """The unique root of c = 10n²ℒ_0(c)/δ + 4εn with ℒ_0(c) = ℒ(0, cP) (§6; D_distinct only, δ [our choice]).
    The right side decreases in c, so the root is unique; it is found by Brent's method to relative 1e-15.

    **Arguments:**

    - ``L``, ``n``, ``M``: the instance, as in ``delta_gamma``.
    - ``eps``: Theorem 2's ε > 0.
    - ``distribution``: ``"distinct"`` (the only law the theorem's constants are defined for; ValueError otherwise).
    """
    _validate_distinct(distribution)
    eps = _validate.positive("eps", eps)
    delta, _ = delta_gamma(L, n, M, distribution)
    return _solve_c(L, n, 10 * n**2 / delta, 4 * eps * n)


def theorem2_feasible(n: int, L0: float, m: int) -> bool:
    """Whether some ε, A satisfy Theorem 2's hypotheses: max_ε ε(ℒ_0 − 6ε/n)² > 4mℒ_0 ⇔ n·ℒ_0² > 162m (§6).

    **Arguments:**

    - ``n``: the sequence length (≥ 1).
    - ``L0``: ℒ_0 = ℒ(0, cP) > 0, the initial loss.
    - ``m``: the theorem's m (≥ 1).
    """
    n = _validate.int_at_least("n", n, 1)
    L0 = _validate.positive("L0", L0)
    m = _validate.int_at_least("m", m, 1)
    return n * L0**2 > 162 * m


def theorem2_eps_star(n: int, L0: float) -> float:
    """ε* = nℒ_0/18, the ε maximising ε(ℒ_0 − 6ε/n)², i.e. the widest A-range (§6)."""
    n = _validate.int_at_least("n", n, 1)
    return n * _validate.positive("L0", L0) / 18


def theorem2_A_range(L0: float, n: int, eps: float, m: int) -> tuple[float, float] | None:
    """The open interval (√(4mℒ_0/ε), ℒ_0 − 6ε/n) of admissible A (§6), or None when it is empty (an infeasible
    instance is a legitimate answer, not bad input)."""
    L0, eps = _validate.positive("L0", L0), _validate.positive("eps", eps)
    n, m = _validate.int_at_least("n", n, 1), _validate.int_at_least("m", m, 1)
    lo, hi = math.sqrt(4 * m * L0 / eps), L0 - 6 * eps / n
    return (lo, hi) if lo < hi else None


def theorem2_T_range(L0: float, m: int, A: float, eta: float, eps: float) -> tuple[float, float] | None:
    """The closed horizon interval [2mℒ_0/(A²η), ε/(2η)] of Theorem 2 (§6), or None when it is empty
    (A² < 4mℒ_0/ε)."""
    L0, A = _validate.positive("L0", L0), _validate.positive("A", A)
    eta, eps = _validate.positive("eta", eta), _validate.positive("eps", eps)
    m = _validate.int_at_least("m", m, 1)
    lo, hi = 2 * m * L0 / (A**2 * eta), eps / (2 * eta)
    return (lo, hi) if lo <= hi else None


class Theorem2Instance(NamedTuple):
    """Theorem 2's constants at ε = ε* (§6; ``theorem2_instance``).

    **Fields:**

    - ``delta``: δ of lists of lengths 1..M (``delta_gamma``, [our choice]).
    - ``m``: the m of the theorem (M unless given, [our choice]).
    - ``c``: the root of c = 10n²ℒ_0/δ + 4εn at ε = ε*.
    - ``L0``: ℒ_0 = ℒ(0, cP), the loss at V_0 = cP exactly (≈ log n).
    - ``eps``: ε* = nℒ_0/18.
    - ``feasible``: whether n·ℒ_0² > 162m, i.e. some ε, A satisfy the hypotheses (``theorem2_feasible``).
    - ``A_range``: the open interval (√(4mℒ_0/ε), ℒ_0 − 6ε/n) of admissible A, None if empty.
    """

    delta: float
    m: int
    c: float
    L0: float
    eps: float
    feasible: bool
    A_range: tuple[float, float] | None


def theorem2_instance(L: int, n: int, M: int, m: int | None = None) -> Theorem2Instance:
    """Theorem 2 at ε = ε* (§6, [our choice]): c and ε solved jointly from c = 10n²ℒ_0/δ + 4εn and ε = nℒ_0/18, with
    ℒ_0 = ℒ(0, cP) for V_0 = cP exactly (≈ log n); m defaults to M [our choice]. This reproduces the c and ε of §6's
    sanity runs; their ℒ_0 and A-range columns were measured at the perturbed V_0 = cP + Δ instead.

    **Arguments:** ``L`` tokens; ``n`` sequence length (D_distinct); ``M`` longest list; ``m`` the theorem's m
    (None: M)."""
    L, n, _ = validate_sizes(L, n, "distinct")
    M = _validate_M(L, M)
    m = M if m is None else _validate.int_at_least("m", m, 1)
    delta, _ = delta_gamma(L, n, M)
    c = _solve_c(L, n, 10 * n**2 / delta + 4 * n * n / 18, 0.0)
    L0 = initial_loss_cP(L, n, c)
    eps = theorem2_eps_star(n, L0)
    return Theorem2Instance(
        delta=delta,
        m=m,
        c=c,
        L0=L0,
        eps=eps,
        feasible=theorem2_feasible(n, L0, m),
        A_range=theorem2_A_range(L0, n, eps, m),
    )
