"""Dynamics as objects (docs/dynamics.md, "Dynamics as objects"): an abstract dynamics runs a Problem from a batch of
starts and returns a ``Trajectory`` that carries it; what a run saves and when a point counts as steady are small
objects of their own, shared by every dynamics."""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import equinox as eqx
from jaxtyping import ArrayLike, Float

from popdyn import _validate
from popdyn.problem import Problem, Theta, ThetaLike

if TYPE_CHECKING:
    from popdyn.dynamics._stack import ChunkProgram
    from popdyn.dynamics._trajectory import Trajectory


class SaveAt(eqx.Module):
    """What a run records besides its end point (the end point, its loss, status and stopping time are always kept).

    The default records only the start and the end: what basin maps, fractions and hitting times need.

    **Arguments:**

    - ``ts``: for a flow, the record times: an int K gives 0 and K − 1 log-spaced times in [10⁻⁶·t1, t1]; a
      sequence is used as is; None records the start and the end.
    - ``every``: for a step dynamics, a record every ``every`` steps (a divisor of the step count); None records the
      start and the end.
    - ``params``: record θ at every record (needed by ``step_size_audit``).
    - ``metrics``: θ → {name: scalar}, recorded with the loss (step dynamics): quantities along a run too large to
      keep θ for.
    """

    ts: int | Sequence[float] | Float[ArrayLike, " K"] | None = None
    every: int | None = None
    params: bool = False
    metrics: Callable[[Theta], dict] | None = None

    def __check_init__(self) -> None:
        if self.every is not None:
            _validate.int_at_least("every", self.every, 1)
        if not isinstance(self.params, bool):
            raise ValueError(f"params={self.params!r} is invalid: must be True or False")
        if self.metrics is not None and not callable(self.metrics):
            raise ValueError(f"metrics={self.metrics!r} is invalid: must be a function θ -> {{name: scalar}}")

    @property
    def end_points_only(self) -> bool:
        """Whether nothing but the start and the end is recorded."""
        return self.ts is None and self.every is None and not self.params and self.metrics is None


class Steady(eqx.Module):
    """When a point counts as steady (``popdyn.dynamics._stopping``): by default when the quadratic model of the loss
    puts the nearest critical point within δ = atol + rtol·‖θ‖, or the speed has fallen to round-off relative to its
    start; with ``gtol``, when the speed ‖θ̇‖ < gtol instead (an absolute threshold, not invariant when L is scaled).

    **Arguments:**

    - ``rtol``, ``atol``: the state tolerance δ = atol + rtol·‖θ‖ (> 0).
    - ``gtol``: an absolute speed threshold (> 0) replacing the scale-aware rule, or None.
    - ``saddle_tol``: the relative size |λ| ≤ saddle_tol·ρ below which a Hessian eigenvalue counts as zero when a
      steady point is classified (minimum, saddle or degenerate; ≥ 0).
    """

    rtol: float = 1e-8
    atol: float = 1e-10
    gtol: float | None = None
    saddle_tol: float = 1e-7

    def __check_init__(self) -> None:
        for name in ("rtol", "atol"):
            _validate.positive(name, getattr(self, name))
        if self.gtol is not None:
            _validate.positive("gtol", self.gtol)
        _validate.positive("saddle_tol", self.saddle_tol, allow_zero=True)


_D = TypeVar("_D", bound="AbstractDynamics")


