"""Theorem 2 run exactly: W and V trained by gradient descent from W₀ = 0, V₀ = cP + U(−ε/2, ε/2)
(docs/models/decision_lists.md §6, sanity runs).

``theorem2_run`` builds the instance of ``theorem2_instance`` (c, ε solved jointly at ε = nℒ₀/18), measures ℒ₀
at the actual perturbed θ₀, recomputes the A- and T-ranges from it, runs exact GD (path B, §3) with
η = 1/λ_max(θ₀), and checks the theorem's conclusions and the hypotheses its T-range rests on: the first
perfectly classifying step (§4) against the T-range, ‖V_t − cP‖ ≤ ε, η·λ_max(θ_t) ≤ 1 and the descent lemma
ℒ_{t+1} ≤ ℒ_t − (η/2)‖∇ℒ_t‖².
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from popdyn import _validate
from popdyn.analysis import lambda_max, step_size_audit
from popdyn.analysis._stepsize import rise_slack
from popdyn.dynamics import STATUS_NAMES, Trajectory, gradient_descent
from popdyn.tasks.decision_list._data import random_lists, random_perm
from popdyn.tasks.decision_list._model import DecisionList
from popdyn.tasks.decision_list._theorems import (
    Theorem2Instance,
    theorem2_A_range,
    theorem2_feasible,
    theorem2_instance,
    theorem2_T_range,
)

ROUNDING = 1e-12
"""Relative slack for float64 rounding in the descent-lemma and η·λ_max ≤ 1 checks [our choice]: with
η = 1/λ_max(θ₀) the product η·λ_max(θ₀) is 1 only up to an ulp."""


@eqx.filter_jit
def _loss(prob: DecisionList, theta):
    return prob.loss(theta)


@eqx.filter_jit
def _margins(prob: DecisionList, params):
    return jax.vmap(prob.margin)(params)


def _floats(x) -> list[float]:
    return [float(v) for v in np.asarray(x).ravel()]


@contextmanager
def _timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """Adds the wall time of the ``with`` block to ``timings`` under ``key`` (seconds)."""
    t0 = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t0


def _slice(traj: Trajectory, start: int, stop: int) -> Trajectory:
    """Records start..stop−1 of an unbatched trajectory, for auditing part of it."""
    return eqx.tree_at(
        lambda t: (t.ts, t.loss, t.grad_norm, t.params),
        traj,
        jax.tree_util.tree_map(lambda x: x[start:stop], (traj.ts, traj.loss, traj.grad_norm, traj.params)),
    )


LAMBDA_MAX0_REFERENCE = {(23, 20, 1): 1.20e3, (32, 29, 2): 1.80e5}
"""λ_max(θ₀) of §6's sanity runs, keyed by (L, n, M): each from one unknown draw of (lists, π, V₀ − cP)."""


def theorem2_problem(L: int, n: int, M: int, seed: int = 0) -> tuple[Theorem2Instance, DecisionList]:
    """``theorem2_instance(L, n, M)`` and its ``DecisionList`` (D_distinct, trained W and V): lists and π from
    ``seed``, c and init_eps = ε from the instance, so ``prob.init(key)`` draws V₀ = cP + U(−ε/2, ε/2)."""
    inst = theorem2_instance(L, n, M)
    prob = DecisionList(L, n, random_lists(L, M, seed), random_perm(L, seed), c=inst.c, init_eps=inst.eps)
    return inst, prob


class LambdaMax0Reference(NamedTuple):
    """What §6 gives for λ_max(θ₀) at one (L, n, M) (``lambda_max0_reference``).

    **Fields:**

    - ``table``: the sanity-run value where (L, n, M) is one of §6's runs (one unknown draw each), else None.
    - ``order``: the order of magnitude c²/(L·n³), "within a factor of about 2".
    """

    table: float | None
    order: float


def lambda_max0_reference(L: int, n: int, M: int, c: float) -> LambdaMax0Reference:
    """What §6 gives for λ_max(θ₀): the sanity-run value where (L, n, M) is one of its runs (``table``, else None)
    and the order of magnitude c²/(L·n³), "within a factor of about 2" (``order``).

    **Arguments:** ``L``, ``n``, ``M`` the instance's sizes; ``c`` its value scale."""
    return LambdaMax0Reference(table=LAMBDA_MAX0_REFERENCE.get((L, n, M)), order=c**2 / (L * n**3))


