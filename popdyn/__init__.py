"""popdyn: exact population dynamics of small transformer models from learning theory."""

from popdyn import analysis, dynamics, exact, tasks
from popdyn.analysis import (
    BasinFractions, BasinMap, Distance, GradNormBelow, Grid, HittingTimes, LossBelow, StepSizeAudit, basin_fractions,
    basin_map, extreme_eigenvalues, hessian_spectrum, hitting_times, lambda_max, lambda_min, step_size_audit,
)
from popdyn.dynamics import STATUS_NAMES, Status, Trajectory, gradient_descent, gradient_flow
from popdyn.problem import Overlay, Problem

__version__ = "0.1.0"
__all__ = [
    "BasinFractions", "BasinMap", "Distance", "GradNormBelow", "Grid", "HittingTimes", "LossBelow", "StepSizeAudit",
    "basin_fractions", "basin_map", "hitting_times", "step_size_audit",
    "STATUS_NAMES", "Overlay", "Problem", "Status", "Trajectory", "__version__", "analysis", "dynamics",
    "exact", "extreme_eigenvalues", "gradient_descent", "gradient_flow", "hessian_spectrum", "lambda_max",
    "lambda_min", "tasks",
]
