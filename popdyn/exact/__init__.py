"""Exact-expectation machinery shared by the tasks (DESIGN.md, layer 1)."""

from popdyn.exact.markov_chain import (
    binary_kernel,
    entropy_rate,
    stationary_distribution,
    unigram_loss,
    validate_transition_matrix,
)
from popdyn.exact.roots import bisect

__all__ = [
    "binary_kernel",
    "bisect",
    "entropy_rate",
    "stationary_distribution",
    "unigram_loss",
    "validate_transition_matrix",
]
