"""A model for the command line, declared in one place (docs/jobs.md, "Your own task").

``popdyn basins|converge|stepsize|sweep module.path:NAME`` runs a ``Task`` named NAME in the user's module with the
generic jobs: its problem factory (keywords set with ``--param`` and swept with ``--vary``), the slice a basin map
runs over when no coordinates are given, the labeller that names where runs end, and theory checks reported beside
the map. A plain function returning a Problem is a Task of that function alone.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx

from popdyn.analysis import AbstractLabeller, AbstractSlice, BasinFractions
from popdyn.problem import Problem


class Task(eqx.Module):
    """A model and what the generic jobs need to know about it.

    **Arguments:**

    - ``problem``: the factory, keywords → ``popdyn.Problem`` (every keyword it takes can be given with ``--param``
      and swept with ``--vary``).
    - ``slice``: (prob, n, lo, hi) → the ``AbstractSlice`` of n × n starts over [lo, hi]² that ``basins`` maps when
      no ``--x``/``--y`` are given; None: θ's first two coordinates (a ``Grid``).
    - ``labeller``: the ``AbstractLabeller`` that names where runs end in ``basins`` and ``sweep``; None: the
      default (the problem's residuals, then loss level and Morse index).
    - ``checks``: (prob, basin map) → {name: number}, the theory's predictions checked on the map (say, the share a
      closed form predicts next to the share measured); written to summary.json under "checks" and printed.
    """

    problem: Callable[..., Problem]
    slice: Callable[[Problem, int, float, float], AbstractSlice] | None = None
    labeller: AbstractLabeller | None = None
    checks: Callable[[Problem, BasinFractions], dict[str, float]] | None = None

    def __check_init__(self) -> None:
        for name in ("problem", "slice", "checks"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"{name}={value!r} is invalid: must be a function")
        if not callable(self.problem):
            raise ValueError(f"problem={self.problem!r} is invalid: must be a function returning a popdyn.Problem")
        if self.labeller is not None and not isinstance(self.labeller, AbstractLabeller):
            raise ValueError(f"labeller={self.labeller!r} is invalid: must be a popdyn.analysis labeller")

    def basin_slice(self, prob: Problem, n: int, lo: float, hi: float) -> AbstractSlice | None:
        """The task's slice of n × n starts over [lo, hi]², checked to be a slice; None when it declares none."""
        if self.slice is None:
            return None
        out = self.slice(prob, n, lo, hi)
        if not isinstance(out, AbstractSlice):
            raise ValueError(f"the task's slice returned {type(out).__name__}: must return a popdyn.analysis slice")
        return out

    def check(self, prob: Problem, result: BasinFractions) -> dict[str, float] | None:
        """The task's checks on a basin map as {name: float}; None when it declares none."""
        if self.checks is None:
            return None
        return {str(k): float(v) for k, v in dict(self.checks(prob, result)).items()}