def lambda_max0_draws(prob: DecisionList, seeds, lanczos_iters: int = 64) -> np.ndarray:
    """λ_max of the full (W, V) Hessian at θ₀ = ``prob.init(PRNGKey(s))`` for each seed s: one value per draw of the
    perturbation V₀ − cP ~ U(−ε/2, ε/2), lists and π fixed by the problem. One draw at a time (a vmapped Lanczos
    over the draws is slower on CPU)."""
    return np.array(
        [float(lambda_max(prob, prob.init(jax.random.PRNGKey(int(s))), iters=lanczos_iters)) for s in seeds]
    )


def validate_draws(draws, seed: int) -> int:
    """``draws`` ≥ 1, with the last draw's seed ``seed + draws − 1`` still a valid seed."""
    draws = _validate.int_at_least("draws", draws, 1)
    if seed + draws - 1 > _validate.SEED_MAX:
        raise ValueError(
            f"draws={draws} is out of range: the draws use seeds seed, ..., seed + draws - 1 = "
            f"{seed + draws - 1}, which must stay <= 2**32 - 1"
        )
    return draws


@dataclass(frozen=True)
class Theorem2Run:
    """One Theorem 2 run (§6) by ``theorem2_run``. ``popdyn.jobs._records.summary(run)`` is its JSON part; an
    infeasible instance has ``feasible=False``, a ``reason``, ``steps`` = 0 and None for every run quantity.

    **Fields** (per-record lists have steps + 1 entries, per-step lists ``steps``):

    - ``L``, ``n``, ``M``, ``m``, ``seed``; ``delta``, ``c``, ``eps`` of ``theorem2_instance``; ``L0_unperturbed``
      = ℒ(0, cP) and ``L0`` = ℒ(θ₀) at the perturbed θ₀; ``A_range`` recomputed from ``L0`` (None if empty);
      ``feasible``, ``reason`` (why not, else None).
    - ``A`` (midpoint of the A-range), ``lambda_max0`` = λ_max(θ₀), ``lambda_max0_draws`` (λ_max(θ₀) per draw of
      V₀ − cP, the first the run's) and ``draw_seeds``, ``lr`` = η, ``T_range`` [2mℒ₀/(A²η), ε/(2η)] (None if
      empty).
    - ``steps`` (records kept), ``status`` (the GD run's), ``first_pc_step`` t*, ``pc_within_T`` (t* ≤ ε/(2η)),
      ``first_pc_le_T_lo`` (t* ≤ ⌈2mℒ₀/(A²η)⌉): both None when undecided (no PC within a run shorter than the
      bound).
    - ``max_lambda_along``, ``lambda_at_hit`` (λ_max at t*), ``eta_times_max_lambda``, ``step_size_held``
      (η·max_t λ_max(θ_t) ≤ 1): None when not audited.
    - ``loss_rises``, ``descent_inequality_held``; per step t < steps, ``descent_gaps`` = ℒ_t − (η/2)‖∇ℒ_t‖² −
      ℒ_{t+1} (the descent lemma held ⇔ ≥ 0, up to rounding) and ``descent_beta`` = 2(ℒ_{t+1} − ℒ_t +
      η‖∇ℒ_t‖²)/(η²‖∇ℒ_t‖²) [derived]: the curvature along the step averaged with weight 2(1−s) (Taylor with
      integral remainder), so held ⇔ β_t ≤ 1/η. It can fail while η·λ_max(θ_t) ≤ 1 at every recorded θ_t: the
      curvature can peak between iterates.
    - ``V_dev_max_entry``, ``V_dev_inf_norm``: ‖V_t − cP‖ per record in both readings of §6's ‖·‖_∞ (max entry,
      induced ∞-norm = max row sum of |·|); ``V_within_eps``, ``V_within_eps_inf_norm``: ≤ ε at every record.
      ``V_within_eps`` is the theorem's [our choice: V₀ = cP + U(−ε/2, ε/2) meets the hypothesis ‖V₀ − cP‖ ≤ ε/2
      only in the max-entry reading].
    - ``ts``, ``margins``, ``losses``, ``grad_norms``, ``lambdas`` (λ_max per record, None where not audited):
      the figure's data; ``timings`` (seconds per stage).
    """

    L: int
    n: int
    M: int
    m: int
    seed: int
    delta: float
    c: float
    eps: float
    L0_unperturbed: float
    L0: float
    A_range: list[float] | None
    feasible: bool
    reason: str | None = None
    A: float | None = None
    lambda_max0: float | None = None
    lr: float | None = None
    T_range: list[float] | None = None
    steps: int = 0
    status: str | None = None
    first_pc_step: int | None = None
    pc_within_T: bool | None = None
    first_pc_le_T_lo: bool | None = None
    max_lambda_along: float | None = None
    lambda_at_hit: float | None = None
    eta_times_max_lambda: float | None = None
    step_size_held: bool | None = None
    loss_rises: int | None = None
    descent_inequality_held: bool | None = None
    descent_gaps: list[float] | None = None
    descent_beta: list[float | None] | None = None
    V_dev_max_entry: list[float] | None = None
    V_dev_inf_norm: list[float] | None = None
    V_within_eps: bool | None = None
    V_within_eps_inf_norm: bool | None = None
    ts: list[float] | None = None
    margins: list[float] | None = None
    losses: list[float] | None = None
    grad_norms: list[float] | None = None
    lambdas: list[float | None] | None = None
    lambda_max0_draws: list[float] | None = None
    draw_seeds: list[int] | None = None
    timings: dict[str, float] = field(default_factory=dict)


