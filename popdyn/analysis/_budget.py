"""How far the runs that ran out of budget got, in the problem's own time scale (docs/dynamics.md, "Runs that ran
out of budget").

A run whose budget ran out (status MAX_STEPS: the flow's t1 or max_steps, GD's steps) is read at its end point θ_T,
with T its horizon in flow time (t for the flow; GD's steps·η/(1 − μ), the flow time its steps stand for), from the
spectral decomposition of the gradient g = ∇L(θ_T) on the Hessian H = ∇²L(θ_T): eigenpairs (λ_k, u_k) and the
components c_k = u_k·g (the exact spectrum up to ``EXACT_MAX_DIM`` parameters; above, Lanczos from g,
``popdyn.curvature.krylov_pairs``). With ρ = max|λ_k| and the run's saddle_tol, a direction is negative when
λ_k < −saddle_tol·ρ, positive when λ_k > saddle_tol·ρ, flat otherwise. Each run is one ``Motion``:

* **escaping**: it moves out to ‖θ‖ → ∞ with L falling to a limit (``popdyn.analysis._unresolved.outward``): no
  horizon resolves it;
* **plateau**: H has a negative eigenvalue: near a saddle, the flow leaves along u_min at the rate |λ_min|, so the
  time scale is τ = 1/|λ_min|;
* **flat**: else, when the gradient has a Newton component c_k/(saddle_tol·ρ) beyond the state tolerance along a
  flat direction: no finite time scale;
* **relaxing**: else, towards the minimum of the quadratic model: τ = 1/λ of the slowest positive direction whose
  Newton component |c_k|/λ_k is still beyond the state tolerance δ* = atol + rtol·‖θ* ‖ (θ* = θ_T − Σ_k c_k/λ_k u_k
  over the positive directions, the model's minimum; atol, rtol the run's stopping rule).

How fast it still moves: r = T·‖g‖²/h, the fraction of the height h it still has to fall that the loss would lose
over another horizon T at its present speed (dL/dt = −‖g‖² on the flow). h is the height above where the run is
going: ½ Σ c_k²/λ_k over the positive directions when relaxing (the quadratic model's minimum, exact on a quadratic);
L − L(2⁴⁰θ) when escaping (the ray's limit); on a plateau or along flat directions, L − L_low where the lowest end-point
loss of the batch, L_low, lies below L by more than ``PLATEAU_TOL``·max(S, |L|), else S, the loss scale of the starts
(a plateau is left by falling a loss of the problem's own scale). Every quantity scales with L: multiplying L by
c > 0 divides the time scales by c and leaves r (with T/c) unchanged.

The horizon it needs, T*: relaxing, T plus the time t at which the model's Newton distance √(Σ (c_k/λ_k)² e^{−2λ_k t})
falls to δ* (exact on a quadratic); on a plateau, T + τ·(½ ln(h/D) + 2 ln(x_e/δ_e)): the unstable directions' share
of the fall, D = Σ c_k²/(2|λ_k|) over the negative ones, grows as e^{2t/τ} until it reaches h (the escape), and the
run then relaxes from the escape's distance x_e = √(2h/|λ_min|) to δ_e = atol + rtol·(‖θ_T‖ + x_e) at half the
escape rate (``SETTLE``: the destination's curvature is not known at θ_T);
escaping and flat runs need an infinite one. ``BudgetSummary.settings`` rounds the 90th percentile of T* over the runs
that have one up to 1, 2 or 5 × 10ᵏ.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from popdyn.analysis._labellers import loss_scale
from popdyn.analysis._unresolved import PLATEAU_TOL, outward, ray_profile
from popdyn.curvature import EXACT_MAX_DIM, hessian_matrix, krylov_pairs
from popdyn.dynamics import AbstractDynamics, GradientDescent, GradientFlow, Status, Steady, Trajectory
from popdyn.problem import Problem, Theta

LANCZOS_ITERS = 64
"""Lanczos steps from ∇L above ``EXACT_MAX_DIM`` parameters (``popdyn.curvature.krylov_pairs``)."""

SETTLE = 2.0
"""After escaping a plateau a run relaxes at its destination, whose curvature θ_T does not show: it is allowed the
time scale SETTLE·τ (half the escape rate), which covers a minimum up to SETTLE times flatter than the saddle is
steep (the soft committee machine's is 1.4 times: tests/test_budget.py)."""

QUANTILE = 0.9
"""The suggested horizon is this quantile of the horizons the runs need (those that have a finite one)."""


class Motion(enum.IntEnum):
    """What a run that ran out of budget is doing at its end point (the module docstring has the tests)."""

    PLATEAU = 0
    RELAXING = 1
    ESCAPING = 2
    FLAT = 3


MOTION_NAMES = tuple(m.name.lower() for m in Motion)


def flow_time_unit(dynamics: AbstractDynamics | None) -> float | np.ndarray | None:
    """The flow time one unit of a run's ``t_final`` stands for: 1 for a gradient flow, η/(1 − μ) for plain or
    heavy-ball GD (per start where η is), the time the slow modes of heavy ball move at; None for any other dynamics
    (preconditioned, per-block rates, an optimizer, proximal steps, or a dynamics of one's own), whose motion is not
    the gradient flow's.

    **Arguments:** ``dynamics``: the dynamics that ran (``Trajectory.dynamics``)."""
    if isinstance(dynamics, GradientFlow):
        plain = dynamics.precondition is None and dynamics.time_scales is None
        return 1.0 if plain else None
    if isinstance(dynamics, GradientDescent):
        hooks = (dynamics.optimizer, dynamics.precondition, dynamics.time_scales, dynamics.prox)
        return np.asarray(dynamics.lr, float) / (1.0 - dynamics.momentum) if all(h is None for h in hooks) else None
    return None


@dataclass(frozen=True)
class BudgetSummary:
    """A ``BudgetReport`` in a few numbers (``BudgetReport.summary``); times are flow times.

    - ``runs``, ``ran_out``: the starts, and how many ran out of budget; ``motions``: how many of those per
      ``Motion`` name.
    - ``unit``: the run's own unit ("time" or "step"); ``budget``: the median end of the runs that ran out in it
      (flow time, or GD steps), ``horizon`` in flow time; ``solver_steps``: how many flows ran out of solver steps
      (max_steps) before t1.
    - ``motion``: the most common motion with a finite time scale ("plateau" or "relaxing"; None: none has one);
      ``time_scale``: the median τ of its runs; ``level``: their median loss; ``rate``: the median r of all.
    - ``needed``: the ``QUANTILE`` of the horizons T* the runs need (NaN: none has a finite one).
    - ``settings``: (setting of the dynamics, value) to raise: ("t1", …) and ("max_steps", …) for the flow,
      ("steps", …) for GD, each rounded up to 1, 2 or 5 × 10ᵏ and given only where above the run's own.
    """

    runs: int
    ran_out: int
    motions: dict[str, int]
    unit: str
    budget: float
    horizon: float
    solver_steps: int
    motion: str | None
    time_scale: float
    level: float
    rate: float
    needed: float
    settings: tuple[tuple[str, float | int], ...]

    def json(self) -> dict[str, Any]:
        """The summary as summary.json holds it (``settings`` as {name: value})."""
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"settings": dict(self.settings)}


