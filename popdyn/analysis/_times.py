"""Hitting times (exact, by root finding inside the solver step) and rates of convergence (docs/times.md)."""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, PyTree

from popdyn import _validate, dynamics
from popdyn.curvature import hessian_spectrum
from popdyn.dynamics import AbstractDynamics, Status, Trajectory, gradient_descent
from popdyn.dynamics._base import run_options
from popdyn.dynamics._status import count
from popdyn.problem import Problem, Theta, ThetaLike


class Distance(eqx.Module):
    """Target ‖θ − θ*‖ ≤ ε, as the condition ‖θ − θ*‖ − ε (reached when ≤ 0); θ* and ε are array leaves."""

    theta_star: Theta
    eps: Float[Array, ""]

    def __init__(self, theta_star: Theta, eps: float):
        self.theta_star = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype=jnp.result_type(float)), theta_star)
        self.eps = jnp.asarray(_validate.positive("eps", eps), dtype=jnp.result_type(float))

    def __call__(self, theta: Theta) -> Float[Array, ""]:
        return optax.tree.norm(jax.tree_util.tree_map(jnp.subtract, theta, self.theta_star)) - self.eps


class LossBelow(eqx.Module):
    """Target L(θ) ≤ level (e.g. L* + ε), as the condition L(θ) − level."""

    prob: Problem
    level: Float[Array, ""]

    def __init__(self, prob: Problem, level: float):
        self.prob = prob
        self.level = jnp.asarray(_validate.finite("level", level), dtype=jnp.result_type(float))

    def __call__(self, theta: Theta) -> Float[Array, ""]:
        return self.prob.loss(theta) - self.level


class GradNormBelow(eqx.Module):
    """Target ‖∇L(θ)‖ ≤ ε, as the condition ‖∇L(θ)‖ − ε."""

    prob: Problem
    eps: Float[Array, ""]

    def __init__(self, prob: Problem, eps: float):
        self.prob = prob
        self.eps = jnp.asarray(_validate.positive("eps", eps), dtype=jnp.result_type(float))

    def __call__(self, theta: Theta) -> Float[Array, ""]:
        return optax.tree.norm(jax.grad(self.prob.loss)(theta)) - self.eps


@dataclass(frozen=True)
class HittingTimes:
    """Per initialisation: the first time (flow) or step (GD) at which the target holds, NaN where it was not
    reached (see ``status``: the run converged elsewhere, diverged, or ran out of budget), and where it stopped;
    ``trajectory`` is the run itself (for ``popdyn.analysis.budget_report``)."""

    times: np.ndarray
    status: np.ndarray
    final: PyTree[Float[np.ndarray, "..."]]
    time_unit: str
    trajectory: Trajectory | None = None

    @property
    def reached(self) -> np.ndarray:
        """Whether each point reached the target."""
        return self.status == int(Status.REACHED)

    def status_counts(self) -> dict[str, int]:
        """How many initialisations ended in each status."""
        return count(self.status)


def hitting_times(
    prob: Problem,
    theta0: ThetaLike,
    target,
    method: str | AbstractDynamics = "flow",
    *,
    t1: float | None = None,
    lr=None,
    steps: int | None = None,
    **dynamics_kwargs,
) -> HittingTimes:
    """First time each run from θ0 (one point or a batch) meets ``target``: a function θ → real, reached when it
    first falls to ≤ 0 (``Distance``, ``LossBelow``, ``GradNormBelow`` or a user's own; an equinox Module keeps its
    numbers traced, so a new ε compiles nothing).

    ``method`` is a dynamics object (its own settings; extra keywords: ``chunk_size``, ``progress``, ``checkpoint``),
    or ``"flow"`` (to ``t1``, default 1e4) or ``"gd"`` (``steps`` at ``lr``, defaults 10,000 and 0.1), where extra
    keywords go to ``gradient_flow`` / ``gradient_descent`` (e.g. ``rtol``/``atol`` for tighter times).
    Flow: the time is found by a root finder on the solver's dense output inside the step where the condition
    changes sign (diffrax events), so it is exact to the solver's tolerance, not rounded to a step end. GD: the
    exact index of the first step k with target(θ_k) ≤ 0."""
    if not callable(target):
        raise ValueError(f"target={target!r} is invalid: must be a function θ -> real (reached when <= 0)")
    if isinstance(method, AbstractDynamics):
        options = run_options(method, dynamics_kwargs, t1=t1, lr=lr, steps=steps)
        traj = method.reaching(target).end_points().run(prob, theta0, **options)
    elif _validate.choice("method", method, ("flow", "gd")) == "flow":
        t1 = 1e4 if t1 is None else t1
        traj = dynamics.gradient_flow(prob, theta0, t1=t1, ts=None, until=target, **dynamics_kwargs)
    else:
        steps = 10_000 if steps is None else steps
        traj = gradient_descent(
            prob,
            theta0,
            lr=0.1 if lr is None else lr,
            steps=steps,
            record_every=dynamics_kwargs.pop("record_every", steps),
            until=target,
            **dynamics_kwargs,
        )
    status = np.asarray(traj.status)
    times = np.where(status == int(Status.REACHED), np.asarray(traj.t_final), np.nan)
    return HittingTimes(
        times=times,
        status=status,
        final=jax.tree_util.tree_map(np.asarray, traj.final),
        time_unit=traj.time_unit,
        trajectory=traj,
    )


