"""popdyn: exact population dynamics of small transformer models from learning theory.

The public API is re-exported here and loaded on first use (PEP 562), so ``import popdyn.dynamics`` loads
no analysis, task or job module and the command line starts without importing what a command does not need.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_HOME = {
    **dict.fromkeys(
        [
            "BasinFractions",
            "BasinMap",
            "Distance",
            "GradNormBelow",
            "Grid",
            "HittingTimes",
            "LossBelow",
            "StepSizeAudit",
            "basin_fractions",
            "basin_map",
            "extreme_eigenvalues",
            "hessian_spectrum",
            "hitting_times",
            "lambda_max",
            "lambda_min",
            "step_size_audit",
        ],
        "popdyn.analysis",
    ),
    **dict.fromkeys(["STATUS_NAMES", "Status", "Trajectory", "gradient_descent", "gradient_flow"], "popdyn.dynamics"),
    **dict.fromkeys(["Overlay", "Problem"], "popdyn.problem"),
}
_SUBPACKAGES = ("analysis", "dynamics", "exact", "jobs", "tasks")

__all__ = sorted([*_HOME, *_SUBPACKAGES, "__version__"])


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"popdyn.{name}")
    else:
        raise AttributeError(f"module 'popdyn' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
