"""The basins and converge jobs with ``--method sgd`` (docs/jobs.md, "SGD on the command line"): a basin map as
probabilities over the seeds from every start, beside GD's map at the same step; and the time to the target as a
distribution over the seeds from every start.
"""

from __future__ import annotations

import numpy as np

from popdyn.analysis import AbstractLabeller, AbstractSlice, HittingTimes, basin_probabilities
from popdyn.analysis._basin_probabilities import BasinProbabilities
from popdyn.dynamics import SGD, AbstractDynamics
from popdyn.dynamics._status import count
from popdyn.io import Result
from popdyn.plot import plot_basin_probabilities, plot_times_over_seeds
from popdyn.problem import Problem

UNCERTAIN_LEVEL = 0.1
"""A start is uncertain when no outcome has probability above 1 − this (``BasinProbabilities.uncertain``)."""


def separatrix_dynamics(dynamics: AbstractDynamics) -> AbstractDynamics | None:
    """The deterministic dynamics whose map is drawn under SGD's probabilities: GD with SGD's own step, steps,
    momentum and stopping rule (the map SGD's tends to as η → 0 at fixed ηt), or None for another dynamics."""
    if isinstance(dynamics, SGD):
        return dynamics.descent(dynamics.lr, None)
    return None


def probability_results(bp: BasinProbabilities) -> dict:
    """The summary of a probability map: per outcome (each attractor, then "unresolved") its share of all runs and,
    where a deterministic dynamics ran beside (``bp.beside_labels``), its share of starts and the share of starts at
    which the runs' most likely outcome is its; the share of uncertain starts; and the runs' statuses."""
    names = (*bp.attractors, "unresolved")
    share = bp.probabilities.reshape(-1, len(names)).mean(axis=0)
    out: dict = {
        "attractors": list(bp.attractors),
        "seeds": bp.seeds,
        "fractions": {n: float(f) for n, f in zip(names, share, strict=True)},
        "uncertain_fraction": float(np.mean(bp.uncertain(UNCERTAIN_LEVEL))),
        "uncertain_level": UNCERTAIN_LEVEL,
        "status_counts": count(bp.status),
    }
    if bp.beside_labels is not None:
        beside = np.where(bp.beside_labels < 0, len(bp.attractors), bp.beside_labels)
        out["beside_method"] = bp.beside_method
        out["beside_fractions"] = {n: float(np.mean(beside == i)) for i, n in enumerate(names)}
        out["agrees_with_beside"] = float(np.mean(np.argmax(bp.probabilities, axis=-1) == beside))
    return out


def probability_lines(results: dict, head: str) -> list[str]:
    """The printed lines of ``probability_results``: a heading, each outcome's share (the map beside's next to it),
    the uncertain share and the runs' statuses."""
    beside, method = results.get("beside_fractions"), results.get("beside_method")
    lines = [head]
    for name, f in results["fractions"].items():
        next_to = "" if beside is None else f"   ({method} map: {100 * beside[name]:6.2f}% of starts)"
        lines.append(f"  {name:>12s}: {100 * f:6.2f}% of runs{next_to}")
    level = results["uncertain_level"]
    lines.append(f"  uncertain starts (no outcome above {1 - level:g}): {100 * results['uncertain_fraction']:.2f}%")
    if beside is not None:
        lines.append(f"  most likely outcome = {method}'s at {100 * results['agrees_with_beside']:.2f}% of starts")
    lines.append("  runs: " + ", ".join(f"{k} {v}" for k, v in results["status_counts"].items() if v))
    return lines