def _check_options(
    seed, draws, max_steps, extra_steps, lanczos_iters, lr
) -> tuple[int, int, int, int, int, float | None]:
    """``theorem2_run``'s options validated (its arguments of the same names), or ValueError."""
    seed = _validate.seed("seed", seed)
    return (
        seed,
        validate_draws(draws, seed),
        _validate.int_at_least("max_steps", max_steps, 1),
        _validate.int_at_least("extra_steps", extra_steps, 0),
        _validate.int_at_least("lanczos_iters", lanczos_iters, 1),
        None if lr is None else _validate.positive("lr", lr),
    )


def _require_float64() -> None:
    """Refuses to run under float32: c is 1e4 to 3e5, so float32 losses and margins are meaningless."""
    if not jax.config.jax_enable_x64:  # type: ignore[attr-defined]  # jax's Config sets its flags at run time
        raise RuntimeError(
            "theorem2_run needs float64: call jax.config.update('jax_enable_x64', True) first "
            "(c is 1e4 to 3e5, so float32 losses and margins are meaningless)"
        )


def _infeasibility(n: int, L0: float, inst: Theorem2Instance, A_range: tuple[float, float] | None) -> str | None:
    """Why no ε, A satisfy Theorem 2's hypotheses at the measured ℒ₀ (n·ℒ₀² ≤ 162m, or an empty A-range at the
    instance's ε), or None when they are satisfiable.

    **Arguments:** ``n`` sequence length; ``L0`` ℒ(θ₀); ``inst`` the instance (m, ε); ``A_range`` the A-range at
    ``L0`` (None if empty)."""
    m, eps = inst.m, inst.eps
    if not theorem2_feasible(n, L0, m):
        return f"n·ℒ0² = {n * L0**2:.4g} <= 162m = {162 * m}: no ε, A satisfy the hypotheses (§6)"
    if A_range is None:
        return (
            f"empty A-range: √(4mℒ0/ε) = {math.sqrt(4 * m * L0 / eps):.4g} >= "
            f"ℒ0 − 6ε/n = {L0 - 6 * eps / n:.4g} at ε = {eps:.4g} (§6)"
        )
    return None


def _lambda_max0(
    prob: DecisionList, theta0, seeds: list[int], lanczos_iters: int, timings: dict[str, float]
) -> tuple[float, list[float]]:
    """λ_max(θ₀) of the run, and its values at every draw of ``seeds`` (the first: the run's own θ₀).

    **Arguments:** ``prob`` the instance; ``theta0`` the run's θ₀; ``seeds`` the draws' seeds, the run's first;
    ``lanczos_iters`` Lanczos steps per λ_max; ``timings`` where the stages' seconds are added."""
    with _timed(timings, "lambda_max0"):
        lam0 = float(lambda_max(prob, theta0, iters=lanczos_iters))
    with _timed(timings, "lambda_max0_draws"):
        draws = [lam0] + _floats(lambda_max0_draws(prob, seeds[1:], lanczos_iters))
    return lam0, draws


