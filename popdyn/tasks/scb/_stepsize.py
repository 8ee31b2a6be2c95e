"""The step-size condition of SCB's preconditioned, projected population GD (docs/models/scb.md §4, §10).

Algorithm 1 steps along D^{-1}Π∇L, not ∇L, so the curvature its step size meets is that of the whitened
loss u ↦ L(θ₀ + Π(u)D_μ^{-1/2}): plain GD on u with step η is the preconditioned projected GD on θ with
step η (exactly, step for step), and its Hessian is Π D^{-1/2} ∇²L D^{-1/2} Π. ``Whitened`` is that
problem, so the engine's ``step_size_audit`` checks η ≤ 1/λ_max and η < 2/λ_max for Algorithm 1 itself
(``jobs.stepsize_scb``). Its examples are the instance's (``SparseBigram.examples``), each seen through θ(u), so
minibatch SGD on u is the preconditioned, projected minibatch SGD of stage 2 on θ, step for step, and
``popdyn.sgd_spread`` on u predicts how far that SGD strays from the population process (``jobs.scb.spread``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from popdyn.exact._tables import WeightedTable
from popdyn.problem import Problem, Theta
from popdyn.tasks.scb._model import SparseBigram


class Whitened(Problem):
    """L(θ(u)) with θ(u) = (V₀ + U_V D_μ^{-1/2}, A₀ + Π_T U_A D_μ^{-1/2}): GD on u with step η equals the §4
    preconditioned, Π_T-projected GD on θ from θ₀ with step η, and ∇²_u L is the curvature that step sees, so a
    step-size audit on u judges the preconditioned step against 1/η and 2/η.

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance (ValueError otherwise).
    - ``origin``: θ₀ = {"V", "A"} (None: the uninformative start (μ1ᵀ, 11ᵀ/T)).
    """

    prob: SparseBigram
    origin: Theta

    def __init__(self, prob: SparseBigram, origin: Theta | None = None):
        if not isinstance(prob, SparseBigram):
            raise ValueError(f"prob={prob!r} is invalid: must be a SparseBigram")
        self.prob = prob
        self.origin = prob.init(None) if origin is None else origin

    def theta(self, u: Theta) -> Theta:
        """θ(u), the SCB parameters at whitened coordinates u."""
        root = jnp.sqrt(self.prob.mu)
        UA = u["A"] - jnp.mean(u["A"], axis=-2, keepdims=True)
        return {"V": self.origin["V"] + u["V"] / root, "A": self.origin["A"] + UA / root}

    def loss(self, u: Theta) -> Float[Array, ""]:
        return self.prob.loss(self.theta(u))

    def examples(self) -> WeightedTable:
        """The instance's training draws (``SparseBigram.examples``: all N^{T+2} of them, ValueError above
        ``MAX_SEQUENCES``)."""
        return self.prob.examples()

    def example_loss(self, u: Theta, x) -> Float[Array, ""]:
        """ℓ(θ(u), x), the per-sample loss of one draw at whitened coordinates u: E_x ℓ(θ(u), x) = ``loss(u)``, and a
        step along its gradient in u is the preconditioned, projected per-sample step on θ: ∇_u ℓ = (∇_V ℓ D_μ^{-1/2},
        Π_T ∇_A ℓ D_μ^{-1/2}), so θ(u − η∇_u ℓ) = θ(u) − η (∇_V ℓ D_μ^{-1}, Π_T ∇_A ℓ D_μ^{-1}).

        **Arguments:**

        - ``u``: whitened coordinates {"V": N × N, "A": T × N}.
        - ``x``: one draw, a point of ``examples()`` ({"X", "k", "y"}).
        """
        return self.prob.example_loss(self.theta(u), x)

    def init(self, key: Array | None) -> Theta:
        """u = 0, i.e. θ = θ₀ (by default the uninformative start (μ1ᵀ, 11ᵀ/T)); ``key`` unused."""
        del key
        return jax.tree_util.tree_map(jnp.zeros_like, self.origin)

    def at(self, theta: Theta) -> Theta:
        """The u with θ(u) = θ, for θ whose A has the column sums of θ₀ (as along Algorithm 1)."""
        root = jnp.sqrt(self.prob.mu)
        return {"V": (theta["V"] - self.origin["V"]) * root, "A": (theta["A"] - self.origin["A"]) * root}
