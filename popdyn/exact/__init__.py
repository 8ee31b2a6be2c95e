"""Exact-expectation machinery shared by the tasks (docs/architecture.md, layer 1)."""

from popdyn.exact._chains import Chain, sample
from popdyn.exact._count_dp import count_dp_loss
from popdyn.exact._enumeration import MAX_SEQUENCES, check_enumerable, expectation, sequences
from popdyn.exact._markov_chain import (
    binary_kernel,
    entropy_rate,
    stationary_distribution,
    unigram_loss,
    validate_transition_matrix,
)
from popdyn.exact._product import MAX_POINTS, ProductDistribution, check_point_count
from popdyn.exact._quadrature import MAX_NODES, GaussHermite, covariance_factor, gaussian_expectation
from popdyn.exact._roots import bisect
from popdyn.exact._tables import WeightedTable

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
