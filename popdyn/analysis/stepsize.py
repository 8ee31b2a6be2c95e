"""Step-size audits: λ_max(∇²L(θ_t)) along a trajectory against the thresholds 1/η and 2/η.

GD on a quadratic with curvature λ is monotone for η ≤ 1/λ and stable for η < 2/λ (the edge of
stability); the audit reports where a run crosses either threshold and whether its loss rose.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from popdyn import _validate
from popdyn.analysis.curvature import lambda_max
from popdyn.dynamics import Status, Trajectory
from popdyn.problem import Problem


@dataclass(frozen=True)
class StepSizeAudit:
    """Per initialisation (leading axis when batched): λ_max at each record time, its maximum, the
    first record time where it exceeds 1/η and 2/η (NaN: never), and how often the loss rose."""

    lr: float
    ts: np.ndarray
    lambda_max: np.ndarray
    max_lambda: np.ndarray
    first_above_1_over_lr: np.ndarray
    first_above_2_over_lr: np.ndarray
    loss_rises: np.ndarray
    status: np.ndarray

    @property
    def monotone_safe(self) -> np.ndarray:
        """max_t λ_max ≤ 1/η: the step size condition η ≤ 1/λ_max held all along."""
        return self.max_lambda <= 1.0 / self.lr

    @property
    def flagged(self) -> np.ndarray:
        """max_t λ_max > 2/η: past the stability edge at some recorded point."""
        return self.max_lambda > 2.0 / self.lr

    @property
    def diverged(self) -> np.ndarray:
        """The run itself diverged or produced NaN."""
        return np.isin(self.status, (int(Status.DIVERGED), int(Status.NAN)))

    def summary(self) -> dict:
        """One (unbatched) run's audit as plain numbers for ``summary.json``."""
        return {"lr": self.lr, "max_lambda": float(self.max_lambda), "one_over_lr": 1 / self.lr,
                "two_over_lr": 2 / self.lr, "monotone_safe": bool(self.monotone_safe),
                "past_stability_edge": bool(self.flagged),
                "first_step_above_2_over_lr": float(self.first_above_2_over_lr), "loss_rises": int(self.loss_rises)}

    def verdict(self) -> str:
        """One (unbatched) run's audit in words, with its λ_max against 1/η and 2/η."""
        word = ("PAST 2/η (unstable)" if self.flagged else "η ≤ 1/λ_max held" if self.monotone_safe
                else "between 1/λ_max and 2/λ_max")
        return (f"max λ_max = {float(self.max_lambda):.4f} (1/η = {1 / self.lr:.3f}, 2/η = {2 / self.lr:.3f}): {word}; "
                f"loss rose {int(self.loss_rises)}×")


def _first_time(ts: np.ndarray, above: np.ndarray) -> np.ndarray:
    hit = above.any(axis=-1)
    idx = np.argmax(above, axis=-1)
    return np.where(hit, np.take_along_axis(ts, idx[..., None], axis=-1)[..., 0], np.nan)


def step_size_audit(prob: Problem, traj: Trajectory, lr: float, method: str = "auto") -> StepSizeAudit:
    """Audit a trajectory recorded with ``save_params=True`` against the learning rate ``lr``."""
    lr = _validate.positive("lr", lr)
    if traj.params is None:
        raise ValueError("traj has no saved parameters: run gradient_descent/gradient_flow with save_params=True")
    ts = np.asarray(traj.ts)
    lead = ts.shape  # (*B, T)
    flat = jax.tree_util.tree_map(lambda x: x.reshape((-1, *x.shape[len(lead):])), traj.params)
    lam = np.asarray(lambda_max(prob, flat, method=method)).reshape(lead)
    lam = np.where(np.isfinite(ts), lam, np.nan)
    loss = np.asarray(traj.loss)
    rises = np.sum(np.diff(loss, axis=-1) > 1e-12 * np.maximum(1.0, np.abs(loss[..., :-1])), axis=-1)
    safe = np.where(np.isfinite(lam), lam, -np.inf)
    return StepSizeAudit(
        lr=lr, ts=ts, lambda_max=lam, max_lambda=np.max(safe, axis=-1),
        first_above_1_over_lr=_first_time(ts, safe > 1.0 / lr),
        first_above_2_over_lr=_first_time(ts, safe > 2.0 / lr),
        loss_rises=rises, status=np.asarray(traj.status),
    )
