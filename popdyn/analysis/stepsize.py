"""Step-size audits: λ_max(∇²L(θ_t)) along a trajectory against the thresholds 1/η and 2/η.

GD on a quadratic with curvature λ is monotone for η ≤ 1/λ and stable for η < 2/λ (the edge of
stability); the audit reports where a run crosses either threshold and whether its loss rose. With heavy-ball
momentum μ the thresholds are λ ≤ (1 − √μ)²/η (real, positive roots: no oscillation) and λ < 2(1 + μ)/η
(stable) [derived from the recursion x_{k+1} = x_k − ηλx_k + μ(x_k − x_{k−1}); docs/dynamics.md].
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import jax
import numpy as np

from popdyn import _validate
from popdyn.curvature import lambda_max
from popdyn.dynamics import STATUS_NAMES, GradientDescent, Status, Trajectory
from popdyn.dynamics.status import AT_MINIMUM
from popdyn.problem import Problem

VERDICTS = ("held", "between", "edge of stability", "unstable", "diverged")
"""Audit verdicts, in order: η ≤ 1/λ_max held all along; max λ in (1/η, 2/η]; λ crossed 2/η but the run settled
where λ_end < 2/η; past 2/η and not settled; the run diverged or hit NaN."""


JSONRow = dict[str, float | int | bool | str]
"""An ``AuditRow`` as summary.json holds it (``AuditRow.json``)."""


class AuditRow(NamedTuple):
    """One run of a ``StepSizeAudit`` as plain numbers (``StepSizeAudit.row``).

    - ``lr``: its learning rate η; ``one_over_lr``, ``two_over_lr``: 1/η and 2/η.
    - ``max_lambda``, ``lambda_end``: the largest λ_max over the records, and λ_max at the last finite record.
    - ``momentum``, ``monotone_threshold``, ``stability_threshold``: μ, (1 − √μ)²/η and 2(1 + μ)/η.
    - ``monotone_safe``: max λ_max ≤ (1 − √μ)²/η; ``past_stability_edge``: max λ_max > 2(1 + μ)/η.
    - ``verdict``: one of ``VERDICTS``; ``first_step_above_2_over_lr``: the first record time above 2(1 + μ)/η
      (NaN: never).
    - ``loss_rises``: how often the loss rose between records; ``status``: the run's status name;
      ``final_loss``: its loss at the end point.
    """

    lr: float
    max_lambda: float
    lambda_end: float
    one_over_lr: float
    two_over_lr: float
    momentum: float
    monotone_threshold: float
    stability_threshold: float
    monotone_safe: bool
    past_stability_edge: bool
    verdict: str
    first_step_above_2_over_lr: float
    loss_rises: int
    status: str
    final_loss: float

    def json(self) -> JSONRow:
        """The row for ``summary.json``: its fields in order, the three momentum fields only when μ > 0."""
        row = self._asdict()
        if not self.momentum:
            for name in ("momentum", "monotone_threshold", "stability_threshold"):
                del row[name]
        return row


@dataclass(frozen=True)
class StepSizeAudit:
    """Per initialisation (leading axis when batched): λ_max at each record time, its maximum and its value at the
    end, the first record time where it exceeds 1/η and 2/η (NaN: never), how often the loss rose, and the run's
    status and loss at its end point (``final_loss``, never a padded record). ``lr`` is one
    rate, or one per initialisation (a step-size sweep); ``momentum`` μ the heavy-ball momentum of the run, which
    moves the two thresholds to (1 − √μ)²/η and 2(1 + μ)/η (the ``first_above_…`` fields are then the first
    times above those). For one (unbatched) run the per-initialisation values are NumPy scalars or 0-d arrays."""

    lr: float | np.ndarray
    ts: np.ndarray
    lambda_max: np.ndarray
    max_lambda: np.ndarray | np.number
    lambda_end: np.ndarray | np.number
    first_above_1_over_lr: np.ndarray | np.number
    first_above_2_over_lr: np.ndarray | np.number
    loss_rises: np.ndarray | np.number
    status: np.ndarray | np.number
    final_loss: np.ndarray | np.number
    momentum: float = 0.0

    @property
    def monotone_threshold(self) -> np.ndarray | float:
        """(1 − √μ)²/η: 1/η for plain GD."""
        return thresholds(self.lr, self.momentum)[0]

    @property
    def stability_threshold(self) -> np.ndarray | float:
        """2(1 + μ)/η: 2/η for plain GD."""
        return thresholds(self.lr, self.momentum)[1]

    @property
    def threshold_names(self) -> tuple[str, str]:
        """How the two thresholds are written: ("1/η", "2/η"), or with momentum ("(1−√μ)²/η", "2(1+μ)/η")."""
        return ("1/η", "2/η") if not self.momentum else ("(1−√μ)²/η", "2(1+μ)/η")

    @property
    def monotone_safe(self) -> np.ndarray | np.bool_:
        """max_t λ_max ≤ (1 − √μ)²/η: the step size condition (η ≤ 1/λ_max for plain GD) held all along."""
        return self.max_lambda <= self.monotone_threshold

    @property
    def flagged(self) -> np.ndarray | np.bool_:
        """max_t λ_max > 2(1 + μ)/η: past the stability edge at some recorded point."""
        return self.max_lambda > self.stability_threshold

    @property
    def diverged(self) -> np.ndarray | np.bool_:
        """The run itself diverged or produced NaN."""
        return np.isin(self.status, (int(Status.DIVERGED), int(Status.NAN)))

    @property
    def settled(self) -> np.ndarray | np.bool_:
        """The run ended at a minimum (converged, or converged late) with λ_max there below 2/η."""
        at_min = np.isin(self.status, [int(s) for s in AT_MINIMUM])
        return at_min & (self.lambda_end < self.stability_threshold)

    @property
    def verdict_code(self) -> np.ndarray:
        """Index into ``VERDICTS`` per initialisation."""
        return np.select(
            [self.diverged, self.flagged & self.settled, self.flagged, ~self.monotone_safe], [4, 2, 3, 1], default=0
        )

    def verdicts(self) -> np.ndarray:
        """``VERDICTS`` names per initialisation."""
        return np.asarray(VERDICTS, dtype=object)[self.verdict_code]

    def run(self, i: int) -> StepSizeAudit:
        """The audit of run ``i`` of a batch (e.g. one η of a sweep), unbatched: for figures and tables."""
        return StepSizeAudit(
            **{
                f.name: (
                    getattr(self, f.name)
                    if f.name == "momentum" or (f.name == "lr" and np.ndim(self.lr) == 0)
                    else np.asarray(getattr(self, f.name))[i]
                )
                for f in fields(self)
            }
        )

    def rows(self) -> list[AuditRow]:
        """One ``AuditRow`` per run of a batch; the one run's row alone when unbatched."""
        if np.ndim(self.max_lambda):
            return [self.row(i) for i in range(np.shape(self.max_lambda)[0])]
        return [self.row()]

    def summary(self) -> JSONRow | list[JSONRow]:
        """The audit as plain numbers for ``summary.json`` (``AuditRow.json``): one row for one run, a list of rows
        for a batch."""
        rows = [r.json() for r in self.rows()]
        return rows if np.ndim(self.max_lambda) else rows[0]

    def row(self, i: int | tuple[()] = ()) -> AuditRow:
        """Run ``i``'s audit as an ``AuditRow`` (the only run when unbatched)."""
        lr = float(np.broadcast_to(self.lr, np.shape(self.max_lambda))[i])
        if not isinstance(self.lr, np.ndarray) or self.lr.ndim == 0:
            lr = float(self.lr)
        low, edge = thresholds(lr, self.momentum)
        return AuditRow(
            lr=lr,
            max_lambda=float(np.asarray(self.max_lambda)[i]),
            lambda_end=float(np.asarray(self.lambda_end)[i]),
            one_over_lr=1 / lr,
            two_over_lr=2 / lr,
            momentum=self.momentum,
            monotone_threshold=low,
            stability_threshold=edge,
            monotone_safe=bool(np.asarray(self.monotone_safe)[i]),
            past_stability_edge=bool(np.asarray(self.flagged)[i]),
            verdict=VERDICTS[int(self.verdict_code[i])],
            first_step_above_2_over_lr=float(np.asarray(self.first_above_2_over_lr)[i]),
            loss_rises=int(np.asarray(self.loss_rises)[i]),
            status=STATUS_NAMES[int(np.asarray(self.status)[i])],
            final_loss=float(np.asarray(self.final_loss)[i]),
        )

    def verdict(self, i=()) -> str:
        """Run ``i``'s audit in words (the only run when unbatched), with λ_max against 1/η and 2/η (with momentum
        μ: (1 − √μ)²/η and 2(1 + μ)/η)."""
        r = self.row(i)
        low, edge = self.threshold_names
        words = {
            "held": f"λ_max ≤ {low} held",
            "between": f"between {low} and {edge}",
            "edge of stability": f"edge of stability: λ_max crossed {edge} at t = {r.first_step_above_2_over_lr:g}, "
            f"then settled where λ_max = {r.lambda_end:.4f} < {edge}",
            "unstable": f"PAST {edge} (unstable)",
            "diverged": f"PAST {edge} and diverged" if r.past_stability_edge else "diverged",
        }
        return (
            f"max λ_max = {r.max_lambda:.4f}, at the end {r.lambda_end:.4f} ({low} = {r.monotone_threshold:.3f}, "
            f"{edge} = {r.stability_threshold:.3f}{f', μ = {self.momentum:g}' if self.momentum else ''}): "
            f"{words[r.verdict]}; loss rose {r.loss_rises}×"
        )


