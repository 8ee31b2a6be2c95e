"""One module per paper (DESIGN.md, layer 2)."""

from popdyn.tasks import markov

__all__ = ["markov"]
