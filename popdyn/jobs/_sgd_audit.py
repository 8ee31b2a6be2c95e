"""The stepsize jobs' ``--batch B --sampling …``: SGD's mean-square threshold η*(B) beside GD's 2/λ_max at each
end point (``popdyn.step_size_audit(..., batch=B, replace=...)``; docs/sgd.md, "In the step-size audit and on the
command line")."""

from __future__ import annotations

import math

import numpy as np

from popdyn import _validate
from popdyn.analysis._sgd_curve import ThresholdCurve, threshold_curve
from popdyn.analysis._stepsize import AuditRow, StepSizeAudit, check_sgd
from popdyn.jobs._registry import SGD_SAMPLING
from popdyn.problem import Problem, Theta

SAME_MINIMUM_RTOL = 1e-6
"""Two runs' end points share a threshold curve when their 2/λ_max, η*(B) and η*_⊥(B) agree to this relative
tolerance."""


def sgd_replace(prob: Problem, batch: int | None, sampling: str | None, momentum: float) -> bool:
    """``replace`` for ``step_size_audit`` from ``--sampling`` (with-replacement where not given), the SGD inputs
    checked against ``prob`` before any run (``check_sgd``: examples declared, B in range, no momentum); ValueError
    for a ``--sampling`` without ``--batch``.

    **Arguments:**

    - ``prob``: the problem the runs are on; ``batch``: B, or None (no SGD thresholds).
    - ``sampling``: "with-replacement", "without-replacement" or None; ``momentum``: the runs' μ.
    """
    if batch is None:
        if sampling is not None:
            raise ValueError(f"sampling={sampling!r} applies only with a minibatch size: give --batch B too")
        return True
    choices = SGD_SAMPLING.choices or ()
    replace = _validate.choice("sampling", "with-replacement" if sampling is None else sampling, choices) == choices[0]
    check_sgd(prob, batch, replace, momentum)
    return replace


def sgd_inputs(batch: int | None, replace: bool) -> dict[str, int | str]:
    """What ``summary.json`` records of ``--batch`` and ``--sampling`` among a job's inputs: nothing without a
    minibatch size.

    **Arguments:** ``batch``: B or None; ``replace``: the sampling (``sgd_replace``).
    """
    if batch is None:
        return {}
    choices = SGD_SAMPLING.choices or ()
    return {"batch": batch, "sampling": choices[0] if replace else choices[1]}


def sgd_lines(lrs, audits: list[tuple[StepSizeAudit, int | tuple[()]]]) -> list[str]:
    """The printed lines of the SGD thresholds: a heading naming the sampling, then one line per learning rate with
    GD's 2/λ_max, SGD's η*(B) and the verdict at its end point (``StepSizeAudit.sgd_words``).

    **Arguments:**

    - ``lrs``: the learning rates, in order; ``audits``: for each, its audit and the run's index in it (``()`` for
      an unbatched audit).
    """
    valley = any(bool(np.any(audit.valley)) for audit, _ in audits if audit.valley is not None)
    across = "; on a valley of minima, across it for η ≤ η*_⊥(B)" if valley else ""
    head = f"  at each end point, SGD with {audits[0][0].sampling} (mean-square stable for η ≤ η*(B){across}):"
    return [head] + [f"  η = {lr:<8g} {audit.sgd_words(i)}" for lr, (audit, i) in zip(lrs, audits, strict=True)]


def _same(a: AuditRow, b: AuditRow) -> bool:
    """The two runs' end points have the same 2/λ_max, η*(B) and η*_⊥(B), to ``SAME_MINIMUM_RTOL``."""
    return all(
        math.isclose(x, y, rel_tol=SAME_MINIMUM_RTOL)
        for x, y in (
            (a.gd_threshold, b.gd_threshold),
            (a.sgd_threshold, b.sgd_threshold),
            (a.transverse_threshold, b.transverse_threshold),
        )
    )


def sgd_curves(
    prob: Problem, ends: list[Theta], rows: list[AuditRow], batch: int, replace: bool, saddle_tol: float
) -> list[ThresholdCurve]:
    """η*(B) against B (``threshold_curve``) at each distinct minimum the runs ended at, with the learning rates of
    the runs that ended there. The runs with an SGD threshold (``sgd_threshold`` finite: at a minimum where SGD's
    condition is defined) are grouped in order: a run joins the first group whose first run has the same 2/λ_max,
    η*(B) and η*_⊥(B) (``SAME_MINIMUM_RTOL``), else starts a group; each group's curve is computed at its first
    run's end point. Minima that give the same three numbers (a symmetric pair, say) share a curve, which is then
    the same.

    **Arguments:**

    - ``prob``: the problem of the runs; ``ends``: each run's end point, unbatched.
    - ``rows``: each run's ``AuditRow`` from the audit with the minibatch size ``batch`` and sampling ``replace``
      (``sgd_replace``); ``saddle_tol``: the audit's (``run_saddle_tol``), so each curve's η* at B is the audit's.
    """
    groups: list[list[int]] = []
    for i, row in enumerate(rows):
        if math.isnan(row.sgd_threshold):
            continue
        same = (g for g in groups if _same(rows[g[0]], row))
        group = next(same, None)
        if group is None:
            groups.append([i])
        else:
            group.append(i)
    return [
        threshold_curve(prob, ends[g[0]], batch, replace, lrs=[rows[i].lr for i in g], runs=g, saddle_tol=saddle_tol)
        for g in groups
    ]


def curve_lines(curves: list[ThresholdCurve]) -> list[str]:
    """The printed lines of the threshold curves: per distinct minimum, the runs that ended there, 2/λ_max, and
    η*(B) at each B of the curve (η*_⊥(B) on a valley of minima, ``ThresholdCurve.drawn``).

    **Arguments:** ``curves``: ``sgd_curves``'s.
    """
    lines = []
    for curve in curves:
        lrs = ", ".join(f"{lr:g}" for lr in curve.lrs)
        values = ", ".join(f"{b}: {t:.6g}" for b, t in zip(curve.batches, curve.drawn, strict=True))
        name = "η*_⊥(B) across the valley" if curve.flat_curved else "η*(B)"
        lines.append(f"  {name} at the end point of η = {lrs} (2/λ_max = {curve.gd_threshold:.6g}): B = {values}")
    return lines
