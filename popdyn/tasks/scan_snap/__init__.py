"""Scan and Snap: the Y/Z one-layer transformer on sequence classes (docs/models/scan_snap.md)."""

from popdyn.tasks.scan_snap._closed_forms import (
    B_n,
    Gamma,
    gamma,
    h,
    h_star,
    omega_1,
    scan_time,
    snap_logit,
    transition_time,
    x_star,
)
from popdyn.tasks.scan_snap._data import Classes, dataset2, make_classes, syn_medium, syn_small
from popdyn.tasks.scan_snap._metrics import (
    distinct_entropy,
    growth_factor,
    invariant_spread,
    logit_change,
    scan_invariant,
)
from popdyn.tasks.scan_snap._model import ScanSnap
from popdyn.tasks.scan_snap._reduced import attention_velocity, reduced_attention_flow
from popdyn.tasks.scan_snap._winner import TokenWinner, token_winner

__all__ = [
    "B_n",
    "Classes",
    "Gamma",
    "ScanSnap",
    "TokenWinner",
    "attention_velocity",
    "dataset2",
    "distinct_entropy",
    "gamma",
    "growth_factor",
    "h",
    "h_star",
    "invariant_spread",
    "logit_change",
    "make_classes",
    "omega_1",
    "reduced_attention_flow",
    "scan_invariant",
    "scan_time",
    "snap_logit",
    "syn_medium",
    "syn_small",
    "token_winner",
    "transition_time",
    "x_star",
]