def hitting_time(ts: Float[ArrayLike, " T"], dist: Float[ArrayLike, " T"], eps: float) -> float:
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


def asymptotic_rate(ts: Float[ArrayLike, " T"], dist: Float[ArrayLike, " T"], hi: float, lo: float) -> float:
    """Least-squares rate r of dist ~ C·exp(−r t) over the records with lo < dist < hi (NaN if < 3)."""
    ts, dist = np.asarray(ts, float), np.asarray(dist, float)
    sel = np.isfinite(ts) & np.isfinite(dist) & (dist > lo) & (dist < hi)
    if sel.sum() < 3:
        return float("nan")
    slope = np.polyfit(ts[sel], np.log(dist[sel]), 1)[0]
    return float(-slope)


def local_rate(prob: Problem, theta_limit: ThetaLike, rel_tol: float = 1e-8) -> float:
    """Predicted rate of approach to a minimum: the smallest Hessian eigenvalue above rel_tol·λ_max
    (zero eigenvalues are directions along a manifold of minima, which the flow does not contract)."""
    ev = np.asarray(hessian_spectrum(prob, theta_limit))
    pos = ev[ev > rel_tol * max(ev[-1], 0.0)]
    return float(pos[0]) if pos.size and ev[-1] > 0 else float("nan")


def first_passage(
    prob: Problem, theta0: ThetaLike, g, t1: float, *, n_grid: int = 4000, t_min: float | None = None, **flow_kwargs
) -> tuple[np.ndarray, Trajectory]:
    """First times t at which each component of g(θ_t) > 0 along the gradient flow from θ0 (one point, or a
    batch on a leading axis).

    The flow is recorded on 0 ∪ a log-spaced grid of ``n_grid`` times in [t_min, t1] (t_min = t1·1e-9 by
    default) and each crossing is located by linear interpolation between the two records around it
    (relative error ~ (grid ratio − 1)², ≈ 3e-5 at the defaults). NaN where g_k never becomes positive;
    returns (times (…, K), trajectory)."""
    t_min = t1 * 1e-9 if t_min is None else t_min
    ts = np.concatenate([[0.0], np.geomspace(t_min, t1, n_grid)])
    traj = dynamics.gradient_flow(prob, theta0, t1=t1, ts=ts, save_params=True, **flow_kwargs)
    batched = np.ndim(traj.ts) == 2
    gv = jax.vmap(jax.vmap(g)) if batched else jax.vmap(g)
    G = np.asarray(gv(traj.params))
    G = G.reshape(*G.shape[: 1 + batched], -1)  # (…, T, K)
    above = np.isfinite(G) & (G > 0)
    i = np.argmax(above, axis=-2)[..., None, :]  # first record above 0
    g1 = np.take_along_axis(G, i, axis=-2)[..., 0, :]
    g0 = np.take_along_axis(G, np.maximum(i - 1, 0), axis=-2)[..., 0, :]
    t_hi, t_lo = ts[i[..., 0, :]], ts[np.maximum(i[..., 0, :] - 1, 0)]
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(i[..., 0, :] == 0, 0.0, t_lo + (t_hi - t_lo) * (-g0) / (g1 - g0))
    return np.where(above.any(axis=-2), t, np.nan), traj
