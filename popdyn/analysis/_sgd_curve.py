"""SGD's step-size threshold η*(B) against the minibatch size B at one minimum, beside GD's 2/λ_max (docs/sgd.md,
"η*(B) against the batch size"): the numbers behind ``popdyn.plot.plot_sgd_thresholds`` and behind the panel that
``popdyn stepsize ... --batch B`` adds to its figure.

η*(B) never decreases with B and never exceeds 2/λ_max (``mean_square_stability``); without replacement it reaches
2/λ_max at B = n, where the minibatch is the whole data set, and with replacement it approaches 2/λ_max as p = 1/B
falls to 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from jaxtyping import ArrayLike

from popdyn._batching import checked
from popdyn.analysis._noise import _check_sampling
from popdyn.analysis._sgd_stability import AbstractPencilSolver, mean_square_stability
from popdyn.problem import Problem, ThetaLike, check_measure

SPAN = 16
"""With replacement (or online draws) a curve runs up to ``SPAN`` times the chosen B (and at least to ``MIN_TOP``):
there the examples' part of the second moment, p = 1/B, is a sixteenth of the chosen B's."""

MIN_TOP = 64
"""The smallest top batch size of a curve with replacement."""


def curve_batches(n: int, batch: int, replace: bool | None) -> np.ndarray:
    """The minibatch sizes of a threshold curve, increasing: B = 1, 2, 4, … and the chosen ``batch``. Without
    replacement the powers of two below n, then n itself (the whole data set: η*(n) = 2/λ_max); with replacement or
    online draws the powers of two up to the first one ≥ max(``MIN_TOP``, ``SPAN``·B).

    **Arguments:**

    - ``n``: the number of examples; ``batch``: the chosen B (≤ n without replacement).
    - ``replace``: True (with replacement), None (online draws), False (without replacement).
    """
    top = n if replace is False else max(MIN_TOP, SPAN * batch)
    powers = 2 ** np.arange(int(np.ceil(np.log2(top))) + 1)
    if replace is False:
        powers = np.append(powers[powers < n], n)
    return np.unique(np.append(powers, batch)).astype(int)


@dataclass(frozen=True)
class ThresholdCurve:
    """η*(B) against B at one minimum θ* (``threshold_curve``).

    - ``batches``: B, increasing (``curve_batches``); ``thresholds``: η*(B) at each (``mean_square_stability``).
    - ``gd_threshold``: 2/λ_max(∇²L(θ*)), GD's threshold, the limit of η*(B) (η*(n) itself without replacement).
    - ``batch``: the chosen B, one of ``batches``; ``replace``: the sampling (True, False or None: online draws);
      ``n``: the number of examples.
    - ``flat_curved``: the examples' Hessians act on flat directions of H (a valley of minima), so η*(B) = 0 wherever
      p > 0; ``transverse``: η*_⊥(B) at each B, the threshold of the motion across the valley
      (``SGDStability.transverse_thresholds``; η*(B) itself off a valley).
    - ``lrs``: learning rates to set against the curve (the runs that ended at θ*), possibly empty; ``runs``: their
      indices among a job's runs (empty when not from a job).
    """

    batches: np.ndarray
    thresholds: np.ndarray
    gd_threshold: float
    batch: int
    replace: bool | None
    n: int
    flat_curved: bool
    transverse: np.ndarray
    lrs: np.ndarray
    runs: tuple[int, ...] = ()

    @property
    def threshold(self) -> float:
        """η*(B) at the chosen B."""
        return float(self.thresholds[np.flatnonzero(self.batches == self.batch)[0]])

    @property
    def drawn(self) -> np.ndarray:
        """The thresholds a figure draws: η*_⊥(B) across a valley of minima (``flat_curved``), else η*(B)."""
        return self.transverse if self.flat_curved else self.thresholds

    def json(self) -> dict[str, list[int] | list[float] | float | int | bool | None]:
        """The curve as ``summary.json`` holds it: its fields, arrays as lists."""
        return {
            "runs": list(self.runs),
            "lr": self.lrs.tolist(),
            "batch": self.batch,
            "replace": self.replace,
            "n": self.n,
            "gd_threshold": self.gd_threshold,
            "flat_curved": self.flat_curved,
            "batches": self.batches.tolist(),
            "thresholds": self.thresholds.tolist(),
            "transverse_thresholds": self.transverse.tolist(),
        }


def threshold_curve(
    prob: Problem,
    theta_star: ThetaLike,
    batch: int,
    replace: bool | None = True,
    *,
    lrs: Sequence[float] | ArrayLike = (),
    runs: Sequence[int] = (),
    saddle_tol: float = 1e-7,
    solver: AbstractPencilSolver | None = None,
) -> ThresholdCurve:
    """SGD's η*(B) at the minimum θ* for B = 1, 2, 4, … (``curve_batches``) and the chosen B, beside GD's 2/λ_max:
    one ``mean_square_stability`` over all of them (the examples' Hessians enter once).

    **Arguments:**

    - ``prob``: a Problem that declares its examples (``Problem.from_examples``); ``theta_star``: one θ at a
      minimum (as ``mean_square_stability``).
    - ``batch``: the chosen B, an integer ≥ 1 (≤ n without replacement); ``replace``: True, False or None, as
      ``gradient_noise``. A bad one raises ValueError naming it.
    - ``lrs``: learning rates to mark against the curve; ``runs``: the indices of the runs they belong to.
    - ``saddle_tol``, ``solver``: as ``mean_square_stability``.
    """
    measure = check_measure("prob.examples()", checked(prob).examples())
    n, _ = _check_sampling(batch, replace, measure)
    found = mean_square_stability(
        prob, theta_star, curve_batches(n, int(batch), replace), replace, saddle_tol=saddle_tol, solver=solver
    )
    return ThresholdCurve(
        batches=found.batches,
        thresholds=found.thresholds,
        gd_threshold=found.gd_threshold,
        batch=int(batch),
        replace=found.replace,
        n=n,
        flat_curved=found.flat_curved,
        transverse=found.transverse_thresholds,
        lrs=np.asarray(lrs, dtype=float).reshape(-1),
        runs=tuple(int(i) for i in runs),
    )
