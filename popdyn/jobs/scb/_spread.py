"""SGD's distance to the population process along stage 2 of Algorithm 1, predicted and measured (docs/models/scb.md,
"SGD's distance to the population process").

Stage 2's plain SGD steps θ ← θ − η D^{-1}Π ĝ_B from the exact stage-1 end point θ1, ĝ_B the gradient of B exact draws
of §1. In the whitened coordinates u of ``Whitened(prob, θ1)`` it is plain minibatch SGD on u, step for step, and the
population process (θ̄_t, exact preconditioned projected GD) is plain GD on u. So ``popdyn.sgd_spread`` on u gives the
first-order E‖u_SGD,t − ū_t‖² = tr C_t, and ‖u − ū‖ is the distance of the paper's Δ in the μ-norm:
‖u − ū‖² = ‖V − V̄‖_μ² + ‖A − Ā‖_μ². An ensemble of ``popdyn.dynamics.SGD`` runs on u, recorded at the same steps,
measures it. The signal is ‖θ̄_t − θ_0‖_μ, the μ-distance the population process has moved from the uninformative
start θ_0 = (μ1ᵀ, 11ᵀ/T) (stage 1 included); on the invariant manifold 𝓜, where θ̄ stays, it is
√(c α_V² + (q̄ − 1/T) α_A²), the paper's signals α in the units of Δ.

``SparseBigram.examples`` enumerates all N^{T+2} draws, so this runs on tiny instances only (N = 3, T = 4 by default,
not the N = 10, T = 50 of Figs. 1 and 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from popdyn import _validate
from popdyn.analysis import MeasuredSpread, SGDSpread, measured_spread, sgd_spread
from popdyn.jobs._records import internal, summary
from popdyn.jobs.scb._training import BATCH, ETA2, stage2_start
from popdyn.tasks.scb._model import SparseBigram
from popdyn.tasks.scb._stepsize import Whitened

SPREAD_SIZE = (3, 4, 2)
"""(N, T, Q) of ``popdyn reproduce scb-spread``: with N^{T+2} = 729 draws a step of ``sgd_spread`` costs about 4 ms on
2 CPU cores; (3, 6) has 6,561 draws and (4, 4) 4,096, each about 60 times slower per step."""

SPREAD_BATCHES = (BATCH, 1)
"""The minibatch sizes compared: Figs. 1 and 3's B = 256, and B = 1, the only one whose noise reaches the signal at
``SPREAD_SIZE`` (at B = 16 the predicted distance peaks at 0.28 times the signal)."""

SPREAD_STEPS = 300
"""Stage 2's steps: at η_2 = 0.1 and ``SPREAD_SIZE`` the signal has levelled off by then (the figure's left panel)."""

REPORT_FRACTIONS = (0.05, 0.25, 1.0)
"""Where a curve's numbers are reported: at these fractions of the run (the nearest record)."""

SE_BAND = 3.0
"""How many standard errors apart the measured and predicted E‖Δ‖² may be before the first order counts as left."""


@dataclass(frozen=True)
class SpreadCurve:
    """One minibatch size B of ``spread_comparison``.

    - ``batch``: B.
    - ``crossing_step``: the first recorded step at which the predicted E‖Δ_t‖² = tr C_t exceeds the signal's square,
      None if it never does; ``recrossing_step``: the first recorded step after it at which the signal is back above,
      None if it never is. ``measured_crossing_step``, ``measured_recrossing_step``: the same for the measured mean.
    - ``departs_at``: the first recorded step from which the measured mean of ‖Δ_t‖² and tr C_t differ by more than
      ``SE_BAND`` standard errors at every later record (where the first order stops describing the runs), None if
      they agree at the last record (``_departure``).
    - ``report_steps``: the steps of the numbers below (``REPORT_FRACTIONS`` of the run); ``predicted``: √tr C_t;
      ``measured``: √(mean of ‖Δ_t‖² over the runs); ``ratio``: that mean over tr C_t; ``ratio_stderr``: its
      standard error.
    - ``max_noise_to_signal``: the largest predicted √tr C_t / signal over the run.
    - ``status``: the runs' count per engine status.
    - ``predicted_sq``, ``measured_sq``, ``measured_stderr``: tr C_t, the mean of ‖Δ_t‖² and its standard error at
      every record (kept out of the JSON summary).
    """

    batch: int
    crossing_step: int | None
    recrossing_step: int | None
    measured_crossing_step: int | None
    measured_recrossing_step: int | None
    departs_at: int | None
    report_steps: list[int]
    predicted: list[float]
    measured: list[float]
    ratio: list[float]
    ratio_stderr: list[float]
    max_noise_to_signal: float
    status: dict[str, int]
    predicted_sq: np.ndarray = internal()
    measured_sq: np.ndarray = internal()
    measured_stderr: np.ndarray = internal()


