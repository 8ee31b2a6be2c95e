"""The job registry: every (command, task) pair declares its options, defaults and help here, once; the
``popdyn`` command is generated from it (docs/jobs.md).

Importing this module loads nothing heavy (no JAX, no matplotlib): a job's function is imported only when it
runs, so ``popdyn basins markov --help`` answers at once.

A default is written here alone. A job function writes ``DECLARED`` as the default of each of its option
parameters (``def basins_markov(p=DECLARED, q=DECLARED, n=DECLARED, ...)``) and is decorated with ``registered``,
which, when its module is imported, puts the Options' defaults in place of ``DECLARED`` in ``__defaults__`` and
``__kwdefaults__``: ``inspect.signature`` shows them and a Python call without the keyword uses them, exactly as
the command line does. The marker, rather than parameters without defaults, keeps the functions callable with
some keywords alone, positionally where they were before (``basins_markov(0.1, 0.2, n=8)``), and keeps that true
for a type checker: ``DECLARED`` is typed ``Any``, so ``n: int = DECLARED`` is an optional ``int`` to mypy. The
decorator refuses, at import, an option parameter whose source default is anything but ``DECLARED`` and a
``DECLARED`` that no Option declares, so a restated default cannot come back unnoticed.

Which tasks ``popdyn sweep TASK`` serves is declared on the task's basins Job (``sweep=True``), and TASKS, the
papers' tasks, is read off JOBS in declaration order.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

COMMANDS = ("basins", "converge", "stepsize", "sweep", "spread")
MODEL = "model"
"""The task name of a user's own Problem (``popdyn basins module.path:factory`` is rewritten to it)."""


@dataclass(frozen=True)
class Option:
    """One command-line option ``--flag`` of a job: its type, default (the one place it is written: the job
    function's default is filled in from it, ``registered``) and help. ``param`` is the job function's
    keyword (default: the flag's name with - → _), a tuple for an option of several values that the function
    takes as several keywords (``--range LO HI`` → lo, hi). ``when`` = (option, value) or (option, (value, …)): the
    option applies only when that other option has that value (one of those values); given otherwise, it is
    refused."""

    flag: str
    type: Callable = float
    default: Any = None
    help: str = ""
    nargs: int | str | None = None
    choices: tuple | None = None
    param: str | tuple[str, ...] | None = None
    when: tuple[str, Any] | None = None
    metavar: str | tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def params(self) -> tuple[str, ...]:
        p = self.param or self.dest
        return p if isinstance(p, tuple) else (p,)

    @property
    def when_values(self) -> tuple:
        """The values of the ``when`` option under which this option applies (empty: always)."""
        if self.when is None:
            return ()
        value = self.when[1]
        return tuple(value) if isinstance(value, tuple) else (value,)

    def when_text(self, code: str = "") -> str:
        """``--method gd`` or ``--method gd or sgd`` (each value wrapped in ``code``, e.g. a backtick)."""
        if self.when is None:
            return ""
        flag = f"--{self.when[0].replace('_', '-')}"
        first, *rest = self.when_values
        return " or ".join([f"{code}{flag} {first}{code}", *(f"{code}{v}{code}" for v in rest)])

    def help_text(self) -> str:
        extra = [] if self.choices is None else ["one of " + ", ".join(map(str, self.choices))]
        if self.default is not None and self.default != ():
            shown = " ".join(map(str, self.default)) if isinstance(self.default, (tuple, list)) else self.default
            extra.append(f"default {shown}")
        if self.when is not None:
            extra.append(f"with {self.when_text()} only")
        return self.help + (f" ({'; '.join(extra)})" if extra else "")

    def kwargs(self, value) -> dict[str, Any]:
        """The job function's keywords for this option's value (its default where it was not given)."""
        value = self.default if value is None else value
        if len(self.params) == 1:
            return {self.params[0]: list(value) if isinstance(value, tuple) and self.nargs == "+" else value}
        return dict(zip(self.params, value, strict=False))

    def defaults(self) -> dict[str, Any]:
        """The job function's default of each keyword this option feeds (``--range`` → lo, hi: one value each)."""
        if len(self.params) == 1:
            return {self.params[0]: self.default}
        return dict(zip(self.params, self.default, strict=True))


