"""One package per paper (docs/problem.md): models, exact losses, closed forms and theorem bounds. The task
packages load on first use (PEP 562), so importing one task does not import the others."""

from __future__ import annotations

import importlib

__all__ = ["decision_list", "markov", "scan_snap", "scb", "teacher"]


def __getattr__(name: str):
    if name in __all__:
        module = importlib.import_module(f"popdyn.tasks.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'popdyn.tasks' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
