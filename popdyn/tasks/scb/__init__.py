"""Sparse contextual bigrams learned by a one-layer linear transformer (Ren, Wang, Lee 2024; spec scb.md)."""

from popdyn.tasks.scb.brute_force import MAX_SEQUENCES, brute_force_loss, sequence_table
from popdyn.tasks.scb.instance import random_instance, validate_instance
from popdyn.tasks.scb.model import SoftmaxBigram, SparseBigram
from popdyn.tasks.scb.reduced import Reduced2D, Reduced4D, embed_2d, embed_4d
from popdyn.tasks.scb.sampling import minibatch_gradient, per_sample_gradients, per_sample_loss
from popdyn.tasks.scb.stepsize import Whitened
from popdyn.tasks.scb.training import (
    SampledGradient, WithReference, gradient_variance, normalise, population_reference, preconditioner, stage1,
    stage1_threshold, stage2, state_metrics, surrogate_noise, trajectory_metrics,
)
from popdyn.tasks.scb.transfer import run_signals, transfer

__all__ = [
    "MAX_SEQUENCES", "Reduced2D", "Reduced4D", "SampledGradient", "SoftmaxBigram", "SparseBigram", "WithReference",
    "Whitened",
    "brute_force_loss", "embed_2d", "embed_4d", "gradient_variance", "minibatch_gradient", "normalise",
    "per_sample_gradients", "per_sample_loss", "population_reference", "preconditioner", "random_instance",
    "run_signals", "sequence_table", "stage1", "stage1_threshold", "stage2", "state_metrics", "surrogate_noise",
    "trajectory_metrics", "transfer", "validate_instance",
]
