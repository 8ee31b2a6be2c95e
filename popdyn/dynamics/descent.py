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

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn.batching import apply_scales, as_batch, check_chunk_size, map_chunks, scale_tree
from popdyn.dynamics import stopping
from popdyn.dynamics.status import Status
from popdyn.dynamics.trajectory import Trajectory, finish, frozen_scales
from popdyn.problem import Problem, Theta


def _optimizer(optimizer, lr: float) -> optax.GradientTransformation:
    if isinstance(optimizer, optax.GradientTransformation):
        return optimizer
    if callable(optimizer):  # e.g. optax.adam: called with the learning rate
        return optimizer(lr)
    raise ValueError(f"optimizer={optimizer!r} is invalid: must be None, an optax transformation or a factory lr -> transformation")


def gradient_descent(
    prob: Problem,
    theta0: Theta,
    lr: float | Float[ArrayLike, " B"] = 0.1,
    steps: int = 1000,
    *,
    momentum: float = 0.0,
    optimizer: optax.GradientTransformation | Callable | None = None,
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
) -> Trajectory:
    """Run ``steps`` steps of GD (``optimizer=None``) or of an optax optimizer from θ0 (batched or not).

    ``lr`` is one number or, for a batched θ0, one learning rate per initialisation. ``momentum`` μ > 0 gives
    heavy-ball GD in PyTorch's convention, b ← μb + τ ⊙ d, θ ← θ − η b (b₀ = 0). ``optimizer`` may be a
    GradientTransformation (used as is) or a factory such as ``optax.adam`` (called with ``lr``).

    The step direction is d = P(g) + σξ:

    * g = ∇L, or ``gradient`` (θ, key) → g, a stochastic estimate such as a sampled minibatch gradient (SGD;
      the key is per initialisation and step);
    * ``precondition`` P maps a gradient pytree to a direction (a plain function or an equinox Module, e.g. a
      bound method of the problem);
    * ``noise`` σ (one number, or one per top-level parameter block) adds i.i.d. N(0, σ²) entries drawn from
      ``seed``, one stream per initialisation and step: a noisy surrogate of minibatch SGD.

    ``prox`` (θ, η) → θ' runs after every step (proximal GD, e.g. ``L1Prox``). ``metrics`` θ → {name: scalar}
    is recorded with the loss (``Trajectory.metrics``): quantities along a run too large to keep θ for.
    ``time_scales`` multiplies each parameter block's direction (per-block learning rates). Records at
    steps 0, k, 2k, …; ``t_final`` is the first recorded step where the point is steady (or ``steps``): by the
    scale-aware rule of ``popdyn.dynamics.stopping`` with δ = atol + rtol‖θ‖ on the noise-free direction, or
    ‖∇L‖ < ``gtol`` when given. With ``until`` (θ → real), a point stops at the first step k with
    until(θ_k) ≤ 0: status REACHED, ``t_final`` = k exactly, θ frozen there. Status as for ``gradient_flow``.

    Batches run in chunks of ``chunk_size`` spread over all devices; ``checkpoint`` (a directory) saves each
    finished chunk and resumes from them (``popdyn.batching.map_chunks``).
    """
    steps = _validate.int_at_least("steps", steps, 1)
    momentum = _validate.positive("momentum", momentum, allow_zero=True)
    if not momentum < 1:
        raise ValueError(f"momentum={momentum!r} is out of range: must lie in [0, 1)")
    k = _validate.int_at_least("record_every", record_every, 1)
    noise = _noise_levels(prob, noise)
    seed = _validate.seed("seed", seed)
    for name, v in (("rtol", rtol), ("atol", atol), ("diverge", diverge)):
        _validate.positive(name, v)
    if gtol is not None:
        _validate.positive("gtol", gtol)
    if until is not None and not callable(until):
        raise ValueError(f"until={until!r} is invalid: must be a function θ -> real (reached when <= 0)")
    _validate.positive("saddle_tol", saddle_tol, allow_zero=True)
    check_chunk_size(chunk_size)
    if steps % k:
        raise ValueError(f"steps={steps} is invalid: must be a multiple of record_every={k}")
    cfg = _DescentConfig(steps=steps, record_every=k, save_params=save_params, gtol=gtol, rtol=rtol, atol=atol,
                         diverge=diverge,
                         scales=frozen_scales(scale_tree(prob, time_scales)), momentum=momentum,
                         noise=noise)
    batch, batched = as_batch(prob, theta0)
    n = jax.tree_util.tree_leaves(batch)[0].shape[0]
    lrs = _learning_rates(lr, n, batched)
    if optimizer is not None and (momentum or np.ptp(lrs) > 0):
        raise ValueError("optimizer is given: momentum and per-initialisation learning rates apply to plain GD only")
    opt = None if optimizer is None else _optimizer(optimizer, float(lrs[0]))
    lr_arr = jnp.asarray(lrs, dtype=jnp.result_type(float))
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    hooks = (precondition, prox, gradient, metrics, until)
    out = map_chunks(lambda b: _descend_batch(prob, *b, opt, hooks, cfg), (batch, lr_arr, keys),
                     chunk_size, progress=progress, desc="gradient descent", checkpoint=checkpoint,
                     depends_on=("gd", prob, opt, hooks, cfg))
    return finish(prob, out, batched, saddle_tol, "step", rtol, atol)


