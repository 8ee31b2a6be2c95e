"""popdyn: exact population dynamics of small transformer models from learning theory.

The public API is re-exported here and loaded on first use (PEP 562), so ``import popdyn.dynamics`` loads
no analysis, task or job module and the command line starts without importing what a command does not need. A
type checker reads the same names from the ``TYPE_CHECKING`` block (explicit ``X as X`` re-exports, with their
real signatures; the package ships ``py.typed``); a test holds the block and ``_HOME`` to the same names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a type checker sees: the real names and signatures (at run time, loaded on first use)
    from popdyn import analysis as analysis
    from popdyn import dynamics as dynamics
    from popdyn import exact as exact
    from popdyn import jobs as jobs
    from popdyn import tasks as tasks
    from popdyn.analysis import BasinFractions as BasinFractions
    from popdyn.analysis import BasinMap as BasinMap
    from popdyn.analysis import BasinProbabilities as BasinProbabilities
    from popdyn.analysis import Distance as Distance
    from popdyn.analysis import GradientNoise as GradientNoise
    from popdyn.analysis import GradNormBelow as GradNormBelow
    from popdyn.analysis import Grid as Grid
    from popdyn.analysis import HittingTimes as HittingTimes
    from popdyn.analysis import LossBelow as LossBelow
    from popdyn.analysis import SGDSpread as SGDSpread
    from popdyn.analysis import SGDStability as SGDStability
    from popdyn.analysis import StepSizeAudit as StepSizeAudit
    from popdyn.analysis import basin_fractions as basin_fractions
    from popdyn.analysis import basin_map as basin_map
    from popdyn.analysis import basin_probabilities as basin_probabilities
    from popdyn.analysis import extreme_eigenvalues as extreme_eigenvalues
    from popdyn.analysis import gradient_noise as gradient_noise
    from popdyn.analysis import hessian_spectrum as hessian_spectrum
    from popdyn.analysis import hitting_times as hitting_times
    from popdyn.analysis import lambda_max as lambda_max
    from popdyn.analysis import lambda_min as lambda_min
    from popdyn.analysis import mean_square_stability as mean_square_stability
    from popdyn.analysis import measured_spread as measured_spread
    from popdyn.analysis import sgd_spread as sgd_spread
    from popdyn.analysis import sgd_threshold as sgd_threshold
    from popdyn.analysis import step_size_audit as step_size_audit
    from popdyn.dynamics import SGD as SGD
    from popdyn.dynamics import STATUS_NAMES as STATUS_NAMES
    from popdyn.dynamics import GradientDescent as GradientDescent
    from popdyn.dynamics import GradientFlow as GradientFlow
    from popdyn.dynamics import Status as Status
    from popdyn.dynamics import Trajectory as Trajectory
    from popdyn.dynamics import gradient_descent as gradient_descent
    from popdyn.dynamics import gradient_flow as gradient_flow
    from popdyn.dynamics import sgd as sgd
    from popdyn.jobs._task import Task as Task
    from popdyn.problem import Overlay as Overlay
    from popdyn.problem import Problem as Problem

__version__ = "0.1.0"

_HOME = {
    **dict.fromkeys(
        [
            "BasinFractions",
            "BasinMap",
            "BasinProbabilities",
            "Distance",
            "GradNormBelow",
            "GradientNoise",
            "Grid",
            "HittingTimes",
            "LossBelow",
            "SGDSpread",
            "SGDStability",
            "StepSizeAudit",
            "basin_fractions",
            "basin_map",
            "basin_probabilities",
            "extreme_eigenvalues",
            "gradient_noise",
            "hessian_spectrum",
            "hitting_times",
            "lambda_max",
            "lambda_min",
            "mean_square_stability",
            "measured_spread",
            "sgd_spread",
            "sgd_threshold",
            "step_size_audit",
        ],
        "popdyn.analysis",
    ),
    **dict.fromkeys(
        [
            "GradientDescent",
            "GradientFlow",
            "SGD",
            "STATUS_NAMES",
            "Status",
            "Trajectory",
            "gradient_descent",
            "gradient_flow",
            "sgd",
        ],
        "popdyn.dynamics",
    ),
    **dict.fromkeys(["Overlay", "Problem"], "popdyn.problem"),
    "Task": "popdyn.jobs._task",
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
