"""Gradient flow and gradient descent over batches of initialisations (docs/architecture.md, layer 3)."""

from typing import TYPE_CHECKING

from popdyn.dynamics.descent import gradient_descent
from popdyn.dynamics.prox import L1Prox, soft_threshold
from popdyn.dynamics.status import STATUS_NAMES, Status
from popdyn.dynamics.trajectory import Trajectory

if TYPE_CHECKING:  # a type checker sees the real signature; at run time it loads on first use (below)
    from popdyn.dynamics.flow import gradient_flow as gradient_flow

__all__ = ["L1Prox", "STATUS_NAMES", "Status", "Trajectory", "gradient_descent", "gradient_flow", "soft_threshold"]


def __getattr__(name: str):
    """``gradient_flow`` is imported on first use: it brings diffrax (~0.5 s), which descent does not need."""
    if name == "gradient_flow":
        from popdyn.dynamics.flow import gradient_flow

        return gradient_flow
    raise AttributeError(f"module 'popdyn.dynamics' has no attribute {name!r}")
