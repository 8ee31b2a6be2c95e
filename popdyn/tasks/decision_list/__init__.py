"""Decision lists learned by a one-layer softmax transformer (docs/models/decision_lists.md)."""

from popdyn.tasks.decision_list._brute_force import brute_force_loss, brute_force_margin
from popdyn.tasks.decision_list._classification import pc_closed_form, pc_slacks
from popdyn.tasks.decision_list._data import (
    DISTRIBUTIONS,
    loss_weights,
    random_lists,
    random_perm,
    rule_probabilities,
    validate_lists,
    validate_perm,
)
from popdyn.tasks.decision_list._model import DecisionList, permutation_matrix
from popdyn.tasks.decision_list._reduced import column_loss, is_column_structured, structured_total_loss
from popdyn.tasks.decision_list._reduced_flow import ReducedDecisionList
from popdyn.tasks.decision_list._theorems import (
    Theorem1Bounds,
    Theorem2Instance,
    delta_gamma,
    theorem1_bounds,
    theorem1_c,
    theorem2_c,
    theorem2_feasible,
    theorem2_instance,
)

__all__ = [
    "DISTRIBUTIONS",
    "DecisionList",
    "ReducedDecisionList",
    "Theorem1Bounds",
    "Theorem2Instance",
    "brute_force_loss",
    "brute_force_margin",
    "column_loss",
    "delta_gamma",
    "is_column_structured",
    "loss_weights",
    "pc_closed_form",
    "pc_slacks",
    "permutation_matrix",
    "random_lists",
    "random_perm",
    "rule_probabilities",
    "structured_total_loss",
    "theorem1_bounds",
    "theorem1_c",
    "theorem2_c",
    "theorem2_feasible",
    "theorem2_instance",
    "validate_lists",
    "validate_perm",
]