@dataclass(frozen=True)
class Job:
    """A job: ``popdyn COMMAND TASK [options]`` runs ``target`` ("module:function") with one keyword per option
    (plus ``progress`` and ``checkpoint`` where it takes them) and writes the ``popdyn.io.Result`` it returns."""

    command: str
    task: str
    target: str
    help: str
    options: tuple[Option, ...]
    takes_progress: bool = False
    takes_checkpoint: bool = False
    fixed: dict = field(default_factory=dict)
    forwards_to: str | None = None
    """A command whose job of the same task gets the keywords this job's function takes as ``**options``."""
    sweep: bool = False
    """For a basins job: ``popdyn sweep TASK`` runs it over a grid of one or two of its numeric options."""

    def __post_init__(self) -> None:
        if self.sweep and self.command != "basins":
            raise ValueError(f"sweep=True on the {self.command} {self.task} job: only a basins job is swept")

    def function(self) -> Callable:
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)

    def signature_params(self) -> set[str]:
        """The keywords the job function accepts (with ``forwards_to``: also the options it passes on)."""
        params = inspect.signature(self.function()).parameters
        own = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if self.forwards_to is None:
            return own
        return own | (lookup(self.forwards_to, self.task).signature_params() - {"progress", "checkpoint"})

    def defaults(self) -> dict[str, Any]:
        """The default of each keyword the options feed, by keyword."""
        return {name: value for o in self.options for name, value in o.defaults().items()}

    def declared_params(self) -> set[str]:
        """The keywords the options, progress, checkpoint and fixed values supply."""
        out = {p for o in self.options for p in o.params} | set(self.fixed)
        return (
            out
            | ({"progress"} if self.takes_progress else set())
            | ({"checkpoint"} if self.takes_checkpoint else set())
        )

    def keywords(self, given: dict[str, Any], progress: bool, checkpoint) -> dict[str, Any]:
        """The job function's keywords from the parsed option values ``given`` (None = not given): defaults
        filled in, an option given outside its ``when`` refused with a ValueError."""
        values = {o.dest: (o.default if given.get(o.dest) is None else given[o.dest]) for o in self.options}
        for o in self.options:
            if o.when is not None and given.get(o.dest) is not None and values.get(o.when[0]) not in o.when_values:
                raise ValueError(
                    f"--{o.dest.replace('_', '-')} applies only with {o.when_text()} "
                    f"(here {values.get(o.when[0])!r}); leave it out"
                )
        for item in given.get("vary") or ():  # a swept option is not also given a value
            name = str(item).partition("=")[0].replace("-", "_")
            if name != "vary" and given.get(name) is not None:
                raise ValueError(f"--{name.replace('_', '-')} is also swept with --vary: give it once")
        kw = dict(self.fixed)
        for o in self.options:
            kw.update(o.kwargs(values[o.dest]))
        if self.takes_progress:
            kw["progress"] = progress
        if self.takes_checkpoint:
            kw["checkpoint"] = checkpoint
        return kw


# ---- shared option sets ----------------------------------------------------------------------------------------
def _opts(*options: Option) -> tuple[Option, ...]:
    return tuple(options)


