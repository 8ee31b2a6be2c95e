"""The SCB state and its noise-free reference advanced as one problem (docs/models/scb.md §5): θ = (V, A, V_ref,
A_ref), loss L(V, A) + L(V_ref, A_ref), so each copy follows its own gradient; noise and the ℓ1 prox name the blocks
"V", "A" only, so (V_ref, A_ref) follows exact preconditioned projected GD and Δ = (V − V_ref, A − A_ref) is recorded
as a metric along the run without storing θ.
"""

from __future__ import annotations

from jaxtyping import Array, Float

from popdyn.problem import Problem, Theta
from popdyn.tasks.scb._metrics import state_metrics
from popdyn.tasks.scb._model import SparseBigram


class WithReference(Problem):
    """The SCB state (V, A) and the noise-free, unregularised reference (V_ref, A_ref) advanced together: the
    losses add, so each copy follows its own gradient, and Δ is recorded as a metric without storing θ.
    Noise and the ℓ1 prox name the blocks "V", "A" only, so the reference stays exact (§5).

    θ = {"V", "A", "V_ref", "A_ref"}; ``init`` and ``pair`` start both copies at the same state, ``precondition``
    applies the projected §4 preconditioner to each, and ``metrics`` reports ``state_metrics`` against the reference.

    **Arguments:**

    - ``prob``: the ``SparseBigram`` instance both copies train on.
    """

    prob: SparseBigram

    def loss(self, theta: Theta):
        return self.prob.loss({"V": theta["V"], "A": theta["A"]}) + self.prob.loss(
            {"V": theta["V_ref"], "A": theta["A_ref"]}
        )

    def init(self, key) -> Theta:
        return self.pair(self.prob.init(key))

    @staticmethod
    def pair(theta: Theta) -> Theta:
        """(V, A) and an identical reference copy."""
        return {"V": theta["V"], "A": theta["A"], "V_ref": theta["V"], "A_ref": theta["A"]}

    def precondition(self, grad: Theta) -> Theta:
        """The projected §4 preconditioner on each copy."""
        a = self.prob.precondition({"V": grad["V"], "A": grad["A"]}, project=True)
        b = self.prob.precondition({"V": grad["V_ref"], "A": grad["A_ref"]}, project=True)
        return {"V": a["V"], "A": a["A"], "V_ref": b["V"], "A_ref": b["A"]}

    def metrics(self, theta: Theta) -> dict[str, Float[Array, ""]]:
        """``state_metrics`` of (V, A) against the reference copy, by name (the engine's ``metrics=``)."""
        pair = state_metrics(self.prob, {"V": theta["V"], "A": theta["A"]}, {"V": theta["V_ref"], "A": theta["A_ref"]})
        return pair.named()
