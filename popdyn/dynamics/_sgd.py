"""Minibatch SGD on a problem's own examples, as a dynamics object (docs/sgd.md, "SGD runs").

Each step draws a minibatch of B examples from ``prob.examples()`` (with replacement: B i.i.d. draws by the
weights; without: a uniformly random B-subset of n equally weighted examples, ``popdyn.exact._minibatch``) and steps
along the mean of their gradients. ``SGD`` is ``GradientDescent`` with that ``gradient`` hook, run on the starts
repeated ``seeds`` times, each run with its own stream of minibatches.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from popdyn import _validate
from popdyn._batching import as_batch, checked
from popdyn.dynamics._base import AbstractDynamics, SaveAt, Steady
from popdyn.dynamics._descent import GradientDescent, Optimizer, _learning_rates, descend
from popdyn.dynamics._trajectory import Trajectory
from popdyn.exact._minibatch import Sampler, check_minibatch
from popdyn.problem import Problem, Theta, ThetaLike, check_measure


class MinibatchGradient(eqx.Module):
    """(θ, key) → ĝ_B(θ) = (1/B) Σ_{j ∈ S} ∇_θ ℓ(θ, x_j): the mean gradient of a minibatch S of B examples drawn
    with ``key``, a ``gradient`` hook of ``GradientDescent``.

    **Arguments:**

    - ``prob``: the Problem, whose ``example_loss`` is ℓ.
    - ``sampler``: draws the minibatch (``popdyn.exact._minibatch.Sampler``).
    """

    prob: Problem
    sampler: Sampler

    def __call__(self, theta: Theta, key: Array) -> Theta:
        x = self.sampler(key)
        per_example = jax.vmap(self.prob.example_loss, in_axes=(None, 0))
        return jax.grad(lambda t: jnp.mean(per_example(t, x)))(theta)


def run_keys(seed: int, starts: int, seeds: int) -> Array:
    """The PRNG keys of ``starts`` × ``seeds`` runs, start-major: row j·seeds + s is fold_in(fold_in(key(seed), j), s),
    so run (j, s) draws the same minibatches whatever the number of starts and seeds beside it.

    **Arguments:** ``seed`` the base seed; ``starts`` and ``seeds`` the numbers of starts and of runs per start."""
    base = jax.random.PRNGKey(seed)
    j, s = np.repeat(np.arange(starts), seeds), np.tile(np.arange(seeds), starts)
    return _fold(base, jnp.asarray(j), jnp.asarray(s))


@jax.jit
def _fold(base: Array, j: Array, s: Array) -> Array:
    return jax.vmap(lambda a, b: jax.random.fold_in(jax.random.fold_in(base, a), b))(j, s)


class SGD(AbstractDynamics):
    """Minibatch SGD θ ← θ − η ĝ_B(θ) (heavy-ball momentum or an optax optimizer optional) on a problem that
    declares its examples, ``seeds`` independent runs from each start.

    ĝ_B is the mean of the examples' gradients ∇ℓ(θ, x) over a minibatch of B examples of ``prob.examples()``: with
    replacement, B i.i.d. draws by the weights w_i (for a finite or quadrature measure, what online sampling from
    the measure is); without, a uniformly random B-subset of n equally weighted examples (Cov(ĝ_B) = c_B Σ,
    docs/sgd.md). It runs as ``GradientDescent`` with ĝ_B as its ``gradient`` hook, so statuses, records, lanes,
    chunks and checkpoints are GD's: a run whose ‖θ‖ exceeds ``diverge`` or turns non-finite is frozen and marked
    DIVERGED / NAN alone, and the stopping rule reads the population gradient ∇L.

    **Runs.** A batch of n starts gives n·S runs, start-major: run j·S + s is start j's seed s, so
    ``traj.final_loss.reshape(n, S)`` (any per-run array) has one row per start; one unbatched θ0 gives S runs on a
    leading axis, or, with ``seeds=1``, a Trajectory without a batch axis, as GD's. Run (j, s) draws its minibatches
    from the key fold_in(fold_in(key(seed), j), s), one per step: the same seed gives the same runs bit for bit, and a
    run's minibatches do not depend on how many starts or seeds run beside it, nor on ``chunk_size``, so a
    ``checkpoint`` resumes a run as GD's does.

    **Arguments:**

    - ``lr``: the learning rate η > 0, or one per start (an array as long as the batch of starts).
    - ``batch``: B, an integer ≥ 1 (≤ n without replacement).
    - ``replace``: True (with replacement) or False (without; every weight must be 1/n, else ValueError).
    - ``steps``: the number of steps (≥ 1).
    - ``seeds``: S ≥ 1, the number of independent runs from each start.
    - ``seed``: the base seed of the runs' streams, an integer in [0, 2³² − 1].
    - ``momentum``, ``optimizer``, ``stopping``, ``save``, ``diverge``, ``target``: as ``GradientDescent``.
    """

    lr: float | Float[ArrayLike, " n"] = 0.1
    batch: int = 1
    replace: bool = True
    steps: int = 1000
    seeds: int = 1
    seed: int = 0
    momentum: float = 0.0
    optimizer: Optimizer | None = None
    save: SaveAt = SaveAt()
    stopping: Steady = Steady()
    diverge: float = 1e8
    target: Callable[[Theta], Array] | None = None
    time_unit: ClassVar[str] = "step"

    @property
    def method(self) -> str:
        """ "sgd"."""
        return "sgd"

    @property
    def runs_per_start(self) -> int:
        """S = ``seeds``."""
        return self.seeds

    def __check_init__(self) -> None:
        _validate.int_at_least("batch", self.batch, 1)
        if not isinstance(self.replace, (bool, np.bool_)):
            raise ValueError(
                f"replace={self.replace!r} is invalid: must be True (i.i.d. draws by the weights) or False (a random "
                "subset of n equally weighted examples)"
            )
        _validate.int_at_least("seeds", self.seeds, 1)
        if np.ndim(self.lr) != 0:
            lr = _validate.float_array("lr", self.lr)
            if lr.ndim != 1 or not np.all(np.isfinite(lr) & (lr > 0)):
                raise ValueError(f"lr has shape {lr.shape}: one learning rate per start must be finite numbers > 0")
        self.descent(self.lr, None)  # GD's checks of the settings it shares

    def descent(self, lr, gradient: MinibatchGradient | None) -> GradientDescent:
        """The ``GradientDescent`` that runs: these settings, with learning rates ``lr`` and the ``gradient`` hook."""
        return GradientDescent(
            lr=lr,
            steps=self.steps,
            optimizer=self.optimizer,
            momentum=self.momentum,
            gradient=gradient,
            seed=self.seed,
            stopping=self.stopping,
            save=self.save,
            diverge=self.diverge,
            target=self.target,
        )

    def run(
        self,
        prob: Problem,
        theta0: ThetaLike,
        *,
        chunk_size: int | None = None,
        progress: bool = False,
        checkpoint: str | os.PathLike | None = None,
    ) -> Trajectory:
        """Run S seeds of SGD from each start of ``theta0`` (one θ, or a batch on a leading axis);
        ``AbstractDynamics.run``. A problem without examples, or a minibatch it cannot give (B > n, or unequal
        weights without replacement), raises ValueError before anything runs."""
        data = check_measure("prob.examples()", checked(prob).examples())
        check_minibatch(self.batch, self.replace, data)
        batch, batched = as_batch(prob, theta0)
        starts, S = jax.tree_util.tree_leaves(batch)[0].shape[0], self.seeds
        rates = np.repeat(_learning_rates(self.lr, starts, batched), S)
        hook = MinibatchGradient(prob, Sampler.of(data, self.batch, bool(self.replace)))
        keys = run_keys(self.seed, starts, S)
        if batched or S > 1:
            runs = jax.tree_util.tree_map(lambda x: jnp.repeat(x, S, axis=0), batch)
            gd = self.descent(rates, hook)
        else:
            runs, gd = theta0, self.descent(self.lr, hook)
        traj = descend(gd, prob, runs, keys, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)
        return dataclasses.replace(traj, dynamics=self)


def sgd(
    prob: Problem,
    theta0: ThetaLike,
    *,
    lr: float | Float[ArrayLike, " n"],
    batch: int,
    steps: int,
    seeds: int,
    replace: bool = True,
    momentum: float = 0.0,
    seed: int = 0,
    optimizer: Optimizer | None = None,
    record_every: int | None = None,
    save_params: bool = False,
    metrics: Callable[[Theta], dict] | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    gtol: float | None = None,
    saddle_tol: float = 1e-7,
    diverge: float = 1e8,
    until: Callable[[Theta], Array] | None = None,
    chunk_size: int | None = None,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
) -> Trajectory:
    """``seeds`` runs of ``steps`` steps of minibatch SGD from each start of θ0: a convenience for
    ``SGD(…).run(prob, theta0, …)`` with the settings as keywords (see ``SGD``).

    **Arguments:**

    - ``record_every``, ``save_params``, ``metrics``: ``SaveAt(every=record_every, params=save_params,
      metrics=metrics)``; by default only the start and the end are recorded (a record evaluates the population
      loss and gradient, a pass over every example).
    - ``rtol``, ``atol``, ``gtol``, ``saddle_tol``: the stopping rule ``Steady(rtol, atol, gtol, saddle_tol)``.
    - ``until``: the ``target`` (θ → real, reached when ≤ 0).
    - ``lr``, ``batch``, ``steps``, ``seeds``, ``replace``, ``momentum``, ``seed``, ``optimizer``, ``diverge``: as
      ``SGD``.
    - ``chunk_size``, ``progress``, ``checkpoint``: as ``SGD.run``.
    """
    steps = _validate.int_at_least("steps", steps, 1)  # before record_every, which must divide it
    every = None if record_every is None else _validate.int_at_least("record_every", record_every, 1)
    dynamics = SGD(
        lr=lr,
        batch=batch,
        replace=replace,
        steps=steps,
        seeds=seeds,
        seed=seed,
        momentum=momentum,
        optimizer=optimizer,
        save=SaveAt(every=every, params=save_params, metrics=metrics),
        stopping=Steady(rtol=rtol, atol=atol, gtol=gtol, saddle_tol=saddle_tol),
        diverge=diverge,
        target=until,
    )
    return dynamics.run(prob, theta0, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)