def _descend(
    prob: DecisionList, theta0, eta: float, max_steps: int, timings: dict[str, float]
) -> tuple[Trajectory, np.ndarray]:
    """``max_steps`` steps of exact GD at rate ``eta`` from ``theta0`` (no early stop; parameters recorded at every
    step) and the margin min_y (z_y − max_{k≠y} z_k) at each record.

    **Arguments:** ``prob`` the instance; ``theta0`` θ₀; ``eta`` the rate η; ``max_steps`` the steps run;
    ``timings`` where the stages' seconds are added."""
    with _timed(timings, "gradient_descent"):
        scale = float(jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree_util.tree_leaves(theta0))))
        traj = gradient_descent(
            prob, theta0, lr=eta, steps=max_steps, save_params=True, gtol=1e-300, diverge=max(1e8, 1e3 * scale)
        )  # run the full budget; no early stop
        jax.block_until_ready(traj.loss)
    with _timed(timings, "margins"):
        margins = np.asarray(_margins(prob, traj.params))
    return traj, margins


class _Descent(NamedTuple):
    """The descent lemma ℒ_{t+1} ≤ ℒ_t − (η/2)‖∇ℒ_t‖² along a run (fields named as ``Theorem2Run``'s): how often
    the loss rose, whether the lemma held at every step (up to rounding), the gaps and the curvatures β_t."""

    loss_rises: int
    descent_inequality_held: bool
    descent_gaps: list[float]
    descent_beta: list[float | None]


def _descent_lemma(losses: np.ndarray, gnorms: np.ndarray, eta: float) -> _Descent:
    """The descent lemma at each step t: gap ℒ_t − (η/2)‖∇ℒ_t‖² − ℒ_{t+1} (held ⇔ ≥ 0, up to ``ROUNDING``) and
    β_t = 2(ℒ_{t+1} − ℒ_t + η‖∇ℒ_t‖²)/(η²‖∇ℒ_t‖²), the curvature along the step (None where ∇ℒ_t = 0).

    **Arguments:** ``losses``, ``gnorms`` the loss and gradient norm per record; ``eta`` the rate η."""
    gaps = losses[:-1] - 0.5 * eta * gnorms[:-1] ** 2 - losses[1:]  # ≥ 0 ⇔ the descent lemma held at step t
    beta = [
        2 * (l1 - l0 + eta * g * g) / (eta * g) ** 2 if g > 0 else None
        for l0, l1, g in zip(losses[:-1].tolist(), losses[1:].tolist(), gnorms[:-1].tolist(), strict=False)
    ]
    slack = rise_slack(losses, ROUNDING)
    return _Descent(
        loss_rises=int(np.sum(np.diff(losses) > slack)),
        descent_inequality_held=bool(np.all(gaps >= -slack)),
        descent_gaps=_floats(gaps),
        descent_beta=beta,
    )


class _VDeviation(NamedTuple):
    """‖V_t − cP‖ per record in both readings of §6's ‖·‖_∞ and whether it stays ≤ ε (fields named as
    ``Theorem2Run``'s)."""

    V_dev_max_entry: list[float]
    V_dev_inf_norm: list[float]
    V_within_eps: bool
    V_within_eps_inf_norm: bool


def _v_deviation(V: np.ndarray, cP: np.ndarray, eps: float) -> _VDeviation:
    """‖V_t − cP‖ as its max entry and as the induced ∞-norm (max row sum of |·|), against ε.

    **Arguments:** ``V`` the recorded V_t, shape (records, L, L); ``cP`` the value matrix c·P; ``eps`` ε."""
    dev = V - cP
    dev_max, dev_inf = np.abs(dev).max(axis=(1, 2)), np.abs(dev).sum(axis=2).max(axis=1)
    return _VDeviation(
        V_dev_max_entry=_floats(dev_max),
        V_dev_inf_norm=_floats(dev_inf),
        V_within_eps=bool(np.all(dev_max <= eps)),
        V_within_eps_inf_norm=bool(np.all(dev_inf <= eps)),
    )


class _PathAudit(NamedTuple):
    """λ_max along a run (fields named as ``Theorem2Run``'s; all but ``lambdas`` None when not audited)."""

    lambdas: list[float | None]
    max_lambda_along: float | None = None
    lambda_at_hit: float | None = None
    eta_times_max_lambda: float | None = None
    step_size_held: bool | None = None


