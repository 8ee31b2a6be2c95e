"""The stepsize jobs' ``--batch B --sampling …``: SGD's mean-square threshold η*(B) beside GD's 2/λ_max at each
end point (``popdyn.step_size_audit(..., batch=B, replace=...)``; docs/sgd.md, "In the step-size audit and on the
command line")."""

from __future__ import annotations

from popdyn import _validate
from popdyn.analysis._stepsize import StepSizeAudit, check_sgd
from popdyn.jobs._registry import SGD_SAMPLING
from popdyn.problem import Problem


def sgd_replace(prob: Problem, batch: int | None, sampling: str | None, momentum: float) -> bool:
    """``replace`` for ``step_size_audit`` from ``--sampling`` (with-replacement where not given), the SGD inputs
    checked against ``prob`` before any run (``check_sgd``: examples declared, B in range, no momentum); ValueError
    for a ``--sampling`` without ``--batch``.

    **Arguments:**

    - ``prob``: the problem the runs are on; ``batch``: B, or None (no SGD thresholds).
    - ``sampling``: "with-replacement", "without-replacement" or None; ``momentum``: the runs' μ.
    """
    if batch is None:
        if sampling is not None:
            raise ValueError(f"sampling={sampling!r} applies only with a minibatch size: give --batch B too")
        return True
    choices = SGD_SAMPLING.choices or ()
    replace = _validate.choice("sampling", "with-replacement" if sampling is None else sampling, choices) == choices[0]
    check_sgd(prob, batch, replace, momentum)
    return replace


def sgd_inputs(batch: int | None, replace: bool) -> dict[str, int | str]:
    """What ``summary.json`` records of ``--batch`` and ``--sampling`` among a job's inputs: nothing without a
    minibatch size.

    **Arguments:** ``batch``: B or None; ``replace``: the sampling (``sgd_replace``).
    """
    if batch is None:
        return {}
    choices = SGD_SAMPLING.choices or ()
    return {"batch": batch, "sampling": choices[0] if replace else choices[1]}


def sgd_lines(lrs, audits: list[tuple[StepSizeAudit, int | tuple[()]]]) -> list[str]:
    """The printed lines of the SGD thresholds: a heading naming the sampling, then one line per learning rate with
    GD's 2/λ_max, SGD's η*(B) and the verdict at its end point (``StepSizeAudit.sgd_words``).

    **Arguments:**

    - ``lrs``: the learning rates, in order; ``audits``: for each, its audit and the run's index in it (``()`` for
      an unbatched audit).
    """
    head = f"  at each end point, SGD with {audits[0][0].sampling} (mean-square stable for η ≤ η*(B)):"
    return [head] + [f"  η = {lr:<8g} {audit.sgd_words(i)}" for lr, (audit, i) in zip(lrs, audits, strict=True)]
