"""Jobs for a user's own Problem: ``popdyn basins|converge|stepsize|sweep module.path:factory --param NAME=VALUE``
(docs/jobs.md, "Your own model"). The factory is any function returning a ``popdyn.Problem`` (for instance
``Problem.from_loss``); every keyword it takes can be given with ``--param``.
"""

from __future__ import annotations

import ast
import cmath
import inspect
import math
import operator
import warnings
from collections.abc import Callable

import jax
import numpy as np

from popdyn import _validate
from popdyn._batching import check_memory
from popdyn.analysis import (
    GradNormBelow,
    Grid,
    basin_map,
    group_unresolved,
    hitting_times,
    lambda_max,
    step_size_audit,
)
from popdyn.analysis._coords import names as coordinate_names
from popdyn.analysis._stepsize import run_saddle_tol
from popdyn.dynamics import SGD, gradient_descent
from popdyn.io import Result
from popdyn.jobs._basin_result import basin_result
from popdyn.jobs._budget import budget_json, budget_lines, run_budget
from popdyn.jobs._dynamics_options import SGDRuns, job_dynamics, settings
from popdyn.jobs._registry import DECLARED, registered
from popdyn.jobs._sgd_audit import curve_lines, sgd_curves, sgd_inputs, sgd_lines, sgd_replace
from popdyn.jobs._sgd_jobs import seed_time_lines, seed_times, seed_times_figure, sgd_basins
from popdyn.jobs._task import Task
from popdyn.jobs._user_code import call_user, load_object
from popdyn.plot import plot_step_size_audit, plot_times
from popdyn.problem import Problem, Theta, check_problem


def load_factory(factory: str) -> Task:
    """The model named by ``"module.path:name"``: a ``popdyn.jobs._task.Task``, or a function returning a Problem (then
    a Task of that function alone); an import that fails, whatever it raises, is a ValueError naming the module and
    the error."""
    obj = load_object("factory", factory, "'module.path:function'", "returning a popdyn.Problem")
    if isinstance(obj, Task):
        return obj
    if not callable(obj):
        module, name = factory.split(":")
        raise ValueError(f"factory={factory!r} is invalid: {module!r} has no function {name!r}")
    return Task(problem=obj)


def parse_params(params) -> dict[str, object]:
    """``["c=1.5", "name=abc"]`` → {"c": 1.5, "name": "abc"}: Python literals where they parse, else strings. A name
    given twice, or a number that is not finite (``1e400`` parses as inf), is refused."""
    out: dict[str, object] = {}
    for item in params or ():
        name, sep, raw = str(item).partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"param={item!r} is invalid: must be NAME=VALUE with NAME a Python identifier")
        if name in out:
            raise ValueError(f"param {name!r} is given twice ({name}={out[name]!r}, {item}): give it once")
        try:
            out[name] = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            out[name] = raw
        if not _finite(out[name]):
            raise ValueError(f"param {name}={raw} is out of range: numbers must be finite (here {out[name]!r})")
    return out


def _finite(value) -> bool:
    """Whether every number in a parsed literal (nested in tuples, lists, sets and dicts too) is finite."""
    if isinstance(value, (float, complex)):
        return cmath.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(_finite(v) for v in value)
    return True


