"""Gradient descent θ ← θ − η τ ⊙ ∇L(θ) (optionally with heavy-ball momentum), or any optax optimizer, as
one jitted ``lax.scan``.

Batched over initialisations (vmap), with one learning rate or one per initialisation (a step-size
sweep is one call); loss and ‖∇L‖ recorded every ``record_every`` steps. A point
whose ‖θ‖ exceeds ``diverge`` or turns non-finite is frozen where it was and marked DIVERGED / NAN,
so one diverging member never poisons the batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn._batching import apply_scales, as_batch, check_chunk_size, map_chunks, scale_tree
from popdyn.dynamics import _stopping as stopping
from popdyn.dynamics import _transforms as transforms
from popdyn.dynamics._base import AbstractDynamics, SaveAt, Steady, check_hooks, check_lanes
from popdyn.dynamics._lanes import lane_width, run_lanes
from popdyn.dynamics._stack import ChunkProgram
from popdyn.dynamics._status import Status
from popdyn.dynamics._trajectory import Trajectory, finish, frozen_scales
from popdyn.problem import Problem, Theta, ThetaLike

Optimizer: TypeAlias = optax.GradientTransformation | Callable[[Array], optax.GradientTransformation]
"""An optax transformation used as is, or a factory lr → transformation (e.g. ``optax.adam``), called with each
point's own learning rate."""