@dataclass(frozen=True)
class SpreadComparison:
    """``spread_comparison``: the settings (``N``, ``T``, ``Q``, ``seed``, ``lr``, ``steps``, ``seeds``,
    ``record_every``), the exact stage 1's step count (``stage1_steps``), the number of draws ``examples`` and of
    parameters ``params`` d, the signal at the first and last record (``signal_start``, ``signal_end``), and one
    ``SpreadCurve`` per minibatch size (``curves``); ``ts`` the recorded steps and ``signal`` ‖θ̄_t − θ_0‖_μ there.
    ``summary()`` is its JSON form."""

    N: int
    T: int
    Q: int
    seed: int
    lr: float
    steps: int
    seeds: int
    record_every: int
    stage1_steps: int
    examples: int
    params: int
    signal_start: float
    signal_end: float
    curves: tuple[SpreadCurve, ...] = internal()
    ts: np.ndarray = internal()
    signal: np.ndarray = internal()

    def summary(self) -> dict:
        """The JSON part: the settings and numbers above, and each curve's under ``"batch_<B>"``."""
        return summary(self) | {f"batch_{c.batch}": summary(c) for c in self.curves}


def _departure(gap: np.ndarray, ts: np.ndarray) -> int | None:
    """The first recorded step from which ``gap`` holds at every later record (the measured mean stays more than
    ``SE_BAND`` standard errors from the prediction for good), or None if it fails at the last record. A single
    excursion beyond ``SE_BAND`` that falls back does not count: across tens of records one is expected by chance."""
    if not gap[-1]:
        return None
    held = np.flatnonzero(~gap)
    return int(ts[held[-1] + 1]) if held.size else int(ts[0])


def _first(mask: np.ndarray, ts: np.ndarray, after: int = 0) -> int | None:
    """The first recorded step at index ≥ ``after`` where ``mask`` holds, or None."""
    hit = np.flatnonzero(mask[after:])
    return int(ts[after + hit[0]]) if hit.size else None


def _crossings(sq: np.ndarray, signal: np.ndarray, ts: np.ndarray) -> tuple[int | None, int | None]:
    """(first step with sq > signal², first later step with sq ≤ signal² again), None where there is none."""
    above = sq > signal**2
    first = _first(above, ts)
    if first is None:
        return None, None
    return first, _first(~above, ts, int(np.searchsorted(ts, first)))


def _curve(m: MeasuredSpread, sig: np.ndarray) -> SpreadCurve:
    """A ``SpreadCurve`` from an ensemble measured against its prediction (``measured_spread``) and the signal
    ``sig`` at its records."""
    ts, predicted, mean, se = m.ts, m.predicted.expected_sq_distance, m.sq_distance, m.sq_distance_stderr
    idx = sorted({max(1, round(f * (len(ts) - 1))) for f in REPORT_FRACTIONS})
    crossing, recrossing = _crossings(predicted, sig, ts)
    m_crossing, m_recrossing = _crossings(mean, sig, ts)
    return SpreadCurve(
        batch=m.predicted.batch,
        crossing_step=crossing,
        recrossing_step=recrossing,
        measured_crossing_step=m_crossing,
        measured_recrossing_step=m_recrossing,
        departs_at=_departure(np.abs(mean - predicted) > SE_BAND * se, ts),
        report_steps=[int(ts[i]) for i in idx],
        predicted=[float(np.sqrt(predicted[i])) for i in idx],
        measured=[float(np.sqrt(mean[i])) for i in idx],
        ratio=[float(mean[i] / predicted[i]) for i in idx],
        ratio_stderr=[float(se[i] / predicted[i]) for i in idx],
        max_noise_to_signal=float(np.max(np.sqrt(predicted) / sig)),
        status=m.status_counts(),
        predicted_sq=predicted,
        measured_sq=mean,
        measured_stderr=se,
    )


def signal_distance(prob: SparseBigram, theta) -> np.ndarray:
    """‖θ − θ_0‖_μ = √(‖V − μ1ᵀ‖_μ² + ‖A − 11ᵀ/T‖_μ²) for each θ of a batch (leading axis), θ_0 the uninformative start.

    **Arguments:**

    - ``prob``: the instance; ``theta``: a batch {"V": (R, N, N), "A": (R, T, N)}.
    """
    start = prob.init(None)
    dist = jax.vmap(lambda th: prob.mu_norm(th["V"] - start["V"]) ** 2 + prob.mu_norm(th["A"] - start["A"]) ** 2)
    return np.sqrt(np.asarray(dist(theta)))


