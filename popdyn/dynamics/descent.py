"""Gradient descent θ ← θ − η τ ⊙ ∇L(θ), or any optax optimizer, as one jitted ``lax.scan``.

Batched over initialisations (vmap), loss and ‖∇L‖ recorded every ``record_every`` steps. A point
whose ‖θ‖ exceeds ``diverge`` or turns non-finite is frozen where it was and marked DIVERGED / NAN,
so one diverging member never poisons the batch.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from popdyn import _validate
from popdyn.batching import apply_scales, as_batch, map_chunks, scale_tree
from popdyn.dynamics.flow import _finish
from popdyn.dynamics.status import Status
from popdyn.dynamics.trajectory import Trajectory
from popdyn.problem import Problem, Theta


def _optimizer(optimizer, lr: float) -> optax.GradientTransformation:
    if optimizer is None:
        return optax.sgd(lr)
    if isinstance(optimizer, optax.GradientTransformation):
        return optimizer
    if callable(optimizer):  # e.g. optax.adam: called with the learning rate
        return optimizer(lr)
    raise ValueError(f"optimizer={optimizer!r} is invalid: must be None, an optax transformation or a factory lr -> transformation")


def gradient_descent(
    prob: Problem,
    theta0: Theta,
    lr: float = 0.1,
    steps: int = 1000,
    *,
    optimizer: optax.GradientTransformation | Callable | None = None,
    record_every: int = 1,
    save_params: bool = False,
    gtol: float = 1e-9,
    diverge: float = 1e8,
    time_scales: dict[str, float] | None = None,
    saddle_tol: float = 1e-7,
    chunk_size: int | None = None,
    progress: bool = False,
) -> Trajectory:
    """Run ``steps`` steps of GD (``optimizer=None``) or of an optax optimizer from θ0 (batched or not).

    ``optimizer`` may be a GradientTransformation (used as is) or a factory such as ``optax.adam``
    (called with ``lr``). ``time_scales`` multiplies each parameter block's gradient (per-block
    learning rates). Records at steps 0, k, 2k, …; ``t_final`` is the first recorded step with
    ‖∇L‖ < gtol (or ``steps``). Status as for ``gradient_flow``.
    """
    lr = _validate.positive("lr", lr)
    steps = _validate.int_at_least("steps", steps, 1)
    k = _validate.int_at_least("record_every", record_every, 1)
    for name, v in (("gtol", gtol), ("diverge", diverge)):
        _validate.positive(name, v)
    if steps % k:
        raise ValueError(f"steps={steps} is invalid: must be a multiple of record_every={k}")
    opt = _optimizer(optimizer, lr)
    scales = scale_tree(prob, time_scales)
    batch, batched = as_batch(prob, theta0)
    vg = jax.value_and_grad(prob.loss)
    n_rec = steps // k

    def run_one(theta):
        def step(carry, _):
            theta, state, bad = carry
            g = apply_scales(jax.grad(prob.loss)(theta), scales)
            updates, new_state = opt.update(g, state, theta)
            new = optax.apply_updates(theta, updates)
            norm = optax.tree.norm(new)
            blown = ~jnp.isfinite(norm) | (norm > diverge)
            code = jnp.where(~jnp.isfinite(norm), int(Status.NAN), int(Status.DIVERGED))
            bad = jnp.where((bad < 0) & blown, code, bad)
            keep = bad >= 0  # frozen after divergence
            theta = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), theta, new)
            state = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), state, new_state)
            return (theta, state, bad), None

        def block(carry, _):
            carry, _ = jax.lax.scan(step, carry, None, length=k)
            loss, g = vg(carry[0])
            rec = {"loss": loss, "grad_norm": optax.tree.norm(g)}
            if save_params:
                rec["params"] = carry[0]
            return carry, rec

        loss0, g0 = vg(theta)
        rec0 = {"loss": loss0, "grad_norm": optax.tree.norm(g0)}
        if save_params:
            rec0["params"] = theta
        carry = (theta, opt.init(theta), jnp.int32(-1))
        (final, _, bad), recs = jax.lax.scan(block, carry, None, length=n_rec)
        recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), rec0, recs)
        ts = jnp.arange(n_rec + 1, dtype=jnp.result_type(float)) * k
        gn = recs["grad_norm"]
        below = gn < gtol
        first = jnp.where(jnp.any(below), ts[jnp.argmax(below)], float(steps))
        finite = jnp.isfinite(recs["loss"][-1]) & jnp.isfinite(gn[-1])
        status = jnp.where(
            bad >= 0, bad,
            jnp.where(~finite, int(Status.NAN),
                      jnp.where(gn[-1] < gtol, int(Status.CONVERGED), int(Status.MAX_STEPS))),
        )
        return {
            "final": final, "status": status, "t_final": first, "ts": ts, "loss": recs["loss"],
            "grad_norm": gn, "params": recs.get("params"), "n_steps": jnp.int32(steps),
        }

    out = map_chunks(jax.jit(jax.vmap(run_one)), batch, chunk_size, progress=progress, desc="gradient descent")
    return _finish(prob, out, batched, saddle_tol, "step")