def _check_keywords(factory: str, fn: Callable, kwargs: dict) -> None:
    """ValueError when ``fn`` does not take ``kwargs``: a keyword it does not know, or one it needs and lacks."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a callable without a signature (a builtin): the call itself will tell
        return
    takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    unknown = [k for k in kwargs if k not in sig.parameters and not takes_any]
    if unknown:
        raise ValueError(
            f"param {unknown[0]!r} is not a keyword of {factory}: it takes {', '.join(sig.parameters) or 'none'}"
        )
    try:
        sig.bind(**kwargs)
    except TypeError as err:  # a keyword it needs is missing, or one it takes only by position
        raise ValueError(f"factory={factory!r} cannot be called with {kwargs or 'no arguments'}: {err}") from None


def build(factory: str, param=(), **overrides) -> Problem:
    """``factory(**params, **overrides)``, checked to be a Problem whose init, loss and residuals trace.

    Args:
        factory: "module.path:function"; param: ``NAME=VALUE`` strings (``parse_params``); overrides: more
            keywords (a sweep's values).

    Unknown or missing keywords, an import or a call that raises, and a Problem whose functions fail when traced
    are refused with one ValueError naming the factory and the error (``call_user``).
    """
    fn = load_factory(factory).problem
    kwargs = parse_params(param) | overrides
    _check_keywords(factory, fn, kwargs)
    called = f"factory={factory!r}" + (f" (called with {kwargs})" if kwargs else "")
    prob = call_user(called, fn, kwargs=kwargs)
    if not isinstance(prob, Problem):
        raise ValueError(
            f"factory={factory!r} returned {type(prob).__name__}: must return a popdyn.Problem "
            "(popdyn.Problem.from_loss turns a loss function into one)"
        )
    return call_user(f"the Problem of {called}, traced,", check_problem, (prob,))


def theta_bytes(prob: Problem) -> int:
    """Bytes of one θ of ``prob`` (from its template: nothing is computed)."""
    return sum(math.prod(t.shape) * np.dtype(t.dtype).itemsize for t in jax.tree_util.tree_leaves(prob.template()))


def draw_inits(prob: Problem, factory: str, n: int, seed: int) -> Theta:
    """``n`` draws of ``prob.init``, keys split from ``seed``: their memory checked first (``check_memory``), and a
    warning when the init ignores its key (n > 1 draws all the same start)."""
    check_memory(n * (theta_bytes(prob) + 16.0), f"{n:,} initialisations of {factory}")
    keys = jax.random.split(jax.random.PRNGKey(_validate.seed("seed", seed)), n)
    warn_if_init_ignores_key(prob, factory, n)
    return jax.vmap(prob.init)(keys)


def warn_if_init_ignores_key(prob: Problem, what: str, n: int) -> None:
    """Warn when ``n`` > 1 draws of ``prob.init`` are asked for and it gives one start for two different keys.

    Args:
        prob: the problem; what: its name for the message; n: the number of draws.
    """
    if n < 2:
        return
    a, b = (prob.init(jax.random.PRNGKey(k)) for k in (0, 1))
    same = jax.tree_util.tree_map(lambda u, v: bool(np.array_equal(np.asarray(u), np.asarray(v))), a, b)
    if all(jax.tree_util.tree_leaves(same)):
        warnings.warn(
            f"the init of {what} gives the same θ for every key: its {n:,} draws are {n:,} copies of one start "
            "(init_scale=0, or an init(key) that does not use key)",
            stacklevel=2,
        )


def model_title(factory: str, param) -> str:
    return factory + ("" if not param else " " + " ".join(param))


@registered
def basins_model(
    factory: str = DECLARED,
    param=DECLARED,
    x: str | None = DECLARED,
    y: str | None = DECLARED,
    grid: int = DECLARED,
    lo: float = DECLARED,
    hi: float = DECLARED,
    seed: int = DECLARED,
    method: str = DECLARED,
    t1: float = DECLARED,
    lr: float = DECLARED,
    steps: int = DECLARED,
    batch: int = DECLARED,
    seeds: int = DECLARED,
    sampling: str = DECLARED,
    solver: str = DECLARED,
    rtol: float = DECLARED,
    atol: float = DECLARED,
    gtol: float | None = DECLARED,
    max_steps: int = DECLARED,
    chunk: int = DECLARED,
    progress: bool = False,
    checkpoint=None,
) -> Result:
    """Basin map over a slice of n × n starts in [lo, hi]²: the coordinates (x, y) of θ, every other coordinate from
    prob.init(PRNGKey(seed)), or, when neither is given and the model is a ``Task`` with a slice, that slice; run by
    ``job_dynamics`` of the method and its settings; attractors named by the task's labeller (default: the problem's
    residuals, else loss level and Morse index; ``popdyn.basin_map``), and the task's checks reported beside them.
    With ``method="sgd"``, ``seeds`` runs of SGD from every start (minibatches of ``batch`` drawn by ``sampling``,
    streams from ``seed``) and the map as probabilities beside GD's at the same step (``sgd_basins``)."""
    task = load_factory(factory)
    prob = build(factory, param)
    n = _validate.int_at_least("grid", grid, 2)
    lo, hi = _validate.interval("range", (lo, hi))
    dynamics = job_dynamics(
        method, t1=t1, lr=lr, steps=steps, solver=solver, rtol=rtol, atol=atol, gtol=gtol, max_steps=max_steps,
        sgd=SGDRuns(batch, seeds, sampling, seed),
    )  # fmt: skip
    g = task.basin_slice(prob, n, lo, hi) if x is None and y is None else None
    g = _coordinate_grid(prob, factory, x, y, lo, hi, n, seed) if g is None else g
    run = {"chunk_size": chunk, "progress": progress, "checkpoint": checkpoint}
    title = f"{model_title(factory, param)}, {dynamics.method}"
    inputs = {"task": factory, "param": list(param), "x": g.x, "y": g.y, "grid": n, "range": [lo, hi], "seed": seed}
    inputs |= settings(dynamics, method)
    if isinstance(dynamics, SGD) or dynamics.runs_per_start > 1:
        return sgd_basins(prob, g, dynamics, task.labeller, run, title, inputs)
    bm = basin_map(prob, g, dynamics, labeller=task.labeller, **run)
    groups = group_unresolved(prob, bm)
    results = {
        "fractions": bm.fractions,
        "stderr": bm.stderr,
        "attractors": list(bm.attractors),
        "status_counts": bm.status_counts(),
        "resolved_fraction": bm.resolved_fraction,
        "unresolved_groups": groups.fractions,
    }
    checks = task.check(prob, bm)
    results |= {} if checks is None else {"checks": checks}
    budget = run_budget(prob, bm.trajectory)
    results["budget"] = budget_json(budget)
    res = basin_result(bm, prob, title, inputs, results, unresolved=groups)
    res.lines.append(f"basins  {title}  grid {n}x{n} of ({g.x}, {g.y}) over [{lo}, {hi}]^2")
    res.lines += [f"  {k:>12s}: {100 * f:6.2f}% ± {100 * bm.stderr[k]:.2f}" for k, f in bm.fractions.items()]
    res.lines += [f"  {'':>12s}  {name}: {100 * f:.2f}%" for name, f in groups.fractions.items()]
    res.lines.append("  status: " + ", ".join(f"{k} {v}" for k, v in bm.status_counts().items() if v))
    res.lines += budget_lines(budget)
    res.lines += [f"  check {name}: {value:.6g}" for name, value in (checks or {}).items()]
    return res