class GradientDescent(AbstractDynamics):
    """Gradient descent θ ← θ − η τ ⊙ d (heavy-ball momentum optional), or any optax optimizer, for ``steps`` steps
    from each start, as one compiled ``lax.scan`` vmapped over the starts.

    The step is one optax chain (``popdyn.dynamics._transforms``): the direction d = τ ⊙ (P(g) + σξ), then heavy ball
    and −η, or the ``optimizer``. Here g = ∇L, or the ``gradient`` hook (θ, key) → g, a stochastic estimate such as a
    sampled minibatch gradient (the key is per start and step); P is ``precondition``; ``noise`` σ adds i.i.d.
    N(0, σ²) entries drawn from ``seed``, one stream per start and step. ``prox`` (θ, η) → θ' runs after every step
    (proximal GD, e.g. ``L1Prox``). A point whose ‖θ‖ exceeds ``diverge`` or turns non-finite is frozen where it was
    and marked DIVERGED / NAN; with a ``target``, a point stops at the first step k with target(θ_k) ≤ 0 (REACHED,
    ``t_final`` = k exactly). The status of the other points comes from ``stopping`` at the end point, on the
    noise-free direction f = −τ ⊙ P(∇L); ``t_final`` is the first record where the rule holds (with δ and the
    curvature taken at the end point), or ``steps``.

    **Arguments:**

    - ``lr``: the learning rate η > 0, or one per start (an array as long as the batch of starts), for plain GD, heavy
      ball and any optimizer given as a factory.
    - ``steps``: the number of steps (≥ 1).
    - ``optimizer``: None (plain or heavy-ball GD), an optax transformation (its own rate), or a factory
      lr → transformation such as ``optax.adam``. A chain may hold the links of ``popdyn.dynamics._transforms``
      (``gaussian_noise``, ``preconditioned``, ``block_rates``) anywhere, e.g. noise after momentum:
      ``lambda lr: optax.chain(optax.trace(0.9), gaussian_noise(0.1), optax.scale_by_learning_rate(lr))``; every
      link's ``update`` gets ``key``, one per start and step.
    - ``momentum``: heavy-ball μ in [0, 1), PyTorch's convention b ← μb + d, θ ← θ − ηb (b₀ = 0); plain GD only.
    - ``precondition``, ``prox``, ``gradient``: the hooks above, or None.
    - ``noise``: σ ≥ 0, one number or {top-level block of θ: σ}.
    - ``seed``: the seed of the noise and of the ``gradient`` hook's keys.
    - ``stopping``: the steady-state rule (``Steady``).
    - ``save``: what is recorded (``SaveAt``: ``every``, ``params``, ``metrics``); by default the start and the end.
    - ``diverge``: the norm above which a point is DIVERGED (> 0).
    - ``time_scales``: {top-level block of θ: multiplier τ > 0} (per-block learning rates).
    - ``target``: θ → real, reached when ≤ 0.
    - ``lanes``, ``lane_steps``: when only end points are recorded and a chunk holds more points than lanes (by
      default min(1024, max(64, ⌈chunk/4⌉))), the chunk runs through vmapped lanes: a point stops at the first
      multiple of ``lane_steps`` where it is steady, diverged or at its target, and its lane takes the next point
      (``popdyn.dynamics._lanes``); its record at ``ts[1]`` is then that step.
    """

    lr: float | Float[ArrayLike, " B"] = 0.1
    steps: int = 1000
    optimizer: Optimizer | None = None
    momentum: float = 0.0
    precondition: Callable[[Theta], Theta] | None = None
    prox: Callable[[Theta, Array], Theta] | None = None
    gradient: Callable[[Theta, Array], Theta] | None = None
    noise: float | dict[str, float] = 0.0
    seed: int = 0
    stopping: Steady = Steady()
    save: SaveAt = SaveAt()
    diverge: float = 1e8
    time_scales: dict[str, float] | None = None
    target: Callable[[Theta], Array] | None = None
    lanes: int | None = None
    lane_steps: int = 64
    time_unit: ClassVar[str] = "step"

    @property
    def method(self) -> str:
        """ "gd"."""
        return "gd"

    def __check_init__(self) -> None:
        if np.ndim(self.lr) == 0:
            _validate.positive("lr", np.asarray(self.lr).item())
        _validate.int_at_least("steps", self.steps, 1)
        _validate.half_open_unit("momentum", self.momentum)
        _validate.seed("seed", self.seed)
        _validate.positive("diverge", self.diverge)
        every = self.steps if self.save.every is None else self.save.every
        if self.steps % every:
            raise ValueError(f"steps={self.steps} is invalid: must be a multiple of record_every={every}")
        if self.save.ts is not None:
            raise ValueError("save: ts applies to a flow; a step dynamics records every save.every steps")
        if not (self.optimizer is None or isinstance(self.optimizer, optax.GradientTransformation)):
            if not callable(self.optimizer):
                raise ValueError(
                    f"optimizer={self.optimizer!r} is invalid: must be None, an optax transformation or a factory "
                    "lr -> transformation"
                )
        if self.optimizer is not None and self.momentum:
            raise ValueError(
                f"momentum={self.momentum} is heavy-ball GD's (optimizer=None): an optax optimizer carries its own "
                "(e.g. optax.sgd(lr, momentum=0.9), or optax.trace(0.9) as a link of its chain)"
            )
        check_hooks(precondition=self.precondition, prox=self.prox, gradient=self.gradient, target=self.target)
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
        """Descend from ``theta0`` (one θ, or a batch on a leading axis); ``AbstractDynamics.run``."""
        return descend(self, prob, theta0, None, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)

    def chunk_program(self, prob: Problem, theta0: ThetaLike, chunk_size: int | None) -> ChunkProgram:
        """``AbstractDynamics.chunk_program``: each start with the rate and key a run of ``prob`` alone gives it."""
        gd, fn, rest, inputs = _program(self, prob, *as_batch(prob, theta0), None, chunk_size)
        return ChunkProgram(gd, fn, rest, inputs, self.stopping, "gradient descent")


