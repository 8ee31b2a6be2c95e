"""Algorithm 1, reconstructed (docs/models/scb.md §5): stage 1 on the exact population process, stage 2 as
ℓ1-proximal or plain preconditioned SGD with exact minibatches or the Gaussian surrogate, the noise-free population
trajectory, and the state metrics (``popdyn.tasks.scb.state_metrics``: distances, signals and Δ, the distance to that
trajectory) along a run.

Every hyperparameter of the paper is [unknown]; the defaults below are popdyn's choices, tuned once on
random N = 10, T = 50, Q = 2 instances (measured: proximal reaches ‖A − Qm‖_μ ≈ 0.006 after
normalisation where plain SGD with the same batch stays at ≈ 0.13).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from popdyn import _validate
from popdyn.dynamics import L1Prox, Trajectory, gradient_descent
from popdyn.jobs._records import internal
from popdyn.problem import Theta
from popdyn.tasks.scb._instance import random_instance
from popdyn.tasks.scb._metrics import StateMetrics, state_metrics
from popdyn.tasks.scb._model import SparseBigram
from popdyn.tasks.scb.sampling import minibatch_gradient, per_sample_sq_norms

ETA1, ETA2, ETA2_SMALL = 0.5, 0.1, 0.02
LAMBDA_A, LAMBDA_V = 0.002, 0.0
BATCH = 256
METHODS = ("proximal", "sgd")
NOISES = ("gaussian", "sampled")


def stage1_threshold(N: int, Q: int) -> float:
    """2/(QN): Θ(1/(QN)) of Thm 3.1 with the constant of the paper's runs (α ≈ 0.1 at N = 10, Q = 2; §5)."""
    return 2.0 / (_validate.int_at_least("Q", Q, 1) * _validate.int_at_least("N", N, 2))


def preconditioner(prob: SparseBigram, project: bool = True) -> eqx.Partial:
    """θ ↦ the §4 direction of a gradient (Π_T-projected by default), as a traceable callable for the engine."""
    return eqx.Partial(prob.precondition, project=project)


