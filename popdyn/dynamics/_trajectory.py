"""The result of a batched run of gradient flow or gradient descent."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from popdyn._batching import unbatch
from popdyn.curvature import EXACT_MAX_DIM, extreme_eigenvalues, hessian_spectrum
from popdyn.dynamics import _degenerate as degenerate
from popdyn.dynamics import _stopping as stopping
from popdyn.dynamics._base import AbstractDynamics, Steady
from popdyn.dynamics._status import STATUS_NAMES, Status, count, refine_saddles
from popdyn.problem import Problem, Theta


class Trajectory(eqx.Module):
    """Batched record of a run (leading axis = initialisation; absent for a single θ0).

    ``ts`` are record times (flow time, or GD step index when ``time_unit == "step"``); entries
    after a point stopped early are NaN (diffrax's inf padding is masked). ``metrics`` holds user quantities
    recorded at ``ts`` (``gradient_descent(metrics=…)``), without storing θ. ``t_final`` is when a
    point stopped: its steady-state time if it converged, else the end of the budget. ``final_loss`` is
    L(final), so it is never padding, unlike ``loss[..., -1]`` for a flow that stopped early. ``dynamics`` is the
    dynamics object that ran (``popdyn.dynamics.AbstractDynamics``): analyses read the run's settings from it.
    """

    final: Theta
    final_loss: Float[Array, " *B"]
    status: Int[Array, " *B"]
    t_final: Float[Array, " *B"]
    ts: Float[Array, "*B T"]
    loss: Float[Array, "*B T"]
    grad_norm: Float[Array, "*B T"]
    params: Theta | None
    n_steps: Int[Array, " *B"]
    time_unit: str = eqx.field(static=True)
    metrics: dict | None = None
    dynamics: AbstractDynamics | None = None

    @property
    def status_names(self) -> tuple[str, ...]:
        """Names of the status codes, indexed by code."""
        return STATUS_NAMES

    def status_counts(self) -> dict[str, int]:
        """How many initialisations ended in each status."""
        return count(self.status)


def frozen_scales(scales: dict | None) -> tuple | None:
    """Per-block scales as a hashable tuple, so they can sit in a static (compile-cache) config."""
    return None if scales is None else tuple(sorted(scales.items()))


@eqx.filter_jit
def _classify(
    prob: Problem, batch: Theta, status: Int[Array, " B"], tols: tuple[float, float, float], late: bool, saddles: bool
) -> tuple[Int[Array, " B"], Float[Array, " B"], Bool[Array, " B"]]:
    """(The refined status, L at every end point, which points need the higher-order probe) in one program per
    problem, shape and flags: MAX_STEPS points passing the Newton test become CONVERGED_LATE (``late``), converged
    points with negative curvature SADDLE (``saddles``). With a dense Hessian (up to ``EXACT_MAX_DIM`` parameters),
    converged or late points whose spectrum has a zero eigenvalue are marked for ``popdyn.dynamics._degenerate``.
    One compiled program instead of one per step keeps a warm command's start-up short."""
    rtol, atol, saddle_tol = tols
    dense = prob.n_params() <= EXACT_MAX_DIM
    if late:
        ok = jax.vmap(lambda t: stopping.converged_late(prob, t, rtol, atol, saddle_tol))(batch)
        status = jnp.where((status == Status.MAX_STEPS) & ok, int(Status.CONVERGED_LATE), status)
    lam = hessian_spectrum(prob, batch) if dense and (late or saddles) else None
    if saddles:
        lo, hi = (lam[:, 0], lam[:, -1]) if lam is not None else extreme_eigenvalues(prob, batch)
        status = refine_saddles(status, lo, hi, saddle_tol)
    at_min = (status == Status.CONVERGED) | (status == Status.CONVERGED_LATE)
    probe = at_min & degenerate.flat(lam, saddle_tol) if lam is not None else jnp.zeros_like(at_min)
    return status, jax.vmap(prob.loss)(batch), probe


def finish(prob: Problem, out: dict, batched: bool, dynamics: AbstractDynamics, rule: Steady) -> Trajectory:
    """Classify converged points by their Hessian (saddle vs minimum; degenerate ones by the higher-order probe of
    ``popdyn.dynamics._degenerate``), points whose budget ran out by the Newton test (CONVERGED_LATE or still
    MAX_STEPS), both with the tolerances of the run's stopping ``rule``, and package a Trajectory that carries
    ``dynamics`` (attached after the batch axis is dropped: its settings are not per point)."""
    rtol, atol, saddle_tol = rule.rtol, rule.atol, rule.saddle_tol
    codes = np.asarray(out["status"])  # which tests are needed, decided on the host
    late, saddles = bool(np.any(codes == Status.MAX_STEPS)), bool(np.any(codes == Status.CONVERGED))
    status, final_loss, probe = _classify(
        prob, out["final"], jnp.asarray(out["status"], jnp.int32), (rtol, atol, saddle_tol), late, saddles
    )
    if np.any(np.asarray(probe)):
        status = jnp.asarray(degenerate.refine(prob, out["final"], np.asarray(status), np.asarray(probe), saddle_tol))
    traj = Trajectory(
        final=out["final"],
        final_loss=final_loss,
        status=status,
        t_final=out["t_final"],
        ts=out["ts"],
        loss=out["loss"],
        grad_norm=out["grad_norm"],
        params=out["params"],
        n_steps=jnp.asarray(out["n_steps"], jnp.int32),
        time_unit=dynamics.time_unit,
        metrics=out.get("metrics"),
    )
    return dataclasses.replace(unbatch(traj, batched), dynamics=dynamics)
