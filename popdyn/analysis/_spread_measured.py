"""SGD's spread around the GD path, measured: an ensemble of SGD runs beside ``sgd_spread``'s first-order prediction
(docs/sgd.md, "SGD's spread around the GD path").

S runs of SGD from GD's θ_0 with the prediction's η, B and sampling record θ at its steps; at each, the sample mean
of ‖θ_SGD,t − θ_t‖² over the runs estimates E‖δ_t‖² (tr C_t to first order) with standard error s/√S, s the runs'
sample standard deviation, and the mean of L(θ_SGD,t) − L(θ_t) the excess loss. ``z`` = (measured − predicted)/SE
says how many standard errors apart they are: within about 3 where first order holds (small η; the gap is O(η)
relative).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from popdyn import _validate
from popdyn._batching import check_memory
from popdyn.analysis._spread import SGDSpread
from popdyn.dynamics import SGD, SaveAt, Status
from popdyn.dynamics._status import count
from popdyn.problem import Problem


@dataclass(frozen=True)
class MeasuredSpread:
    """An SGD ensemble's spread around GD's path, at the prediction's recorded steps (``ts``).

    - ``sq_distance``, ``sq_distance_stderr``: the runs' mean of ‖θ_SGD,t − θ_t‖² and its standard error.
    - ``excess_loss``, ``excess_loss_stderr``: the runs' mean of L(θ_SGD,t) − L(θ_t) and its standard error.
    - ``predicted``: the ``SGDSpread`` it is measured against.
    - ``runs``: S; ``seed``: the base seed of their minibatches; ``status``: each run's status (a run that stopped
      before its last step, steady at a minimum, holds its end point at the records after).
    """

    sq_distance: np.ndarray
    sq_distance_stderr: np.ndarray
    excess_loss: np.ndarray
    excess_loss_stderr: np.ndarray
    predicted: SGDSpread
    runs: int
    seed: int
    status: np.ndarray

    @property
    def ts(self) -> np.ndarray:
        """The recorded steps: the prediction's."""
        return np.asarray(self.predicted.ts)

    @property
    def z(self) -> np.ndarray:
        """(measured − predicted)/SE of E‖δ_t‖² at each record (NaN where the SE is 0: at t = 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = self.sq_distance - self.predicted.expected_sq_distance
            return np.where(self.sq_distance_stderr > 0, gap / self.sq_distance_stderr, np.nan)

    def status_counts(self) -> dict[str, int]:
        """How many runs ended in each status."""
        return count(self.status)

    @property
    def all_steps(self) -> int:
        """How many runs took every step (status MAX_STEPS): the others stopped early, steady."""
        return int(np.sum(self.status == int(Status.MAX_STEPS)))


def _mean_and_stderr(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of x (runs × records): the sample mean and its standard error s/√S."""
    runs = x.shape[0]
    spread = np.std(x, axis=0, ddof=1) if runs > 1 else np.full(x.shape[1], np.nan)
    return np.mean(x, axis=0), spread / np.sqrt(runs)


def measured_spread(
    prob: Problem,
    predicted: SGDSpread,
    *,
    runs: int,
    seed: int = 0,
    chunk_size: int | None = None,
    progress: bool = False,
    checkpoint: str | os.PathLike | None = None,
) -> MeasuredSpread:
    """``runs`` runs of SGD from ``predicted``'s θ_0, with its η, B and sampling, measured against its GD path at its
    recorded steps (module docstring).

    **Arguments:**

    - ``prob``: the problem ``predicted`` was computed on.
    - ``predicted``: ``popdyn.sgd_spread``'s record.
    - ``runs``: S ≥ 2, the ensemble's size; ``seed``: the base seed of the runs' minibatches (``SGD``).
    - ``chunk_size``, ``progress``, ``checkpoint``: as ``SGD.run``.
    """
    runs = _validate.int_at_least("runs", runs, 2)
    if not isinstance(predicted, SGDSpread):
        raise ValueError(f"predicted={predicted!r} is invalid: must be popdyn.sgd_spread's record (SGDSpread)")
    ts = np.asarray(predicted.ts)
    every, steps = int(ts[1] - ts[0]) if ts.size > 1 else int(ts[-1]), int(ts[-1])
    flat_path = np.asarray(jax.vmap(lambda t: ravel_pytree(t)[0])(predicted.path))  # records × d
    check_memory(8.0 * runs * ts.size * (flat_path.shape[1] + 2), f"{runs:,} SGD runs' θ at {ts.size} records")
    replace = True if predicted.replace is None else predicted.replace
    save = SaveAt(every=every, params=True)
    sgd = SGD(lr=predicted.lr, batch=predicted.batch, replace=replace, steps=steps, seeds=runs, seed=seed, save=save)
    theta0 = jax.tree_util.tree_map(lambda a: np.asarray(a)[0], predicted.path)
    traj = sgd.run(prob, theta0, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)
    params = np.asarray(jax.vmap(jax.vmap(lambda t: ravel_pytree(t)[0]))(traj.params))  # runs × records × d
    sq = np.sum((params - flat_path[None]) ** 2, axis=-1)
    excess = np.asarray(traj.loss) - np.asarray(predicted.loss)[None]
    (sq_mean, sq_se), (ex_mean, ex_se) = _mean_and_stderr(sq), _mean_and_stderr(excess)
    return MeasuredSpread(sq_mean, sq_se, ex_mean, ex_se, predicted, runs, seed, np.asarray(traj.status))
