"""The dynamics of a job from its command-line settings (docs/cli.md): ``--method``, ``--t1``, ``--lr``, ``--steps``,
``--solver``, ``--rtol``, ``--atol``, ``--gtol`` and ``--max-steps`` become one dynamics object, validated where it
is made, and the settings it ran with go into the job's summary. ``--method sgd`` (in the jobs that take ``--batch``,
``--seeds`` and ``--sampling``) is minibatch SGD on the problem's examples; ``--method module.path:NAME`` runs a
dynamics of the user's own instead (an ``AbstractDynamics``, or a function returning one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from popdyn import _validate
from popdyn.dynamics import SGD, AbstractDynamics, GradientDescent, Steady
from popdyn.jobs import _registry as registry

SOLVER_NAMES = ("tsit5", "kvaerno5", "dopri8")
SAMPLING: tuple[str, ...] = registry.SAMPLING.choices or ()
"""``--sampling``: SGD's B i.i.d. draws by the examples' weights, or a random B-subset of the n examples."""


@dataclass(frozen=True)
class SGDRuns:
    """The SGD settings of a job that runs ``--method sgd``: its minibatch size, runs per start, sampling and the
    base seed of the runs' minibatch streams (``popdyn.dynamics.SGD``'s ``batch``, ``seeds``, ``replace``, ``seed``).

    **Arguments:**

    - ``batch``: B ≥ 1; ``seeds``: S ≥ 1 runs from each start.
    - ``sampling``: "with-replacement" or "without-replacement" (``SAMPLING``).
    - ``seed``: the base seed, an integer in [0, 2³² − 1].
    """

    batch: int = 1
    seeds: int = 1
    sampling: str = SAMPLING[0]
    seed: int = 0

    @property
    def replace(self) -> bool:
        """True for draws with replacement."""
        return _validate.choice("sampling", self.sampling, SAMPLING) == SAMPLING[0]


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
    sgd: SGDRuns | None = None,
) -> AbstractDynamics:
    """Gradient flow (``method="flow"``), gradient descent (``"gd"``) or, for a job that runs it, minibatch SGD
    (``"sgd"``) with a job's settings, or the user's own dynamics named ``"module.path:NAME"`` (``user_dynamics``;
    the other settings are then the object's own).

    **Arguments:**

    - ``method``: "flow", "gd", "sgd" (with ``sgd`` given) or "module.path:NAME".
    - ``t1``, ``solver``, ``max_steps``: the flow's horizon, diffrax solver (by name) and step budget per point.
    - ``lr``, ``steps``, ``momentum``: GD's (and SGD's) learning rate, step count and heavy-ball momentum.
    - ``rtol``, ``atol``, ``gtol``: the stopping rule (``popdyn.dynamics.Steady``), and for the flow also its
      step-size controller's tolerances (``popdyn.dynamics.pid_controller``).
    - ``sgd``: the job's SGD settings (``SGDRuns``), or None for a job that does not run SGD.
    """
    if isinstance(method, str) and ":" in method:
        return user_dynamics(method)
    rule = Steady(rtol=rtol, atol=atol, gtol=gtol)
    names = ("flow", "gd", "module.path:NAME") if sgd is None else ("flow", "gd", "sgd", "module.path:NAME")
    method = _validate.choice("method", method, names)
    if method == "sgd" and sgd is not None:
        return SGD(
            lr=lr, steps=steps, momentum=momentum, stopping=rule, batch=sgd.batch, seeds=sgd.seeds,
            replace=sgd.replace, seed=sgd.seed,
        )  # fmt: skip
    if method == "gd":
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
    step budget; GD's rate, steps and momentum; or SGD's, with its minibatch size, runs per start, sampling and base
    seed), and the stopping rule's tolerances."""
    from popdyn.dynamics._flow import GradientFlow

    if ":" in spec:
        return {"dynamics": spec} | settings(dynamics)

    own: dict[str, Any]
    if isinstance(dynamics, SGD):
        own = {"lr": dynamics.lr, "steps": dynamics.steps, "batch": dynamics.batch, "seeds": dynamics.seeds}
        own |= {"sampling": SAMPLING[0] if dynamics.replace else SAMPLING[1], "seed": dynamics.seed}
        own |= {"momentum": dynamics.momentum} if dynamics.momentum else {}
    elif isinstance(dynamics, GradientDescent):
        own = {"lr": dynamics.lr, "steps": dynamics.steps} | (
            {"momentum": dynamics.momentum} if dynamics.momentum else {}
        )
    elif isinstance(dynamics, GradientFlow):
        own = {"t1": dynamics.t1, "solver": type(dynamics.solver).__name__.lower(), "max_steps": dynamics.max_steps}
    else:
        return {"method": dynamics.method}
    rule = dynamics.stopping
    return {"method": dynamics.method, **own, "rtol": rule.rtol, "atol": rule.atol, "gtol": rule.gtol}
