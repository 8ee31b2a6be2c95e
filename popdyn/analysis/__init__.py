"""Curvature, basin maps, hitting times, step-size audits, SGD's exact gradient noise and its step-size condition
(docs/architecture.md, layer 4)."""

from popdyn.analysis._basin_probabilities import BasinProbabilities, basin_probabilities
from popdyn.analysis._basins import (
    UNRESOLVED,
    BasinFractions,
    BasinMap,
    basin_fractions,
    basin_map,
    label_end_points,
)
from popdyn.analysis._budget import BudgetReport, BudgetSummary, Motion, budget_report, flow_time_unit
from popdyn.analysis._cluster import cluster_points
from popdyn.analysis._grid import Grid
from popdyn.analysis._labellers import (
    AbstractLabeller,
    Clusters,
    FirstOf,
    Labels,
    LossLevels,
    Reached,
    Residuals,
    Rest,
    default_labeller,
    loss_scale,
    morse_index,
)
from popdyn.analysis._noise import Eigenpairs, GradientNoise, block_krylov, gradient_noise, minibatch_factor
from popdyn.analysis._sgd_curve import ThresholdCurve, threshold_curve
from popdyn.analysis._sgd_stability import (
    AbstractPencilSolver,
    DensePencil,
    MatrixFreePencil,
    SGDStability,
    mean_square_stability,
    sgd_threshold,
)
from popdyn.analysis._slices import AbstractSlice, BlockScales, Plane
from popdyn.analysis._spread import SGDSpread, sgd_spread
from popdyn.analysis._spread_measured import MeasuredSpread, measured_spread
from popdyn.analysis._stepsize import AuditRow, StepSizeAudit, step_size_audit
from popdyn.analysis._sweeps import Sweep, SweepPoint, basin_sweep
from popdyn.analysis._times import (
    Distance,
    GradNormBelow,
    HittingTimes,
    LossBelow,
    asymptotic_rate,
    first_passage,
    hitting_time,
    hitting_times,
    local_rate,
)
from popdyn.analysis._unresolved import UnresolvedGroups, group_unresolved, outward, ray_profile
from popdyn.curvature import (
    extreme_eigenvalues,
    hessian_matrix,
    hessian_spectrum,
    lambda_max,
    lambda_min,
    newton_decrement,
)

__all__ = [
    "UNRESOLVED",
    "UnresolvedGroups",
    "group_unresolved",
    "BudgetReport",
    "BudgetSummary",
    "Motion",
    "budget_report",
    "flow_time_unit",
    "BasinFractions",
    "BasinMap",
    "BasinProbabilities",
    "Distance",
    "GradNormBelow",
    "HittingTimes",
    "LossBelow",
    "basin_fractions",
    "hitting_times",
    "label_end_points",
    "AbstractLabeller",
    "Clusters",
    "FirstOf",
    "Labels",
    "LossLevels",
    "Reached",
    "Residuals",
    "Rest",
    "default_labeller",
    "loss_scale",
    "morse_index",
    "Grid",
    "Eigenpairs",
    "GradientNoise",
    "gradient_noise",
    "AbstractPencilSolver",
    "DensePencil",
    "MatrixFreePencil",
    "SGDStability",
    "mean_square_stability",
    "sgd_threshold",
    "ThresholdCurve",
    "threshold_curve",
    "AbstractSlice",
    "BlockScales",
    "Plane",
    "AuditRow",
    "StepSizeAudit",
    "Sweep",
    "SweepPoint",
    "basin_sweep",
    "asymptotic_rate",
    "first_passage",
    "basin_map",
    "basin_probabilities",
    "cluster_points",
    "extreme_eigenvalues",
    "hessian_matrix",
    "hessian_spectrum",
    "hitting_time",
    "lambda_max",
    "lambda_min",
    "local_rate",
    "step_size_audit",
    "block_krylov",
    "minibatch_factor",
    "SGDSpread",
    "sgd_spread",
    "MeasuredSpread",
    "measured_spread",
    "outward",
    "ray_profile",
    "newton_decrement",
]
