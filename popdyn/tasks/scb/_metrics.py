"""Where an SCB state θ = (V, A) stands (docs/models/scb.md §5): the final normalisation of Algorithm 1, the
distances ‖V − P‖_μ and ‖A − Qm‖_μ (raw and after the normalisation), the signals α_V, α_A and, against a reference
state (V_ref, A_ref), Δ_V = V − V_ref and Δ_A = A − A_ref in the Frobenius and μ norms.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn.problem import Theta
from popdyn.tasks.scb._model import SparseBigram


def normalise(theta: Theta) -> Theta:
    """The final normalisation [our choice of the unknown rule]: clip negatives, then rescale every column of
    V and A to sum to 1 (a column with no positive entry becomes uniform): a state as a column-stochastic
    (P, Qm) estimate, for the normalised distances of ``state_metrics``.

    **Arguments:**

    - ``theta``: the state {"V": N × N, "A": T × N}.
    """

    def columns(M):
        M = jnp.maximum(M, 0.0)
        s = jnp.sum(M, axis=0, keepdims=True)
        return jnp.where(s > 0, M / jnp.where(s > 0, s, 1.0), 1.0 / M.shape[0])

    return {"V": columns(theta["V"]), "A": columns(theta["A"])}


class StateMetrics(NamedTuple):
    """Where an SCB state (V, A) stands (§5, ``state_metrics``); scalars at one state, arrays along a run.

    - ``dist_V``, ``dist_A``: ‖V − P‖_μ and ‖A − Qm‖_μ; ``dist_V_normalised``, ``dist_A_normalised``: the same after
      ``normalise``.
    - ``alpha_V``, ``alpha_A``: the signals α_V, α_A.
    - ``delta_V_fro``, ``delta_V_mu``, ``delta_A_fro``, ``delta_A_mu``: Δ_V = V − V_ref and Δ_A = A − A_ref in the
      Frobenius and μ norms (the plot norm is [unknown], both reported); None without a reference state.
    """

    dist_V: Float[Array, "*run"]
    dist_A: Float[Array, "*run"]
    dist_V_normalised: Float[Array, "*run"]
    dist_A_normalised: Float[Array, "*run"]
    alpha_V: Float[Array, "*run"]
    alpha_A: Float[Array, "*run"]
    delta_V_fro: Float[Array, "*run"] | None = None
    delta_V_mu: Float[Array, "*run"] | None = None
    delta_A_fro: Float[Array, "*run"] | None = None
    delta_A_mu: Float[Array, "*run"] | None = None

    def named(self) -> dict[str, Float[Array, "*run"]]:
        """The metrics by name, those without a reference left out: the engine's ``metrics=`` form."""
        return {k: v for k, v in self._asdict().items() if v is not None}


def state_metrics(prob: SparseBigram, theta: Theta, reference: Theta | None = None) -> StateMetrics:
    """``StateMetrics`` of θ = (V, A): its distances to (P, Qm) (raw and after ``normalise``) and signals, and with a
    ``reference`` state Δ_V, Δ_A in the Frobenius and μ norms (§5).

    **Arguments:**

    - ``prob``: the instance; ``theta``: the state.
    - ``reference``: the noise-free reference state (V_ref, A_ref) at the same step, or None.
    """
    dV, dA = prob.distances(theta)
    nV, nA = prob.distances(normalise(theta))
    aV, aA = prob.signals(theta)
    deltas = {}
    if reference is not None:
        for b in ("V", "A"):
            diff = theta[b] - reference[b]
            deltas[f"delta_{b}_fro"] = jnp.sqrt(jnp.sum(diff**2))
            deltas[f"delta_{b}_mu"] = prob.mu_norm(diff)
    return StateMetrics(dV, dA, nV, nA, aV, aA, **deltas)
