"""Binary Markov data and a single-layer transformer (Makkuva et al., docs/models/markov.md)."""

from popdyn.tasks.markov._attention_scalar import AttentionScalar
from popdyn.tasks.markov._canonical import ATTRACTORS, E_SADDLE, W_SADDLE, Canonical
from popdyn.tasks.markov._transformer import Transformer, rank_one_weights

__all__ = ["ATTRACTORS", "AttentionScalar", "Canonical", "E_SADDLE", "Transformer", "W_SADDLE", "rank_one_weights"]