class AbstractDynamics(eqx.Module):
    """A way to move θ. ``run`` takes a Problem and starts (one θ, or a batch on a leading axis) and returns a
    ``Trajectory`` whose ``dynamics`` is this object, so that analyses read its settings from the result instead of
    being told them twice.

    A subclass declares the class variable ``time_unit`` ("time" or "step") and implements ``run``; with the fields
    ``save`` (a ``SaveAt``) and ``target`` (θ → real, reached when ≤ 0, or None), ``end_points`` and ``reaching``
    work unchanged, and so do the analyses that take a dynamics (``basin_map``, ``basin_fractions``,
    ``hitting_times``).
    """

    time_unit: eqx.AbstractClassVar[str]

    @property
    def method(self) -> str:
        """A short name for figures and summaries (the class name unless a subclass says otherwise)."""
        return type(self).__name__

    @property
    def runs_per_start(self) -> int:
        """How many runs ``run`` makes from each start: 1 here; a dynamics with several (``SGD``: its ``seeds``) puts
        them start-major on the Trajectory's batch axis, start j's runs at j·k … j·k + k − 1."""
        return 1

    @abc.abstractmethod
    def run(
        self,
        prob: Problem,
        theta0: ThetaLike,
        *,
        chunk_size: int | None = None,
        progress: bool = False,
        checkpoint: str | os.PathLike | None = None,
    ) -> Trajectory:
        """Run from ``theta0`` and return the Trajectory (carrying this dynamics).

        **Arguments:**

        - ``prob``: the Problem.
        - ``theta0``: one θ, or a batch of them on a leading axis.
        - ``chunk_size``: points per compiled call (None: one chunk), spread over the devices.
        - ``progress``: show a progress bar over the chunks.
        - ``checkpoint``: a directory where finished chunks are saved and resumed from.
        """

    def chunk_program(self, prob: Problem, theta0: ThetaLike, chunk_size: int | None) -> ChunkProgram | None:
        """What this dynamics compiles for chunks of ``chunk_size`` starts of ``prob`` from ``theta0`` (a batch), for
        ``run_stack`` to vmap over a stack of problems; None (here): the dynamics has no such program, and
        ``run_stack`` runs the problems one after another. ``GradientFlow`` and ``GradientDescent`` have one."""
        return None

    def run_stack(
        self,
        problems: Sequence[Problem],
        theta0s: Sequence[ThetaLike],
        *,
        chunk_size: int | None = None,
        progress: bool = False,
        checkpoint: str | os.PathLike | None = None,
    ) -> list[Trajectory]:
        """Run each of ``problems`` from its own starts and return their Trajectories, in order. Problems of one
        static structure (a phase diagram's points) run stacked where the dynamics has a ``chunk_program``, every
        start of every problem in one compiled program per chunk; otherwise one ``run`` after another, checkpoints
        in ``point-00000``, … under ``checkpoint`` (docs/dynamics.md, "Several problems at once").

        **Arguments:**

        - ``problems``: the Problems.
        - ``theta0s``: one batch of starts per problem (a leading axis each, the same size for all).
        - ``chunk_size``: runs per compiled call; ``progress``, ``checkpoint``: as for ``run``.
        """
        from popdyn.dynamics import _stack  # imports this module: loaded on first use

        return _stack.run_stack(
            self, problems, theta0s, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint
        )

    def end_points(self: _D) -> _D:
        """The same dynamics recording only the start and the end (what a basin map needs)."""
        return _replace(self, "save", SaveAt())

    def reaching(self: _D, target: Callable[[Theta], object]) -> _D:
        """The same dynamics stopping each point when ``target`` (θ → real) first falls to ≤ 0 (status REACHED)."""
        if not callable(target):
            raise ValueError(f"target={target!r} is invalid: must be a function θ -> real (reached when <= 0)")
        return _replace(self, "target", target)


def _replace(dynamics: _D, name: str, value) -> _D:
    """``dynamics`` with the field ``name`` set to ``value``; a ValueError when its class has no such field."""
    if name not in {f.name for f in dataclasses.fields(dynamics)}:
        raise ValueError(f"{type(dynamics).__name__} has no field {name!r}: declare it to use this analysis")
    return dataclasses.replace(dynamics, **{name: value})


RUN_OPTIONS = ("chunk_size", "progress", "checkpoint")
"""The keywords of ``AbstractDynamics.run``: how a run is executed, not what it computes."""


def run_options(dynamics: AbstractDynamics, options: dict[str, Any], **shortcuts: object) -> dict[str, Any]:
    """``options`` for ``dynamics.run``: a ValueError when one of them is a setting, which belongs to the dynamics
    object, or when a method name's shortcut setting (``shortcuts``: t1, lr, steps; None when not given) is given."""
    given = {name for name, value in shortcuts.items() if value is not None}
    settings = sorted(given | (set(options) - set(RUN_OPTIONS)))
    if settings:
        raise ValueError(
            f"{', '.join(settings)}: settings of the dynamics, given beside a {type(dynamics).__name__} object; "
            "set them on the object instead"
        )
    return options


def check_hooks(**hooks) -> None:
    """Each named hook is None or callable: a ValueError naming the first that is neither."""
    for name, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise ValueError(f"{name}={hook!r} is invalid: must be a function or None")


def check_lanes(lanes: int | None, lane_steps: int) -> None:
    """``lanes`` is None or an int ≥ 1, ``lane_steps`` an int ≥ 1."""
    if lanes is not None:
        _validate.int_at_least("lanes", lanes, 1)
    _validate.int_at_least("lane_steps", lane_steps, 1)
