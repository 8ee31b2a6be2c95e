"""Curvature, basin maps, hitting times and step-size audits (DESIGN.md, layer 4)."""

from popdyn.analysis.basins import UNRESOLVED, BasinMap, basin_map
from popdyn.analysis.cluster import cluster_points
from popdyn.analysis.curvature import extreme_eigenvalues, hessian_matrix, hessian_spectrum, lambda_max, lambda_min
from popdyn.analysis.grid import Grid
from popdyn.analysis.stepsize import StepSizeAudit, step_size_audit
from popdyn.analysis.times import asymptotic_rate, first_passage, hitting_time, local_rate

__all__ = [
    "UNRESOLVED", "BasinMap", "Grid", "StepSizeAudit", "asymptotic_rate", "first_passage", "basin_map", "cluster_points",
    "extreme_eigenvalues", "hessian_matrix", "hessian_spectrum", "hitting_time", "lambda_max", "lambda_min",
    "local_rate", "step_size_audit",
]
