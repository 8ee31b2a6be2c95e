"""Transfer (Thm 4.1, docs/models/scb.md §6, [our choice] of test): fine-tune on a downstream instance from the
source solution (V, A) = (P, Qm) and compare with training from scratch.

The pretrained V is in general off the downstream manifold 𝓜̃, so the full matrices are used (exact
preconditioned, column-sum-projected population GD).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from popdyn import _validate
from popdyn.dynamics import gradient_descent
from popdyn.jobs.scb._training import ETA1, preconditioner, stage1_threshold
from popdyn.problem import Theta
from popdyn.tasks.scb._model import SparseBigram


def _first(mask: np.ndarray) -> int | None:
    hit = np.flatnonzero(mask)
    return int(hit[0]) if hit.size else None


class Signals(NamedTuple):
    """Exact preconditioned projected GD from one start, at every step (``run_signals``): the signals ``alpha_V``,
    ``alpha_A``, and ``distance`` = max(‖V − P‖_μ, ‖A − Qm‖_μ)."""

    alpha_V: np.ndarray
    alpha_A: np.ndarray
    distance: np.ndarray


class TransferRun(NamedTuple):
    """One start of ``transfer`` on the downstream instance: ``alpha0``, its signals [α_V, α_A] at the start;
    ``stage1_steps``, the first step with max(α_V, α_A) ≥ 2/(QN) (None: not within the run); ``steps_to_eps``, the
    first step within ε of the downstream truth (None likewise); ``signals``, the run (``Signals``)."""

    alpha0: list[float]
    stage1_steps: int | None
    steps_to_eps: int | None
    signals: Signals


class Transfer(NamedTuple):
    """Fine-tuning from the source solution against training from scratch (Thm 4.1, ``transfer``): stage 1's
    ``threshold`` 2/(QN), the distance ``eps`` that counts as solved, and the two runs ``pretrained`` (from
    (V, A) = (P, Qm) of the source) and ``scratch`` (from the uninformative start)."""

    threshold: float
    eps: float
    pretrained: TransferRun
    scratch: TransferRun


def run_signals(prob: SparseBigram, theta0: Theta, *, lr: float = ETA1, steps: int = 4000) -> Signals:
    """α_V, α_A and max(‖V−P‖_μ, ‖A−Qm‖_μ) at every step of exact preconditioned projected GD from θ0.

    **Arguments:**

    - ``prob``: the instance; ``theta0``: the start.
    - ``lr``: the step η; ``steps``: how many steps.
    """
    steps = _validate.int_at_least("steps", steps, 1)
    traj = gradient_descent(prob, theta0, lr=lr, steps=steps, precondition=preconditioner(prob), save_params=True)

    def at(theta):
        return (*prob.signals(theta), *prob.distances(theta))

    aV, aA, dV, dA = (np.asarray(v) for v in jax.vmap(at)(traj.params))
    return Signals(alpha_V=aV, alpha_A=aA, distance=np.maximum(dV, dA))


def _transfer_run(
    prob: SparseBigram, theta0: Theta, threshold: float, eps: float, lr: float, steps: int
) -> TransferRun:
    """``run_signals`` on ``prob`` from ``theta0``, with the first steps at stage 1's ``threshold`` and within
    ``eps``."""
    s = run_signals(prob, theta0, lr=lr, steps=steps)
    return TransferRun(
        alpha0=[float(s.alpha_V[0]), float(s.alpha_A[0])],
        stage1_steps=_first(np.maximum(s.alpha_V, s.alpha_A) >= threshold),
        steps_to_eps=_first(s.distance <= eps),
        signals=s,
    )


def transfer(
    source: SparseBigram, target: SparseBigram, Q: int, *, lr: float = ETA1, steps: int = 4000, eps: float = 0.05
) -> Transfer:
    """Downstream signals at the source solution and the steps to stage-1's threshold 2/(QN) and to
    max(‖V−P̃‖_μ, ‖A−Q̃m‖_μ) ≤ ``eps``, from the source solution and from the uninformative start.

    **Arguments:**

    - ``source``, ``target``: the pretraining and downstream instances (same N and T).
    - ``Q``: the downstream Q of the threshold 2/(QN).
    - ``lr``, ``steps``: exact GD's step η and steps of both runs; ``eps``: the distance that counts as solved.
    """
    if (source.N, source.T) != (target.N, target.T):
        raise ValueError(
            f"target has (N, T) = ({target.N}, {target.T}): must match the source's ({source.N}, {source.T})"
        )
    eps = _validate.positive("eps", eps)
    threshold = stage1_threshold(target.N, Q)
    return Transfer(
        threshold=threshold,
        eps=eps,
        pretrained=_transfer_run(target, {"V": source.P, "A": source.Qm}, threshold, eps, lr, steps),
        scratch=_transfer_run(target, target.init(None), threshold, eps, lr, steps),
    )
