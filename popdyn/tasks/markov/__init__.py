"""Binary Markov data and a single-layer transformer (Makkuva et al., spec markov.md)."""

from popdyn.tasks.markov.canonical import ATTRACTORS, E_SADDLE, W_SADDLE, Canonical

__all__ = ["ATTRACTORS", "Canonical", "E_SADDLE", "W_SADDLE"]