GRID_RANGE = Option(
    "--range",
    float,
    (-3.0, 3.0),
    "the square [LO, HI]² of the slice",
    nargs=2,
    param=("lo", "hi"),
    metavar=("LO", "HI"),
)
CHUNK = Option("--chunk", int, 16384, "initialisations per compiled chunk")
METHOD = Option(
    "--method",
    str,
    "flow",
    "dynamics: flow, gd, or MODULE:NAME, a dynamics of your own (a popdyn.dynamics.AbstractDynamics, or a function "
    "returning one)",
    metavar="METHOD",
)
SEED = Option("--seed", int, 0, "random seed")
SAMPLING = Option(
    "--sampling",
    str,
    "with-replacement",
    "how SGD draws each minibatch of B: B independent draws, or a random B-subset of the n examples",
    choices=("with-replacement", "without-replacement"),
)
"""SGD's sampling in the jobs that run SGD: with replacement (the default) or without."""
SGD_METHOD = Option(
    "--method",
    str,
    "flow",
    "dynamics: flow, gd, sgd (minibatch SGD on the model's examples, docs/sgd.md), or MODULE:NAME, a dynamics of "
    "your own (a popdyn.dynamics.AbstractDynamics, or a function returning one)",
    metavar="METHOD",
)
SGD_RUNS = (
    Option(
        "--batch",
        int,
        1,
        "SGD's minibatch size B (the model must declare its examples: Problem.from_examples)",
        when=("method", "sgd"),
        metavar="B",
    ),
    Option("--seeds", int, 32, "SGD runs from each start, each with its own minibatches", when=("method", "sgd")),
    dataclasses.replace(SAMPLING, when=("method", "sgd")),
)
"""Minibatch SGD's settings in the jobs that run it (``--method sgd``); its runs' minibatch streams start from
``--seed``."""
SPREAD = (
    Option("--lr", float, 0.1, "the learning rate η of GD and SGD"),
    Option("--batch", int, 1, "SGD's minibatch size B", metavar="B"),
    SAMPLING,
    Option("--steps", int, 200, "steps of GD and SGD"),
    Option("--record-every", int, 10, "a record every this many steps (a divisor of --steps)"),
    Option("--seeds", int, 1000, "SGD runs measuring the spread (>= 2)"),
    SEED,
)
"""The options of ``popdyn spread``: SGD's spread around GD's path, predicted and measured (docs/sgd.md)."""
AUDIT_MOMENTUM = Option(
    "--momentum", float, 0.0, "heavy-ball momentum μ in [0, 1): thresholds (1 − √μ)²/η and 2(1 + μ)/η"
)
SGD_BATCH = Option(
    "--batch",
    int,
    None,
    "SGD's minibatch size B: at each end point that is a minimum, GD's 2/λ_max beside SGD's mean-square threshold "
    "η*(B), and which holds at each η; the figure adds η*(B) against B (docs/sgd.md; the model must declare its "
    "examples)",
    metavar="B",
)
SGD_SAMPLING = Option(
    "--sampling",
    str,
    None,
    "how SGD draws each minibatch of B: B independent draws (with-replacement, the default) or a random B-subset "
    "of the n examples (without-replacement); only with a minibatch size B",
    choices=SAMPLING.choices,
)
SGD_AUDIT = (SGD_BATCH, SGD_SAMPLING)
"""The step-size audit's SGD thresholds (``step_size_audit(..., batch=B, replace=...)``), for stepsize jobs."""
SOLVER = Option(
    "--solver",
    str,
    "tsit5",
    "the flow's diffrax solver (kvaerno5 for stiff flows)",
    choices=("tsit5", "kvaerno5", "dopri8"),
    when=("method", "flow"),
)
RTOL = Option("--rtol", float, 1e-8, "relative tolerance of the stopping rule δ = atol + rtol‖θ‖ and the flow's solver")
ATOL = Option("--atol", float, 1e-10, "absolute tolerance of the stopping rule and the flow's solver")
GTOL = Option("--gtol", float, None, "stop at ‖∇L‖ < gtol (default: the scale-aware rule)")
MAX_STEPS = Option("--max-steps", int, 100_000, "the flow's solver steps per start", when=("method", "flow"))
DYNAMICS = (SOLVER, RTOL, ATOL, GTOL, MAX_STEPS)
"""The dynamics' own settings (docs/dynamics.md), for jobs with --method."""

MARKOV = _opts(
    Option("--p", float, 0.1, "P(next=1 | current=0), in (0, 1)"),
    Option("--q", float, 0.1, "P(next=0 | current=1), in (0, 1)"),
)
DECISION_LIST = _opts(
    Option("--L", int, 10, "number of tokens"),
    Option("--n", int, 3, "sequence length (<= L for distinct tokens)"),
    Option(
        "--distribution",
        str,
        "distinct",
        "how sequences are drawn ([our choice], docs/models/decision_lists.md §2)",
        choices=("distinct", "iid"),
    ),
)
DL_C = Option("--c", float, None, "V = cP scale (default: the theorem's)")
DL_M = Option("--M", int, 3, "longest list: lists of every length 1..M")
SCB = _opts(
    Option("--N", int, 10, "vocabulary size"),
    Option("--T", int, 50, "context length"),
    Option("--Q", int, 2, "sparsity: nonzeros per attention column"),
    SEED,
)
TEACHER = _opts(
    Option("--teacher", str, "cnn", "the teacher model", choices=("cnn", "gcn", "sts", "gslp")),
    Option("--D", int, None, "tokens (default: the paper's, cnn 36, others 20)"),
    Option("--K", int, None, "support per column of S* (default: cnn 4, gcn 3, sts 4, gslp 1)"),
    Option("--activation", str, "relu", "activation", choices=("relu", "leaky", "linear")),
    Option("--alpha", float, None, "leaky slope in [0, 1) (default 0.1)"),
    Option("--d", int, 4, "features per token"),
    Option("--M", int, None, "channels (cnn, gcn: default 4)"),
    SEED,
)
SMALL_TEACHER = _opts(
    Option("--D", int, None, "tokens (default: a small instance, cnn 8, gcn 9, sts 8, gslp 8)"),
    Option("--K", int, None, "support per column of S* (default: a small instance, cnn 2, gcn 3, sts 2, gslp 1)"),
)
"""The sizes of the teacher jobs that run the full (W, A) model, whose defaults are a small instance, each used
where that size is not given (popdyn.jobs.teacher.commands.SMALL_SIZES)."""
USER = _opts(
    Option("--factory", str, None, "module.path:factory returning a popdyn.Problem (given as the task)"),
    Option("--param", str, (), "a keyword of the factory, NAME=VALUE (repeatable)", nargs="*", metavar="NAME=VALUE"),
)

