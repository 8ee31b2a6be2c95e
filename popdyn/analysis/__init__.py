"""Curvature, basin maps, hitting times and step-size audits (DESIGN.md, layer 4)."""

from popdyn.analysis.curvature import extreme_eigenvalues, hessian_matrix, hessian_spectrum, lambda_max, lambda_min

__all__ = ["extreme_eigenvalues", "hessian_matrix", "hessian_spectrum", "lambda_max", "lambda_min"]