def _coordinate_grid(prob: Problem, factory: str, x, y, lo: float, hi: float, n: int, seed: int) -> Grid:
    """The n × n grid of coordinates (x, y) of θ over [lo, hi]² (θ's first two where not given), every other
    coordinate from prob.init(PRNGKey(seed))."""
    base = prob.init(jax.random.PRNGKey(_validate.seed("seed", seed)))
    coords = coordinate_names(prob.template())
    if len(coords) < 2:
        raise ValueError(f"{factory} has {len(coords)} parameter: a basin map needs two coordinates")
    x = coords[0] if x is None else x
    y = (coords[1] if coords[1] != x else coords[0]) if y is None else y
    return Grid.square(x, y, lo, hi, n, base=base)


@registered
def converge_model(
    factory: str = DECLARED,
    param=DECLARED,
    n_init: int = DECLARED,
    seed: int = DECLARED,
    eps: float = DECLARED,
    method: str = DECLARED,
    t1: float = DECLARED,
    lr: float = DECLARED,
    steps: int = DECLARED,
    batch: int = DECLARED,
    seeds: int = DECLARED,
    sampling: str = DECLARED,
    solver: str = DECLARED,
    rtol: float = DECLARED,
    atol: float = DECLARED,
    gtol: float | None = DECLARED,
    max_steps: int = DECLARED,
) -> Result:
    """From n_init draws of prob.init: the time (flow) or step (GD, SGD) at which ‖∇L‖ ≤ ε (a flow's exact to the
    solver's tolerance: ``popdyn.hitting_times`` with ``GradNormBelow``), the status of each run and its end loss;
    the dynamics is ``job_dynamics`` of the method and its settings. With ``method="sgd"``, ``seeds`` runs from each
    draw, and the time as a distribution over them (``seed_times``)."""
    prob = build(factory, param)
    n_init = _validate.int_at_least("n-init", n_init, 1)
    eps = _validate.positive("eps", eps)
    dynamics = job_dynamics(
        method, t1=t1, lr=lr, steps=steps, solver=solver, rtol=rtol, atol=atol, gtol=gtol, max_steps=max_steps,
        sgd=SGDRuns(batch, seeds, sampling, seed),
    )  # fmt: skip
    theta0 = draw_inits(prob, factory, n_init, seed)
    ht = hitting_times(prob, theta0, GradNormBelow(prob, eps), dynamics)
    final_loss = np.asarray(jax.vmap(prob.loss)(ht.final))
    times = ht.times
    inputs = {"task": factory, "param": list(param), "n_init": n_init, "seed": seed, "eps": eps}
    inputs |= settings(dynamics, method)
    results = {
        "reached": int(ht.reached.sum()),
        "status_counts": ht.status_counts(),
        "time_median": float(np.nanmedian(times)) if ht.reached.any() else None,
        "time_max": float(np.nanmax(times)) if ht.reached.any() else None,
        "times": times,
        "final_loss": final_loss,
    }
    budget = run_budget(prob, ht.trajectory)
    results["budget"] = budget_json(budget)
    head = f"{model_title(factory, param)}: time to ‖∇L‖ ≤ {eps:g}"
    runs = dynamics.runs_per_start
    arrays = {"times": times, "status": ht.status, "final_loss": final_loss}
    if runs > 1:  # S runs from each draw: the times as a distribution over them, one row per draw
        results |= seed_times(ht, n_init)
        arrays = {k: np.reshape(v, (n_init, runs)) for k, v in arrays.items()}
    figure = seed_times_figure(ht, n_init, head) if runs > 1 else plot_times(times, head)
    res = Result(inputs, results, arrays={"converge": arrays}, figures={"converge": figure})
    unit = f"{dynamics.method} {'time' if dynamics.time_unit == 'time' else 'steps'}"
    res.lines.append(f"converge  {model_title(factory, param)}: {unit} to ‖∇L‖ ≤ {eps:g} from {n_init} draws of init")
    res.lines.append(
        f"  reached {results['reached']}/{n_init * runs}; status: "
        + ", ".join(f"{k} {v}" for k, v in ht.status_counts().items() if v)
    )
    res.lines += budget_lines(budget)
    if runs > 1:
        res.lines += seed_time_lines(results, n_init, unit)
    elif ht.reached.any():
        res.lines.append(f"  time: median {results['time_median']:.6g}, max {results['time_max']:.6g}")
    return res


