"""The result of a batched run of gradient flow or gradient descent."""

from __future__ import annotations

import equinox as eqx
from jaxtyping import Array, Float, Int

from popdyn.dynamics.status import STATUS_NAMES, count
from popdyn.problem import Theta


class Trajectory(eqx.Module):
    """Batched record of a run (leading axis = initialisation; absent for a single θ0).

    ``ts`` are record times (flow time, or GD step index when ``time_unit == "step"``); entries
    after a point stopped early are NaN (diffrax's inf padding is masked). ``t_final`` is when a
    point stopped: its steady-state time if it converged, else the end of the budget.
    """

    final: Theta
    status: Int[Array, " *B"]
    t_final: Float[Array, " *B"]
    ts: Float[Array, "*B T"]
    loss: Float[Array, "*B T"]
    grad_norm: Float[Array, "*B T"]
    params: Theta | None
    n_steps: Int[Array, " *B"]
    time_unit: str = eqx.field(static=True)

    @property
    def status_names(self) -> tuple[str, ...]:
        """Names of the status codes, indexed by code."""
        return STATUS_NAMES

    def status_counts(self) -> dict[str, int]:
        """How many initialisations ended in each status."""
        return count(self.status)
