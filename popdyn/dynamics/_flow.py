"""Gradient flow θ̇ = −τ ⊙ ∇L(θ) with diffrax, batched over initialisations (docs/architecture.md, layer 3).

Adaptive step size (PID controller), termination at a steady state (the scale-aware rule of
``popdyn.dynamics._stopping``), on divergence (‖θ‖ > diverge or non-finite) or when a target condition
crosses zero (its time found by root finding on the solver's dense output), through diffrax Events,
``throw=False`` so that one failing member never kills the batch: every initialisation gets a ``Status``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from popdyn import _validate
from popdyn._batching import apply_scales, as_batch, check_chunk_size, map_chunks, scale_tree
from popdyn.dynamics import _stopping as stopping
from popdyn.dynamics._base import AbstractDynamics, SaveAt, Steady, check_hooks, check_lanes
from popdyn.dynamics._lanes import lane_width, run_lanes
from popdyn.dynamics._solver_checks import inputs_checked
from popdyn.dynamics._stack import ChunkProgram
from popdyn.dynamics._status import Status, finite_tree
from popdyn.dynamics._trajectory import Trajectory, finish, frozen_scales
from popdyn.problem import Problem, Theta, ThetaLike

SOLVERS = {"tsit5": diffrax.Tsit5, "kvaerno5": diffrax.Kvaerno5, "dopri8": diffrax.Dopri8}


def record_times(t1: float, ts: int | Sequence[float] | Float[ArrayLike, " K"] | None) -> np.ndarray:
    """Record times: an int K gives 0 and K−1 log-spaced times in [1e-6·t1, t1]; a sequence is used as is. Either way
    they are finite, increasing and in [0, t1], which diffrax's own checks of them then take as given
    (``popdyn.dynamics._solver_checks``)."""
    if ts is None:
        return np.array([0.0, t1])
    if isinstance(ts, (int, np.integer)):
        k = _validate.int_at_least("ts", ts, 2)
        return np.concatenate([[0.0], np.geomspace(1e-6 * t1, t1, k - 1)])
    arr = np.asarray(ts, dtype=np.float64)
    bad = arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr))
    if bad or np.any(np.diff(arr) < 0) or arr[0] < 0 or arr[-1] > t1:
        raise ValueError(f"ts must be a non-empty increasing sequence of finite times in [0, t1={t1}]")
    return arr


def _solver(solver):
    if isinstance(solver, diffrax.AbstractSolver):
        return solver
    return SOLVERS[_validate.choice("solver", solver, tuple(SOLVERS))]()


def pid_controller(rtol: float = 1e-8, atol: float = 1e-10, pcoeff: float = 0.3, icoeff: float = 0.4):
    """diffrax's PID controller with popdyn's defaults: PI coefficients (``pcoeff=0.3, icoeff=0.4``) and an error norm
    that is right at any scale of θ (``popdyn.dynamics._stopping.rms_norm``).

    PI rather than diffrax's default I controller: near a manifold of minima an explicit solver runs at its stability
    limit, where the I controller oscillates and ‖∇L‖ stalls (measured on the Markov (e, w) plane: 126/256 points
    unfinished at t = 1e4 with the I controller, 0/256 with PI, ≤ 160 steps each).

    **Arguments:**

    - ``rtol``, ``atol``: the solver's error tolerances (> 0).
    - ``pcoeff`` (≥ 0), ``icoeff`` (> 0): the proportional and integral coefficients.
    """
    for name, value in (("rtol", rtol), ("atol", atol), ("icoeff", icoeff)):
        _validate.positive(name, value)
    _validate.positive("pcoeff", pcoeff, allow_zero=True)
    return diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=pcoeff, icoeff=icoeff, norm=stopping.rms_norm)


class GradientFlow(AbstractDynamics):
    """Gradient flow θ̇ = −τ ⊙ P(∇L(θ)) from each start up to ``t1``, solved by diffrax (P: ``precondition``, τ:
    ``time_scales``).

    A point stops once it is steady by ``stopping`` (CONVERGED, or SADDLE when its Hessian has a negative eigenvalue),
    at ‖θ‖ > ``diverge`` (DIVERGED), at non-finite values (NAN), and, with a ``target`` (θ → real), when it first
    falls to ≤ 0 (REACHED; the time is located by a root finder on the dense output to the solver's tolerance).
    Otherwise MAX_STEPS, refined to CONVERGED_LATE when the end point passes the Newton test
    (``popdyn.dynamics._trajectory.finish``). Every point gets a ``Status``; a failing point never stops the batch.

    **Arguments:**

    - ``t1``: the horizon (> 0).
    - ``solver``: a diffrax solver (Tsit5; Kvaerno5 for stiff flows).
    - ``controller``: a diffrax adaptive step-size controller (``pid_controller()``: PI, tolerances 1e-8 / 1e-10);
      its tolerances also set the first step and the root finder of targets.
    - ``stopping``: the steady-state rule (``Steady``).
    - ``save``: what is recorded (``SaveAt``: ``ts`` and ``params``); by default the start and the end.
    - ``max_steps``: the solver's step budget per point (≥ 1).
    - ``diverge``: the norm above which a point is DIVERGED (> 0).
    - ``time_scales``: {top-level block of θ: rate τ > 0}; missing blocks run at 1.
    - ``precondition``: a gradient → direction map P (a function or an equinox Module), or None.
    - ``target``: θ → real, reached when ≤ 0 (``popdyn.analysis`` has ``Distance``, ``LossBelow``, ``GradNormBelow``).
    - ``lanes``, ``lane_steps``: when only end points are recorded and a chunk holds more points than lanes
      (by default min(1024, max(64, ⌈chunk/4⌉))), the chunk runs through vmapped lanes in segments of
      ``lane_steps`` solver steps: a finished point frees its lane for the next one (``popdyn.dynamics._lanes``; a
      point's step-size controller restarts every ``lane_steps`` steps).
    """

    t1: float = 1e4
    solver: diffrax.AbstractSolver = diffrax.Tsit5()
    controller: diffrax.AbstractAdaptiveStepSizeController = eqx.field(default_factory=pid_controller)
    stopping: Steady = Steady()
    save: SaveAt = SaveAt()
    max_steps: int = 100_000
    diverge: float = 1e8
    time_scales: dict[str, float] | None = None
    precondition: Callable[[Theta], Theta] | None = None
    target: Callable[[Theta], Array] | None = None
    lanes: int | None = None
    lane_steps: int = 64
    time_unit: ClassVar[str] = "time"

    @property
    def method(self) -> str:
        """ "flow"."""
        return "flow"

    def __check_init__(self) -> None:
        _validate.positive("t1", self.t1)
        _validate.positive("diverge", self.diverge)
        _validate.int_at_least("max_steps", self.max_steps, 1)
        if not isinstance(self.solver, diffrax.AbstractSolver):
            raise ValueError(f"solver={self.solver!r} is invalid: must be a diffrax solver (e.g. diffrax.Tsit5())")
        if not isinstance(self.controller, diffrax.AbstractAdaptiveStepSizeController):
            raise ValueError(
                f"controller={self.controller!r} is invalid: must be a diffrax adaptive step-size controller "
                "(e.g. popdyn.dynamics.pid_controller())"
            )
        if self.save.every is not None or self.save.metrics is not None:
            raise ValueError("save: every and metrics apply to step dynamics; a flow records at save.ts")
        check_hooks(precondition=self.precondition, target=self.target)
        check_lanes(self.lanes, self.lane_steps)

    def run(
        self,
        prob: Problem,
        theta0: ThetaLike,
        *,
        chunk_size: int | None = None,
        progress: bool = False,
        checkpoint: str | os.PathLike | None = None,
    ) -> Trajectory:
        """Integrate from ``theta0`` (one θ, or a batch on a leading axis); ``AbstractDynamics.run``."""
        check_chunk_size(chunk_size)
        batch, batched = as_batch(prob, theta0)
        program = self.chunk_program(prob, batch, chunk_size)
        run = lambda b: program.fn(program.pieces, b, *program.rest)  # noqa: E731
        out = map_chunks(run, batch, chunk_size, progress=progress, desc=program.desc, checkpoint=checkpoint)
        return finish(prob, out, batched, self, self.stopping)

    def chunk_program(self, prob: Problem, theta0: ThetaLike, chunk_size: int | None) -> ChunkProgram:
        """``AbstractDynamics.chunk_program``: for the starts ``theta0``, through lanes when only end points are
        recorded (``lane_width``), else one vmapped solve with records."""
        batch, _ = as_batch(prob, theta0)
        times = record_times(self.t1, self.save.ts)
        rule = self.stopping
        cfg = _FlowConfig(
            save_params=self.save.params,
            rtol=rule.rtol,
            atol=rule.atol,
            gtol=rule.gtol,
            diverge=self.diverge,
            max_steps=self.max_steps,
            scales=frozen_scales(scale_tree(prob, self.time_scales)),
        )
        pieces = _Pieces(prob, self.precondition, self.target, self.controller, cfg)
        t1_ = jnp.asarray(self.t1, dtype=jnp.result_type(float))
        width = lane_width(self.lanes, jax.tree_util.tree_leaves(batch)[0].shape[0], chunk_size)
        fn: Callable
        rest: tuple
        if self.save.ts is None and not self.save.params and width is not None:
            fn, rest = _solve_lanes, (t1_, self.solver, width, self.lane_steps)
        else:
            fn, rest = _solve_batch, (t1_, jnp.asarray(times, dtype=t1_.dtype), self.solver)
        return ChunkProgram(pieces, fn, rest, (batch,), rule, "gradient flow")


def gradient_flow(
    prob: Problem,
    theta0: ThetaLike,
    t1: float = 1e4,
    *,
    ts: int | Sequence[float] | Float[ArrayLike, " K"] | None = 64,
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
    until: Callable[[Theta], Array] | None = None,
    lanes: int | None = None,
    lane_steps: int = 64,
) -> Trajectory:
    """Gradient flow from θ0 (one point, or a batch on a leading axis) up to ``t1``: a convenience for
    ``GradientFlow(…).run(prob, theta0, …)`` with the settings as keywords (see ``GradientFlow``).

    **Arguments:**

    - ``ts``, ``save_params``: ``SaveAt(ts=ts, params=save_params)``; 64 log-spaced record times by default.
    - ``solver``: "tsit5", "kvaerno5", "dopri8" or a diffrax solver.
    - ``rtol``, ``atol``, ``pcoeff``, ``icoeff``: ``pid_controller(rtol, atol, pcoeff, icoeff)``; ``rtol``, ``atol``,
      ``gtol`` and ``saddle_tol`` also make the stopping rule ``Steady(rtol, atol, gtol, saddle_tol)``.
    - ``until``: the ``target`` (θ → real, reached when ≤ 0).
    - ``diverge``, ``max_steps``, ``time_scales``, ``precondition``, ``lanes``, ``lane_steps``: as ``GradientFlow``.
    - ``chunk_size``, ``progress``, ``checkpoint``: as ``GradientFlow.run``.
    """
    rule = Steady(rtol=rtol, atol=atol, gtol=gtol, saddle_tol=saddle_tol)
    dynamics = GradientFlow(
        t1=_validate.positive("t1", t1),
        solver=_solver(solver),
        controller=pid_controller(rtol, atol, pcoeff, icoeff),
        stopping=rule,
        save=SaveAt(ts=ts, params=save_params),
        max_steps=max_steps,
        diverge=diverge,
        time_scales=time_scales,
        precondition=precondition,
        target=until,
        lanes=lanes,
        lane_steps=lane_steps,
    )
    return dynamics.run(prob, theta0, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)


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
    scales: tuple | None


class _Pieces(eqx.Module):
    """The vector field, stopping events and controller of a flow run, shared by the batch and lane solvers."""

    prob: Problem
    precondition: Callable | None
    until: Callable | None
    controller: diffrax.AbstractAdaptiveStepSizeController
    cfg: _FlowConfig = eqx.field(static=True)

    def field(self, t, y, args):
        g = jax.grad(self.prob.loss)(y)
        if self.precondition is not None:
            g = self.precondition(g)
        scales = None if self.cfg.scales is None else dict(self.cfg.scales)
        return jax.tree_util.tree_map(jnp.negative, apply_scales(g, scales))

    def steady(self, t, y: Theta, floor: Array) -> Array:
        """The stopping rule at θ = ``y`` (``popdyn.dynamics._stopping.steady``)."""
        cfg = self.cfg
        return stopping.steady(
            lambda z: self.field(t, z, None), y, stopping.state_tol(y, cfg.rtol, cfg.atol), floor, cfg.gtol
        )

    def floor(self, y0: Theta) -> Array:
        return stopping.speed_floor(stopping.norm(self.field(0.0, y0, None)))

    def event(self) -> diffrax.Event:
        cfg = self.cfg

        def steady(t, y, args, **kwargs):  # args: (the speed floor of this point, whether it moves)
            return self.steady(t, y, args[0]) & args[1]

        def blowup(t, y, args, **kwargs):
            n = optax.tree.norm(y)
            return (n > cfg.diverge) | ~jnp.isfinite(n)

        until = self.until
        if until is None:
            return diffrax.Event((steady, blowup))

        def target(t, y, args, **kwargs):
            return jnp.where(args[1], jnp.asarray(until(y), dtype=jnp.result_type(t, float)), 1.0)

        rtol, atol = float(self.controller.rtol), float(self.controller.atol)
        return diffrax.Event((steady, blowup, target), root_finder=optx.Newton(rtol=rtol * 1e-2, atol=atol * 1e-2))

    def solve(self, solver, y0, t0, t1, floor, saveat, max_steps: int, moves=True):
        """diffeqsolve from (t0, y0); with ``moves`` False the field is zero and no event fires, so the point stays
        at y0 to t1 in a few growing steps (a point already stopped at t0 keeps a vmapped batch cheap: frozen by
        an event at t0 instead, its lane would re-save all pending records inside each later step)."""

        def term(t, y, args):
            return jax.tree_util.tree_map(lambda f: jnp.where(args[1], f, 0.0), self.field(t, y, None))

        terms, args = diffrax.ODETerm(term), (floor, jnp.asarray(moves))
        with inputs_checked():  # t0 ≤ t1, the first step ≥ 0 (or NaN) and the record times are popdyn's checked ones
            return diffrax.diffeqsolve(
                terms,
                solver,
                t0=t0,
                t1=t1,
                dt0=self.first_step(terms, t0, t1, y0, args),
                y0=y0,
                args=args,
                saveat=saveat,
                stepsize_controller=self.controller,
                event=self.event(),
                max_steps=max_steps,
                throw=False,
            )

    def first_step(self, terms, t0, t1, y0, args) -> Array:
        """The first step size, 0.01·max(d0, 1)/d1 with d0 = rms(y0/s), d1 = rms(f(y0)/s), s = atol + rtol|y0|: a step
        that moves θ by 1% of its own size (the first estimate of Hairer's rule; t1 − t0 where f(y0) = 0).

        diffrax's own rule (``dt0=None``) is not invariant when L is multiplied by a constant, which rescales time: it
        falls back on absolute times (1e-6) when d1 < 1e-5, and its second estimate overflows to a zero step when L
        is large (multiplied by 1e150, say). This one is, so the flow takes the same steps in θ for any scale of L. The
        tolerances are the controller's."""
        tol = self.controller
        s = jax.tree_util.tree_map(lambda y: tol.atol + tol.rtol * jnp.abs(y), y0)
        ratio = lambda a: jax.tree_util.tree_map(lambda x, s_: x / s_, a, s)  # noqa: E731
        d0 = stopping.rms_norm(ratio(y0))
        d1 = stopping.rms_norm(ratio(terms.vf(t0, y0, args)))
        return jnp.where(d1 > 0, 0.01 * jnp.maximum(d0, 1.0) / jnp.where(d1 > 0, d1, 1.0), t1 - t0)

    def at_start(self, y0) -> Array:
        return jnp.bool_(False) if self.until is None else jnp.asarray(self.until(y0) <= 0)

    def status(self, sol, final, at_start, running_code: int) -> Array:
        """The status code after a solve; ``running_code`` where it stopped at its step budget."""
        hit_steady, hit_blowup, *hit_target = sol.event_mask
        fired = sol.result == diffrax.RESULTS.event_occurred
        finite = finite_tree(*jax.tree_util.tree_leaves(final), self.prob.loss(final))
        hit = at_start | (fired & hit_target[0]) if self.until is not None else at_start
        return jnp.select(
            [
                ~finite,
                hit,
                fired & hit_steady,
                fired & hit_blowup,
                sol.result == diffrax.RESULTS.successful,
                sol.result == diffrax.RESULTS.max_steps_reached,
            ],
            [
                int(Status.NAN),
                int(Status.REACHED),
                int(Status.CONVERGED),
                int(Status.DIVERGED),
                int(Status.MAX_STEPS),
                running_code,
            ],
            default=int(Status.SOLVER_FAILED),
        )


@eqx.filter_jit
def _solve_batch(pieces: _Pieces, batch: Theta, t1: Array, times: Float[Array, " K"], solver) -> dict:
    cfg = pieces.cfg
    vg = jax.value_and_grad(pieces.prob.loss)

    def record(t, y, args):
        loss, g = vg(y)
        out = {"loss": loss, "grad_norm": stopping.norm(g)}
        if cfg.save_params:
            out["params"] = y
        return out

    saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(t1=True), diffrax.SubSaveAt(ts=times, fn=record)])

    def solve_one(y0):
        floor = pieces.floor(y0)
        at_start = pieces.at_start(y0)
        steady0 = pieces.steady(0.0, y0, floor)
        stop0 = at_start | steady0
        sol = pieces.solve(solver, y0, 0.0, t1, floor, saveat, cfg.max_steps, moves=~stop0)
        final = jax.tree_util.tree_map(lambda x: x[0], sol.ys[0])
        rec_t = sol.ts[1]
        reached = jnp.isfinite(rec_t) & ~(stop0 & (times > 0))  # diffrax pads records after an early stop with inf
        recs = jax.tree_util.tree_map(
            lambda x: jnp.where(reached.reshape((-1,) + (1,) * (x.ndim - 1)), x, jnp.nan), sol.ys[1]
        )
        status = pieces.status(sol, final, at_start, int(Status.MAX_STEPS))
        status = jnp.where(steady0 & ~at_start & (status != int(Status.NAN)), int(Status.CONVERGED), status)
        final = jax.tree_util.tree_map(lambda a, b: jnp.where(stop0, a, b), y0, final)
        return {
            "final": final,
            "status": status,
            "t_final": jnp.where(stop0, 0.0, sol.ts[0][0]),
            "ts": jnp.where(reached, rec_t, jnp.nan),
            "loss": recs["loss"],
            "grad_norm": recs["grad_norm"],
            "params": recs.get("params"),
            "n_steps": jnp.where(stop0, 0, sol.stats["num_steps"]),
        }

    return jax.vmap(solve_one)(batch)


@eqx.filter_jit
def _solve_lanes(pieces: _Pieces, batch: Theta, t1: Array, solver, width: int, segment: int) -> dict:
    """End points only (no records between 0 and t1), through ``width`` lanes of ``segment`` solver steps each."""
    cfg = pieces.cfg
    vg = jax.value_and_grad(pieces.prob.loss)
    running = -1

    def start(y0):
        at_start = pieces.at_start(y0)
        return {
            "y": y0,
            "t": jnp.zeros((), t1.dtype),
            "floor": pieces.floor(y0),
            "steps": jnp.int32(0),
            "seg": jnp.int32(0),
            "code": jnp.where(at_start, int(Status.REACHED), running).astype(jnp.int32),
        }

    def advance(lane):
        sol = pieces.solve(solver, lane["y"], lane["t"], t1, lane["floor"], diffrax.SaveAt(t1=True), segment)
        y = jax.tree_util.tree_map(lambda x: x[0], sol.ys)
        seg = jnp.asarray(sol.stats["num_steps"]).astype(jnp.int32)
        steps = lane["steps"] + seg
        code = pieces.status(sol, y, jnp.bool_(False), running)
        code = jnp.where((code == running) & (steps >= cfg.max_steps), int(Status.MAX_STEPS), code)
        new = {
            "y": y,
            "t": sol.ts[0],
            "floor": lane["floor"],
            "steps": steps,
            "seg": seg,
            "code": code.astype(jnp.int32),
        }
        return jax.tree_util.tree_map(
            lambda a, b: jnp.where(lane["code"] == running, a, b), new, lane | {"seg": jnp.int32(0)}
        )

    out, _ = run_lanes(start, advance, lambda lane: lane["code"] != running, lambda lane: lane["seg"], batch, width)

    def package(y0, lane):
        loss0, g0 = vg(y0)
        loss1, g1 = vg(lane["y"])
        at_t1 = lane["code"] == int(Status.MAX_STEPS)
        at_t1 = at_t1 & (lane["t"] >= t1)
        nan = jnp.full((), jnp.nan, loss0.dtype)
        return {
            "final": lane["y"],
            "status": lane["code"],
            "t_final": lane["t"],
            "ts": jnp.stack([jnp.zeros((), t1.dtype), jnp.where(at_t1, t1, nan)]),
            "loss": jnp.stack([loss0, jnp.where(at_t1, loss1, nan)]),
            "grad_norm": jnp.stack([stopping.norm(g0), jnp.where(at_t1, stopping.norm(g1), nan)]),
            "params": None,
            "n_steps": lane["steps"],
        }

    return jax.vmap(package)(batch, out)
