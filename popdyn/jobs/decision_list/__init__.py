"""Decision-list runs: Theorem 1's first passage to perfect classification, Theorem 2's step-size run, and the
command-line jobs built on them (docs/jobs.md)."""

from popdyn.jobs.decision_list._theorem1 import Theorem1Run, theorem1_run
from popdyn.jobs.decision_list._theorem2 import Theorem2Run, theorem2_run

__all__ = ["Theorem1Run", "Theorem2Run", "theorem1_run", "theorem2_run"]
