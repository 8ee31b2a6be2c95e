"""The line a job prints, and the entry of its summary.json, about runs that ran out of budget (docs/dynamics.md,
"Runs that ran out of budget"): how many, what they are doing, their time scale and the setting that would likely
resolve them (``popdyn.analysis.budget_report``)."""

from __future__ import annotations

from collections.abc import Sequence

from popdyn.analysis import BudgetReport, BudgetSummary, budget_report, flow_time_unit
from popdyn.dynamics import Trajectory
from popdyn.problem import Problem


def run_budget(prob: Problem, traj: Trajectory | None) -> BudgetSummary | None:
    """The ``BudgetSummary`` of a job's run; None where its dynamics is not one ``budget_report`` reads (a dynamics
    of the user's own, say).

    **Arguments:** ``prob`` the problem; ``traj`` the run (``BasinFractions.trajectory``, ``HittingTimes.trajectory``).
    """
    if traj is None or flow_time_unit(traj.dynamics) is None:
        return None
    return budget_report(prob, traj).summary()


def joined_budget(reports: Sequence[BudgetReport | None]) -> BudgetSummary | None:
    """The ``BudgetSummary`` over the reports given (a sweep's points), None where there is none."""
    given = [r for r in reports if r is not None]
    return BudgetReport.join(given).summary() if given else None


def _num(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant digits, exponents without padding: 2.09e3, 1e6, 0.25."""
    return f"{x:.{digits}g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def _setting(value: float | int) -> str:
    """A setting as its flag takes it: an integer in full (``--steps 20000``), a float to its one significant digit
    (``--t1 5e4``; ``BudgetSummary.settings`` are 1, 2 or 5 × 10ᵏ)."""
    return str(value) if isinstance(value, int) else _num(value, 1)


def _where(s: BudgetSummary) -> str:
    """Where the runs stopped: "of time at t = 100", "of steps at step 2000 (flow time t = 200)", "of solver steps
    at t ≈ 37.2"."""
    if s.unit == "step":
        return f"of steps at step {s.budget:.0f} (flow time t = {_num(s.horizon, 3)})"
    if s.solver_steps:
        return f"of solver steps at t ≈ {_num(s.horizon, 3)}"
    return f"of time at t = {_num(s.horizon, 3)}"


def _what(s: BudgetSummary) -> str:
    """What the runs are doing, e.g. "escape time scale ≈ 2.09e3 near a plateau at L ≈ 0.25"."""
    if s.motion == "plateau":
        return f"escape time scale ≈ {_num(s.time_scale, 3)} near a plateau at L ≈ {_num(s.level, 3)}"
    if s.motion == "relaxing":
        return f"relaxation time scale ≈ {_num(s.time_scale, 3)} at L ≈ {_num(s.level, 3)}"
    return "no finite time scale"


def budget_lines(s: BudgetSummary | None) -> list[str]:
    """The line a job prints about the runs that ran out of budget (none when no run did), e.g. "budget: 128 of 256
    runs ran out of time at t = 100 while still moving (escape time scale ≈ 2.09e3 near a plateau at L ≈ 0.25);
    try --t1 1e4"."""
    if s is None or not s.ran_out:
        return []
    line = f"  budget: {s.ran_out} of {s.runs} runs ran out {_where(s)} while still moving ({_what(s)})"
    if s.motions["escaping"]:
        line += f"; {s.motions['escaping']} move out to ‖θ‖ → ∞ (no horizon resolves them)"
    if s.motions["flat"]:
        line += f"; {s.motions['flat']} move along flat directions (no finite time scale)"
    if s.settings:
        line += "; try " + " ".join(f"--{name.replace('_', '-')} {_setting(value)}" for name, value in s.settings)
    return [line]


def budget_json(s: BudgetSummary | None) -> dict | None:
    """The summary.json entry ``budget``: ``BudgetSummary.json``, or None where the dynamics is not one it reads."""
    return None if s is None else s.json()
