"""Decision lists learned by a one-layer softmax transformer (spec decision_lists.md)."""

from popdyn.tasks.decision_list.brute_force import brute_force_loss, brute_force_margin
from popdyn.tasks.decision_list.data import (
    DISTRIBUTIONS, loss_weights, random_lists, random_perm, rule_probabilities, validate_lists, validate_perm,
)

__all__ = [
    "DISTRIBUTIONS", "brute_force_loss", "brute_force_margin", "loss_weights", "random_lists", "random_perm",
    "rule_probabilities", "validate_lists", "validate_perm",
]