def _audit_path(
    prob: DecisionList,
    traj: Trajectory,
    eta: float,
    lam0: float,
    first: int | None,
    steps: int,
    timings: dict[str, float],
) -> _PathAudit:
    """λ_max(θ_t) at records 1..``steps`` by ``step_size_audit`` (λ_max(θ₀) = ``lam0`` reused), its maximum, its
    value at the first perfectly classifying step and whether η·max_t λ_max(θ_t) ≤ 1 (up to ``ROUNDING``).

    **Arguments:** ``prob`` the instance; ``traj`` its GD run; ``eta`` the rate η; ``lam0`` λ_max(θ₀); ``first``
    the first perfectly classifying step (None: none); ``steps`` records audited; ``timings`` where the audit's
    seconds are added."""
    with _timed(timings, "audit"):
        aud = step_size_audit(prob, _slice(traj, 1, steps + 1), eta)
    along = [lam0, *_floats(aud.lambda_max)]
    max_lam = max(along)
    return _PathAudit(
        lambdas=[*along],
        max_lambda_along=max_lam,
        lambda_at_hit=None if first is None else along[first],
        eta_times_max_lambda=eta * max_lam,
        step_size_held=bool(eta * max_lam <= 1 + ROUNDING),
    )


class _Kept(NamedTuple):
    """The records 0..steps a run keeps (fields named as ``Theorem2Run``'s): how many, the run's end status, the
    first perfectly classifying step t* (None: none), and per record the time, margin, loss and gradient norm."""

    steps: int
    status: str
    first_pc_step: int | None
    ts: list[float]
    margins: list[float]
    losses: list[float]
    grad_norms: list[float]


def _keep(
    traj: Trajectory, margins: np.ndarray, max_steps: int, extra_steps: int, eta: float, cP: np.ndarray, eps: float
) -> tuple[_Kept, _Descent, _VDeviation]:
    """The records 0..steps of a GD run, steps = min(t* + ``extra_steps``, ``max_steps``) with t* the first
    perfectly classifying step (margin > 0; all ``max_steps`` without PC), and the descent lemma and ‖V_t − cP‖
    along them.

    **Arguments:** ``traj`` the run (parameters recorded); ``margins`` its margin per record; ``max_steps`` the
    steps run; ``extra_steps`` the steps kept past t*; ``eta`` the rate η; ``cP`` the value matrix c·P; ``eps``
    ε."""
    hits = np.flatnonzero(margins > 0)
    first = int(hits[0]) if hits.size else None
    steps = max_steps if first is None else min(first + extra_steps, max_steps)
    keep = slice(0, steps + 1)
    losses, gnorms = np.asarray(traj.loss)[keep], np.asarray(traj.grad_norm)[keep]
    V = np.asarray(traj.params["V"])[keep]  # type: ignore[index]  # save_params=True: params hold θ
    kept = _Kept(
        steps=steps,
        status=STATUS_NAMES[int(traj.status)],
        first_pc_step=first,
        ts=_floats(np.asarray(traj.ts)[keep]),
        margins=_floats(margins[keep]),
        losses=_floats(losses),
        grad_norms=_floats(gnorms),
    )
    return kept, _descent_lemma(losses, gnorms, eta), _v_deviation(V, cP, eps)


def _first_pc_by(first: int | None, max_steps: int, bound: float | None) -> bool | None:
    """Whether the first perfectly classifying step ``first`` is ≤ ``bound``; None when that is undecided (no
    bound, or no PC within a run of ``max_steps`` < bound)."""
    if bound is None or (first is None and max_steps < bound):
        return None
    return first is not None and first <= bound