def descend(
    dynamics: GradientDescent,
    prob: Problem,
    theta0: ThetaLike,
    keys: Array | None,
    *,
    chunk_size: int | None,
    progress: bool,
    checkpoint: str | os.PathLike | None,
) -> Trajectory:
    """``GradientDescent.run`` with the starts' PRNG keys given: ``keys`` holds one key per start (a leading axis as
    long as the batch, one row for a single θ0), the stream of its ``gradient`` hook and noise; None splits them
    from ``dynamics.seed``, as ``run`` does. A dynamics built on GD that draws its own streams (``SGD``: one per start
    and seed) passes them here.

    **Arguments:**

    - ``dynamics``: the ``GradientDescent`` that runs.
    - ``prob``, ``theta0``, ``chunk_size``, ``progress``, ``checkpoint``: as ``GradientDescent.run``.
    - ``keys``: the keys, or None.
    """
    check_chunk_size(chunk_size)
    batch, batched = as_batch(prob, theta0)
    gd, fn, rest, inputs = _program(dynamics, prob, batch, batched, keys, chunk_size)
    run = lambda b: fn(gd, *b, *rest)  # noqa: E731
    out = map_chunks(run, inputs, chunk_size, progress=progress, desc="gradient descent", checkpoint=checkpoint)
    return finish(prob, out, batched, dynamics, dynamics.stopping)


def _program(
    dynamics: GradientDescent, prob: Problem, batch: Theta, batched: bool, keys: Array | None, chunk_size: int | None
) -> tuple[_GD, Callable, tuple, tuple[Theta, Array, Array]]:
    """(The step of a run of ``prob``, its compiled chunk function, the function's arguments after the chunk, and the
    per-point inputs (θ0, learning rate, key)) for the starts ``batch``: through lanes when only end points are kept
    (``lane_width``), else one vmapped scan with records."""
    noise_levels = _noise_levels(prob, dynamics.noise)
    rule, k = dynamics.stopping, dynamics.steps if dynamics.save.every is None else dynamics.save.every
    cfg = _DescentConfig(
        steps=dynamics.steps,
        record_every=k,
        save_params=dynamics.save.params,
        gtol=rule.gtol,
        rtol=rule.rtol,
        atol=rule.atol,
        diverge=dynamics.diverge,
        scales=frozen_scales(scale_tree(prob, dynamics.time_scales)),
        momentum=float(dynamics.momentum),
        noise=noise_levels,
    )
    n = jax.tree_util.tree_leaves(batch)[0].shape[0]
    lrs = _learning_rates(dynamics.lr, n, batched)
    if isinstance(dynamics.optimizer, optax.GradientTransformation) and np.ptp(lrs) > 0:
        raise ValueError(
            "lr: per-initialisation learning rates need an optimizer given as a factory lr -> transformation "
            "(e.g. optax.adam), not a built transformation with its own rate"
        )
    lr_arr = jnp.asarray(lrs, dtype=jnp.result_type(float))
    # an optimizer's chain may hold links that draw (transforms.gaussian_noise): it gets keys too
    stochastic = dynamics.gradient is not None or noise_levels != 0.0 or dynamics.optimizer is not None
    keys = _keys(dynamics.seed, n, stochastic=stochastic) if keys is None else keys
    hooks = (dynamics.precondition, dynamics.prox, dynamics.gradient, dynamics.save.metrics, dynamics.target)
    gd = _GD(prob, dynamics.optimizer, hooks, cfg)
    width = lane_width(dynamics.lanes, n, chunk_size)
    if k == dynamics.steps and not dynamics.save.params and dynamics.save.metrics is None and width is not None:
        return gd, _descend_lanes, (width, dynamics.lane_steps), (batch, lr_arr, keys)
    return gd, _descend_batch, (), (batch, lr_arr, keys)