def _noise_levels(prob: Problem, noise) -> float | tuple:
    """σ as a float, or per block as a hashable ((name, σ), …) over every top-level key (missing → 0)."""
    if not isinstance(noise, dict):
        return _validate.positive("noise", noise, allow_zero=True)
    template = prob.template()
    unknown = set(noise) - set(template) if isinstance(template, dict) else set(noise)
    if unknown:
        raise ValueError(f"noise has unknown parameter(s) {sorted(unknown)}: allowed "
                         f"{sorted(template) if isinstance(template, dict) else 'a single number'}")
    levels = {k: _validate.positive(f"noise[{k!r}]", noise.get(k, 0.0), allow_zero=True) for k in template}
    return tuple(levels.items()) if any(levels.values()) else 0.0


def _learning_rates(lr, n: int, batched: bool) -> np.ndarray:
    """``lr`` as n positive finite rates (a number is repeated; an array needs a batched θ0 of n points)."""
    if np.ndim(lr) == 0:
        return np.full(n, _validate.positive("lr", np.asarray(lr).item()))
    arr = np.asarray(lr, dtype=float)
    if not batched or arr.shape != (n,) or not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"lr has shape {arr.shape}: per-initialisation learning rates must be {n} finite numbers "
                         f"> 0, one per point of a batched θ0")
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