def theorem2_run(
    L: int,
    n: int,
    M: int,
    *,
    seed: int = 0,
    lr: float | None = None,
    max_steps: int = 20,
    extra_steps: int = 3,
    audit: bool = True,
    lanczos_iters: int = 64,
    draws: int = 1,
) -> Theorem2Run:
    """Theorem 2 (§6) on one random instance, by exact gradient descent; the record's fields are listed on
    ``Theorem2Run``.

    * Instance: c, ε from ``theorem2_instance(L, n, M)`` (ε = nℒ₀/18 with ℒ₀ = ℒ(0, cP), m = M [our choice]);
      lists, π from ``seed``; θ₀ = ``DecisionList.init(PRNGKey(seed))``, i.e. W₀ = 0, V₀ = cP + U(−ε/2, ε/2).
    * ℒ₀ is measured at that perturbed θ₀ (as in §6's table) and the A-range (√(4mℒ₀/ε), ℒ₀ − 6ε/n) recomputed
      from it with the unperturbed ε. Infeasible (empty A-range or nℒ₀² ≤ 162m): returns ``feasible=False`` and a
      ``reason``, runs nothing more, and leaves every run quantity None; the caller reports it.
    * A = midpoint of the A-range [our choice]; η = 1/λ_max(θ₀) unless ``lr`` is given; T-range
      [2mℒ₀/(A²η), ε/(2η)] (None if empty).
    * Runs ``max_steps`` GD steps, finds the first perfectly classifying step t* (margin > 0, §4) and keeps
      records 0..steps with steps = min(t* + ``extra_steps``, ``max_steps``) (all ``max_steps`` if never PC).
    * ``audit``: λ_max along records 1..steps by ``step_size_audit`` (λ_max(θ₀) reused). Each λ_max is a
      64-step Lanczos (2L² > 512 parameters here); ``audit=False`` skips it for large L and leaves the λ-path
      quantities None. ``lanczos_iters`` is for λ_max(θ₀) only (``lambda_max``'s default 64; 32 already agree
      with 64 and 128 to ~1e-15 at (23, 20, 1) and (32, 29, 2)).
    * ``draws``: λ_max(θ₀) also at ``draws`` − 1 further draws of the perturbation V₀ − cP (θ₀ =
      ``prob.init(PRNGKey(s))`` for s = seed + 1, …, seed + draws − 1; lists and π stay those of ``seed``), for its
      spread: ``lambda_max0_draws`` (the first is ``lambda_max0``, the run's) and ``draw_seeds``.
    * The descent lemma at each step and ‖V_t − cP‖ ≤ ε at each record (``Theorem2Run``'s fields say how).
      Needs float64 (``jax_enable_x64``): c is 1e4–3e5.

    **Arguments:** ``L``, ``n``, ``M`` the sizes (D_distinct, lists of lengths 1..M); the rest as above.
    """
    _require_float64()
    seed, draws, max_steps, extra_steps, lanczos_iters, lr = _check_options(
        seed, draws, max_steps, extra_steps, lanczos_iters, lr
    )
    timings: dict[str, float] = {}
    inst, prob = theorem2_problem(L, n, M, seed)
    theta0 = prob.init(jax.random.PRNGKey(seed))
    with _timed(timings, "L0"):
        L0 = float(_loss(prob, theta0))
    A_range = theorem2_A_range(L0, n, inst.eps, inst.m)
    fixed: dict[str, Any] = dict(L=L, n=n, M=M, m=inst.m, seed=seed, delta=inst.delta, c=inst.c, eps=inst.eps)
    fixed |= dict(L0_unperturbed=inst.L0, L0=L0, A_range=None if A_range is None else list(A_range), timings=timings)
    reason = _infeasibility(n, L0, inst, A_range)
    if reason is not None or A_range is None:
        return Theorem2Run(**fixed, feasible=False, reason=reason)

    A = 0.5 * (A_range[0] + A_range[1])
    seeds = [seed + k for k in range(draws)]
    lam0, lam_draws = _lambda_max0(prob, theta0, seeds, lanczos_iters, timings)
    eta = 1.0 / lam0 if lr is None else lr
    T_range = theorem2_T_range(L0, inst.m, A, eta, inst.eps)
    traj, margins = _descend(prob, theta0, eta, max_steps, timings)
    kept, descent, deviation = _keep(traj, margins, max_steps, extra_steps, eta, inst.c * prob.P, inst.eps)
    first, steps = kept.first_pc_step, kept.steps
    path = _PathAudit([lam0] + [None] * steps)  # None: not audited
    if audit and steps >= 1:
        path = _audit_path(prob, traj, eta, lam0, first, steps, timings)
    return Theorem2Run(
        **fixed,
        **kept._asdict(),
        **descent._asdict(),
        **deviation._asdict(),
        **path._asdict(),
        feasible=True,
        A=A,
        lambda_max0=lam0,
        lambda_max0_draws=lam_draws,
        draw_seeds=seeds,
        lr=eta,
        T_range=None if T_range is None else list(T_range),
        pc_within_T=_first_pc_by(first, max_steps, None if T_range is None else T_range[1]),
        first_pc_le_T_lo=_first_pc_by(first, max_steps, None if T_range is None else math.ceil(T_range[0])),
    )