@dataclass(frozen=True)
class BudgetReport:
    """Per start (one flat axis of n, in the order of the run's starts): whether it ran out of budget, and for those
    that did (NaN, or −1 for ``motion``, elsewhere) its ``Motion``, horizon T (flow time), loss, rate r, height h,
    time scale τ (inf: none), the horizon T* it needs (flow time; inf: none) and ``steps``, the budget in the run's
    own steps at which it would reach T* (GD steps, or the flow's solver steps at its rate so far); the module
    docstring has the definitions. ``dynamics`` is the dynamics that ran."""

    ran_out: np.ndarray
    motion: np.ndarray
    horizon: np.ndarray
    loss: np.ndarray
    rate: np.ndarray
    height: np.ndarray
    time_scale: np.ndarray
    needed: np.ndarray
    steps: np.ndarray
    budget: np.ndarray
    dynamics: AbstractDynamics

    @staticmethod
    def join(reports: Sequence[BudgetReport]) -> BudgetReport:
        """One report over the starts of several (a sweep's points), of the first one's dynamics."""
        names = [f.name for f in fields(BudgetReport) if f.name != "dynamics"]
        arrays = {k: np.concatenate([getattr(r, k) for r in reports]) for k in names}
        return BudgetReport(**arrays, dynamics=reports[0].dynamics)

    def summary(self) -> BudgetSummary:
        """The report in a few numbers (``BudgetSummary``)."""
        out = self.ran_out
        motion = self.motion[out]
        finite = np.isfinite(self.time_scale[out])
        counts = {name: int(np.sum(motion == m)) for m, name in enumerate(MOTION_NAMES)}
        kinds = [m for m in (Motion.PLATEAU, Motion.RELAXING) if np.any(motion[finite] == m)]
        main = max(kinds, key=lambda m: (counts[MOTION_NAMES[m]], -m)) if kinds else None
        of_main = out & (self.motion == (-2 if main is None else main))
        solver_steps = 0
        if isinstance(self.dynamics, GradientFlow):
            solver_steps = int(np.sum(self.budget[out] < self.dynamics.t1))
        return BudgetSummary(
            runs=int(out.size),
            ran_out=int(out.sum()),
            motions=counts,
            unit=self.dynamics.time_unit,
            budget=_median(self.budget[out]),
            horizon=_median(self.horizon[out]),
            solver_steps=solver_steps,
            motion=None if main is None else MOTION_NAMES[main],
            time_scale=_median(self.time_scale[of_main]),
            level=_median(self.loss[of_main]),
            rate=_median(self.rate[out]),
            needed=_quantile(self.needed[out]),
            settings=self._settings(),
        )

    def _settings(self) -> tuple[tuple[str, float | int], ...]:
        """The settings to raise (``BudgetSummary.settings``)."""
        out = self.ran_out
        dyn = self.dynamics
        if isinstance(dyn, GradientDescent):
            return _above("steps", _quantile(self.steps[out]), dyn.steps, int)
        if isinstance(dyn, GradientFlow):
            return _above("t1", _quantile(self.needed[out]), dyn.t1, float) + _above(
                "max_steps", _quantile(self.steps[out]), dyn.max_steps, int
            )
        return ()


