"""Transfer (Thm 4.1, docs/models/scb.md §6, [our choice] of test): fine-tune on a downstream instance from the
source solution (V, A) = (P, Qm) and compare with training from scratch.

The pretrained V is in general off the downstream manifold 𝓜̃, so the full matrices are used (exact
preconditioned, column-sum-projected population GD).
"""

from __future__ import annotations

import jax
import numpy as np

from popdyn import _validate
from popdyn.dynamics import gradient_descent
from popdyn.jobs.scb.training import ETA1, preconditioner, stage1_threshold
from popdyn.problem import Theta
from popdyn.tasks.scb.model import SparseBigram


def _first(mask: np.ndarray) -> int | None:
    hit = np.flatnonzero(mask)
    return int(hit[0]) if hit.size else None


def run_signals(prob: SparseBigram, theta0: Theta, *, lr: float = ETA1, steps: int = 4000) -> dict[str, np.ndarray]:
    """α_V, α_A and max(‖V−P‖_μ, ‖A−Qm‖_μ) at every step of exact preconditioned projected GD from θ0."""
    steps = _validate.int_at_least("steps", steps, 1)
    traj = gradient_descent(prob, theta0, lr=lr, steps=steps, precondition=preconditioner(prob), save_params=True)

    def at(theta):
        return (*prob.signals(theta), *prob.distances(theta))

    aV, aA, dV, dA = (np.asarray(v) for v in jax.vmap(at)(traj.params))
    return {"alpha_V": aV, "alpha_A": aA, "distance": np.maximum(dV, dA)}


def transfer(
    source: SparseBigram, target: SparseBigram, Q: int, *, lr: float = ETA1, steps: int = 4000, eps: float = 0.05
) -> dict:
    """Downstream signals at the source solution and the steps to stage-1's threshold 2/(QN) and to
    max(‖V−P̃‖_μ, ‖A−Q̃m‖_μ) ≤ ``eps``, from the source solution and from the uninformative start."""
    if (source.N, source.T) != (target.N, target.T):
        raise ValueError(
            f"target has (N, T) = ({target.N}, {target.T}): must match the source's ({source.N}, {source.T})"
        )
    eps = _validate.positive("eps", eps)
    threshold = stage1_threshold(target.N, Q)
    out: dict[str, object] = {"threshold": threshold, "eps": eps}
    for name, theta0 in (("pretrained", {"V": source.P, "A": source.Qm}), ("scratch", target.init(None))):
        s = run_signals(target, theta0, lr=lr, steps=steps)
        out[name] = {
            "alpha0": [float(s["alpha_V"][0]), float(s["alpha_A"][0])],
            "stage1_steps": _first(np.maximum(s["alpha_V"], s["alpha_A"]) >= threshold),
            "steps_to_eps": _first(s["distance"] <= eps),
            "signals": s,
        }
    return out