def gradient_descent(
    prob: Problem,
    theta0: ThetaLike,
    lr: float | Float[ArrayLike, " B"] = 0.1,
    steps: int = 1000,
    *,
    momentum: float = 0.0,
    optimizer: Optimizer | None = None,
    precondition: Callable[[Theta], Theta] | None = None,
    prox: Callable[[Theta, Array], Theta] | None = None,
    gradient: Callable[[Theta, Array], Theta] | None = None,
    metrics: Callable[[Theta], dict] | None = None,
    noise: float | dict[str, float] = 0.0,
    seed: int = 0,
    record_every: int = 1,
    save_params: bool = False,
    gtol: float | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    diverge: float = 1e8,
    time_scales: dict[str, float] | None = None,
    saddle_tol: float = 1e-7,
    chunk_size: int | None = None,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
    until: Callable[[Theta], Array] | None = None,
    lanes: int | None = None,
    lane_steps: int = 64,
) -> Trajectory:
    """``steps`` steps of GD (``optimizer=None``) or of an optax optimizer from θ0 (one point, or a batch on a leading
    axis): a convenience for ``GradientDescent(…).run(prob, theta0, …)`` with the settings as keywords (see
    ``GradientDescent``). Unlike ``GradientDescent``, it records every step by default.

    **Arguments:**

    - ``record_every``, ``save_params``, ``metrics``: ``SaveAt(every=record_every, params=save_params,
      metrics=metrics)``.
    - ``rtol``, ``atol``, ``gtol``, ``saddle_tol``: the stopping rule ``Steady(rtol, atol, gtol, saddle_tol)``.
    - ``until``: the ``target`` (θ → real, reached when ≤ 0).
    - ``lr``, ``steps``, ``momentum``, ``optimizer``, ``precondition``, ``prox``, ``gradient``, ``noise``, ``seed``,
      ``diverge``, ``time_scales``, ``lanes``, ``lane_steps``: as ``GradientDescent``.
    - ``chunk_size``, ``progress``, ``checkpoint``: as ``GradientDescent.run``.
    """
    steps = _validate.int_at_least("steps", steps, 1)  # before record_every, which must divide it
    dynamics = GradientDescent(
        lr=lr,
        steps=steps,
        optimizer=optimizer,
        momentum=momentum,
        precondition=precondition,
        prox=prox,
        gradient=gradient,
        noise=noise,
        seed=seed,
        stopping=Steady(rtol=rtol, atol=atol, gtol=gtol, saddle_tol=saddle_tol),
        save=SaveAt(every=_validate.int_at_least("record_every", record_every, 1), params=save_params, metrics=metrics),
        diverge=diverge,
        time_scales=time_scales,
        target=until,
        lanes=lanes,
        lane_steps=lane_steps,
    )
    return dynamics.run(prob, theta0, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)


def _noise_levels(prob: Problem, noise) -> float | tuple:
    """σ as a float, or per block as a hashable ((name, σ), …) over every top-level key (missing → 0)."""
    if not isinstance(noise, dict):
        return _validate.positive("noise", noise, allow_zero=True)
    template = prob.template()
    unknown = set(noise) - set(template) if isinstance(template, dict) else set(noise)
    if unknown:
        raise ValueError(
            f"noise has unknown parameter(s) {sorted(unknown)}: allowed "
            f"{sorted(template) if isinstance(template, dict) else 'a single number'}"
        )
    levels = {k: _validate.positive(f"noise[{k!r}]", noise.get(k, 0.0), allow_zero=True) for k in template}
    return tuple(levels.items()) if any(levels.values()) else 0.0


def _keys(seed: int, n: int, stochastic: bool):
    """One PRNG key per initialisation, split from ``seed``; zeros of the same shape when no step draws from
    them (no noise, no gradient hook): no program runs for keys nothing reads."""
    if stochastic:
        return jax.random.split(jax.random.PRNGKey(seed), n)
    key = jax.eval_shape(jax.random.PRNGKey, 0)
    return jax.device_put(np.zeros((n, *key.shape), key.dtype))


def _learning_rates(lr, n: int, batched: bool) -> np.ndarray:
    """``lr`` as n positive finite rates (a number is repeated; an array needs a batched θ0 of n points)."""
    if np.ndim(lr) == 0:
        return np.full(n, _validate.positive("lr", np.asarray(lr).item()))
    arr = np.asarray(lr, dtype=float)
    if not batched or arr.shape != (n,) or not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(
            f"lr has shape {arr.shape}: per-initialisation learning rates must be {n} finite numbers "
            f"> 0, one per point of a batched θ0"
        )
    return arr