def _median(values: np.ndarray) -> float:
    """The median of the finite values (NaN: none)."""
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else float("nan")


def _quantile(values: np.ndarray) -> float:
    """The ``QUANTILE`` of the finite values, taken at a value (NaN: none)."""
    values = values[np.isfinite(values)]
    return float(np.quantile(values, QUANTILE, method="higher")) if values.size else float("nan")


def round_up(x: float) -> float:
    """The smallest of 1, 2 and 5 × 10ᵏ that is ≥ ``x`` (> 0)."""
    k = math.floor(math.log10(x))
    return next(m * 10.0**k for m in (1, 2, 5, 10) if m * 10.0**k >= x * (1 - 1e-12))


def _above(name: str, value: float, current: float | int, kind: type) -> tuple[tuple[str, float | int], ...]:
    """((name, ``value`` rounded up)) where it is above ``current``, else ()."""
    if not np.isfinite(value) or value <= current:
        return ()
    return ((name, kind(round_up(value))),)


@eqx.filter_jit
def _measure(prob: Problem, batch: Theta, saddle_tol: jax.Array, iters: int) -> dict[str, jax.Array]:
    """At each end point: L, ‖g‖², ‖θ‖, ‖θ*‖, the eigenvalues λ_k and components c_k = u_k·g (exact spectrum, or
    Lanczos from g), and the ray's (cosine, L(sθ)) (``ray_profile``), in one program per problem and batch shape."""
    dense = prob.n_params() <= EXACT_MAX_DIM

    def one(theta):
        x = ravel_pytree(theta)[0]
        loss, grads = jax.value_and_grad(prob.loss)(theta)
        g = ravel_pytree(grads)[0]
        if dense:
            lam, U = jnp.linalg.eigh(hessian_matrix(prob, theta))
            vectors = U.T
        else:
            lam, vectors = krylov_pairs(prob, theta, g, iters)
        c = vectors @ g
        pos = lam > saddle_tol * jnp.max(jnp.abs(lam))
        step = vectors.T @ jnp.where(pos, c / jnp.where(pos, lam, 1.0), 0.0)
        norm, target = jnp.linalg.norm(x), jnp.linalg.norm(x - step)
        return {"loss": loss, "gg": jnp.vdot(g, g), "norm": norm, "target": target, "lam": lam, "c": c}

    out = jax.vmap(one)(batch)
    cos, along = ray_profile(prob, batch)
    return out | {"cos": cos, "along": along}