@eqx.filter_jit
def _descend_batch(prob: Problem, batch: Theta, lrs, keys, opt, hooks, cfg: _DescentConfig) -> dict:
    precondition, prox, gradient, metrics, until = hooks
    scales = None if cfg.scales is None else dict(cfg.scales)
    vg = jax.value_and_grad(prob.loss)
    k, steps = cfg.record_every, cfg.steps
    n_rec = steps // k

    def field(theta):  # the noise-free direction, −τ⊙P(∇L), for the stopping rule
        g = jax.grad(prob.loss)(theta)
        return jax.tree_util.tree_map(jnp.negative, apply_scales(g if precondition is None else precondition(g),
                                                                 scales))

    def direction(theta, key):
        key, key_noise = jax.random.split(key)
        d = jax.grad(prob.loss)(theta) if gradient is None else gradient(theta, key)
        if precondition is not None:
            d = precondition(d)
        if cfg.noise:
            if isinstance(cfg.noise, float):
                stds = jax.tree_util.tree_map(lambda _: cfg.noise, d)
            else:
                per_block = dict(cfg.noise)
                stds = {k: jax.tree_util.tree_map(lambda _, s=per_block[k]: s, v) for k, v in d.items()}
            leaves, tree = jax.tree_util.tree_flatten(d)
            ks = jax.random.split(key_noise, len(leaves))
            sig = tree.flatten_up_to(stds)
            d = jax.tree_util.tree_unflatten(
                tree, [x + s_ * jax.random.normal(k_, x.shape, x.dtype) for x, s_, k_ in zip(leaves, sig, ks)])
        return apply_scales(d, scales)

    def update(theta, state, lr, key):
        new, state = _step(theta, state, lr, key)
        return (new if prox is None else prox(new, lr)), state

    def _step(theta, state, lr, key):
        g = direction(theta, key)
        if opt is None and cfg.momentum:  # heavy ball: the state is the buffer b
            state = jax.tree_util.tree_map(lambda b, d: cfg.momentum * b + d, state, g)
            return jax.tree_util.tree_map(lambda x, b: x - lr * b, theta, state), state
        if opt is None:  # plain GD: no optimizer state
            return jax.tree_util.tree_map(lambda x, d: x - lr * d, theta, g), state
        updates, state = opt.update(g, state, theta)
        return optax.apply_updates(theta, updates), state

    def init_state(theta):
        if opt is not None:
            return opt.init(theta)
        return jax.tree_util.tree_map(jnp.zeros_like, theta) if cfg.momentum else ()

    def run_one(theta, lr, key):
        floor = stopping.speed_floor(optax.tree.norm(field(theta)))
        start_hit = jnp.bool_(False) if until is None else until(theta) <= 0

        def step(carry, i):
            theta, state, bad = carry
            new, new_state = update(theta, state, lr, jax.random.fold_in(key, i))
            norm = optax.tree.norm(new)
            blown = ~jnp.isfinite(norm) | (norm > cfg.diverge)
            code = jnp.where(~jnp.isfinite(norm), int(Status.NAN), int(Status.DIVERGED))
            if until is not None:  # a hit after step i (at θ_{i+1}) is the code −2 − (i + 1)
                hit = jnp.isfinite(norm) & ~blown & (until(new) <= 0)
                code = jnp.where(blown, code, -(i + 3))
                blown = blown | hit
            bad = jnp.where((bad == -1) & blown, code, bad).astype(jnp.int32)
            keep = bad != -1  # frozen where it was once it diverged or reached the target
            theta = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), theta, new)
            state = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), state, new_state)
            return (theta, state, bad), None

        def snapshot(theta):
            loss, g = vg(theta)
            rec = {"loss": loss, "grad_norm": optax.tree.norm(g),
                   "steady": stopping.steady(field, theta, stopping.state_tol(theta, cfg.rtol, cfg.atol), floor,
                                             cfg.gtol)}
            if cfg.save_params:
                rec["params"] = theta
            if metrics is not None:
                rec["metrics"] = metrics(theta)
            return rec

        def block(carry, b):
            carry, _ = jax.lax.scan(step, carry, b * k + jnp.arange(k))
            return carry, snapshot(carry[0])

        state0 = init_state(theta)
        bad0 = jnp.where(start_hit, jnp.int32(-2), jnp.int32(-1))  # reached at step 0: the code −2 − 0
        (final, _, bad), recs = jax.lax.scan(block, (theta, state0, bad0), jnp.arange(n_rec))
        recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), snapshot(theta), recs)
        ts = jnp.arange(n_rec + 1, dtype=jnp.result_type(float)) * k
        gn, below = recs["grad_norm"], recs.pop("steady")
        first = jnp.where(jnp.any(below), ts[jnp.argmax(below)], float(steps))
        finite = jnp.isfinite(recs["loss"][-1]) & jnp.isfinite(gn[-1])
        reached = bad <= -2
        hit_step = (-bad - 2).astype(ts.dtype)
        status = jnp.where(
            reached, int(Status.REACHED),
            jnp.where(bad >= 0, bad,
                      jnp.where(~finite, int(Status.NAN),
                                jnp.where(below[-1], int(Status.CONVERGED), int(Status.MAX_STEPS)))),
        )
        return {
            "final": final, "status": status, "t_final": jnp.where(reached, hit_step, first), "ts": ts,
            "loss": recs["loss"], "grad_norm": gn, "params": recs.get("params"), "metrics": recs.get("metrics"),
            "n_steps": jnp.where(reached, hit_step, steps).astype(jnp.int32),
        }

    return jax.vmap(run_one)(batch, lrs, keys)