@dataclass(frozen=True)
class _DescentConfig:
    """Static settings of a GD run (hashable: compiled loops are reused; lr is traced, not static)."""

    steps: int
    record_every: int
    save_params: bool
    gtol: float | None
    rtol: float
    atol: float
    diverge: float
    scales: tuple | None
    momentum: float
    noise: float | tuple


class _GD(eqx.Module):
    """One point's GD step, its noise-free direction (for the stopping rule) and its status bookkeeping; shared by
    the recorded batch run and the lane run."""

    prob: Problem
    optimizer: Optimizer | None
    hooks: tuple
    cfg: _DescentConfig = eqx.field(static=True)

    def transform(self, lr) -> optax.GradientTransformationExtraArgs:
        """The step of a point with learning rate ``lr`` as one optax chain (``popdyn.dynamics._transforms``): the
        direction's links P, noise σξ and per-block rates τ, then the optimizer (or its factory called with ``lr``),
        or, for GD, heavy ball b ← μb + u (``optax.trace``) and −η u."""
        precondition = self.hooks[0]
        cfg = self.cfg
        links = [] if precondition is None else [transforms.preconditioned(precondition)]
        if cfg.noise:
            links.append(transforms.gaussian_noise(cfg.noise if isinstance(cfg.noise, float) else dict(cfg.noise)))
        if cfg.scales is not None:
            links.append(transforms.block_rates(dict(cfg.scales)))
        if self.optimizer is None:
            links += [optax.trace(cfg.momentum)] if cfg.momentum else []
            links.append(optax.scale_by_learning_rate(lr))
        else:
            built = isinstance(self.optimizer, optax.GradientTransformation)
            links.append(self.optimizer if built else self.optimizer(lr))
        return optax.chain(*links)

    def field(self, theta):  # the noise-free direction, −τ⊙P(∇L), for the stopping rule
        return self.field_from(jax.grad(self.prob.loss)(theta))

    def field_from(self, g):
        precondition = self.hooks[0]
        return jax.tree_util.tree_map(
            jnp.negative, apply_scales(g if precondition is None else precondition(g), self.scales())
        )

    def scales(self):
        return None if self.cfg.scales is None else dict(self.cfg.scales)

    def update(self, theta, state, lr, key, g=None):
        """One step from θ: u = ∇L(θ) (``g`` when the caller already has it) or the ``gradient`` hook's estimate, the
        chain of ``transform`` (its links draw from the second half of ``key``), θ + update, then the prox."""
        prox, gradient = self.hooks[1], self.hooks[2]
        key, key_noise = jax.random.split(key)
        if gradient is not None:
            g = gradient(theta, key)
        elif g is None:
            g = jax.grad(self.prob.loss)(theta)
        updates, state = self.transform(lr).update(g, state, theta, key=key_noise)
        new = optax.apply_updates(theta, updates)
        return (new if prox is None else prox(new, lr)), state

    def init_state(self, theta, lr):
        return self.transform(lr).init(theta)

    def start_code(self, theta) -> Array:
        """−2 when the target is met at step 0, else −1 (running). Codes: ≥ 0 a Status, −2 − k reached at step k."""
        until = self.hooks[4]
        hit = jnp.bool_(False) if until is None else until(theta) <= 0
        return jnp.where(hit, jnp.int32(-2), jnp.int32(-1))

    def carries_gradient(self) -> bool:
        """Plain gradients (no ``gradient`` hook): each step's (L, ∇L) at the new point is carried to the next step
        and to the records, so a step costs one value-and-gradient."""
        return self.hooks[2] is None

    def step(self, carry, i, lr, key):
        """Step i (θ_i → θ_{i+1}) unless the point is already frozen (diverged or reached its target). The carry is
        (θ, optimizer state, code) or, with ``carries_gradient``, (θ, state, code, (L(θ), ∇L(θ)))."""
        until = self.hooks[4]
        theta, state, bad, *lg = carry
        new, new_state = self.update(theta, state, lr, jax.random.fold_in(key, i), lg[0][1] if lg else None)
        norm = optax.tree.norm(new)
        blown = ~jnp.isfinite(norm) | (norm > self.cfg.diverge)
        code = jnp.where(~jnp.isfinite(norm), int(Status.NAN), int(Status.DIVERGED))
        if until is not None:  # a hit after step i (at θ_{i+1}) is the code −2 − (i + 1)
            hit = jnp.isfinite(norm) & ~blown & (until(new) <= 0)
            code = jnp.where(blown, code, -(i + 3))
            blown = blown | hit
        running = bad == -1
        bad = jnp.where(running & blown, code, bad).astype(jnp.int32)
        # frozen once it diverged (at θ_i, the last finite point) or reached the target (at θ_{i+1}, where it was met)
        keep = (bad != -1) & ~(running & (bad <= -2))
        theta = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), theta, new)
        state = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), state, new_state)
        if not lg:
            return theta, state, bad
        # (L, ∇L) at the point kept: a frozen point's values again, bit for bit, without selecting them
        return theta, state, bad, jax.value_and_grad(self.prob.loss)(theta)

    def steady(self, theta, floor) -> Array:
        cfg = self.cfg
        return stopping.steady(self.field, theta, stopping.state_tol(theta, cfg.rtol, cfg.atol), floor, cfg.gtol)

    def status(self, bad, finite, steady) -> Array:
        return jnp.where(
            bad <= -2,
            int(Status.REACHED),
            jnp.where(
                bad >= 0,
                bad,
                jnp.where(~finite, int(Status.NAN), jnp.where(steady, int(Status.CONVERGED), int(Status.MAX_STEPS))),
            ),
        )