def gradient_variance(
    prob: SparseBigram, theta: Theta, key, samples: int = 20_000, project: bool = True, chunk: int = 200
) -> dict[str, float]:
    """Mean per-entry variance of the preconditioned per-sample gradient g at θ, per block (§5 calibration):
    (E‖g_b‖² − ‖E g_b‖²)/size_b, with E g_b the exact preconditioned population gradient and E‖g_b‖² the
    Monte Carlo mean of per-sample squared norms over ``samples`` draws, ``chunk`` at a time (no per-sample
    gradient is stored, so it scales to T = 1e5). Keyed by θ's blocks ("V", "A"), as ``surrogate_noise`` and the
    engine's ``noise=`` take it."""
    samples = _validate.int_at_least("samples", samples, 2)
    chunk = min(_validate.int_at_least("chunk", chunk, 1), samples)
    n_chunks = -(-samples // chunk)
    sums = {"V": 0.0, "A": 0.0}
    for key_c in jax.random.split(key, n_chunks):
        sq = per_sample_sq_norms(prob, theta, prob.sample(key_c, chunk), project=project)
        sums = {b: sums[b] + float(jnp.sum(sq[b])) for b in sums}
    mean_g = prob.precondition(jax.grad(prob.loss)(theta), project=project)
    n = n_chunks * chunk
    return {b: (sums[b] / n - float(jnp.sum(mean_g[b] ** 2))) / mean_g[b].size for b in sums}


def surrogate_noise(variance: dict[str, float], batch: int) -> dict[str, float]:
    """σ_b = √(var_b / B): the Gaussian surrogate of a batch-B minibatch gradient, per block b of θ (§5), keyed
    like ``variance`` (``gradient_variance``): the engine's ``noise=``."""
    batch = _validate.int_at_least("batch", batch, 1)
    return {k: float(np.sqrt(v / batch)) for k, v in variance.items()}


class SampledGradient(eqx.Module):
    """(θ, key) ↦ the preconditioned gradient of an exact batch-B minibatch of the generative model (§5)."""

    prob: SparseBigram
    batch: int = eqx.field(static=True)
    project: bool = eqx.field(static=True)

    def __call__(self, theta: Theta, key) -> Theta:
        return minibatch_gradient(self.prob, theta, self.prob.sample(key, self.batch), project=self.project)


@dataclass(frozen=True)
class Stage1Run:
    """Stage 1 on the exact population process (docs/models/scb.md §5), as returned by ``stage1``: ``step``, the
    first GD step t with max(α_V, α_A) ≥ ``threshold`` (min(α_V, α_A) with ``both``; None if not within the budget),
    θ_t (``theta``, None likewise) and the signals (α_V, α_A) (``alphas``) at steps ``ts`` = 0, 1, ... up to it.
    ``popdyn.jobs._records.summary(run)`` is its JSON part: ``theta``, ``alphas`` and ``ts`` stay out of it."""

    step: int | None
    threshold: float
    theta: Theta | None = internal()
    alphas: np.ndarray = internal()
    ts: np.ndarray = internal()


def stage1(
    prob: SparseBigram,
    Q: int,
    *,
    lr: float = ETA1,
    max_steps: int = 5000,
    threshold: float | None = None,
    chunk: int = 100,
    both: bool = False,
) -> Stage1Run:
    """Exact population preconditioned, projected GD from (μ1ᵀ, 11ᵀ/T) until max(α_V, α_A) ≥ ``threshold``
    (default 2/(QN); with ``both``, until min(α_V, α_A) ≥ ``threshold``): T_1 of Thm 3.1 without sampling
    noise. Runs ``chunk`` steps at a time (one compiled loop, reused) and stops at the first chunk that
    crosses; the signals are recorded as metrics, so θ is never stored along the run. Returns the step (None
    if not within ``max_steps``), θ there and the signals as a ``Stage1Run``."""
    threshold = stage1_threshold(prob.N, Q) if threshold is None else _validate.positive("threshold", threshold)
    max_steps = _validate.int_at_least("max_steps", max_steps, 1)
    chunk = min(_validate.int_at_least("chunk", chunk, 1), max_steps)
    pre = preconditioner(prob)

    def signals(theta):
        aV, aA = prob.signals(theta)
        return {"alpha_V": aV, "alpha_A": aA}

    parts: list[np.ndarray]
    theta, parts, done = prob.init(None), [], 0
    while done < max_steps:
        n = min(chunk, max_steps - done)
        traj = gradient_descent(prob, theta, lr=lr, steps=n, precondition=pre, metrics=signals)
        a = np.stack([np.asarray(traj.metrics["alpha_V"]), np.asarray(traj.metrics["alpha_A"])], axis=-1)  # type: ignore[index]  # metrics= was given, so traj.metrics is a dict
        parts.append(a if not parts else a[1:])  # a chunk's first record repeats the previous chunk's last
        hit = np.flatnonzero((a.min(axis=-1) if both else a.max(axis=-1)) >= threshold)
        if hit.size:
            step = done + int(hit[0])
            if hit[0] > 0:
                theta = gradient_descent(
                    prob, theta, lr=lr, steps=int(hit[0]), record_every=int(hit[0]), precondition=pre
                ).final
            alphas = np.concatenate(parts)[: step + 1]
            return Stage1Run(step=step, threshold=threshold, theta=theta, alphas=alphas, ts=np.arange(step + 1.0))
        theta, done = traj.final, done + n
    alphas = np.concatenate(parts)
    return Stage1Run(step=None, threshold=threshold, theta=None, alphas=alphas, ts=np.arange(len(alphas) * 1.0))


def stage2_start(N: int, T: int, Q: int, seed: int) -> tuple[SparseBigram, Stage1Run]:
    """The random instance drawn from ``PRNGKey(seed)`` (``random_instance``) and its exact ``stage1`` run, whose end
    point is where every stage-2 run of Figs. 1 and 3 starts; ValueError if stage 1 does not cross its threshold
    within its step budget.

    **Arguments:**

    - ``N``, ``T``, ``Q``: the instance's sizes and sparsity; ``seed``: an integer ≥ 0.
    """
    prob = SparseBigram(*random_instance(jax.random.PRNGKey(_validate.int_at_least("seed", seed, 0)), N, T, Q))
    s1 = stage1(prob, Q)
    if s1.step is None:
        raise ValueError(f"Q={Q}: stage 1 did not reach max(α) >= {s1.threshold:.3g} within its step budget")
    return prob, s1


def stage2(
    prob: SparseBigram,
    theta1: Theta,
    *,
    method: str = "proximal",
    noise: str = "gaussian",
    lr: float = ETA2,
    steps: int = 3000,
    batch: int = BATCH,
    lam_A: float = LAMBDA_A,
    lam_V: float = LAMBDA_V,
    variance: dict[str, float] | None = None,
    seed: int = 0,
    record_every: int = 10,
) -> Trajectory:
    """Stage 2 from θ1: preconditioned projected SGD (``method="sgd"``) or its ℓ1-proximal version
    V ← S_{ηλ_V}(V − ηĝ_V), A ← S_{ηλ_A}(A − ηĝ_A) (``"proximal"``), with ĝ an exact batch-``batch`` minibatch
    gradient (``noise="sampled"``) or the exact gradient plus N(0, var_b/B) (``"gaussian"``; var_b from
    ``gradient_variance`` at θ1 unless given). Parameters are saved every ``record_every`` steps."""
    _validate.choice("method", method, METHODS)
    _validate.choice("noise", noise, NOISES)
    lam = {
        "V": _validate.positive("lam_V", lam_V, allow_zero=True),
        "A": _validate.positive("lam_A", lam_A, allow_zero=True),
    }
    prox = L1Prox(lam) if method == "proximal" and any(lam.values()) else None
    if noise == "sampled":
        hooks: dict = {"gradient": SampledGradient(prob, _validate.int_at_least("batch", batch, 1), True)}
    else:
        if variance is None:
            variance = gradient_variance(prob, theta1, jax.random.PRNGKey(seed + 1))
        hooks = {"precondition": preconditioner(prob), "noise": surrogate_noise(variance, batch)}
    return gradient_descent(
        prob, theta1, lr=lr, steps=steps, prox=prox, seed=seed, record_every=record_every, save_params=True, **hooks
    )


def population_reference(
    prob: SparseBigram, theta1: Theta, *, lr: float = ETA2, steps: int = 3000, record_every: int = 10
) -> Trajectory:
    """(V̄, Ā): the noise-free, unregularised population trajectory (exact preconditioned projected GD) from θ1."""
    return gradient_descent(
        prob, theta1, lr=lr, steps=steps, precondition=preconditioner(prob), record_every=record_every, save_params=True
    )


class RunMetrics(NamedTuple):
    """``StateMetrics`` along a run (``trajectory_metrics``): ``state``, NumPy arrays of the metrics at the record
    ``steps``."""

    steps: np.ndarray
    state: StateMetrics

    def arrays(self) -> dict[str, np.ndarray]:
        """The run's ``.npz`` form: the metrics by name (``StateMetrics.named``) in alphabetical order, as the engine
        records ``metrics=`` (``WithReference``), then ``steps``."""
        return {k: np.asarray(v) for k, v in sorted(self.state.named().items())} | {"steps": self.steps}


def trajectory_metrics(prob: SparseBigram, traj: Trajectory, reference: Trajectory | None = None) -> RunMetrics:
    """``state_metrics`` along a run with saved parameters, as ``RunMetrics``.

    **Arguments:**

    - ``prob``: the instance; ``traj``: the run (``save_params=True``).
    - ``reference``: the noise-free reference run, recorded at the same steps, or None.
    """
    ref = None if reference is None else reference.params
    out = (
        jax.vmap(lambda th, r: state_metrics(prob, th, r))(traj.params, ref)
        if ref is not None
        else jax.vmap(lambda th: state_metrics(prob, th))(traj.params)
    )
    return RunMetrics(steps=np.asarray(traj.ts), state=jax.tree_util.tree_map(np.asarray, out))