def thresholds(lr, momentum: float = 0.0) -> tuple:
    """((1 − √μ)²/η, 2(1 + μ)/η): the curvatures below which heavy-ball GD at rate η and momentum μ does not
    oscillate, and is stable, on a quadratic; 1/η and 2/η for μ = 0."""
    lr = np.asarray(lr, dtype=float)
    low, edge = (1.0 - np.sqrt(momentum)) ** 2 / lr, 2.0 * (1.0 + momentum) / lr
    return (float(low), float(edge)) if lr.ndim == 0 else (low, edge)


def _first_time(ts: np.ndarray, above: np.ndarray) -> np.ndarray:
    hit = above.any(axis=-1)
    idx = np.argmax(above, axis=-1)
    return np.where(hit, np.take_along_axis(ts, idx[..., None], axis=-1)[..., 0], np.nan)


def _rates(lr, lead: tuple) -> float | np.ndarray:
    """``lr`` as one float, or an array of one rate per run of the batch (shape ``lead[:-1]``)."""
    if np.ndim(lr) == 0:
        return _validate.positive("lr", lr if not hasattr(lr, "item") else lr.item())
    arr = _validate.float_array("lr", lr)
    if arr.shape != lead[:-1] or not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"lr has shape {arr.shape}: a sweep needs one finite rate > 0 per run, shape {lead[:-1]}")
    return arr