@eqx.filter_jit
def _descend_batch(gd: _GD, batch: Theta, lrs, keys) -> dict:
    cfg = gd.cfg
    metrics = gd.hooks[3]
    vg = jax.value_and_grad(gd.prob.loss)
    k, steps = cfg.record_every, cfg.steps
    n_rec = steps // k

    def run_one(theta, lr, key):
        floor = stopping.speed_floor(stopping.norm(gd.field(theta)))

        def snapshot(theta, lg):
            loss, g = vg(theta) if lg is None else lg
            gn = stopping.norm(g)
            plain = gd.hooks[0] is None and cfg.scales is None  # then f = −∇L
            rec = {"loss": loss, "grad_norm": gn, "speed": gn if plain else stopping.norm(gd.field_from(g))}
            if cfg.save_params:
                rec["params"] = theta
            if metrics is not None:
                rec["metrics"] = metrics(theta)
            return rec

        def block(carry, b):
            if k == 1:
                carry = gd.step(carry, b, lr, key)
            else:
                carry, _ = jax.lax.scan(lambda c, i: (gd.step(c, i, lr, key), None), carry, b * k + jnp.arange(k))
            return carry, snapshot(carry[0], carry[3] if len(carry) == 4 else None)

        lg0 = vg(theta) if gd.carries_gradient() else None
        carry0 = (theta, gd.init_state(theta, lr), gd.start_code(theta)) + ((lg0,) if lg0 is not None else ())
        (final, _, bad, *_), recs = jax.lax.scan(block, carry0, jnp.arange(n_rec))
        recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), snapshot(theta, lg0), recs)
        ts = jnp.arange(n_rec + 1, dtype=jnp.result_type(float)) * k
        gn, speed = recs["grad_norm"], recs.pop("speed")
        if cfg.gtol is not None:
            below = speed < cfg.gtol
        else:  # the rule with the effective curvature and δ at the end point: exact at the last record
            tol = stopping.state_tol(final, cfg.rtol, cfg.atol)
            below = stopping.rule(speed, stopping.along(gd.field, final)[1], tol, floor)
        first = jnp.where(jnp.any(below), ts[jnp.argmax(below)], float(steps))
        finite = jnp.isfinite(recs["loss"][-1]) & jnp.isfinite(gn[-1])
        reached = bad <= -2
        hit_step = (-bad - 2).astype(ts.dtype)
        return {
            "final": final,
            "status": gd.status(bad, finite, below[-1]),
            "t_final": jnp.where(reached, hit_step, first),
            "ts": ts,
            "loss": recs["loss"],
            "grad_norm": gn,
            "params": recs.get("params"),
            "metrics": recs.get("metrics"),
            "n_steps": jnp.where(reached, hit_step, steps).astype(jnp.int32),
        }

    return jax.vmap(run_one)(batch, lrs, keys)


