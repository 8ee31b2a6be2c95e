"""One module per paper (DESIGN.md, layer 2)."""

from popdyn.tasks import decision_list, markov, scan_snap, scb

__all__ = ["decision_list", "markov", "scan_snap", "scb"]