def _measured(white: Whitened, spread: SGDSpread, seeds: int, seed: int, progress: bool) -> MeasuredSpread:
    """``measured_spread`` of ``seeds`` SGD runs on the whitened problem against ``spread``; ValueError if a run
    stopped before the last step (a frozen run would bias the mean)."""
    m = measured_spread(white, spread, runs=seeds, seed=seed, progress=progress)
    if m.all_steps != seeds:
        raise ValueError(
            f"lr={spread.lr}, batch={spread.batch}: {seeds - m.all_steps} of {seeds} SGD runs stopped before step "
            f"{int(spread.ts[-1])}; their distance to the population process would be frozen: take a smaller lr or "
            "fewer steps"
        )
    return m


@dataclass(frozen=True)
class SpreadSetup:
    """What ``spread_comparison`` runs (defaults: ``popdyn reproduce scb-spread``'s), checked where it is made.

    **Arguments:**

    - ``N``, ``T``, ``Q``, ``seed``: the random instance (``stage2_start``); N^{T+2} ≤ ``MAX_SEQUENCES``.
    - ``lr``: stage 2's step η (η_2 = 0.1 of Figs. 1 and 3 by default).
    - ``batches``: the minibatch sizes B, distinct integers ≥ 1, at least one.
    - ``steps``, ``record_every``: stage 2's steps and the record interval (a divisor of ``steps``).
    - ``seeds``: the SGD runs per minibatch size, ≥ 2; ``seed`` is also their base seed.
    """

    N: int = SPREAD_SIZE[0]
    T: int = SPREAD_SIZE[1]
    Q: int = SPREAD_SIZE[2]
    seed: int = 0
    lr: float = ETA2
    batches: tuple[int, ...] = SPREAD_BATCHES
    steps: int = SPREAD_STEPS
    seeds: int = 200
    record_every: int = 10

    def __post_init__(self) -> None:
        batches = _validate.int_sequence("batches", self.batches)
        if not batches or min(batches) < 1 or len(set(batches)) < len(batches):
            raise ValueError(f"batches={list(batches)!r} is invalid: must be distinct integers >= 1, at least one")
        object.__setattr__(self, "batches", tuple(batches))
        _validate.int_at_least("seeds", self.seeds, 2)


def spread_comparison(setup: SpreadSetup = SpreadSetup(), progress: bool = False) -> SpreadComparison:
    """Stage 1 (exact), then stage 2's plain preconditioned, projected SGD at each minibatch size: the first-order
    E‖Δ_t‖² = tr C_t of ``sgd_spread`` and the mean of ‖Δ_t‖² over ``setup.seeds`` runs of ``SGD`` (exact
    minibatches of the instance's draws, with replacement), Δ_t = θ_SGD,t − θ̄_t in the μ-norm, against the signal
    ‖θ̄_t − θ_0‖_μ (module docstring).

    **Arguments:** ``setup``: the instance, step, minibatch sizes, steps and runs (``SpreadSetup``); ``progress``:
    progress bars for the SGD runs.
    """
    N, T, Q, seed, lr = setup.N, setup.T, setup.Q, setup.seed, setup.lr
    steps, seeds, record_every = setup.steps, setup.seeds, setup.record_every
    prob, s1 = stage2_start(N, T, Q, seed)
    assert s1.step is not None  # stage2_start refuses a stage 1 that never crossed
    white = Whitened(prob, s1.theta)
    curves, ts, sig = [], np.zeros(0), np.zeros(0)
    for b in setup.batches:
        spread = sgd_spread(white, white.init(None), lr=lr, batch=b, steps=steps, record_every=record_every)
        ts, sig = spread.ts, signal_distance(prob, jax.vmap(white.theta)(spread.path))
        curves.append(_curve(_measured(white, spread, seeds, seed, progress), sig))
    return SpreadComparison(
        N=prob.N, T=prob.T, Q=Q, seed=seed, lr=float(lr), steps=steps, seeds=seeds, record_every=record_every,
        stage1_steps=s1.step, examples=int(prob.examples().weights.shape[0]), params=white.n_params(),
        signal_start=float(sig[0]), signal_end=float(sig[-1]), curves=tuple(curves), ts=ts, signal=sig,
    )  # fmt: skip