def sgd_basins(
    prob: Problem,
    grid: AbstractSlice,
    dynamics: AbstractDynamics,
    labeller: AbstractLabeller | None,
    run: dict,
    title: str,
    inputs: dict,
) -> Result:
    """``popdyn basins … --method sgd``: ``basin_probabilities`` of ``dynamics`` over ``grid`` with GD at the same
    step beside it (``separatrix_dynamics``), and their Result: ``basins.npz`` (every start's probabilities, every
    run's label and status, GD's labels), ``basins.png`` (the first attractor's probability with GD's separatrix)
    and the summary of ``probability_results``.

    **Arguments:**

    - ``prob``, ``grid``: the problem and the 2-D slice of starts; ``labeller``: how settled end points are named.
    - ``dynamics``: the dynamics making several runs per start (``SGD(seeds=S)``).
    - ``run``: ``chunk_size``, ``progress`` and ``checkpoint`` of the runs.
    - ``title``, ``inputs``: the job's title and inputs.
    """
    bp = basin_probabilities(prob, grid, dynamics, beside=separatrix_dynamics(dynamics), labeller=labeller, **run)
    results = probability_results(bp)
    arrays = {
        "probabilities": bp.probabilities,
        "labels": bp.labels,
        "status": bp.status,
        "x": grid.xs,
        "y": grid.ys,
        "attractors": np.array([*bp.attractors, "unresolved"]),
    }
    if bp.beside_labels is not None:
        arrays["beside_labels"] = bp.beside_labels
    figures = {}
    if bp.attractors:
        fig = plot_basin_probabilities(bp, prob=prob)
        fig.axes[0].set_title(f"{title}: {fig.axes[0].get_title()}", fontsize=9)
        figures["basins"] = fig
    res = Result(inputs, results, arrays={"basins": arrays}, figures=figures)
    res.lines += probability_lines(results, f"basins  {title}  {bp.seeds} runs from each start")
    return res


def seed_times(ht: HittingTimes, starts: int) -> dict:
    """The hitting times of S runs from each of ``starts`` starts as a distribution over the seeds: per start the
    share of its runs that reached the target and the quartiles of their times (NaN where none did); over all runs,
    the share reached and the 10%, 50% and 90% quantiles of the times."""
    times = np.asarray(ht.times, dtype=float).reshape(starts, -1)
    reached = np.isfinite(times)
    with np.errstate(all="ignore"):
        per_start = [
            np.nanquantile(t, (0.25, 0.5, 0.75)).tolist() if r.any() else [None] * 3
            for t, r in zip(times, reached, strict=True)
        ]
    overall = np.quantile(times[reached], (0.1, 0.5, 0.9)).tolist() if reached.any() else [None] * 3
    return {
        "seeds": int(times.shape[1]),
        "reached": int(reached.sum()),
        "reached_fraction": float(reached.mean()),
        "reached_fraction_per_start": reached.mean(axis=1).tolist(),
        "time_quartiles_per_start": per_start,
        "time_quantiles": dict(zip(("q10", "q50", "q90"), overall, strict=True)),
    }


def seed_time_lines(results: dict, starts: int, unit: str) -> list[str]:
    """The printed lines of ``seed_times``: the quantiles over all runs, and per start its share of runs reached
    and their median (the first 10 starts)."""
    q = results["time_quantiles"]
    lines = []
    if results["reached"]:
        lines.append(f"  {unit}: 10% {q['q10']:.6g}, median {q['q50']:.6g}, 90% {q['q90']:.6g} over the runs")
    for j, (share, quart) in enumerate(
        zip(results["reached_fraction_per_start"][:10], results["time_quartiles_per_start"][:10], strict=True)
    ):
        median = "—" if quart[1] is None else f"{quart[1]:.6g} (quartiles {quart[0]:.6g}–{quart[2]:.6g})"
        lines.append(f"  start {j}: reached {100 * share:.0f}%, median {median}")
    return lines + ([f"  … {starts - 10} more starts in converge.npz"] if starts > 10 else [])


def seed_times_figure(ht: HittingTimes, starts: int, title: str):
    """The figure of ``seed_times``: per start, the share of its runs that reached the target by each time."""
    return plot_times_over_seeds(np.asarray(ht.times, dtype=float).reshape(starts, -1), title)