@registered
def stepsize_model(
    factory: str = DECLARED,
    param=DECLARED,
    lr=DECLARED,
    steps: int = DECLARED,
    seed: int = DECLARED,
    momentum: float = DECLARED,
    batch: int | None = DECLARED,
    sampling: str | None = DECLARED,
) -> Result:
    """GD from θ0 = prob.init(PRNGKey(seed)) at every η in ``lr`` in one batch (heavy-ball ``momentum`` μ), with
    λ_max(∇²L(θ_t)) audited against 1/η and 2/η, or (1 − √μ)²/η and 2(1 + μ)/η with momentum
    (``popdyn.step_size_audit``: held / edge of stability / unstable / diverged); with a minibatch size ``batch``
    B (drawn by ``sampling``), GD's 2/λ_max and SGD's η*(B) at each end point and which holds at its η."""
    prob = build(factory, param)
    lrs = np.array([_validate.positive("lr", v) for v in lr], dtype=float)
    steps = _validate.int_at_least("steps", steps, 1)
    replace = sgd_replace(prob, batch, sampling, momentum)
    check_memory(  # every step's θ, loss and λ_max are kept for the audit
        (steps + 1.0) * lrs.size * (theta_bytes(prob) + 16.0), f"{steps:,} steps of GD at {lrs.size} rates"
    )
    theta0 = prob.init(jax.random.PRNGKey(_validate.seed("seed", seed)))
    starts = jax.tree_util.tree_map(lambda v: np.broadcast_to(np.asarray(v), (lrs.size, *np.shape(v))).copy(), theta0)
    traj = gradient_descent(prob, starts, lr=lrs, steps=steps, save_params=True, momentum=momentum)
    audit = step_size_audit(prob, traj, lrs, momentum=momentum, batch=batch, replace=replace)
    runs = [audit.run(i) for i in range(lrs.size)]
    rows = audit.summary()
    inputs = {
        "task": factory,
        "param": list(param),
        "lr": lrs.tolist(),
        "steps": steps,
        "seed": seed,
        "momentum": momentum,
    }
    inputs |= sgd_inputs(batch, replace)
    results: dict = {"runs": rows, "lambda_max_at_start": float(lambda_max(prob, theta0))}
    curves = None
    if batch is not None:
        ends = [jax.tree_util.tree_map(operator.itemgetter(i), traj.final) for i in range(lrs.size)]
        curves = sgd_curves(prob, ends, audit.rows(), batch, replace, run_saddle_tol(traj))
        results["sgd_curves"] = [c.json() for c in curves]
    res = Result(
        inputs,
        results,
        arrays={
            "stepsize": {
                "steps": np.asarray(audit.ts),
                "lambda_max": np.asarray(audit.lambda_max),
                "loss": np.asarray(traj.loss),
                "lr": lrs,
            }
        },
        figures={
            "stepsize": plot_step_size_audit(
                runs, list(np.asarray(traj.loss)), [f"η = {v:g}" for v in lrs], curves=curves
            )
        },
    )
    res.lines.append(f"stepsize  {model_title(factory, param)}: GD from init(seed={seed}), {steps} steps")
    res.lines += [f"  η = {v:<8g} {audit.verdict(i)}" for i, v in enumerate(lrs)]
    res.lines += [] if curves is None else sgd_lines(lrs, [(audit, i) for i in range(lrs.size)]) + curve_lines(curves)
    return res
