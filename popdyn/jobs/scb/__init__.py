"""Sparse-contextual-bigram runs: the two-stage training of the paper, SGD's distance to its population process
(predicted and measured), its transfer experiment, and the command-line jobs built on them (docs/jobs.md).
``StateMetrics``, ``WithReference``, ``normalise`` and ``state_metrics`` are ``popdyn.tasks.scb``'s, listed here
too."""

from popdyn.jobs.scb._spread import (
    SpreadComparison,
    SpreadCurve,
    SpreadSetup,
    signal_distance,
    spread_comparison,
)
from popdyn.jobs.scb._training import (
    RunMetrics,
    SampledGradient,
    Stage1Run,
    gradient_variance,
    population_reference,
    preconditioner,
    stage1,
    stage1_threshold,
    stage2,
    stage2_start,
    surrogate_noise,
    trajectory_metrics,
)
from popdyn.jobs.scb._transfer import Signals, Transfer, TransferRun, run_signals, transfer
from popdyn.tasks.scb import StateMetrics, WithReference, normalise, state_metrics

__all__ = [
    "RunMetrics",
    "SampledGradient",
    "Signals",
    "SpreadComparison",
    "SpreadCurve",
    "Stage1Run",
    "StateMetrics",
    "Transfer",
    "TransferRun",
    "WithReference",
    "gradient_variance",
    "normalise",
    "population_reference",
    "preconditioner",
    "run_signals",
    "signal_distance",
    "spread_comparison",
    "SpreadSetup",
    "stage1",
    "stage1_threshold",
    "stage2",
    "stage2_start",
    "state_metrics",
    "surrogate_noise",
    "trajectory_metrics",
    "transfer",
]
