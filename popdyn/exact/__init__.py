"""Exact-expectation machinery shared by the tasks (DESIGN.md, layer 1)."""

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
from popdyn.exact.roots import bisect

__all__ = [
    "MAX_SEQUENCES",
    "Chain",
    "binary_kernel",
    "check_enumerable",
    "count_dp_loss",
    "expectation",
    "sample",
    "sequences",
    "bisect",
    "entropy_rate",
    "stationary_distribution",
    "unigram_loss",
    "validate_transition_matrix",
]
