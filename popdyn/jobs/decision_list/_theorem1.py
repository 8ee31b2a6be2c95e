"""Theorem 1 against its bound: gradient flow on W with V = cP fixed from W₀ = 0, and the first time T* of
perfect classification for every list length 1..M (docs/models/decision_lists.md §5).

The flow runs on the reduced coordinates (one column per length, ``ReducedDecisionList``), which is exact
here because W₀ = 0 is column-structured; T* is located on a log-spaced record by ``first_passage``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popdyn import _validate
from popdyn.analysis import first_passage
from popdyn.dynamics import Trajectory
from popdyn.jobs._records import internal
from popdyn.tasks.decision_list._data import validate_sizes
from popdyn.tasks.decision_list._reduced_flow import ReducedDecisionList
from popdyn.tasks.decision_list._theorems import delta_gamma, theorem1_bound, theorem1_c


@dataclass(frozen=True)
class Theorem1Run:
    """One Theorem 1 run (§5): sizes and constants, both readings of the bound T₁, T* per list length m
    (``columns``: {"m", "T_star"}, None where perfect classification was not reached by ``t1``) and the verdicts;
    ``trajectory`` and ``problem`` (the reduced flow) stay out of the summary."""

    L: int
    n: int
    M: int
    distribution: str
    delta: float
    gamma: float
    c: float
    delta_ours: float
    gamma_ours: float
    bound: float
    bound_gamma_eq_delta: float
    t1: float
    columns: list[dict]
    T_star_max: float | None
    T_star_le_bound: bool | None
    T_star_le_bound_gamma_eq_delta: bool | None
    status: str
    trajectory: Trajectory = internal()
    problem: ReducedDecisionList = internal()


def theorem1_run(
    L: int,
    n: int,
    M: int,
    c: float | None = None,
    distribution: str = "distinct",
    delta: float | None = None,
    gamma: float | None = None,
    t1: float | None = None,
    n_grid: int = 4000,
) -> Theorem1Run:
    """T* per list length m = 1..M against T₁ = 4M/(log L·γ) (both readings of γ, §5).

    δ, γ default to popdyn's definitions (§5, [our choice]); passing them overrides (e.g. δ = γ = 1, the
    counterexample of §5). c defaults to the theorem's 4n·log L/δ. The horizon t1 defaults to 10× the
    larger bound. ``popdyn.jobs._records.summary(run)`` is its JSON part."""
    L, n, distribution = validate_sizes(L, n, distribution)
    M = _validate.int_at_least("M", M, 1)
    if M > L:
        raise ValueError(f"M={M} is out of range: list lengths need 1 <= M <= L={L}")
    d_ours, g_ours = delta_gamma(L, n, M, distribution)
    d = d_ours if delta is None else _validate.positive("delta", delta)
    g = g_ours if gamma is None else _validate.positive("gamma", gamma)
    c = theorem1_c(L, n, M, distribution, d) if c is None else _validate.positive("c", c)
    bounds = {"gamma": theorem1_bound(L, n, M, g), "gamma_eq_delta": theorem1_bound(L, n, M, d)}
    t1 = 10 * max(bounds.values()) if t1 is None else _validate.positive("t1", t1)
    prob = ReducedDecisionList(L, n, range(1, M + 1), c, distribution)
    T, traj = first_passage(
        prob, prob.init(None), prob.pc_slack, t1, n_grid=n_grid, solver="tsit5", rtol=1e-10, atol=1e-12
    )
    columns = [{"m": m, "T_star": None if np.isnan(t) else float(t)} for m, t in zip(prob.lengths, T, strict=False)]
    t_max = float(np.max(T)) if not np.any(np.isnan(T)) else None
    return Theorem1Run(
        L=L,
        n=n,
        M=M,
        distribution=distribution,
        delta=d,
        gamma=g,
        c=c,
        delta_ours=d_ours,
        gamma_ours=g_ours,
        bound=bounds["gamma"],
        bound_gamma_eq_delta=bounds["gamma_eq_delta"],
        t1=t1,
        columns=columns,
        T_star_max=t_max,
        T_star_le_bound=None if t_max is None else t_max <= bounds["gamma"],
        T_star_le_bound_gamma_eq_delta=None if t_max is None else t_max <= bounds["gamma_eq_delta"],
        status=traj.status_names[int(traj.status)],
        trajectory=traj,
        problem=prob,
    )
