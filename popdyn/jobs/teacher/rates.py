"""Convergence rates of the bilinear teachers from zero initialisation against Theorem 3.1 (docs/models/teacher.md
§4–§7).

From W = 0, A = 0 full-matrix GD stays on the invariant manifold and *is* GD on (C1, Δ) (``TeacherReduced``,
equal to 1e-15), so the late regime — ηT up to hundreds of times the onset (D−K)⁴/(2κσ_x²vK) of §5.2 — is
reached with the exact two-scalar map, and the full model is run over the first steps to show the two agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from popdyn import _validate
from popdyn.analysis import AuditRow, StepSizeAudit, step_size_audit
from popdyn.dynamics import STATUS_NAMES, Trajectory, gradient_descent
from popdyn.jobs._records import internal, summary
from popdyn.tasks.teacher._model import BilinearTeacher
from popdyn.tasks.teacher._reduced import TeacherErrors, TeacherReduced, embed, late_constant, project
from popdyn.tasks.teacher.ood import ood_excess_linear, ood_excess_mc

HORIZON = 300.0  # the run ends at ηT = HORIZON × late onset: at the paper's sizes the 1/T constant is then within 0.3%
MAX_STEPS = 50_000_000
RECORDS = 2000
NO_STOP = 1e-30  # gtol: the gradient decays like 1/T²; runs go to their step budget, never "converged"
POSTER = {
    "excess": "Θ(K·D⁴/(ηT))",
    "w_error": "Θ(D²·√K/√(ηT))",
    "s_error": "Θ(D^{5/2}·‖V*‖/√(ηT))",
    "T_star": "Θ(K·D²/(η·‖V*‖²))",
}
SLOPES = {"excess": -1.0, "w_error": -0.5, "s_error": -0.5}


def _reduced_run(red: TeacherReduced, lr: float, steps: int, record_every: int, theta0=None):
    theta0 = red.init(None) if theta0 is None else theta0
    return gradient_descent(
        red,
        theta0,
        lr=lr,
        steps=steps,
        record_every=record_every,
        save_params=True,
        precondition=red.precondition,
        gtol=NO_STOP,
    )


def reduced_records(
    red: TeacherReduced, lr: float, steps: int, early: int
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], str]:
    """The exact reduced GD map from zero for ``steps`` steps, recorded finely (~4000 records) over the first
    ``early`` steps and then ~``RECORDS`` times: (steps, losses, {"C1", "Delta"}) at the records, and the
    engine's status of the run ("max_steps" unless it diverged or produced NaN)."""
    early = min(early, steps)
    e_every = max(1, early // 4000)
    early = e_every * max(early // e_every, 1)
    first = _reduced_run(red, lr, early, e_every)
    parts = [(np.asarray(first.ts), np.asarray(first.loss), first.params)]
    status = first.status_names[int(first.status)]
    rest = steps - early
    if rest > 0:
        every = max(1, rest // RECORDS)
        rest = every * (rest // every)
        second = _reduced_run(red, lr, rest, every, first.final)
        parts.append(
            (
                early + np.asarray(second.ts)[1:],
                np.asarray(second.loss)[1:],
                {k: v[1:] for k, v in second.params.items()},
            )
        )
        status = status if status != "max_steps" else second.status_names[int(second.status)]
    ts = np.concatenate([p[0] for p in parts])
    loss = np.concatenate([p[1] for p in parts])
    params = {k: np.concatenate([np.asarray(p[2][k]) for p in parts]) for k in ("C1", "Delta")}
    return ts, loss, params, status


def _fit_slope(t: np.ndarray, y: np.ndarray) -> float:
    ok = np.isfinite(y) & (y > 0)
    return float(np.polyfit(np.log(t[ok]), np.log(y[ok]), 1)[0])


def half_step(ts: np.ndarray, Kp: np.ndarray) -> float | None:
    """The first step with K·p ≥ 1/2, linearly interpolated between records; None if never."""
    hit = np.flatnonzero(Kp >= 0.5)
    if not hit.size:
        return None
    i = int(hit[0])
    if i == 0:
        return float(ts[0])
    return float(ts[i - 1] + (0.5 - Kp[i - 1]) / (Kp[i] - Kp[i - 1]) * (ts[i] - ts[i - 1]))


class FullModelCheck(NamedTuple):
    """Full-matrix GD from zero against the reduced map (§4, ``full_model_check``).

    - ``steps``: the GD steps of both runs.
    - ``max_abs_C1``, ``max_abs_Delta``: the largest |ΔC1| and |ΔΔ| between the projected full θ and the reduced θ.
    - ``max_rel_loss``: the largest relative difference of their losses.
    - ``max_off_manifold``: the largest entry of the full θ minus its projection embedded back (W and A).
    """

    steps: int
    max_abs_C1: float
    max_abs_Delta: float
    max_rel_loss: float
    max_off_manifold: float


def full_model_check(prob: BilinearTeacher, red: TeacherReduced, lr: float, steps: int) -> FullModelCheck:
    """Full-matrix GD from zero for ``steps`` steps (rounded down to a multiple of the record interval
    ⌊steps/20⌋) against the reduced map, as a ``FullModelCheck``.

    **Arguments:**

    - ``prob``: the teacher; ``red``: its reduced system (``TeacherReduced.from_teacher``).
    - ``lr``: the step η of both runs; ``steps``: how many GD steps.
    """
    every = max(1, steps // 20)
    steps = every * (steps // every)
    full = gradient_descent(
        prob, prob.init(None), lr=lr, steps=steps, record_every=every, save_params=True, gtol=NO_STOP
    )
    ref = _reduced_run(red, lr, steps, every)
    proj = jax.vmap(lambda th: project(prob, th))(full.params)
    back = jax.vmap(lambda th: embed(prob, th))(proj)
    off = max(float(jnp.max(jnp.abs(full.params[b] - back[b]))) for b in ("W", "A"))  # type: ignore[index]  # save_params=True: full.params holds θ
    return FullModelCheck(
        steps=steps,
        max_abs_C1=float(jnp.max(jnp.abs(proj["C1"] - ref.params["C1"]))),
        max_abs_Delta=float(jnp.max(jnp.abs(proj["Delta"] - ref.params["Delta"]))),
        max_rel_loss=float(jnp.max(jnp.abs(full.loss - ref.loss) / ref.loss)),
        max_off_manifold=off,
    )


class TeacherAudit(NamedTuple):
    """One (unbatched) run's step-size audit as the teacher jobs report it (§6, ``audit_summary``).

    - ``steps``: the record steps; ``lambda_max``: λ_max(θ_t) of the full Hessian there.
    - ``row``: the audit in numbers (``StepSizeAudit.row``: max and end λ_max against 1/η and 2/η, the verdict,
      loss rises); ``stable``: never past the stability edge 2/η.
    """

    steps: np.ndarray
    lambda_max: np.ndarray
    row: AuditRow

    @property
    def stable(self) -> bool:
        """λ_max stayed at or below 2/η (2(1 + μ)/η with momentum) at every record."""
        return not self.row.past_stability_edge

    def json(self) -> dict[str, Any]:
        """The audit for ``summary.json``: ``steps``, ``lambda_max``, the row's fields (``AuditRow.json``) and
        ``stable``."""
        return {"steps": self.steps, "lambda_max": self.lambda_max, **self.row.json(), "stable": self.stable}


def audit_summary(audit: StepSizeAudit) -> TeacherAudit:
    """One (unbatched) run's step-size audit as a ``TeacherAudit``. Shared by ``rates`` (``popdyn converge
    teacher``) and ``stepsize_teacher``.

    **Arguments:**

    - ``audit``: the ``step_size_audit`` of one run.
    """
    return TeacherAudit(steps=np.asarray(audit.ts), lambda_max=np.asarray(audit.lambda_max), row=audit.row())


class OODExcess(NamedTuple):
    """The excess OOD loss along a run (§7, ``ood_excess``).

    - ``steps``: ~30 log-spaced record steps; ``excess``: the excess OOD loss there.
    - ``se``: its standard errors (0 when ``exact``); ``exact``: computed in closed form (identity, inputs with
      mean 1 and variance 1) rather than by Monte Carlo with Exp(1) inputs.
    - ``slope``: its log-log slope in ηT over the last decade; None with fewer than two points there.
    """

    steps: np.ndarray
    excess: np.ndarray
    se: np.ndarray
    slope: float | None
    exact: bool


def records_trajectory(
    prob: BilinearTeacher, ts: np.ndarray | jax.Array, params: dict, loss: np.ndarray | jax.Array, status: str
) -> Trajectory:
    """A one-run ``Trajectory`` of full-model records: (C1, Δ) records of the reduced map embedded exactly as
    (W, A) (``embed``), with their losses (the reduced loss is the full one) and the run's status, so that
    ``step_size_audit`` can audit them with the full Hessian."""
    full = jax.vmap(lambda th: embed(prob, th))(params)
    last = jax.tree_util.tree_map(lambda x: x[-1], full)
    ts, loss = jnp.asarray(ts, dtype=jnp.result_type(float)), jnp.asarray(loss)
    return Trajectory(
        final=last,
        final_loss=loss[-1],
        status=jnp.asarray(STATUS_NAMES.index(status), jnp.int32),
        t_final=ts[-1],
        ts=ts,
        loss=loss,
        grad_norm=jnp.full_like(loss, jnp.nan),
        params=full,
        n_steps=jnp.asarray(ts[-1], jnp.int32),
        time_unit="step",
    )


def default_steps(red: TeacherReduced, lr: float, horizon: float = HORIZON) -> int:
    """GD steps to ηT = ``horizon`` × late onset, at least 10⁴ and at most ``MAX_STEPS``."""
    onset = red.late_onset()
    return int(min(MAX_STEPS, max(10_000, math.ceil(_validate.positive("horizon", horizon) * onset / lr))))


@dataclass(frozen=True)
class RatesRun:
    """One zero-initialisation run of a teacher against Theorem 3.1 (docs/models/teacher.md §5–§7), as returned by
    ``rates``; ``run.json()`` is its JSON part, ``curves`` stays out of it.

    * run: step η = ``lr`` (default 1/``lambda_max_teacher``, §6), ``steps`` GD steps, the engine's ``status``,
      and ηT at the end over the late onset (D−K)⁴/(2κσ_x²vK) (``late_onset``, §5.2);
    * late regime (§5.2): ``late_constant`` = ηT·(L − L_opt) at the end against KD(D−K)/4
      (``late_constant_predicted``); ``slopes``: log-log slopes of L − L_opt, ‖W − V*‖, ‖S − S*‖ over the last
      decade of ηT against the poster's (``slopes_poster``); ``constants_vs_derived``: each measured / §5.2's
      asymptote at the end; ``poster``: the poster's Θ-forms;
    * attention (§5.3): ``half_step``, the first step with K·p ≥ 1/2 (None if never), against
      ``T_star`` = KD²/(η‖V*‖²), and their ratio ``half_over_T_star``;
    * ``audit`` (§6): λ_max(θ_t) of the full Hessian at log-spaced records against 1/η and 2/η (a ``TeacherAudit``);
    * ``ood`` (§7): the excess OOD loss at ~30 log-spaced steps, its standard errors (0 when exact), its late
      slope (an ``OODExcess``);
    * ``full_model`` (§4): full-matrix GD over the first steps against the reduced map (a ``FullModelCheck``);
    * ``curves``: the run's records (steps, L − L_opt, ‖W − V*‖, ‖S − S*‖, ε = 1 − K·p, C1, Δ).
    """

    lr: float
    steps: int
    lambda_max_teacher: float
    late_onset: float
    horizon_over_onset: float
    status: str
    late_constant: float
    late_constant_predicted: float
    slopes: dict[str, float]
    slopes_poster: dict[str, float]
    constants_vs_derived: dict[str, float]
    poster: dict[str, str]
    T_star: float
    half_step: float | None
    half_over_T_star: float | None
    audit: TeacherAudit
    ood: OODExcess
    full_model: FullModelCheck
    curves: dict[str, np.ndarray] = internal()

    def json(self) -> dict[str, Any]:
        """The JSON part: every field but ``curves`` (``popdyn.jobs._records.summary``), the audit, OOD and
        full-model records as mappings."""
        return summary(self) | {
            "audit": self.audit.json(),
            "ood": self.ood._asdict(),
            "full_model": self.full_model._asdict(),
        }


def _log_records(ts: np.ndarray, n: int) -> np.ndarray:
    """The indices of the records nearest above ``n`` log-spaced steps from 1 to the last record (duplicates
    dropped)."""
    return np.unique(np.searchsorted(ts, np.geomspace(1, ts[-1], n)))


def ood_excess(prob: BilinearTeacher, lr: float, ts: np.ndarray, params: dict, samples: int, seed: int) -> OODExcess:
    """The excess OOD loss (§7) at ~30 log-spaced records of a reduced run, embedded exactly: exact for the identity
    with Exp(1)-like moments (mean 1, variance 1), Monte Carlo with Exp(1) inputs otherwise.

    **Arguments:**

    - ``prob``: the teacher; ``lr``: the run's step η (the slope is fitted in ηT).
    - ``ts``, ``params``: the run's record steps and (C1, Δ) records (``reduced_records``).
    - ``samples``: Monte Carlo draws per record, from ``seed``.
    """
    idx = _log_records(ts, 30)
    points = jax.vmap(lambda th: embed(prob, th))(jax.tree_util.tree_map(lambda x: x[idx], params))
    exact = float(prob.alpha) == 1.0
    if exact:
        ood = np.asarray(jax.vmap(lambda th: ood_excess_linear(prob, th))(points))
        se = np.zeros_like(ood)
    else:
        keys = jax.random.split(jax.random.PRNGKey(seed), len(idx))
        est = [
            ood_excess_mc(prob, jax.tree_util.tree_map(lambda x, i=i: x[i], points), k, samples)
            for i, k in enumerate(keys)
        ]
        ood, se = (np.array([float(e[j]) for e in est]) for j in (0, 1))
    t = lr * ts[idx]
    late = t >= t[-1] / 10
    slope = _fit_slope(t[late], ood[late]) if late.sum() >= 2 else None
    return OODExcess(steps=ts[idx], excess=ood, se=se, slope=slope, exact=exact)


def _run_audit(
    prob: BilinearTeacher, lr: float, ts: np.ndarray, loss: np.ndarray, params: dict, status: str, points: int
) -> TeacherAudit:
    """``step_size_audit`` (exact λ_max of the full Hessian) at ``points`` log-spaced records of a reduced run,
    embedded exactly (``records_trajectory``); ``ts``, ``loss``, ``params``, ``status`` as ``reduced_records``
    returns them."""
    idx = _log_records(ts, points)
    at = jax.tree_util.tree_map(lambda x: x[idx], params)
    return audit_summary(step_size_audit(prob, records_trajectory(prob, ts[idx], at, loss[idx], status), lr))


def _curves(red: TeacherReduced, ts: np.ndarray, loss: np.ndarray, params: dict) -> dict[str, np.ndarray]:
    """``RatesRun.curves``: the record steps, L − L_opt, ‖W − V*‖, ‖S − S*‖, ε = 1 − K·p, C1 and Δ."""
    errors: TeacherErrors = jax.tree_util.tree_map(np.asarray, jax.vmap(red.errors)(params))
    return {
        "steps": ts,
        "excess": loss - float(red.L_opt),
        "w_error": errors.w_error,
        "s_error": errors.s_error,
        "eps": errors.eps,
        "C1": params["C1"],
        "Delta": params["Delta"],
    }


def _late_fits(
    red: TeacherReduced, lr: float, curves: dict[str, np.ndarray]
) -> tuple[dict[str, float], dict[str, float]]:
    """(slopes, constants): the log-log slopes of L − L_opt, ‖W − V*‖, ‖S − S*‖ in ηT over the last decade, and each
    at the end over §5.2's asymptote (``TeacherReduced.asymptotics``)."""
    t = lr * curves["steps"]
    late = (t >= t[-1] / 10) & (t > 0)
    slopes = {k: _fit_slope(t[late], curves[k][late]) for k in SLOPES}
    asym = red.asymptotics(float(t[-1]))._asdict()
    return slopes, {k: float(curves[k][-1] / asym[k]) for k in SLOPES}


def rates(
    prob: BilinearTeacher,
    lr: float | None = None,
    steps: int | None = None,
    full_steps: int = 2000,
    ood_samples: int = 4000,
    audit_points: int = 12,
    seed: int = 0,
    horizon: float = HORIZON,
) -> RatesRun:
    """The zero-initialisation run of ``prob`` at step ``lr`` (default 1/λ_max at the teacher, the binding
    condition of §6) for ``steps`` GD steps (default: to ηT = ``horizon`` × late onset, at most 5·10⁷; the
    onset underestimates the transient when D − K is small, e.g. D = 9, K = 3 needs ~3000), as a ``RatesRun``:

    * records are fine over the first 30 T*, for the step of K·p = 1/2;
    * the step-size audit is ``step_size_audit`` (exact λ_max of the full Hessian) at ``audit_points`` log-spaced
      records of the run, embedded exactly (``records_trajectory``);
    * the excess OOD loss (§7) is ``ood_excess``'s (``ood_samples`` Monte Carlo draws from ``seed``);
    * the full model is run over the first ``full_steps`` steps against the reduced map (``full_model_check``)."""
    red = TeacherReduced.from_teacher(prob)
    lam_teacher = prob.lambda_max_at_teacher()
    lr = 1.0 / lam_teacher if lr is None else _validate.positive("lr", lr)
    onset = red.late_onset()
    if steps is None:
        steps = default_steps(red, lr, horizon)
    steps = _validate.int_at_least("steps", steps, 10)
    t_star = red.K * red.D**2 / (lr * float(red.v))
    ts, loss, params, status = reduced_records(red, lr, steps, int(math.ceil(30 * t_star)))
    curves = _curves(red, ts, loss, params)
    slopes, constants = _late_fits(red, lr, curves)
    t_half = half_step(ts, 1.0 - curves["eps"])
    return RatesRun(
        lr=lr,
        steps=int(ts[-1]),
        lambda_max_teacher=lam_teacher,
        late_onset=onset,
        horizon_over_onset=float(lr * ts[-1] / onset),
        status=status,
        late_constant=float(lr * ts[-1] * curves["excess"][-1]),
        late_constant_predicted=late_constant(red.D, red.K),
        slopes=slopes,
        slopes_poster=SLOPES,
        constants_vs_derived=constants,
        poster=POSTER,
        T_star=t_star,
        half_step=t_half,
        half_over_T_star=None if t_half is None else t_half / t_star,
        audit=_run_audit(prob, lr, ts, loss, params, status, audit_points),
        ood=ood_excess(prob, lr, ts, params, ood_samples, seed),
        full_model=full_model_check(prob, red, lr, min(full_steps, int(ts[-1]))),
        curves=curves,
    )