def _run_settings(traj: Trajectory, lr, momentum) -> tuple:
    """(lr, momentum) of the audit: the run's own (``traj.dynamics``, a ``GradientDescent``) where not given; given
    values must agree with the run's, as a setting is never passed twice with two values. A run whose step is not
    plain or heavy-ball GD (an optimizer, a preconditioner, per-block rates) is refused: its thresholds differ."""
    run = traj.dynamics
    if not isinstance(run, GradientDescent):
        if lr is None:
            raise ValueError("lr is required: traj was not run by GradientDescent, so it carries no learning rate")
        return lr, 0.0 if momentum is None else momentum
    changed = [name for name in ("optimizer", "precondition", "time_scales") if getattr(run, name) is not None]
    if changed:
        raise ValueError(
            f"traj's step has {' and '.join(changed)}: the audit's thresholds, (1 − √μ)²/η and 2(1 + μ)/η on λ_max of "
            "∇²L, are those of plain and heavy-ball GD and do not hold for that step; audit a plain or heavy-ball run "
            "(of a reparametrised problem where the step preconditions, e.g. a whitened one)"
        )
    if lr is not None and not np.array_equal(np.asarray(lr, dtype=float), np.asarray(run.lr, dtype=float)):
        raise ValueError(f"lr={lr!r} differs from the run's lr={run.lr!r}: leave it out, the audit reads the run's")
    if momentum is not None and float(momentum) != float(run.momentum):
        raise ValueError(f"momentum={momentum!r} differs from the run's momentum={run.momentum!r}: leave it out")
    return run.lr, run.momentum


def step_size_audit(
    prob: Problem, traj: Trajectory, lr=None, method: str = "auto", momentum: float | None = None
) -> StepSizeAudit:
    """Audit a trajectory recorded with θ at every record (``SaveAt(params=True)``, ``save_params=True``) against its
    learning rate η and heavy-ball momentum μ.

    **Arguments:**

    - ``prob``: the Problem the run was on.
    - ``traj``: the run. A run of ``GradientDescent`` carries η (one, or one per initialisation) and μ.
    - ``lr``, ``momentum``: only for a run that does not carry them (e.g. a flow audited against a step size).
    - ``method``: how λ_max is computed (``popdyn.lambda_max``).
    """
    if traj.params is None:
        raise ValueError("traj has no saved parameters: run gradient_descent/gradient_flow with save_params=True")
    lr, momentum = _run_settings(traj, lr, momentum)
    ts = np.asarray(traj.ts)
    lead = ts.shape  # (*B, T)
    lr = _rates(lr, lead)
    momentum = _validate.half_open_unit("momentum", momentum)
    low, edge = (np.asarray(t)[..., None] for t in thresholds(lr, momentum))
    flat = jax.tree_util.tree_map(lambda x: x.reshape((-1, *x.shape[len(lead) :])), traj.params)
    lam = np.asarray(lambda_max(prob, flat, method=method)).reshape(lead)
    lam = np.where(np.isfinite(ts), lam, np.nan)
    loss = np.asarray(traj.loss)
    rises = np.sum(np.diff(loss, axis=-1) > 1e-12 * np.maximum(1.0, np.abs(loss[..., :-1])), axis=-1)
    safe = np.where(np.isfinite(lam), lam, -np.inf)
    last = np.maximum(np.sum(np.isfinite(lam), axis=-1) - 1, 0)
    return StepSizeAudit(
        lr=lr,
        ts=ts,
        lambda_max=lam,
        max_lambda=np.max(safe, axis=-1),
        lambda_end=np.take_along_axis(lam, last[..., None], axis=-1)[..., 0],
        first_above_1_over_lr=_first_time(ts, safe > low),
        first_above_2_over_lr=_first_time(ts, safe > edge),
        loss_rises=rises,
        status=np.asarray(traj.status),
        final_loss=np.asarray(traj.final_loss),
        momentum=momentum,
    )
