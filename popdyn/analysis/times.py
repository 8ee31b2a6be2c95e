"""Hitting times and asymptotic rates of convergence along recorded trajectories."""

from __future__ import annotations

import numpy as np

from popdyn.analysis.curvature import hessian_spectrum
from popdyn.problem import Problem, Theta


def hitting_time(ts: np.ndarray, dist: np.ndarray, eps: float) -> float:
    """First time after which ``dist`` stays ≤ eps, interpolated log-linearly between records;
    NaN if the last finite record is still above eps."""
    ts, dist = np.asarray(ts, float), np.asarray(dist, float)
    keep = np.isfinite(ts) & np.isfinite(dist)
    ts, dist = ts[keep], dist[keep]
    if ts.size == 0 or dist[-1] > eps:
        return float("nan")
    above = np.flatnonzero(dist > eps)
    if above.size == 0:
        return float(ts[0])
    i = above[-1]  # last record above eps; the next one is below
    la, lb = np.log(dist[i]), np.log(max(dist[i + 1], 1e-300))
    frac = (la - np.log(eps)) / (la - lb) if la != lb else 1.0
    return float(ts[i] + frac * (ts[i + 1] - ts[i]))


def asymptotic_rate(ts: np.ndarray, dist: np.ndarray, hi: float, lo: float) -> float:
    """Least-squares rate r of dist ~ C·exp(−r t) over the records with lo < dist < hi (NaN if < 3)."""
    ts, dist = np.asarray(ts, float), np.asarray(dist, float)
    sel = np.isfinite(ts) & np.isfinite(dist) & (dist > lo) & (dist < hi)
    if sel.sum() < 3:
        return float("nan")
    slope = np.polyfit(ts[sel], np.log(dist[sel]), 1)[0]
    return float(-slope)


def local_rate(prob: Problem, theta_limit: Theta, rel_tol: float = 1e-8) -> float:
    """Predicted rate of approach to a minimum: the smallest Hessian eigenvalue above rel_tol·λ_max
    (zero eigenvalues are directions along a manifold of minima, which the flow does not contract)."""
    ev = np.asarray(hessian_spectrum(prob, theta_limit))
    pos = ev[ev > rel_tol * max(ev[-1], 0.0)]
    return float(pos[0]) if pos.size and ev[-1] > 0 else float("nan")