def _relax_time(x: np.ndarray, lam: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Per row, the t ≥ 0 at which √(Σ_k x_k² e^{−2λ_k t}) falls to δ (0 where it is already below), by bisection
    between 0 and the time at which every term is below δ²/K (x_k = 0 where λ_k is not positive)."""
    on = x != 0
    rate = np.where(on, lam, 1.0)
    with np.errstate(divide="ignore"):
        each = np.log(np.sqrt(max(x.shape[1], 1)) * np.abs(x) / delta[:, None]) / rate
    lo, hi = np.zeros(len(x)), np.maximum(np.max(np.where(on, each, 0.0), axis=1, initial=0.0), 0.0)
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        above = np.sum(x**2 * np.exp(-2.0 * rate * mid[:, None]), axis=1) > delta**2
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return hi


def _assess(
    m: dict[str, np.ndarray], horizon: np.ndarray, levels: tuple[float, float], rule: Steady
) -> dict[str, np.ndarray]:
    """Per end point (``_measure``'s ``m``, horizons T): motion, height, time scale and the horizon T* it needs
    (module docstring); ``levels`` = (S, L_low), ``rule`` the run's ``Steady``."""
    scale, low = levels
    lam, c, loss = m["lam"], m["c"], m["loss"]
    cut = rule.saddle_tol * np.max(np.abs(lam), axis=1, keepdims=True)
    neg, pos = lam < -cut, lam > cut
    x = np.where(pos, c / np.where(pos, lam, 1.0), 0.0)
    delta = rule.atol + rule.rtol * m["target"]
    far_flat = ~neg & ~pos & (np.abs(c) > delta[:, None] * np.maximum(cut, np.finfo(float).tiny))
    escaping = outward(m["cos"], m["along"], scale)
    motion = np.select(
        [escaping, neg.any(axis=1), far_flat.any(axis=1), pos.any(axis=1)],
        [Motion.ESCAPING, Motion.PLATEAU, Motion.FLAT, Motion.RELAXING],
        Motion.FLAT,
    )
    below = (loss - low) > PLATEAU_TOL * np.maximum(scale, np.abs(loss))
    height = np.select(
        [motion == Motion.ESCAPING, motion == Motion.RELAXING],
        [loss - m["along"][:, -1], 0.5 * np.sum(c * x, axis=1)],
        np.where(below, loss - low, scale),
    )
    lam_min = np.min(lam, axis=1)
    relevant = pos & (np.abs(x) > delta[:, None])  # else the slowest positive direction the gradient has a part in
    relevant = np.where(relevant.any(axis=1, keepdims=True), relevant, pos & (c != 0))
    slowest = np.min(np.where(relevant, lam, np.inf), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        relax = np.where(np.isfinite(slowest), 1.0 / slowest, np.inf)
        tau = np.select([motion == Motion.PLATEAU, motion == Motion.RELAXING], [-1.0 / lam_min, relax], np.inf)
        drop = np.sum(np.where(neg, c**2 / (2.0 * np.abs(lam)), 0.0), axis=1)
        escape = 0.5 * np.log(np.maximum(height / np.maximum(drop, np.finfo(float).eps ** 2 * height), 1.0))
        reach = np.sqrt(2.0 * height / np.abs(lam_min))
        settle = SETTLE * np.log(np.maximum(reach / (rule.atol + rule.rtol * (m["norm"] + reach)), 1.0))
    extra = np.select(
        [motion == Motion.PLATEAU, motion == Motion.RELAXING],
        [tau * (escape + settle), _relax_time(x, lam, delta)],
        np.inf,
    )
    return {"motion": motion, "height": height, "time_scale": tau, "needed": horizon + extra}


def _padded(n: int) -> int:
    """The batch size ``n`` starts are evaluated at: the next power of two, so few shapes compile."""
    return 1 << max(n - 1, 0).bit_length()


def _found(
    prob: Problem, traj: Trajectory, idx: np.ndarray, horizon: np.ndarray, rule: Steady
) -> dict[str, np.ndarray]:
    """``_assess`` of the end points ``idx`` of ``traj`` (flat indices; horizons T; ``rule`` the run's stopping rule),
    with their loss and ‖g‖²: the points are gathered on the host and padded to a power of two (``_padded``) by
    repeating the first."""
    status = np.asarray(traj.status)
    n = status.size
    leaves = jax.tree_util.tree_map(lambda v: np.reshape(np.asarray(v), (n, *np.shape(v)[status.ndim :])), traj.final)
    pick = np.concatenate([idx, np.full(_padded(idx.size) - idx.size, idx[0])])
    measured = _measure(
        prob, jax.tree_util.tree_map(lambda v: v[pick], leaves), jnp.asarray(rule.saddle_tol), LANCZOS_ITERS
    )
    m = {k: np.asarray(v)[: idx.size] for k, v in measured.items()}
    final_loss = np.ravel(np.asarray(traj.final_loss, float))
    low = float(np.min(final_loss, initial=np.inf, where=np.isfinite(final_loss)))
    return _assess(m, horizon, (loss_scale(traj), low), rule) | {"loss": m["loss"], "gg": m["gg"]}


def budget_report(prob: Problem, traj: Trajectory) -> BudgetReport:
    """How far each run of ``traj`` that ran out of budget (status MAX_STEPS) got, in the problem's own time scale:
    what it is doing (``Motion``), how fast it still moves (r), its time scale τ and the horizon T* it needs
    (the module docstring and docs/dynamics.md, "Runs that ran out of budget"). Nothing is computed when no run ran
    out; the Hessians are taken at those end points only, in one jitted program per power-of-two batch size.

    **Arguments:**

    - ``prob``: the Problem that ran.
    - ``traj``: its run (one start or a batch) by a gradient flow or plain or heavy-ball GD
      (``flow_time_unit``); its ``dynamics`` supplies the horizon's unit and the stopping rule's tolerances.
    """
    dyn = traj.dynamics
    unit = flow_time_unit(dyn)
    if unit is None or not isinstance(dyn, (GradientFlow, GradientDescent)):
        raise ValueError(
            f"traj.dynamics={type(dyn).__name__}: budget_report reads runs of a plain gradient flow or of "
            "plain or heavy-ball GD (no preconditioner, per-block rates, optimizer or proximal step)"
        )
    status = np.ravel(np.asarray(traj.status))
    n = status.size
    ran_out = status == int(Status.MAX_STEPS)
    budget = np.where(ran_out, np.ravel(np.asarray(traj.t_final, float)), np.nan)
    horizon = budget * np.broadcast_to(unit, (n,))
    used = np.ravel(np.asarray(traj.n_steps, float))
    report = {k: np.full(n, np.nan) for k in ("loss", "rate", "height", "time_scale", "needed", "steps")}
    report["motion"] = np.full(n, -1)
    idx = np.flatnonzero(ran_out)
    if idx.size:
        found = _found(prob, traj, idx, horizon[idx], dyn.stopping)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(found["height"] > 0, horizon[idx] * found["gg"] / found["height"], np.nan)
            gd = isinstance(dyn, GradientDescent)
            per = np.broadcast_to(unit, (n,))[idx] if gd else horizon[idx] / used[idx]  # flow time per step
            steps = np.ceil(found["needed"] / per)
        for k in ("motion", "loss", "height", "time_scale", "needed"):
            report[k][idx] = found[k]
        report["rate"][idx], report["steps"][idx] = rate, steps
    return BudgetReport(ran_out=ran_out, horizon=horizon, budget=budget, dynamics=dyn, **report)
