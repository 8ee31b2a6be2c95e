"""Exact-expectation machinery shared by the tasks (docs/architecture.md, layer 1)."""

from popdyn.exact.chains import Chain, sample
from popdyn.exact.count_dp import count_dp_loss
from popdyn.exact.enumeration import MAX_SEQUENCES, check_enumerable, expectation, sequences
from popdyn.exact.markov_chain import (
    binary_kernel,
    entropy_rate,
    stationary_distribution,
    unigram_loss,
    validate_transition_matrix,
)
from popdyn.exact.product import MAX_POINTS, ProductDistribution, check_point_count
from popdyn.exact.quadrature import MAX_NODES, GaussHermite, covariance_factor, gaussian_expectation
from popdyn.exact.roots import bisect
from popdyn.exact.tables import WeightedTable

__all__ = [
    "MAX_NODES",
    "MAX_POINTS",
    "MAX_SEQUENCES",
    "Chain",
    "GaussHermite",
    "ProductDistribution",
    "WeightedTable",
    "binary_kernel",
    "bisect",
    "check_enumerable",
    "check_point_count",
    "count_dp_loss",
    "covariance_factor",
    "entropy_rate",
    "expectation",
    "gaussian_expectation",
    "sample",
    "sequences",
    "stationary_distribution",
    "unigram_loss",
    "validate_transition_matrix",
]