_M = "popdyn.jobs.markov._commands"
_DL = "popdyn.jobs.decision_list.commands"
_SCB = "popdyn.jobs.scb.commands"
_T = "popdyn.jobs.teacher.commands"
_U = "popdyn.jobs._model"
_SW = "popdyn.jobs._sweep"

JOBS: tuple[Job, ...] = (
    # ---- markov
    Job(
        "basins",
        "markov",
        f"{_M}:basins_markov",
        "basin map over the (w, e) plane against the closed form (docs/models/markov.md §4.4)",
        MARKOV
        + _opts(
            Option("--grid", int, 128, "points per axis (>= 2)", param="n"),
            GRID_RANGE,
            SGD_METHOD,
            Option("--t1", float, 1e4, "flow horizon", when=("method", "flow")),
            Option("--lr", float, 0.5, "GD's or SGD's learning rate", when=("method", ("gd", "sgd"))),
            Option("--steps", int, 2000, "GD's or SGD's steps", when=("method", ("gd", "sgd"))),
            Option("--momentum", float, 0.0, "heavy-ball momentum in [0, 1)", when=("method", ("gd", "sgd"))),
            *SGD_RUNS,
            Option("--seed", int, 0, "the base seed of SGD's minibatch streams", when=("method", "sgd")),
            Option(
                "--bias",
                str,
                "profiled",
                "the bias b: profiled out (docs/models/markov.md §2.2) or trained from b = 0",
                choices=("profiled", "trained"),
            ),
            *DYNAMICS,
            CHUNK,
        ),
        takes_progress=True,
        takes_checkpoint=True,
    ),
    Job(
        "converge",
        "markov",
        f"{_M}:converge_markov",
        "time to the ε-ball around the limit vs the local rate (docs/models/markov.md §4.6)",
        MARKOV
        + _opts(
            Option("--n-init", int, 8, "random initialisations"),
            Option("--std", float, 1.0, "std of the Gaussian initialisations"),
            SEED,
            Option("--eps", float, 1e-6, "target distance to the limit"),
            Option("--t1", float, 1e4, "flow horizon"),
        ),
    ),
    Job(
        "stepsize",
        "markov",
        f"{_M}:stepsize_markov",
        "λ_max along GD from (e0, w0) against 1/η and 2/η",
        MARKOV
        + _opts(
            Option("--e0", float, 1.0, "initial e"),
            Option("--w0", float, 0.5, "initial w"),
            Option("--lr", float, (0.5, 2.0, 3.0), "learning rates", nargs="+", param="lrs"),
            Option("--steps", int, 400, "GD steps"),
            AUDIT_MOMENTUM,
            *SGD_AUDIT,
        ),
    ),
    Job(
        "spread",
        "markov",
        f"{_M}:spread_markov",
        "SGD's spread around GD's path on the canonical model from (e0, w0) (docs/models/markov.md §2.2)",
        MARKOV
        + _opts(
            Option("--e0", float, 1.0, "initial e"),
            Option("--w0", float, 0.5, "initial w"),
            Option("--N", int, 512, "predicted tokens of one training sequence, an example"),
        )
        + SPREAD,
        takes_progress=True,
        takes_checkpoint=True,
    ),
    Job(
        "sweep",
        "markov",
        f"{_SW}:sweep_markov",
        "basin fractions, hitting times and λ_max over a (p, q) grid, with the p + q = 1 line",
        _opts(
            Option(
                "--p",
                float,
                (0.05, 0.95),
                "range of p, in (0, 1)",
                nargs=2,
                param=("p_lo", "p_hi"),
                metavar=("LO", "HI"),
            ),
            Option(
                "--q",
                float,
                (0.05, 0.95),
                "range of q, in (0, 1)",
                nargs=2,
                param=("q_lo", "q_hi"),
                metavar=("LO", "HI"),
            ),
            Option("--points", int, 8, "values per data parameter (>= 2)"),
            Option("--grid", int, 16, "initialisations per axis of the (w, e) slice (>= 2)"),
            GRID_RANGE,
            METHOD,
            Option("--t1", float, 1e4, "flow horizon", when=("method", "flow")),
            Option("--lr", float, 0.5, "GD learning rate", when=("method", "gd")),
            Option("--steps", int, 2000, "GD steps", when=("method", "gd")),
            *DYNAMICS,
            CHUNK,
        ),
        takes_progress=True,
        takes_checkpoint=True,
    ),
    # ---- decision lists
    Job(
        "basins",
        "decision-list",
        f"{_DL}:basins_decision_list",
        "rule order reached from the zero-column-sum plane of the reduced flow (docs/models/decision_lists.md §3 C)",
        DECISION_LIST
        + _opts(
            DL_C,
            Option("--grid", int, 32, "points per axis (>= 2)"),
            GRID_RANGE,
            Option("--t1", float, 100.0, "flow horizon"),
            Option("--records", int, 120, "log-spaced record times for the first passage", param="n_times"),
            CHUNK,
        ),
        takes_checkpoint=True,
        sweep=True,
    ),
    Job(
        "converge",
        "decision-list",
        f"{_DL}:converge_decision_list",
        "first time of perfect classification T* per list length against Theorem 1's bounds",
        DECISION_LIST
        + _opts(
            DL_M,
            DL_C,
            Option("--delta", float, None, "override δ (default: docs/models/decision_lists.md §5)"),
            Option("--gamma", float, None, "override γ (default: δ/L-type, docs/models/decision_lists.md §5)"),
            Option("--t1", float, None, "flow horizon (default: 10× the bound)"),
        ),
    ),
    Job(
        "stepsize",
        "decision-list",
        f"{_DL}:stepsize_decision_list",
        "Theorem 2's exact GD at η = 1/λ_max(θ0) with its step-size audit",
        _opts(
            *DECISION_LIST[:2],
            DL_M,
            SEED,
            Option("--lr", float, None, "learning rate (default 1/λ_max(θ0))"),
            Option("--steps", int, 20, "GD steps"),
            Option("--draws", int, 10, "draws of V0's perturbation (seeds seed, seed+1, …) for λ_max(θ0)'s spread"),
        ),
    ),
    # ---- scan and snap
    Job(
        "converge",
        "scan-snap",
        "popdyn.jobs._scan_snap:converge_scan_snap",
        "measured snap time t₀ against its closed form and Remark 1's bound, across η_Y/η_Z",
        _opts(
            Option("--K", int, 10, "classes (one shared query token)"),
            Option("--M", int, 200, "vocabulary size (the paper's worked case: 1000)"),
            Option("--eta-y", float, 0.5, "decoder rate η_Y"),
            Option("--ratios", float, (1.0, 10.0, 100.0), "η_Y/η_Z values", nargs="+"),
            Option("--n-common", int, 1, "common tokens per class"),
            Option("--n-distinct", int, 10, "distinct tokens per class"),
            Option("--rtol", float, 1e-8, "the flow's relative tolerance (atol = rtol/100)"),
        ),
    ),
    Job(
        "stepsize",
        "scan-snap",
        "popdyn.jobs._scan_snap:stepsize_scan_snap",
        "λ_max along exact GD against 1/η and 2/η",
        _opts(
            Option("--lr", float, (1.0, 5.0, 20.0), "learning rates", nargs="+", param="lrs"),
            Option("--steps", int, 100, "GD steps"),
            Option("--record-every", int, 2, "steps between audits"),
            Option("--K", int, 2, "classes"),
            Option("--n-common", int, 10, "common tokens per class"),
            Option("--n-distinct", int, 10, "distinct tokens per class"),
            Option("--M", int, None, "vocabulary size (default: the tokens used)"),
            dataclasses.replace(AUDIT_MOMENTUM, help=f"{AUDIT_MOMENTUM.help} (the paper's μ: 0.9)"),
        ),
    ),
    Job(
        "basins",
        "scan-snap",
        "popdyn.jobs._scan_snap:basins_scan_snap",
        "which distinct token wins the attention, over initial decoder weight × attention logit",
        _opts(
            Option("--grid", int, 9, "points per axis (>= 2)"),
            Option("--decoder-range", float, (-1.0, 1.0), "range of Y[l₂, n₀](0)", nargs=2, metavar=("LO", "HI")),
            Option("--logit-range", float, (-0.5, 1.5), "range of Z[m, l₂](0)", nargs=2, metavar=("LO", "HI")),
            Option("--K", int, 2, "classes"),
            Option("--n-common", int, 1, "common tokens per class"),
            Option("--n-distinct", int, 3, "distinct tokens per class (>= 2)"),
            Option("--M", int, 20, "vocabulary size"),
            Option("--eta-y", float, 1.0, "decoder rate η_Y"),
            Option("--eta-z", float, 0.1, "attention rate η_Z"),
            Option("--gtol", float, 1e-4, "gradient norm that ends a run"),
            Option("--t1", float, 1e7, "flow horizon"),
            CHUNK,
        ),
        takes_progress=True,
        takes_checkpoint=True,
        sweep=True,
    ),
    # ---- sparse contextual bigrams
    Job(
        "basins",
        "scb",
        f"{_SCB}:basins_scb",
        "basin map of the reduced (α_V, α_A) flow (docs/models/scb.md §4)",
        SCB
        + _opts(
            Option("--grid", int, 64, "points per axis (>= 2)", param="n"),
            Option(
                "--range",
                float,
                (-2.0, 2.0),
                "the square [LO, HI]² of the slice",
                nargs=2,
                param=("lo", "hi"),
                metavar=("LO", "HI"),
            ),
            Option("--t1", float, 2e4, "flow horizon"),
            CHUNK,
        ),
        takes_progress=True,
        takes_checkpoint=True,
        sweep=True,
    ),
    Job(
        "converge",
        "scb",
        f"{_SCB}:converge_scb",
        "steps of exact preconditioned GD to ε against the local theory",
        SCB
        + _opts(
            Option("--lr", float, 0.5, "step size"),
            Option("--eps", float, 0.01, "target accuracy"),
            Option("--threshold", float, None, "stage-1 threshold (default: 2/(QN), docs/models/scb.md §5)"),
            Option("--max-steps", int, 20_000, "GD step budget"),
        ),
    ),
    Job(
        "stepsize",
        "scb",
        f"{_SCB}:stepsize_scb",
        "whitened λ_max along GD against 1/η and 2/η",
        SCB
        + _opts(
            Option("--lr", float, None, "learning rates (default 0.5 and 0.9, 1.1 × 2/λ*)", nargs="+", param="lrs"),
            Option("--steps", int, 400, "GD steps"),
            Option("--record-every", int, 20, "audit every k steps"),
        ),
    ),
    # ---- bilinear teachers
    Job(
        "converge",
        "teacher",
        f"{_T}:converge_teacher",
        "GD against the rate theory, with a step-size audit (docs/models/teacher.md §5)",
        TEACHER
        + _opts(
            Option("--lr", float, None, "GD step (default 1/λ_max at the teacher)"),
            Option("--steps", int, None, "GD steps (default: to ηT = 300 × late onset)"),
        ),
    ),
    Job(
        "basins",
        "teacher",
        f"{_T}:basins_teacher",
        "which starts of a 2-D slice reach the teacher's loss level under full-matrix GD",
        _opts(
            *TEACHER[:1],
            *SMALL_TEACHER,
            *TEACHER[3:],
            Option("--x", str, None, "first coordinate, e.g. W[0,1] (default: the scale of W)"),
            Option("--y", str, None, "second coordinate (default: the scale of the attention logits)"),
            Option("--grid", int, 12, "points per axis (>= 2)"),
            Option(
                "--range",
                float,
                (0.0, 6.0),
                "the square [LO, HI]² of the slice",
                nargs=2,
                param=("lo", "hi"),
                metavar=("LO", "HI"),
            ),
            Option("--lr", float, None, "GD step (default 1/λ_max at the teacher)"),
            Option("--steps", int, 3000, "GD step budget"),
            # [our choice]: a start reached the teacher when its excess loss fell to 1% of the excess at the
            # paper's zero initialisation
            Option("--tol", float, 0.01, "the teacher's level: L ≤ L_opt + tol·(L(0) − L_opt), tol in (0, 1)"),
            CHUNK,
        ),
        takes_progress=True,
        takes_checkpoint=True,
        sweep=True,
    ),
    Job(
        "stepsize",
        "teacher",
        f"{_T}:stepsize_teacher",
        "λ_max along full-matrix GD from W = 0, A = 0 against 1/η, 2/η",
        _opts(*TEACHER[:1], *SMALL_TEACHER, *TEACHER[3:])
        + _opts(
            Option("--lr", float, None, "learning rates (default (1, 1.5, 2.5)/λ_max at the teacher)", nargs="+"),
            Option("--steps", int, 5000, "GD steps"),
            Option("--records", int, 40, "audit points"),
            AUDIT_MOMENTUM,
        ),
    ),
    # ---- a user's own Problem
    Job(
        "basins",
        MODEL,
        f"{_U}:basins_model",
        "basin map over two coordinates of your Problem's θ",
        USER
        + _opts(
            Option("--x", str, None, "first coordinate (default: θ's first)"),
            Option("--y", str, None, "second coordinate (default: θ's second)"),
            Option("--grid", int, 32, "points per axis (>= 2)"),
            GRID_RANGE,
            SEED,
            SGD_METHOD,
            Option("--t1", float, 1e4, "flow horizon", when=("method", "flow")),
            Option("--lr", float, 0.1, "GD's or SGD's learning rate", when=("method", ("gd", "sgd"))),
            Option("--steps", int, 2000, "GD's or SGD's steps", when=("method", ("gd", "sgd"))),
            *SGD_RUNS,
            *DYNAMICS,
            CHUNK,
        ),
        takes_progress=True,
        takes_checkpoint=True,
    ),
    Job(
        "converge",
        MODEL,
        f"{_U}:converge_model",
        "times to ‖∇L‖ ≤ ε from random initialisations",
        USER
        + _opts(
            Option("--n-init", int, 16, "random initialisations (prob.init)"),
            SEED,
            Option("--eps", float, 1e-6, "target gradient norm"),
            SGD_METHOD,
            Option("--t1", float, 1e4, "flow horizon", when=("method", "flow")),
            Option("--lr", float, 0.1, "GD's or SGD's learning rate", when=("method", ("gd", "sgd"))),
            Option("--steps", int, 10_000, "GD's or SGD's steps", when=("method", ("gd", "sgd"))),
            *SGD_RUNS,
            *DYNAMICS,
        ),
    ),
    Job(
        "stepsize",
        MODEL,
        f"{_U}:stepsize_model",
        "λ_max along GD from prob.init against 1/η and 2/η",
        USER
        + _opts(
            Option("--lr", float, (0.1,), "learning rates", nargs="+"),
            Option("--steps", int, 400, "GD steps"),
            SEED,
            AUDIT_MOMENTUM,
            *SGD_AUDIT,
        ),
    ),
    Job(
        "spread",
        MODEL,
        "popdyn.jobs._spread:spread_model",
        "SGD's spread around GD's path from prob.init: predicted to first order against measured SGD runs",
        USER + SPREAD,
        takes_progress=True,
        takes_checkpoint=True,
    ),
    Job(
        "sweep",
        MODEL,
        f"{_SW}:sweep_model",
        "basin fractions, hitting times and λ_max over a grid of one or two of the factory's keywords",
        USER
        + _opts(
            Option(
                "--vary",
                str,
                None,
                "a keyword to sweep, NAME=LO:HI:N (once or twice)",
                nargs="+",
                metavar="NAME=LO:HI:N",
            ),
            Option("--n-init", int, 64, "random initialisations per parameter value (prob.init)"),
            SEED,
            METHOD,
            Option("--t1", float, 1e4, "flow horizon", when=("method", "flow")),
            Option("--lr", float, 0.1, "GD learning rate", when=("method", "gd")),
            Option("--steps", int, 2000, "GD steps", when=("method", "gd")),
            *DYNAMICS,
            CHUNK,
        ),
        takes_progress=True,
        takes_checkpoint=True,
    ),
)

