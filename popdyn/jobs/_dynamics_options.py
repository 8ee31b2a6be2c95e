"""The dynamics of a job from its command-line settings (docs/cli.md): ``--method``, ``--t1``, ``--lr``, ``--steps``,
``--solver``, ``--rtol``, ``--atol``, ``--gtol`` and ``--max-steps`` become one dynamics object, validated where it
is made, and the settings it ran with go into the job's summary. ``--method module.path:NAME`` runs a dynamics of the
user's own instead (an ``AbstractDynamics``, or a function returning one)."""

from __future__ import annotations

from typing import Any

from popdyn import _validate
from popdyn.dynamics import AbstractDynamics, GradientDescent, Steady

SOLVER_NAMES = ("tsit5", "kvaerno5", "dopri8")


def job_dynamics(
    method: str = "flow",
    *,
    t1: float = 1e4,
    lr: float = 0.1,
    steps: int = 2000,
    solver: str = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    gtol: float | None = None,
    max_steps: int = 100_000,
    momentum: float = 0.0,
) -> AbstractDynamics:
    """Gradient flow (``method="flow"``) or gradient descent (``"gd"``) with a job's settings, or the user's own
    dynamics named ``"module.path:NAME"`` (``user_dynamics``; the other settings are then the object's own).

    **Arguments:**

    - ``method``: "flow", "gd" or "module.path:NAME".
    - ``t1``, ``solver``, ``max_steps``: the flow's horizon, diffrax solver (by name) and step budget per point.
    - ``lr``, ``steps``, ``momentum``: GD's learning rate, step count and heavy-ball momentum.
    - ``rtol``, ``atol``, ``gtol``: the stopping rule (``popdyn.dynamics.Steady``), and for the flow also its
      step-size controller's tolerances (``popdyn.dynamics.pid_controller``).
    """
    if isinstance(method, str) and ":" in method:
        return user_dynamics(method)
    rule = Steady(rtol=rtol, atol=atol, gtol=gtol)
    if _validate.choice("method", method, ("flow", "gd", "module.path:NAME")) == "gd":
        return GradientDescent(lr=lr, steps=steps, momentum=momentum, stopping=rule)
    from popdyn.dynamics._flow import SOLVERS, GradientFlow, pid_controller

    name = _validate.choice("solver", solver, SOLVER_NAMES)
    return GradientFlow(
        t1=t1, solver=SOLVERS[name](), controller=pid_controller(rtol, atol), stopping=rule, max_steps=max_steps
    )


def user_dynamics(spec: str) -> AbstractDynamics:
    """The dynamics named ``"module.path:NAME"`` in the user's module: an ``AbstractDynamics`` object, or a function
    of no arguments returning one; anything else, or an error raised by their code, is one ValueError."""
    from popdyn.jobs._user_code import call_user, load_object

    obj = load_object("method", spec, "'flow', 'gd' or 'module.path:NAME'", "naming a popdyn.dynamics.AbstractDynamics")
    if not isinstance(obj, AbstractDynamics) and callable(obj):
        obj = call_user(f"method={spec!r}", obj)
    if not isinstance(obj, AbstractDynamics):
        raise ValueError(
            f"method={spec!r} is {type(obj).__name__}: must be a popdyn.dynamics.AbstractDynamics (or a function "
            "returning one)"
        )
    return obj


def settings(dynamics: AbstractDynamics, spec: str = "") -> dict[str, Any]:
    """The settings a job's dynamics ran with, for its summary: the ``--method`` spec when it named the user's own
    dynamics (``"module.path:NAME"``, as "dynamics"), the method and what it reads (the flow's horizon, solver and
    step budget, or GD's rate, steps and momentum), and the stopping rule's tolerances."""
    from popdyn.dynamics._flow import GradientFlow

    if ":" in spec:
        return {"dynamics": spec} | settings(dynamics)

    own: dict[str, Any]
    if isinstance(dynamics, GradientDescent):
        own = {"lr": dynamics.lr, "steps": dynamics.steps} | (
            {"momentum": dynamics.momentum} if dynamics.momentum else {}
        )
    elif isinstance(dynamics, GradientFlow):
        own = {"t1": dynamics.t1, "solver": type(dynamics.solver).__name__.lower(), "max_steps": dynamics.max_steps}
    else:
        return {"method": dynamics.method}
    rule = dynamics.stopping
    return {"method": dynamics.method, **own, "rtol": rule.rtol, "atol": rule.atol, "gtol": rule.gtol}
