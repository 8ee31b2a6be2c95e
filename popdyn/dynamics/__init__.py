"""Dynamics as objects over batches of initialisations (docs/dynamics.md; docs/architecture.md, layer 3): gradient
flow, gradient descent and minibatch SGD, what a run saves and when a point is steady."""

from typing import TYPE_CHECKING

from popdyn.dynamics._base import AbstractDynamics, SaveAt, Steady
from popdyn.dynamics._descent import GradientDescent, gradient_descent
from popdyn.dynamics._prox import L1Prox, soft_threshold
from popdyn.dynamics._sgd import SGD, sgd
from popdyn.dynamics._status import STATUS_NAMES, Status
from popdyn.dynamics._trajectory import Trajectory
from popdyn.dynamics._transforms import block_rates, gaussian_noise, preconditioned

if TYPE_CHECKING:  # a type checker sees the real names; at run time they load on first use (below)
    from popdyn.dynamics._flow import GradientFlow as GradientFlow
    from popdyn.dynamics._flow import gradient_flow as gradient_flow
    from popdyn.dynamics._flow import pid_controller as pid_controller

_FLOW = ("GradientFlow", "gradient_flow", "pid_controller")

__all__ = [
    "AbstractDynamics",
    "GradientDescent",
    "GradientFlow",
    "L1Prox",
    "SGD",
    "STATUS_NAMES",
    "SaveAt",
    "Status",
    "Steady",
    "Trajectory",
    "block_rates",
    "gaussian_noise",
    "gradient_descent",
    "gradient_flow",
    "pid_controller",
    "preconditioned",
    "sgd",
    "soft_threshold",
]


def __getattr__(name: str):
    """The flow's names are imported on first use: they bring diffrax (~0.5 s), which descent does not need."""
    if name in _FLOW:
        from popdyn.dynamics import _flow as flow

        return getattr(flow, name)
    raise AttributeError(f"module 'popdyn.dynamics' has no attribute {name!r}")