NOT_SWEPT = ("grid", "chunk", "records")
"""Options of a basins job that set the map's resolution, not the problem or the dynamics: never swept."""


def sweepable(basins: Job) -> dict[str, Option]:
    """The options a task sweep may vary, by keyword: the basins job's single numbers, less NOT_SWEPT."""
    return {o.dest: o for o in basins.options if o.type in (int, float) and o.nargs is None and o.dest not in NOT_SWEPT}


def _task_sweep(basins: Job) -> Job:
    """``popdyn sweep TASK``: the task's basins job over one or two of its numeric options (docs/jobs.md,
    "Sweeps"); every other option of that job is taken as there."""
    names = ", ".join(o.flag.lstrip("-") for o in sweepable(basins).values())
    return Job(
        "sweep",
        basins.task,
        f"{_SW}:sweep_task",
        f"the basins job's fractions over a grid of one or two of its options ({names})",
        _opts(
            Option(
                "--vary",
                str,
                None,
                "an option to sweep, NAME=LO:HI:N (once or twice)",
                nargs="+",
                metavar="NAME=LO:HI:N",
            )
        )
        + basins.options,
        takes_progress=True,
        takes_checkpoint=True,
        fixed={"task": basins.task},
        forwards_to="basins",
    )


JOBS += tuple(_task_sweep(j) for j in JOBS if j.sweep)
REGISTRY: dict[tuple[str, str], Job] = {(j.command, j.task): j for j in JOBS}
TASKS: tuple[str, ...] = tuple(dict.fromkeys(j.task for j in JOBS if j.task != MODEL))
"""The papers' tasks, in the order JOBS declares them."""


