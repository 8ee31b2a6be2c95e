"""Gradient flow θ̇ = −τ ⊙ ∇L(θ) with diffrax, batched over initialisations (DESIGN.md, layer 3).

Adaptive step size (PID controller), termination at a steady state (‖∇L‖ < gtol) or on divergence
(‖θ‖ > diverge or non-finite) through a diffrax Event, ``throw=False`` so that one failing member
never kills the batch: every initialisation gets a ``Status``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.batching import apply_scales, as_batch, check_chunk_size, map_chunks, scale_tree
from popdyn.dynamics.status import Status, finite_tree
from popdyn.dynamics.trajectory import Trajectory, finish, frozen_scales
from popdyn.problem import Problem, Theta

SOLVERS = {"tsit5": diffrax.Tsit5, "kvaerno5": diffrax.Kvaerno5, "dopri8": diffrax.Dopri8}


def record_times(t1: float, ts: int | Sequence[float] | None) -> np.ndarray:
    """Record times: an int K gives 0 and K−1 log-spaced times in [1e-6·t1, t1]; a sequence is used as is."""
    if ts is None:
        return np.array([0.0, t1])
    if isinstance(ts, (int, np.integer)):
        k = _validate.int_at_least("ts", ts, 2)
        return np.concatenate([[0.0], np.geomspace(1e-6 * t1, t1, k - 1)])
    arr = np.asarray(ts, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0 or np.any(np.diff(arr) < 0) or arr[0] < 0 or arr[-1] > t1:
        raise ValueError(f"ts must be a non-empty increasing sequence of times in [0, t1={t1}]")
    return arr


def _solver(solver):
    if isinstance(solver, diffrax.AbstractSolver):
        return solver
    return SOLVERS[_validate.choice("solver", solver, tuple(SOLVERS))]()


def gradient_flow(
    prob: Problem,
    theta0: Theta,
    t1: float = 1e4,
    *,
    ts: int | Sequence[float] | None = 64,
    save_params: bool = False,
    solver: str | diffrax.AbstractSolver = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    gtol: float | None = None,
    diverge: float = 1e8,
    max_steps: int = 100_000,
    pcoeff: float = 0.3,
    icoeff: float = 0.4,
    time_scales: dict[str, float] | None = None,
    precondition: Callable[[Theta], Theta] | None = None,
    saddle_tol: float = 1e-7,
    chunk_size: int | None = None,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
) -> Trajectory:
    """Integrate θ̇ = −τ ⊙ P(∇L(θ)) from θ0 (one point, or a batch on a leading axis) up to ``t1``; P is
    ``precondition``, a gradient → direction map (default: the identity).

    Stops a point once it is steady, ‖θ̇‖ < ``gtol`` (default: atol + rtol·‖θ‖, diffrax's steady-state
    rule, i.e. steady to within the solver's own tolerance) (CONVERGED, or SADDLE when its Hessian has a negative
    eigenvalue), at ‖θ‖ > ``diverge`` (DIVERGED) or non-finite values (NAN); otherwise MAX_STEPS.
    Records loss and ‖∇L‖ (and θ with ``save_params``) at ``ts``; ``time_scales`` maps parameter
    names to per-block rates τ. Tsit5 by default; "kvaerno5" for stiff flows.

    The step-size controller is PI (``pcoeff=0.3, icoeff=0.4``) rather than diffrax's default I
    controller: near a manifold of minima an explicit solver runs at its stability limit, where the
    I controller oscillates and ‖∇L‖ stalls above ``gtol`` (measured on the Markov (e, w) plane:
    126/256 points unfinished at t = 1e4 with the I controller, 0/256 with PI, ≤ 160 steps each).

    Batches run in chunks of ``chunk_size`` spread over all devices; ``checkpoint`` (a directory) saves each
    finished chunk and resumes from them (``popdyn.batching.map_chunks``).
    """
    t1 = _validate.positive("t1", t1)
    for name, v in (("rtol", rtol), ("atol", atol), ("diverge", diverge)):
        _validate.positive(name, v)
    if gtol is not None:
        _validate.positive("gtol", gtol)
    _validate.int_at_least("max_steps", max_steps, 1)
    _validate.positive("pcoeff", pcoeff, allow_zero=True)
    _validate.positive("icoeff", icoeff)
    _validate.positive("saddle_tol", saddle_tol, allow_zero=True)
    check_chunk_size(chunk_size)
    times = record_times(t1, ts)
    cfg = _FlowConfig(
        save_params=save_params, rtol=rtol, atol=atol, gtol=gtol, diverge=diverge, max_steps=max_steps,
        pcoeff=pcoeff, icoeff=icoeff, scales=frozen_scales(scale_tree(prob, time_scales)),
    )
    batch, batched = as_batch(prob, theta0)
    solver_ = _solver(solver)
    horizon = (jnp.asarray(t1, dtype=jnp.result_type(float)), jnp.asarray(times, dtype=jnp.result_type(float)))
    out = map_chunks(lambda b: _solve_batch(prob, b, *horizon, solver_, precondition, cfg), batch, chunk_size,
                     progress=progress, desc="gradient flow", checkpoint=checkpoint,
                     depends_on=("flow", prob, solver_, precondition, cfg, t1, times))
    return finish(prob, out, batched, saddle_tol, "time")


@dataclass(frozen=True)
class _FlowConfig:
    """Everything static about a flow run: hashable, so compiled solvers are reused across calls. The horizon t1
    and the record times are traced arguments, not part of it: a new t1 or new times reuse the compiled solver."""

    save_params: bool
    rtol: float
    atol: float
    gtol: float | None
    diverge: float
    max_steps: int
    pcoeff: float
    icoeff: float
    scales: tuple | None


@eqx.filter_jit
def _solve_batch(prob: Problem, batch: Theta, t1: Array, times: Float[Array, " K"], solver, precondition,
                 cfg: _FlowConfig) -> dict:
    scales = None if cfg.scales is None else dict(cfg.scales)
    vg = jax.value_and_grad(prob.loss)

    def field(t, y, args):
        g = jax.grad(prob.loss)(y)
        if precondition is not None:
            g = precondition(g)
        return jax.tree_util.tree_map(jnp.negative, apply_scales(g, scales))

    def steady(t, y, args, **kwargs):
        speed = optax.tree.norm(field(t, y, args))
        return speed < (cfg.atol + cfg.rtol * optax.tree.norm(y) if cfg.gtol is None else cfg.gtol)

    def blowup(t, y, args, **kwargs):
        n = optax.tree.norm(y)
        return (n > cfg.diverge) | ~jnp.isfinite(n)

    def record(t, y, args):
        loss, g = vg(y)
        out = {"loss": loss, "grad_norm": optax.tree.norm(g)}
        if cfg.save_params:
            out["params"] = y
        return out

    saveat = diffrax.SaveAt(
        subs=[diffrax.SubSaveAt(t1=True), diffrax.SubSaveAt(ts=times, fn=record)]
    )

    def solve_one(y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field), solver, t0=0.0, t1=t1, dt0=None, y0=y0, saveat=saveat,
            stepsize_controller=diffrax.PIDController(rtol=cfg.rtol, atol=cfg.atol, pcoeff=cfg.pcoeff,
                                                      icoeff=cfg.icoeff),
            event=diffrax.Event((steady, blowup)), max_steps=cfg.max_steps, throw=False,
        )
        final = jax.tree_util.tree_map(lambda x: x[0], sol.ys[0])
        rec_t = sol.ts[1]
        reached = jnp.isfinite(rec_t)  # diffrax pads records after an early stop with inf
        recs = jax.tree_util.tree_map(
            lambda x: jnp.where(reached.reshape((-1,) + (1,) * (x.ndim - 1)), x, jnp.nan), sol.ys[1]
        )
        hit_steady, hit_blowup = sol.event_mask
        event = sol.result == diffrax.RESULTS.event_occurred
        finite = finite_tree(*jax.tree_util.tree_leaves(final), prob.loss(final))
        status = jnp.select(
            [~finite, event & hit_steady, event & hit_blowup,
             (sol.result == diffrax.RESULTS.successful) | (sol.result == diffrax.RESULTS.max_steps_reached)],
            [int(Status.NAN), int(Status.CONVERGED), int(Status.DIVERGED), int(Status.MAX_STEPS)],
            default=int(Status.SOLVER_FAILED),
        )
        return {
            "final": final, "status": status, "t_final": sol.ts[0][0], "ts": jnp.where(reached, rec_t, jnp.nan),
            "loss": recs["loss"], "grad_norm": recs["grad_norm"], "params": recs.get("params"),
            "n_steps": sol.stats["num_steps"],
        }

    return jax.vmap(solve_one)(batch)