@eqx.filter_jit
def _descend_lanes(gd: _GD, batch: Theta, lrs, keys, width: int, segment: int) -> dict:
    """End points only, through ``width`` lanes of ``segment`` steps: a point stops at the first segment end where it
    is steady (or diverged, or reached its target) and frees its lane."""
    steps = gd.cfg.steps
    vg = jax.value_and_grad(gd.prob.loss)

    def start(point):
        theta, lr, key = point
        return {
            "theta": theta,
            "state": gd.init_state(theta, lr),
            "bad": gd.start_code(theta),
            "lr": lr,
            "key": key,
            "floor": stopping.speed_floor(stopping.norm(gd.field(theta))),
            "k": jnp.int32(0),
            "seg": jnp.int32(0),
            "code": jnp.int32(-1),
        }

    def advance(lane):
        def body(c, i):
            return jax.lax.cond(i < steps, lambda: gd.step(c, i, lane["lr"], lane["key"]), lambda: c), None

        running = (lane["code"] == -1) & (lane["bad"] == -1)
        (theta, state, bad), _ = jax.lax.scan(
            body, (lane["theta"], lane["state"], lane["bad"]), lane["k"] + jnp.arange(segment)
        )
        k = jnp.minimum(lane["k"] + segment, steps)
        loss, g = vg(theta)
        finite = jnp.isfinite(loss) & jnp.isfinite(stopping.norm(g))
        steady = gd.steady(theta, lane["floor"])
        code = gd.status(bad, finite, steady)
        code = jnp.where((code == int(Status.MAX_STEPS)) & (k < steps), -1, code)
        new = lane | {
            "theta": theta,
            "state": state,
            "bad": bad,
            "k": k,
            "seg": k - lane["k"],
            "code": code.astype(jnp.int32),
        }
        done = lane | {
            "seg": jnp.int32(0),
            "code": gd.status(lane["bad"], jnp.bool_(True), jnp.bool_(False)).astype(jnp.int32),
        }
        return jax.tree_util.tree_map(lambda a, b: jnp.where(running, a, b), new, done)

    out, _ = run_lanes(
        start, advance, lambda lane: lane["code"] != -1, lambda lane: lane["seg"], (batch, lrs, keys), width
    )

    def package(theta0, lane):
        loss0, g0 = vg(theta0)
        loss1, g1 = vg(lane["theta"])
        reached = lane["bad"] <= -2
        stop = jnp.where(reached, -lane["bad"] - 2, lane["k"]).astype(jnp.result_type(float))
        return {
            "final": lane["theta"],
            "status": lane["code"],
            "t_final": stop,
            "ts": jnp.stack([jnp.zeros_like(stop), stop]),
            "loss": jnp.stack([loss0, loss1]),
            "grad_norm": jnp.stack([stopping.norm(g0), stopping.norm(g1)]),
            "params": None,
            "metrics": None,
            "n_steps": stop.astype(jnp.int32),
        }

    return jax.vmap(package)(batch, out)