def tasks_for(command: str) -> tuple[str, ...]:
    """The tasks that have a ``command`` job, in the order of TASKS, then the user model."""
    have = {t for c, t in REGISTRY if c == command}
    return tuple(t for t in (*TASKS, MODEL) if t in have)


def lookup(command: str, task: str) -> Job:
    """The job of ``command`` for ``task``; a ValueError names the tasks that have one."""
    if (command, task) not in REGISTRY:
        raise ValueError(
            f"task={task!r} has no {command} job: available for {', '.join(tasks_for(command))}, or "
            "your own model as module.path:factory"
        )
    return REGISTRY[(command, task)]


# ---- the job functions' defaults -------------------------------------------------------------------------------
class _Declared:
    """The type of ``DECLARED``."""

    def __repr__(self) -> str:
        return "DECLARED"


DECLARED: Any = _Declared()
"""The source default of a job function's option parameter: ``registered`` puts the Option's default in its
place (typed ``Any``, so ``n: int = DECLARED`` is an optional ``int`` to a type checker)."""

_F = TypeVar("_F", bound=Callable[..., Any])


def _declared_defaults(target: str, names: Collection[str]) -> dict[str, Any]:
    """The default of each keyword in ``names`` that an option of a job running ``target`` ("module:function")
    feeds, by keyword; a TypeError when no job runs it or two of its jobs declare different defaults for one of
    ``names`` (a job that forwards options, ``sweep_task``, declares others that its function does not take)."""
    out: dict[str, Any] = {}
    jobs = [j for j in JOBS if j.target == target]
    if not jobs:
        raise TypeError(f"{target} is the function of no job in popdyn.jobs._registry")
    for job in jobs:
        for name, value in job.defaults().items():
            if name in names and out.setdefault(name, value) != value:
                raise TypeError(f"the jobs of {target} declare two defaults of {name}: {out[name]!r} and {value!r}")
    return out


