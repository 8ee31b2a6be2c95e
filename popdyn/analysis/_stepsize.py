"""Step-size audits: λ_max(∇²L(θ_t)) along a trajectory against the thresholds 1/η and 2/η.

GD on a quadratic with curvature λ is monotone for η ≤ 1/λ and stable for η < 2/λ (the edge of
stability); the audit reports where a run crosses either threshold and whether its loss rose. With heavy-ball
momentum μ the thresholds are λ ≤ (1 − √μ)²/η (real, positive roots: no oscillation) and λ < 2(1 + μ)/η
(stable) [derived from the recursion x_{k+1} = x_k − ηλx_k + μ(x_k − x_{k−1}); docs/dynamics.md].

Given a minibatch size B, the audit also sets the run's η against SGD's own condition at the run's end point θ*,
where that is a minimum: GD is linearly stable there for η ≤ 2/λ_max(∇²L(θ*)), minibatch SGD is mean-square stable
(E‖θ_t − θ*‖² of the linearised iterates bounded from every start) for η ≤ η*(B) ≤ 2/λ_max
(``popdyn.sgd_threshold``; docs/sgd.md, "SGD's step-size condition"). On a valley of minima whose flat directions the
examples' Hessians act on, η*(B) = 0, and the run's η is set against the threshold across the valley η*_⊥(B) instead
(docs/sgd.md, "Flat directions").
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from dataclasses import replace as replace_fields
from typing import NamedTuple

import jax
import numpy as np

from popdyn import _validate
from popdyn._batching import checked
from popdyn.analysis._noise import _check_sampling
from popdyn.analysis._sgd_stability import MAX_DIM, mean_square_stability
from popdyn.curvature import lambda_max
from popdyn.dynamics import STATUS_NAMES, GradientDescent, Status, Steady, Trajectory
from popdyn.dynamics._status import AT_MINIMUM
from popdyn.problem import Problem, check_measure

VERDICTS = ("held", "between", "edge of stability", "unstable", "diverged")
"""Audit verdicts, in order: η ≤ 1/λ_max held all along; max λ in (1/η, 2/η]; λ crossed 2/η but the run settled
where λ_end < 2/η; past 2/η and not settled; the run diverged or hit NaN."""

SGD_VERDICTS = (
    "stable for GD and SGD(B)",
    "stable for GD, unstable for SGD(B)",
    "unstable for both",
    "not a minimum",
    "no threshold",
    "stable for GD and, across the valley, for SGD(B); SGD diffuses along the valley",
    "stable for GD, unstable across the valley for SGD(B)",
)
"""Verdicts on a run's η at its end point θ* (``step_size_audit(..., batch=B)``), in order: η ≤ η*(B) (so also
η ≤ 2/λ_max); η*(B) < η ≤ 2/λ_max; η > 2/λ_max. Here 2/λ_max, λ_max of ∇²L(θ*), is GD's linear stability
threshold, and η*(B) ≤ 2/λ_max is SGD's mean-square one (``popdyn.sgd_threshold``): at η ≤ η*(B), E‖θ_t − θ*‖² of
linearised SGD with minibatches of B stays bounded from every start; above, it grows from some start. Then "not a
minimum": the run did not end at a minimum (its status is not converged or converged_late); "no threshold": it did,
but SGD's condition is not defined there (``sgd_reason`` says why: H = 0, or negative curvature of H). Last, at an
end point on a valley of minima (``valley``: the examples' Hessians act on flat directions of H, so η*(B) = 0):
η ≤ η*_⊥(B), the threshold across the valley (``SGDStability.transverse_thresholds``), where SGD stays near the
valley and moves along it; η*_⊥(B) < η ≤ 2/λ_max, where it leaves the valley (η > 2/λ_max is "unstable for
both")."""

SGD_FIELDS = (
    "batch",
    "replace",
    "sgd_threshold",
    "gd_threshold",
    "sgd_verdict",
    "sgd_reason",
    "transverse_threshold",
    "valley",
    "valley_growth",
    "valley_diffusion",
)
"""The fields of an ``AuditRow`` that an audit with a minibatch size B fills in."""


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
    - ``loss_rises``: how often the loss rose between records by more than 1e-12·max(|L_0|, |L_t|) (``rise_slack``,
      L_0 at the run's start); ``status``: the run's status name;
      ``final_loss``: its loss at the end point.
    - With a minibatch size (``step_size_audit(..., batch=B)``; else None, NaN and ""): ``batch`` B and ``replace``
      the sampling; ``sgd_threshold`` η*(B) and ``gd_threshold`` 2/λ_max at the end point (NaN where the end point
      is not a minimum); ``sgd_verdict``: one of ``SGD_VERDICTS``; ``sgd_reason``: why there is no threshold;
      ``transverse_threshold``: η*_⊥(B), the threshold across a valley of minima (η*(B) itself off a valley);
      ``valley``: the end point is on a valley where η*(B) = 0; ``valley_growth``: η²p·λ_max(E_i N_i²), one step's
      largest relative growth of E‖δ‖² along the flat directions from an offset there; ``valley_diffusion``:
      η²c_B tr(VᵀΣV), the mean square one step from θ* adds along them (``SGDStability``'s fields at the run's η).
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
    batch: int | None = None
    replace: bool | None = None
    sgd_threshold: float = float("nan")
    gd_threshold: float = float("nan")
    sgd_verdict: str = ""
    sgd_reason: str = ""
    transverse_threshold: float = float("nan")
    valley: bool = False
    valley_growth: float = float("nan")
    valley_diffusion: float = float("nan")

    def json(self) -> JSONRow:
        """The row for ``summary.json``: its fields in order, the three momentum fields only when μ > 0, the
        ``SGD_FIELDS`` only with a minibatch size."""
        row = self._asdict()
        dropped = () if self.momentum else ("momentum", "monotone_threshold", "stability_threshold")
        for name in dropped + (SGD_FIELDS if self.batch is None else ()):
            del row[name]
        return row


@dataclass(frozen=True)
class StepSizeAudit:
    """Per initialisation (leading axis when batched): λ_max at each record time, its maximum and its value at the
    end, the first record time where it exceeds 1/η and 2/η (NaN: never), how often the loss rose, and the run's
    status and loss at its end point (``final_loss``, never a padded record). ``lr`` is one
    rate, or one per initialisation (a step-size sweep); ``momentum`` μ the heavy-ball momentum of the run, which
    moves the two thresholds to (1 − √μ)²/η and 2(1 + μ)/η (the ``first_above_…`` fields are then the first
    times above those). For one (unbatched) run the per-initialisation values are NumPy scalars or 0-d arrays.

    With a minibatch size ``batch`` B (``step_size_audit(..., batch=B, replace=...)``; else None): per
    initialisation, ``sgd_threshold`` η*(B), SGD's mean-square threshold, and ``gd_threshold`` 2/λ_max, GD's, at the
    end point (NaN where it is not a minimum, or SGD's condition is not defined there), and ``sgd_reason``, why not
    ("" where computed); ``sgd_verdicts()`` sets the run's η against them (``SGD_VERDICTS``). On a valley of minima
    (``valley``, where η*(B) = 0) against ``transverse_threshold`` η*_⊥(B) instead, with the motion along the valley
    at the run's η, ``valley_growth`` and ``valley_diffusion`` (``AuditRow``)."""

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
    batch: int | None = None
    replace: bool | None = True
    sgd_threshold: np.ndarray | np.number | None = None
    gd_threshold: np.ndarray | np.number | None = None
    sgd_reason: np.ndarray | str | None = None
    transverse_threshold: np.ndarray | np.number | None = None
    valley: np.ndarray | np.bool_ | None = None
    valley_growth: np.ndarray | np.number | None = None
    valley_diffusion: np.ndarray | np.number | None = None

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

    @property
    def sgd_verdict_code(self) -> np.ndarray:
        """Index into ``SGD_VERDICTS`` per initialisation: the run's η against η*(B) and 2/λ_max at its end point, or
        against η*_⊥(B) and 2/λ_max on a valley (an audit with a minibatch size only: ValueError otherwise)."""
        if self.batch is None or self.sgd_threshold is None or self.gd_threshold is None:
            raise ValueError("the audit has no SGD thresholds: give step_size_audit a minibatch size, batch=B")
        lr = np.broadcast_to(self.lr, np.shape(self.status))
        at_min = np.isin(self.status, [int(s) for s in AT_MINIMUM])
        undefined = np.isnan(self.sgd_threshold)
        valley = np.asarray(False if self.valley is None else self.valley, dtype=bool)
        across = valley & (lr <= np.asarray(self.transverse_threshold, dtype=float))
        return np.select(
            [~at_min, undefined, across, valley & (lr <= self.gd_threshold), lr <= self.sgd_threshold,
             lr <= self.gd_threshold],
            [3, 4, 5, 6, 0, 1],
            default=2,
        )  # fmt: skip

    def sgd_verdicts(self) -> np.ndarray:
        """``SGD_VERDICTS`` names per initialisation."""
        return np.asarray(SGD_VERDICTS, dtype=object)[self.sgd_verdict_code]

    @property
    def sampling(self) -> str:
        """SGD's minibatches in words: "minibatches of B = 4 drawn with replacement"."""
        how = {True: "drawn with replacement", False: "drawn without replacement", None: "of online draws"}
        return f"minibatches of B = {self.batch} {how[self.replace]}"

    def run(self, i: int) -> StepSizeAudit:
        """The audit of run ``i`` of a batch (e.g. one η of a sweep), unbatched: for figures and tables."""
        shared = ("momentum", "batch", "replace")

        def part(name: str):
            value = getattr(self, name)
            if name in shared or value is None or (name == "lr" and np.ndim(self.lr) == 0):
                return value
            return np.asarray(value)[i]

        return StepSizeAudit(**{f.name: part(f.name) for f in fields(self)})

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
        row = AuditRow(
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
        if self.batch is None:
            return row
        return row._replace(
            batch=self.batch,
            replace=self.replace,
            sgd_threshold=float(np.asarray(self.sgd_threshold)[i]),
            gd_threshold=float(np.asarray(self.gd_threshold)[i]),
            sgd_verdict=SGD_VERDICTS[int(self.sgd_verdict_code[i])],
            sgd_reason=str(np.asarray(self.sgd_reason, dtype=object)[i]),
            transverse_threshold=float(np.asarray(self.transverse_threshold)[i]),
            valley=bool(np.asarray(self.valley)[i]),
            valley_growth=float(np.asarray(self.valley_growth)[i]),
            valley_diffusion=float(np.asarray(self.valley_diffusion)[i]),
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

    def sgd_words(self, i=()) -> str:
        """Run ``i``'s end point in words (the only run when unbatched): GD's 2/λ_max and SGD's η*(B) there, and
        the verdict on its η (``SGD_VERDICTS``), or why there is none."""
        r = self.row(i)
        if r.sgd_verdict in SGD_VERDICTS[3:5]:
            return f"{r.sgd_verdict}: {r.sgd_reason}"
        across = f", η*_⊥(B) = {r.transverse_threshold:.6g} across the valley" if r.valley else ""
        at = f"2/λ_max = {r.gd_threshold:.6g}, η*(B) = {r.sgd_threshold:.6g}{across} at the end point"
        return f"{at}: {r.sgd_verdict}"


def thresholds(lr, momentum: float = 0.0) -> tuple:
    """((1 − √μ)²/η, 2(1 + μ)/η): the curvatures below which heavy-ball GD at rate η and momentum μ does not
    oscillate, and is stable, on a quadratic; 1/η and 2/η for μ = 0."""
    lr = np.asarray(lr, dtype=float)
    low, edge = (1.0 - np.sqrt(momentum)) ** 2 / lr, 2.0 * (1.0 + momentum) / lr
    return (float(low), float(edge)) if lr.ndim == 0 else (low, edge)


RISE_TOL = 1e-12
"""Relative size of a change of the loss that counts as a rise (``rise_slack``) [our choice]: about 4,500 ε."""


def rise_slack(loss: np.ndarray, rel: float = RISE_TOL) -> np.ndarray:
    """How much the loss may rise between consecutive records before it counts as rising: rel·max(|L_0|, |L_t|),
    L_0 the run's first record (the last axis is the records'), so round-off at the run's own scale is no rise and
    nothing changes when L is scaled. One entry per step t → t + 1.

    **Arguments:** ``loss`` the records, the last axis over time; ``rel`` the relative slack."""
    start = np.abs(loss[..., :1])
    return rel * np.maximum(np.where(np.isfinite(start), start, 0.0), np.abs(loss[..., :-1]))


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


def check_sgd(prob: Problem, batch, replace: bool | None = True, momentum: float = 0.0) -> None:
    """Refuse, before anything is computed, an audit with a minibatch size that cannot be made: ValueError when
    ``prob`` declares no examples (the refusal of ``prob.examples()``, naming the problem), for a bad ``batch`` or
    ``replace`` (as ``popdyn.gradient_noise``), above ``MAX_DIM`` parameters, or with momentum (η*(B) is plain SGD's
    condition).

    **Arguments:**

    - ``prob``: the Problem of the runs; ``batch``: B, one integer ≥ 1 (≤ n without replacement).
    - ``replace``: True (i.i.d. draws), False (B-subsets of n equally weighted examples), None (online draws).
    - ``momentum``: the runs' heavy-ball μ; must be 0.
    """
    try:
        measure = check_measure("prob.examples()", checked(prob).examples())
    except ValueError as err:
        raise ValueError(f"batch={batch!r} needs the problem's examples: {err}") from None
    _check_sampling(_validate.int_at_least("batch", batch, 1), replace, measure)
    if momentum:
        raise ValueError(
            f"batch={batch!r} with momentum={momentum!r}: η*(B) is the condition of plain SGD, not of SGD with "
            "heavy-ball momentum; audit a run without momentum"
        )
    d = prob.n_params()
    if d > MAX_DIM:
        raise ValueError(f"batch={batch!r} is out of reach: θ has d = {d} parameters, η*(B) takes at most {MAX_DIM}")


def run_saddle_tol(traj: Trajectory) -> float:
    """The saddle_tol the SGD thresholds at a run's end points take: the run's own (its ``Steady`` rule's), the
    default ``Steady().saddle_tol`` where the run has none or it is 0."""
    rule = getattr(traj.dynamics, "stopping", None)
    return (rule if isinstance(rule, Steady) and rule.saddle_tol > 0 else Steady()).saddle_tol


class _AtEnds(NamedTuple):
    """SGD's condition at each run's end point (``_sgd_at_ends``), each shaped as the runs' statuses: η*(B),
    2/λ_max and why not (``sgd_threshold``, ``gd_threshold``, ``sgd_reason``); η*_⊥(B) and whether the point is on
    a valley where η*(B) = 0 (``transverse_threshold``, ``valley``); per unit η², p·λ_max(E_i N_i²) and
    c_B tr(VᵀΣV) (``valley_growth``, ``valley_diffusion``)."""

    sgd_threshold: np.ndarray
    gd_threshold: np.ndarray
    sgd_reason: np.ndarray
    transverse_threshold: np.ndarray
    valley: np.ndarray
    valley_growth: np.ndarray
    valley_diffusion: np.ndarray


def _sgd_at_ends(prob: Problem, traj: Trajectory, batch: int, replace: bool | None) -> _AtEnds:
    """SGD's condition at each run's end point (``_AtEnds``): one ``mean_square_stability`` per end point at a
    minimum (its examples' Hessians once), with the run's own saddle_tol (the default where that is 0); NaN (and not
    a valley) with the reason elsewhere, and where SGD's condition is refused at the point."""
    status = np.asarray(traj.status)
    ends = jax.tree_util.tree_map(lambda x: np.reshape(x, (-1, *np.shape(x)[status.ndim :])), traj.final)
    saddle_tol = run_saddle_tol(traj)
    at_minimum = [int(s) for s in AT_MINIMUM]
    eta, gd, across, growth, spread = (np.full(status.size, np.nan) for _ in range(5))
    reasons, valley = np.full(status.size, "", dtype=object), np.zeros(status.size, bool)
    for i, code in enumerate(status.ravel()):
        if int(code) not in at_minimum:
            reasons[i] = f"the run ended with status {STATUS_NAMES[code]}"
            continue
        end = jax.tree_util.tree_map(operator.itemgetter(i), ends)
        try:
            found = mean_square_stability(prob, end, batch, replace, saddle_tol=saddle_tol)
        except ValueError as err:  # the inputs were checked (check_sgd): what is refused is the point
            reasons[i] = str(err)
            continue
        eta[i], gd[i] = found.thresholds[0], found.gd_threshold
        across[i], valley[i] = found.transverse_thresholds[0], found.flat_curved and found.factors[0] > 0
        growth[i], spread[i] = found.factors[0] * found.valley_curvature, found.valley_diffusion[0]
    return _AtEnds(*(v.reshape(status.shape) for v in (eta, gd, reasons, across, valley, growth, spread)))


def step_size_audit(
    prob: Problem,
    traj: Trajectory,
    lr=None,
    method: str = "auto",
    momentum: float | None = None,
    *,
    batch: int | None = None,
    replace: bool | None = True,
) -> StepSizeAudit:
    """Audit a trajectory recorded with θ at every record (``SaveAt(params=True)``, ``save_params=True``) against its
    learning rate η and heavy-ball momentum μ; with a minibatch size B, also against GD's 2/λ_max and SGD's η*(B)
    at each end point that is a minimum (``SGD_VERDICTS``).

    **Arguments:**

    - ``prob``: the Problem the run was on.
    - ``traj``: the run. A run of ``GradientDescent`` carries η (one, or one per initialisation) and μ.
    - ``lr``, ``momentum``: only for a run that does not carry them (e.g. a flow audited against a step size).
    - ``method``: how λ_max is computed (``popdyn.lambda_max``).
    - ``batch``: None, or SGD's minibatch size B: ``prob`` must declare its examples (``Problem.from_examples``),
      and the run must have no momentum (``check_sgd``). At every end point whose status is converged or
      converged_late, ``popdyn.mean_square_stability`` gives η*(B) and 2/λ_max, with the run's saddle_tol;
      elsewhere they are NaN, with the reason, and the run's verdict is "not a minimum" (a point where SGD's
      condition is refused, H = 0 say, gets "no threshold": the batch of runs never stops for one of them).
    - ``replace``: how SGD draws its minibatches: True (i.i.d., with replacement), False (a B-subset of n equally
      weighted examples), None (online draws); as ``popdyn.gradient_noise``.
    """
    if traj.params is None:
        raise ValueError("traj has no saved parameters: run gradient_descent/gradient_flow with save_params=True")
    lr, momentum = _run_settings(traj, lr, momentum)
    ts = np.asarray(traj.ts)
    lead = ts.shape  # (*B, T)
    lr = _rates(lr, lead)
    momentum = _validate.half_open_unit("momentum", momentum)
    if batch is not None:
        check_sgd(prob, batch, replace, momentum)
    low, edge = (np.asarray(t)[..., None] for t in thresholds(lr, momentum))
    flat = jax.tree_util.tree_map(lambda x: x.reshape((-1, *x.shape[len(lead) :])), traj.params)
    lam = np.asarray(lambda_max(prob, flat, method=method)).reshape(lead)
    lam = np.where(np.isfinite(ts), lam, np.nan)
    loss = np.asarray(traj.loss)
    rises = np.sum(np.diff(loss, axis=-1) > rise_slack(loss), axis=-1)
    safe = np.where(np.isfinite(lam), lam, -np.inf)
    last = np.maximum(np.sum(np.isfinite(lam), axis=-1) - 1, 0)
    audit = StepSizeAudit(
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
    if batch is None:
        return audit
    ends = _sgd_at_ends(prob, traj, int(batch), replace)
    step = np.broadcast_to(np.asarray(lr, dtype=float) ** 2, np.shape(audit.status))  # η² per run
    ends = ends._replace(valley_growth=step * ends.valley_growth, valley_diffusion=step * ends.valley_diffusion)
    return replace_fields(audit, batch=int(batch), replace=None if replace is None else bool(replace), **ends._asdict())
