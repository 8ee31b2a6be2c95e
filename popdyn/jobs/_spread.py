"""``popdyn spread module.path:factory``: SGD's spread around GD's path, predicted to first order
(``popdyn.sgd_spread``) beside an ensemble of SGD runs that measures it (``popdyn.measured_spread``); docs/sgd.md,
"SGD's spread around the GD path"."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import jax
import numpy as np

from popdyn import _validate
from popdyn.analysis import MeasuredSpread, measured_spread, sgd_spread
from popdyn.io import Result
from popdyn.jobs._dynamics_options import SGDRuns
from popdyn.jobs._model import build, model_title
from popdyn.jobs._registry import DECLARED, registered
from popdyn.plot import plot_spread
from popdyn.problem import Problem, Theta

FIRST_ORDER_Z = 3.0
"""A gap of more than this many standard errors between measured and predicted is reported: first order fails."""
SHOWN_RECORDS = 12
"""The most records the printed table shows (every record is in ``spread.npz`` and ``summary.json``)."""


def spread_results(m: MeasuredSpread) -> dict:
    """The summary of a spread run: per record the step, the predicted and measured E‖θ_SGD − θ_GD‖² with its
    standard error and z, the predicted and measured excess loss with its standard error; the largest |z| after the
    start; how many runs took every step."""
    p = m.predicted
    z = m.z
    return {
        "ts": m.ts.tolist(),
        "predicted_sq_distance": p.expected_sq_distance.tolist(),
        "measured_sq_distance": m.sq_distance.tolist(),
        "sq_distance_stderr": m.sq_distance_stderr.tolist(),
        "z": [None if np.isnan(v) else float(v) for v in z],
        "max_abs_z": float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else None,
        "predicted_excess_loss": p.expected_excess_loss.tolist(),
        "measured_excess_loss": m.excess_loss.tolist(),
        "excess_loss_stderr": m.excess_loss_stderr.tolist(),
        "gd_loss": p.loss.tolist(),
        "runs": m.runs,
        "runs_all_steps": m.all_steps,
        "factor": p.factor,
        "examples": p.n,
    }


def spread_lines(m: MeasuredSpread, title: str) -> list[str]:
    """The printed table: at up to ``SHOWN_RECORDS`` records, E‖δ‖² predicted, measured ± SE and z."""
    p = m.predicted
    lines = [
        f"spread  {title}: η = {p.lr:g}, B = {p.batch}, {m.runs} SGD runs from θ0 beside GD",
        "  step        E‖θ_SGD − θ_GD‖² predicted   measured ± SE                 z",
    ]
    shown = np.unique(np.linspace(0, m.ts.size - 1, min(m.ts.size, SHOWN_RECORDS)).round().astype(int))
    for i in shown:
        z = "" if np.isnan(m.z[i]) else f"{m.z[i]:+.2f}"
        measured = f"{m.sq_distance[i]:.6g} ± {m.sq_distance_stderr[i]:.2g}"
        lines.append(f"  {int(m.ts[i]):<11d} {p.expected_sq_distance[i]:<28.6g} {measured:<29s} {z}")
    finite = np.isfinite(m.z)
    if finite.any():
        largest = float(np.max(np.abs(m.z[finite])))
        lines.append(f"  largest |z| after the start: {largest:.2f}")
        if largest > FIRST_ORDER_Z:
            lines.append(
                f"  measured and predicted differ by more than {FIRST_ORDER_Z:g} standard errors: first order in the "
                "offset does not hold at this η (its error is O(η) relative; try a smaller --lr)"
            )
    return lines


def spread_job(
    prob: Problem, theta0: Theta, title: str, inputs: dict, settings: SpreadSettings, progress: bool, checkpoint
) -> Result:
    """The spread from ``theta0``: ``sgd_spread``'s first-order E‖θ_SGD,t − θ_GD,t‖² and excess loss along GD's path,
    and ``measured_spread``'s ensemble measuring both, as ``spread.npz``, ``spread.png``, the summary of
    ``spread_results`` and the table of ``spread_lines``; a warning when runs stopped early.

    **Arguments:**

    - ``prob``, ``theta0``: the problem (declaring its examples) and the start of GD and SGD.
    - ``title``, ``inputs``: the job's title and inputs (the settings are added to them).
    - ``settings``: η, the SGD runs, the steps and the record spacing (``SpreadSettings``).
    - ``progress``, ``checkpoint``: as ``measured_spread``.
    """
    runs = settings.runs
    predicted = sgd_spread(
        prob, theta0, lr=settings.lr, batch=runs.batch, steps=settings.steps, replace=runs.replace,
        record_every=settings.record_every,
    )  # fmt: skip
    m = measured_spread(prob, predicted, runs=runs.seeds, seed=runs.seed, progress=progress, checkpoint=checkpoint)
    if m.all_steps < m.runs:
        warnings.warn(
            f"{m.runs - m.all_steps} of {m.runs} SGD runs stopped before step {settings.steps}, steady at a minimum: "
            "their later records hold their end point",
            stacklevel=2,
        )
    inputs = inputs | {"lr": settings.lr, "batch": runs.batch, "sampling": runs.sampling, "steps": settings.steps}
    inputs |= {"record_every": settings.record_every, "seeds": runs.seeds, "seed": runs.seed}
    results = spread_results(m)
    keys: tuple[str, ...] = ("ts", "predicted_sq_distance", "measured_sq_distance", "sq_distance_stderr")
    keys += ("predicted_excess_loss", "measured_excess_loss", "excess_loss_stderr", "gd_loss")
    arrays = {k: np.asarray(results[k], dtype=float) for k in keys}
    res = Result(inputs, results, arrays={"spread": arrays}, figures={"spread": plot_spread(m, title)})
    res.lines += spread_lines(m, title)
    return res


@dataclass(frozen=True)
class SpreadSettings:
    """A spread job's settings: the learning rate η of GD and SGD, the SGD runs (``SGDRuns``: minibatch size,
    ensemble size ≥ 2, sampling, seed), the steps and a record every ``record_every`` steps."""

    lr: float
    runs: SGDRuns
    steps: int
    record_every: int

    def __post_init__(self) -> None:
        _validate.int_at_least("seeds", self.runs.seeds, 2)


@registered
def spread_model(
    factory: str = DECLARED,
    param=DECLARED,
    lr: float = DECLARED,
    batch: int = DECLARED,
    sampling: str = DECLARED,
    steps: int = DECLARED,
    record_every: int = DECLARED,
    seeds: int = DECLARED,
    seed: int = DECLARED,
    progress: bool = False,
    checkpoint=None,
) -> Result:
    """From θ0 = prob.init(PRNGKey(seed)): ``spread_job`` with η = ``lr``, ``seeds`` SGD runs with minibatches of
    ``batch`` drawn by ``sampling`` (streams from ``seed``), ``steps`` steps and a record every ``record_every``."""
    prob = build(factory, param)
    settings = SpreadSettings(lr, SGDRuns(batch, seeds, sampling, seed), steps, record_every)
    theta0 = prob.init(jax.random.PRNGKey(_validate.seed("seed", seed)))
    inputs = {"task": factory, "param": list(param)}
    return spread_job(prob, theta0, model_title(factory, param), inputs, settings, progress, checkpoint)
