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
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from popdyn import _validate
from popdyn.analysis import lambda_max, step_size_audit
from popdyn.dynamics import STATUS_NAMES, Trajectory, gradient_descent
from popdyn.tasks.decision_list.data import random_lists, random_perm
from popdyn.tasks.decision_list.model import DecisionList
from popdyn.tasks.decision_list.theorems import (
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


def lambda_max0_reference(L: int, n: int, M: int, c: float) -> dict:
    """What §6 gives for λ_max(θ₀): the sanity-run value where (L, n, M) is one of its runs (``table``, else None)
    and the order of magnitude c²/(L·n³), "within a factor of about 2" (``order``)."""
    return {"table": LAMBDA_MAX0_REFERENCE.get((L, n, M)), "order": c**2 / (L * n**3)}


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
    """One Theorem 2 run (§6), as documented by ``theorem2_run``: an infeasible instance has ``feasible=False``, a
    ``reason`` and None for every run quantity. ``popdyn.jobs.records.summary(run)`` is its JSON part."""

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
    reason: str | None
    A: float | None
    lambda_max0: float | None
    lr: float | None
    T_range: list[float] | None
    steps: int
    status: str | None
    first_pc_step: int | None
    pc_within_T: bool | None
    first_pc_le_T_lo: bool | None
    max_lambda_along: float | None
    lambda_at_hit: float | None
    eta_times_max_lambda: float | None
    step_size_held: bool | None
    loss_rises: int | None
    descent_inequality_held: bool | None
    descent_gaps: list[float] | None
    descent_beta: list[float | None] | None
    V_dev_max_entry: list[float] | None
    V_dev_inf_norm: list[float] | None
    V_within_eps: bool | None
    V_within_eps_inf_norm: bool | None
    ts: list[float] | None
    margins: list[float] | None
    losses: list[float] | None
    grad_norms: list[float] | None
    lambdas: list[float | None] | None
    lambda_max0_draws: list[float] | None
    draw_seeds: list[int] | None
    timings: dict[str, float]


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
    """Theorem 2 (§6) on one random instance, by exact gradient descent.

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
    * Descent lemma at each step t < steps: ``descent_gaps`` = ℒ_t − (η/2)‖∇ℒ_t‖² − ℒ_{t+1} (held ⇔ ≥ 0, up to
      rounding) and ``descent_beta`` = 2(ℒ_{t+1} − ℒ_t + η‖∇ℒ_t‖²)/(η²‖∇ℒ_t‖²) [derived]: the curvature along
      the step averaged with weight 2(1−s) (Taylor with integral remainder), so held ⇔ β_t ≤ 1/η. It can fail
      while η·λ_max(θ_t) ≤ 1 at every recorded θ_t: the curvature can peak between iterates.

    ‖V_t − cP‖ is reported in both readings of §6's ‖·‖_∞ (max entry, induced ∞-norm = max row sum of |·|);
    ``V_within_eps`` uses the max-entry one [our choice: V₀ = cP + U(−ε/2, ε/2) meets the hypothesis
    ‖V₀ − cP‖ ≤ ε/2 only in that reading]. Needs float64 (``jax_enable_x64``): c is 1e4–3e5.

    The record's fields (JSON-serialisable; per-record lists have steps + 1 entries, per-step lists ``steps``):
    L, n, M, m, seed, delta, c, eps, L0_unperturbed, L0, A_range, feasible, reason, A, lambda_max0,
    lambda_max0_draws, draw_seeds, lr, T_range,
    steps, status, first_pc_step, pc_within_T (t* ≤ ε/(2η)), first_pc_le_T_lo (t* ≤ ⌈2mℒ₀/(A²η)⌉) — both None
    when undecided (no PC within ``max_steps`` < the bound); max_lambda_along, lambda_at_hit,
    eta_times_max_lambda, step_size_held (η·max_t λ_max(θ_t) ≤ 1); loss_rises, descent_inequality_held,
    descent_gaps, descent_beta; V_dev_max_entry, V_dev_inf_norm, V_within_eps, V_within_eps_inf_norm; ts,
    margins, losses, grad_norms, lambdas (λ_max per record, None where not audited: the figure's data); timings
    (seconds).
    """
    if not jax.config.jax_enable_x64:  # type: ignore[attr-defined]  # jax's Config sets its flags at run time
        raise RuntimeError(
            "theorem2_run needs float64: call jax.config.update('jax_enable_x64', True) first "
            "(c is 1e4 to 3e5, so float32 losses and margins are meaningless)"
        )
    seed = _validate.seed("seed", seed)
    draws = validate_draws(draws, seed)
    max_steps = _validate.int_at_least("max_steps", max_steps, 1)
    extra_steps = _validate.int_at_least("extra_steps", extra_steps, 0)
    lanczos_iters = _validate.int_at_least("lanczos_iters", lanczos_iters, 1)
    lr = None if lr is None else _validate.positive("lr", lr)
    timings: dict[str, float] = {}

    inst, prob = theorem2_problem(L, n, M, seed)
    m, c, eps = inst.m, inst.c, inst.eps
    theta0 = prob.init(jax.random.PRNGKey(seed))
    t0 = time.perf_counter()
    L0 = float(_loss(prob, theta0))
    timings["L0"] = time.perf_counter() - t0
    A_range = theorem2_A_range(L0, n, eps, m)
    out: dict[str, Any] = {
        "L": L,
        "n": n,
        "M": M,
        "m": m,
        "seed": seed,
        "delta": inst.delta,
        "c": c,
        "eps": eps,
        "L0_unperturbed": inst.L0,
        "L0": L0,
        "A_range": None if A_range is None else list(A_range),
        "feasible": True,
        "reason": None,
        "A": None,
        "lambda_max0": None,
        "lr": None,
        "T_range": None,
        "steps": 0,
        "status": None,
        "first_pc_step": None,
        "pc_within_T": None,
        "first_pc_le_T_lo": None,
        "max_lambda_along": None,
        "lambda_at_hit": None,
        "eta_times_max_lambda": None,
        "step_size_held": None,
        "loss_rises": None,
        "descent_inequality_held": None,
        "descent_gaps": None,
        "descent_beta": None,
        "V_dev_max_entry": None,
        "V_dev_inf_norm": None,
        "V_within_eps": None,
        "V_within_eps_inf_norm": None,
        "ts": None,
        "margins": None,
        "losses": None,
        "grad_norms": None,
        "lambdas": None,
        "lambda_max0_draws": None,
        "draw_seeds": None,
        "timings": timings,
    }
    if not theorem2_feasible(n, L0, m):
        out.update(
            feasible=False, reason=f"n·ℒ0² = {n * L0**2:.4g} <= 162m = {162 * m}: no ε, A satisfy the hypotheses (§6)"
        )
        return Theorem2Run(**out)
    if A_range is None:
        out.update(
            feasible=False,
            reason=f"empty A-range: √(4mℒ0/ε) = {math.sqrt(4 * m * L0 / eps):.4g} >= "
            f"ℒ0 − 6ε/n = {L0 - 6 * eps / n:.4g} at ε = {eps:.4g} (§6)",
        )
        return Theorem2Run(**out)

    A = 0.5 * (A_range[0] + A_range[1])
    t0 = time.perf_counter()
    lam0 = float(lambda_max(prob, theta0, iters=lanczos_iters))
    timings["lambda_max0"] = time.perf_counter() - t0
    seeds = [seed + k for k in range(draws)]
    t0 = time.perf_counter()
    lam_draws = [lam0] + _floats(lambda_max0_draws(prob, seeds[1:], lanczos_iters))
    timings["lambda_max0_draws"] = time.perf_counter() - t0
    eta = 1.0 / lam0 if lr is None else lr
    T_range = theorem2_T_range(L0, m, A, eta, eps)

    t0 = time.perf_counter()
    scale = float(jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree_util.tree_leaves(theta0))))
    traj = gradient_descent(
        prob, theta0, lr=eta, steps=max_steps, save_params=True, gtol=1e-300, diverge=max(1e8, 1e3 * scale)
    )  # run the full budget; no early stop
    jax.block_until_ready(traj.loss)
    timings["gradient_descent"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    margins = np.asarray(_margins(prob, traj.params))
    timings["margins"] = time.perf_counter() - t0
    hits = np.flatnonzero(margins > 0)
    first = int(hits[0]) if hits.size else None
    steps = max_steps if first is None else min(first + extra_steps, max_steps)
    keep = slice(0, steps + 1)

    losses, gnorms = np.asarray(traj.loss)[keep], np.asarray(traj.grad_norm)[keep]
    gaps = losses[:-1] - 0.5 * eta * gnorms[:-1] ** 2 - losses[1:]  # ≥ 0 ⇔ the descent lemma held at step t
    beta = [
        2 * (l1 - l0 + eta * g * g) / (eta * g) ** 2 if g > 0 else None
        for l0, l1, g in zip(losses[:-1].tolist(), losses[1:].tolist(), gnorms[:-1].tolist(), strict=False)
    ]
    dev = np.asarray(traj.params["V"])[keep] - c * prob.P  # type: ignore[index]  # save_params=True: params hold θ
    dev_max, dev_inf = np.abs(dev).max(axis=(1, 2)), np.abs(dev).sum(axis=2).max(axis=1)

    lambdas: list = [lam0] + [None] * steps  # None: not audited
    if audit and steps >= 1:
        t0 = time.perf_counter()
        aud = step_size_audit(prob, _slice(traj, 1, steps + 1), eta)
        timings["audit"] = time.perf_counter() - t0
        lambdas = [lam0] + _floats(aud.lambda_max)
        max_lam = max(lambdas)
        out.update(
            max_lambda_along=max_lam,
            eta_times_max_lambda=eta * max_lam,
            step_size_held=bool(eta * max_lam <= 1 + ROUNDING),
            lambda_at_hit=None if first is None else lambdas[first],
        )

    def by(bound: float | None) -> bool | None:
        """Whether the first PC step is ≤ bound; None when that is undecided (no PC within a shorter run)."""
        if bound is None or (first is None and max_steps < bound):
            return None
        return first is not None and first <= bound

    out.update(
        A=A,
        lambda_max0=lam0,
        lambda_max0_draws=lam_draws,
        draw_seeds=seeds,
        lr=eta,
        T_range=None if T_range is None else list(T_range),
        steps=steps,
        status=STATUS_NAMES[int(traj.status)],
        first_pc_step=first,
        pc_within_T=by(None if T_range is None else T_range[1]),
        first_pc_le_T_lo=by(None if T_range is None else math.ceil(T_range[0])),
        loss_rises=int(np.sum(np.diff(losses) > ROUNDING * np.maximum(1.0, np.abs(losses[:-1])))),
        descent_inequality_held=bool(np.all(gaps >= -ROUNDING * np.maximum(1.0, np.abs(losses[:-1])))),
        descent_gaps=_floats(gaps),
        descent_beta=beta,
        V_dev_max_entry=_floats(dev_max),
        V_dev_inf_norm=_floats(dev_inf),
        V_within_eps=bool(np.all(dev_max <= eps)),
        V_within_eps_inf_norm=bool(np.all(dev_inf <= eps)),
        ts=_floats(np.asarray(traj.ts)[keep]),
        margins=_floats(margins[keep]),
        losses=_floats(losses),
        grad_norms=_floats(gnorms),
        lambdas=lambdas,
    )
    return Theorem2Run(**out)
