"""One package per paper (docs/problem.md): models, exact losses, closed forms and theorem bounds. The task
packages load on first use (PEP 562), so importing one task does not import the others."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker sees; at run time each package loads on first use (below)
    from popdyn.tasks import decision_list as decision_list
    from popdyn.tasks import markov as markov
    from popdyn.tasks import scan_snap as scan_snap
    from popdyn.tasks import scb as scb
    from popdyn.tasks import teacher as teacher

__all__ = ["decision_list", "markov", "scan_snap", "scb", "teacher"]


def __getattr__(name: str):
    if name in __all__:
        module = importlib.import_module(f"popdyn.tasks.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'popdyn.tasks' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