def registered(fn: _F) -> _F:
    """Decorate a job function: the default of each of its option parameters, written ``DECLARED`` in its source,
    becomes the default its Options declare (in ``__defaults__`` and ``__kwdefaults__``, which
    ``inspect.signature`` and every call read). A TypeError, at import, for an option parameter whose source
    default is not ``DECLARED`` (a restated default, or none) and for a ``DECLARED`` no Option declares.

    **Arguments:**

    - ``fn``: the function of one or more jobs (``Job.target`` names it); returned itself, its defaults set.
    """
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"registered takes a function, not {fn!r}")
    target = f"{fn.__module__}:{fn.__name__}"
    params = inspect.signature(fn).parameters
    declared = _declared_defaults(target, params)
    for name, param in params.items():
        if (name in declared) != (param.default is DECLARED):
            written = "missing" if param.default is param.empty else repr(param.default)
            where = "an Option declares it: write DECLARED" if name in declared else "no Option declares it"
            raise TypeError(f"{target}: the default of {name} is {written}, but {where}")
    positional = fn.__code__.co_varnames[: fn.__code__.co_argcount]
    given = fn.__defaults__ or ()
    names = positional[len(positional) - len(given) :]
    fn.__defaults__ = tuple(declared[n] if d is DECLARED else d for n, d in zip(names, given, strict=True))
    if fn.__kwdefaults__:
        fn.__kwdefaults__ = {n: declared[n] if d is DECLARED else d for n, d in fn.__kwdefaults__.items()}
    return fn
