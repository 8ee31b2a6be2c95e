"""Gradient flow and gradient descent over batches of initialisations (docs/architecture.md, layer 3)."""

from popdyn.dynamics.descent import gradient_descent
from popdyn.dynamics.flow import gradient_flow
from popdyn.dynamics.prox import L1Prox, soft_threshold
from popdyn.dynamics.status import STATUS_NAMES, Status
from popdyn.dynamics.trajectory import Trajectory

__all__ = ["L1Prox", "STATUS_NAMES", "Status", "Trajectory", "gradient_descent", "gradient_flow", "soft_threshold"]
