"""Sparse contextual bigrams learned by a one-layer linear transformer (Ren, Wang, Lee 2024; docs/models/scb.md)."""

from popdyn.tasks.scb._brute_force import MAX_SEQUENCES, brute_force_loss, sequence_table
from popdyn.tasks.scb._instance import random_instance, validate_instance
from popdyn.tasks.scb._metrics import StateMetrics, normalise, state_metrics
from popdyn.tasks.scb._model import SoftmaxBigram, SparseBigram
from popdyn.tasks.scb._reduced import Reduced2D, Reduced4D, embed_2d, embed_4d
from popdyn.tasks.scb._reference import WithReference
from popdyn.tasks.scb._stepsize import Whitened
from popdyn.tasks.scb.sampling import minibatch_gradient, per_sample_gradients, per_sample_loss

__all__ = [
    "MAX_SEQUENCES",
    "Reduced2D",
    "Reduced4D",
    "SoftmaxBigram",
    "SparseBigram",
    "StateMetrics",
    "Whitened",
    "WithReference",
    "brute_force_loss",
    "embed_2d",
    "embed_4d",
    "minibatch_gradient",
    "normalise",
    "per_sample_gradients",
    "per_sample_loss",
    "random_instance",
    "sequence_table",
    "state_metrics",
    "validate_instance",
]
