"""Phase diagrams: basin fractions, hitting times and λ_max as functions of one or two data parameters
(docs/jobs.md, "Sweeps"). Data parameters are array leaves of a Problem, so every parameter value reuses the
programs compiled for the first one: a sweep compiles once.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from popdyn import _validate
from popdyn._batching import Rehearsed, check_memory, rehearsal
from popdyn.analysis import AbstractLabeller, Grid
from popdyn.analysis._basins import UNRESOLVED
from popdyn.analysis._sweeps import Sweep, SweepPoint, basin_sweep, grid_points
from popdyn.dynamics import AbstractDynamics
from popdyn.dynamics._stack import point_folder
from popdyn.io import Result
from popdyn.jobs._budget import budget_json, budget_lines, joined_budget
from popdyn.jobs._dynamics_options import job_dynamics, settings
from popdyn.jobs._model import build, load_factory, parse_params, theta_bytes, warn_if_init_ignores_key
from popdyn.jobs._registry import DECLARED, registered
from popdyn.problem import Problem, Theta

POINT_BYTES = 4096.0
"""Memory per point of a sweep's grid [an estimate]: its values, its row of results and its entries in the arrays;
the grid's size is checked against it (``check_memory``) before any array is made."""


def _check_grid_size(sizes: list[int]) -> None:
    """ValueError (``check_memory``) when a grid of ``sizes`` points per axis is too large to hold."""
    check_memory(POINT_BYTES * math.prod(sizes), f"a sweep over {' × '.join(f'{n:,}' for n in sizes)} values")


def _parse_axis(item) -> tuple[str, float, float, int]:
    """``"c=0.5:2:8"`` → ("c", 0.5, 2.0, 8), each part checked."""
    name, sep, spec = str(item).partition("=")
    name = name.replace("-", "_")  # an option's flag (eta-y) names its keyword (eta_y)
    parts = spec.split(":")
    if not sep or not name.isidentifier() or len(parts) != 3:
        raise ValueError(f"vary={item!r} is invalid: must be NAME=LO:HI:N, e.g. c=0.5:2:8")
    try:
        lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise ValueError(f"vary={item!r} is invalid: LO and HI must be numbers and N an integer") from None
    lo, hi = _validate.interval(f"vary {name}", (lo, hi))
    return name, lo, hi, _validate.int_at_least(f"vary {name} N", n, 2)


def parse_vary(vary) -> list[tuple[str, np.ndarray]]:
    """``["c=0.5:2:8"]`` → [("c", linspace(0.5, 2, 8))]; one or two distinct names, the grid's size checked before
    its values are made."""
    if not vary:
        raise ValueError("vary is missing: give one or two NAME=LO:HI:N (e.g. --vary c=0.5:2:8)")
    specs = [_parse_axis(item) for item in vary]
    names = [spec[0] for spec in specs]
    twice = [name for name in names if names.count(name) > 1]
    if twice:
        raise ValueError(f"vary={list(vary)} is invalid: {twice[0]!r} is given twice; sweep one or two distinct names")
    if len(specs) > 2:
        raise ValueError(f"vary={list(vary)} is invalid: sweep one or two distinct parameters")
    _check_grid_size([spec[3] for spec in specs])
    return [(name, np.linspace(lo, hi, n)) for name, lo, hi, n in specs]


def _points(axes) -> tuple[tuple[int, ...], list[dict[str, float]]]:
    """(The grid's shape, its points as {name: value}, row-major with the last axis fastest)."""
    return tuple(len(v) for _, v in axes), grid_points(tuple(axes))


def _same_structure(a: Any, b: Any) -> bool:
    """Whether two pytree structures (PyTreeDefs, their static fields included) are equal."""
    return bool(a == b)


def _same_problem(a: Problem, b: Problem) -> bool:
    """Whether two problems have one static structure (functions, static fields) and equal array leaves."""
    leaves_a, def_a = jax.tree_util.tree_flatten(a)
    leaves_b, def_b = jax.tree_util.tree_flatten(b)
    try:
        same_def = _same_structure(def_a, def_b)
    except (TypeError, ValueError):  # a static field holding an array: == gives no single truth value
        return False
    return same_def and all(np.array_equal(u, v) for u, v in zip(leaves_a, leaves_b, strict=True))


def _problems(make: Callable[..., Problem], axes, grid: list[dict[str, float]], n_init: int | None) -> list[Problem]:
    """Every point's problem, built before any point runs, so that a value the factory refuses is refused first.

    Also before the runs: the memory of ``n_init`` draws of each problem's init (None: starts given), a warning
    when the static structure changes with the values (every value compiles again), and a ValueError for an axis
    whose second value builds the problem of its first: a keyword that changes neither the data, the static
    structure nor the init changes nothing the sweep computes."""
    shape = tuple(len(v) for _, v in axes)
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]  # row-major: the last axis fastest
    problems: list[Problem] = []
    for i, values in enumerate(grid):
        prob = make(**values)
        if n_init is not None:
            check_memory(n_init * (theta_bytes(prob) + 16.0), f"{n_init:,} initialisations at {values}")
        for (name, vals), stride in zip(axes, strides, strict=True):
            if i == stride and _same_problem(prob, problems[0]):
                raise ValueError(
                    f"vary {name!r} changes nothing the sweep computes: {name}={vals[1]:g} builds the problem of "
                    f"{name}={vals[0]:g} (the same data, functions and init); sweep a keyword that sets the "
                    "problem's data, its structure or its init"
                )
        problems.append(prob)
    first = jax.tree_util.tree_structure(problems[0])
    if not all(_same_structure(jax.tree_util.tree_structure(p), first) for p in problems):
        warnings.warn(
            "the problem's static structure changes with the swept values (for instance a loss "
            "function defined inside the factory, or a data number stored as a static field): every "
            "value compiles again. Define the loss at module level and pass data numbers as data "
            '(docs/jobs.md, "Sweeps")',
            stacklevel=3,
        )
    if n_init is not None:
        warn_if_init_ignores_key(problems[0], "the swept problem", n_init)
    return problems


def run_sweep(
    make: Callable[..., Problem],
    axes: list[tuple[str, np.ndarray]],
    inits: Theta | int,
    *,
    dynamics: AbstractDynamics | None = None,
    labeller: AbstractLabeller | None = None,
    seed: int = 0,
    chunk: int = 16384,
    progress: bool = False,
    checkpoint=None,
) -> Sweep:
    """``popdyn.analysis.basin_sweep`` over the problems ``make(**values)`` of the parameter grid of ``axes``, every
    one built and checked before the first point runs (``_problems``): from the initialisations ``inits`` (one batch
    for every point, or a number n of draws of each point's own init with the same n keys, split from ``seed``),
    run by ``dynamics`` (gradient flow to t = 1e4 by default), named by ``labeller`` (default:
    ``popdyn.analysis.default_labeller()``). Checkpoints under ``checkpoint``: as ``basin_sweep``'s."""
    dynamics = job_dynamics() if dynamics is None else dynamics
    _, grid = _points(axes)
    n_init = _validate.int_at_least("n-init", inits, 1) if isinstance(inits, (int, np.integer)) else None
    problems = _problems(make, axes, grid, n_init)
    return basin_sweep(
        problems,
        tuple(axes),
        inits,
        dynamics,
        labeller=labeller,
        seed=seed,
        chunk_size=chunk,
        progress=progress,
        checkpoint=checkpoint,
    )


SUMMARIES = (
    ("resolved", "resolved share"),
    ("time_median", "median stopping time"),
    ("lambda_max_median", "median λ_max at the end"),
)
"""Per-point arrays of a sweep beside its fractions (those it has), with their panel titles."""


def plot_sweep(sw: Sweep, title: str, theory_line: Callable[[Figure, list], None] | None = None) -> Figure:
    """One panel per attractor (its share of resolved runs) and panels for the resolved share, the median time and
    λ_max where the sweep has them; heatmaps over two parameters, curves over one."""
    fractions = sw.fractions
    panels = [(f"fraction: {a}", fractions[a]) for a in sw.attractors]
    panels += [(name, getattr(sw, key)) for key, name in SUMMARIES if getattr(sw, key) is not None]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.6 * rows), layout="constrained")
    axs = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    (xname, xs), *rest = sw.axes
    for ax, (name, z) in zip(axs, panels, strict=False):
        if rest:
            yname, ys = rest[0]
            im = ax.pcolormesh(ys, xs, z, shading="nearest", cmap="viridis")
            fig.colorbar(im, ax=ax)
            ax.set(xlabel=yname, ylabel=xname, title=name)
        else:
            ax.plot(xs, z, "o-")
            ax.set(xlabel=xname, title=name)
        if not np.isfinite(z).any():  # say why the panel is empty instead of drawing nothing
            ax.text(0.5, 0.5, "no run resolved", transform=ax.transAxes, ha="center", va="center")
    for ax in axs[len(panels) :]:
        ax.set_axis_off()
    if theory_line is not None:
        theory_line(fig, list(axs[: len(panels)]))
    fig.suptitle(title)
    return fig


def _result(sw: Sweep, inputs: dict, title: str, extra: dict | None = None, theory_line=None, rows=None) -> Result:
    """The job's Result of a sweep: ``rows`` (default: every point's ``record()``) under "points", the grids as
    arrays, the figure and one line per point."""
    arrays = {f"fraction_{a}": v for a, v in sw.fractions.items()}
    arrays |= {key: getattr(sw, key) for key, _ in SUMMARIES if getattr(sw, key) is not None}
    arrays |= {name: vals for name, vals in sw.axes}
    rows = [p.record() for p in sw.points] if rows is None else rows
    budget = joined_budget([p.budget for p in sw.points])
    res = Result(
        inputs,
        {"points": rows, "attractors": list(sw.attractors), **(extra or {}), "budget": budget_json(budget)},
        arrays={"sweep": arrays},
        figures={"sweep": plot_sweep(sw, title, theory_line)},
    )
    res.lines.append(f"sweep  {title}: {' × '.join(f'{n} {len(v)} values' for n, v in sw.axes)}")
    for p in sw.points:
        where = ", ".join(f"{k}={v:.4g}" for k, v in p.values.items())
        if p.resolved_fraction == 0:  # shares of no run would read "nan%"
            res.lines.append(f"  {where}: no run resolved")
            continue
        shares = ", ".join(f"{a} {100 * f:5.1f}%" for a, f in p.fractions.items() if a != UNRESOLVED)
        res.lines.append(f"  {where}: {shares} of resolved ({100 * p.resolved_fraction:.0f}% resolved)")
    res.lines += budget_lines(budget)
    return res


@registered
def sweep_model(
    factory: str = DECLARED,
    param=DECLARED,
    vary=DECLARED,
    n_init: int = DECLARED,
    seed: int = DECLARED,
    method: str = DECLARED,
    t1: float = DECLARED,
    lr: float = DECLARED,
    steps: int = DECLARED,
    solver: str = DECLARED,
    rtol: float = DECLARED,
    atol: float = DECLARED,
    gtol: float | None = DECLARED,
    max_steps: int = DECLARED,
    chunk: int = DECLARED,
    progress: bool = False,
    checkpoint=None,
) -> Result:
    """``popdyn sweep module:factory --vary NAME=LO:HI:N``: ``run_sweep`` over the factory's keywords, the same
    n_init draws of init at every value, run by ``job_dynamics`` of the method and its settings."""
    axes = parse_vary(vary)
    fixed = parse_params(param)
    clash = [name for name, _ in axes if name in fixed]
    if clash:
        raise ValueError(f"param {clash[0]!r} is also swept with vary: give it once")
    dynamics = job_dynamics(
        method, t1=t1, lr=lr, steps=steps, solver=solver, rtol=rtol, atol=atol, gtol=gtol, max_steps=max_steps
    )
    sw = run_sweep(
        lambda **v: build(factory, param, **v),
        axes,
        n_init,
        dynamics=dynamics,
        labeller=load_factory(factory).labeller,
        seed=seed,
        chunk=chunk,
        progress=progress,
        checkpoint=checkpoint,
    )
    inputs = {"task": factory, "param": list(param), "vary": list(vary), "n_init": n_init, "seed": seed}
    inputs |= settings(dynamics, method)
    return _result(sw, inputs, factory)


@registered
def sweep_markov(
    p_lo: float = DECLARED,
    p_hi: float = DECLARED,
    q_lo: float = DECLARED,
    q_hi: float = DECLARED,
    points: int = DECLARED,
    grid: int = DECLARED,
    lo: float = DECLARED,
    hi: float = DECLARED,
    method: str = DECLARED,
    t1: float = DECLARED,
    lr: float = DECLARED,
    steps: int = DECLARED,
    solver: str = DECLARED,
    rtol: float = DECLARED,
    atol: float = DECLARED,
    gtol: float | None = DECLARED,
    max_steps: int = DECLARED,
    chunk: int = DECLARED,
    progress: bool = False,
    checkpoint=None,
) -> Result:
    """Basin fractions of the profiled (e, w) flow from a grid × grid slice of (w, e), over a points × points grid
    of (p, q), with the closed-form partition of docs/models/markov.md §4.4 beside each off the line p + q = 1
    (where it holds), run by ``job_dynamics`` of the method and its settings."""
    from popdyn.tasks.markov import ATTRACTORS, Canonical

    dynamics = job_dynamics(
        method, t1=t1, lr=lr, steps=steps, solver=solver, rtol=rtol, atol=atol, gtol=gtol, max_steps=max_steps
    )

    for name, v in (("p", p_lo), ("p", p_hi), ("q", q_lo), ("q", q_hi)):
        _validate.open_unit(name, v)
    _check_grid_size([_validate.int_at_least("points", points, 2)] * 2)
    axes = [
        ("p", np.linspace(*_validate.interval("p", (p_lo, p_hi)), points)),
        ("q", np.linspace(*_validate.interval("q", (q_lo, q_hi)), points)),
    ]
    inits = Grid.square("w", "e", lo, hi, _validate.int_at_least("grid", grid, 2)).points(Canonical(0.5, 0.25))
    sw = run_sweep(
        Canonical,
        axes,
        inits,
        dynamics=dynamics,
        chunk=chunk,
        progress=progress,
        checkpoint=checkpoint,
    )
    predicted: list[dict[str, float] | None] = []
    for point in sw.points:
        p, q = point.values["p"], point.values["q"]
        prob = Canonical(p, q)
        if not prob.theorem_applies():
            predicted.append(None)
            continue
        labels = np.asarray(jax.vmap(prob.predicted_basin)(inits))
        ok = labels >= 0
        predicted.append({a: float(np.mean(labels[ok] == i)) for i, a in enumerate(ATTRACTORS)})
    rows = [point.record() | {"predicted_fractions": pr} for point, pr in zip(sw.points, predicted, strict=True)]

    def line(fig, axs):
        for ax in axs:
            ax.plot([q_lo, q_hi], [1 - q_lo, 1 - q_hi], "w--", lw=1.2, label="p + q = 1")
            ax.set(xlim=(axes[1][1][0], axes[1][1][-1]), ylim=(axes[0][1][0], axes[0][1][-1]))

    inputs = {
        "task": "markov",
        "p": [p_lo, p_hi],
        "q": [q_lo, q_hi],
        "points": points,
        "grid": grid,
        "range": [lo, hi],
        **settings(dynamics, method),
    }
    return _result(sw, inputs, f"Markov (p, q), {dynamics.method}, {grid}x{grid} starts", theory_line=line, rows=rows)


def _task_call(job, numeric: dict, options: dict, point: dict, checkpoint) -> tuple[dict, dict]:
    """(The point's swept values, with integer options as ints; the basins job's keywords at that point)."""
    values = {name: numeric[name].type(v) for name, v in point.items()}
    kw = dict(options)
    for name, v in values.items():
        kw.update(numeric[name].kwargs(v))
    if job.takes_progress:
        kw["progress"] = False
    if job.takes_checkpoint:
        kw["checkpoint"] = checkpoint
    return values, kw


def _rehearse(run: Callable, kw: dict, values: dict) -> None:
    """Call the job up to its first batched computation (``popdyn._batching.rehearsal``): its options and sizes
    checked, nothing computed; a refusal names the point."""
    try:
        with rehearsal():
            run(**kw)
    except Rehearsed:
        return
    except ValueError as err:
        where = ", ".join(f"{k}={v}" if isinstance(v, int) else f"{k}={v:g}" for k, v in values.items())
        raise ValueError(f"at {where}: {err}") from None


@registered
def sweep_task(task: str, vary=DECLARED, progress: bool = False, checkpoint=None, **options) -> Result:
    """``popdyn sweep TASK --vary NAME=LO:HI:N``: the task's basins job (docs/jobs.md) at every point of a grid of one
    or two of its numeric options, its other options fixed: each attractor's share of the resolved starts, the
    resolved share and, where the job reports it, the median time. A swept number that is an array leaf of the
    problem compiles once; one that changes the problem's shapes (a size) compiles again for every value."""
    from popdyn.jobs._registry import lookup, sweepable

    job = lookup("basins", task)
    numeric = sweepable(job)
    axes = []
    for name, vals in parse_vary(vary):
        if name not in numeric:
            raise ValueError(f"vary {name!r} is not an option to sweep for {task}: one of {', '.join(numeric)}")
        if numeric[name].type is int and not np.allclose(vals, np.round(vals)):
            raise ValueError(
                f"vary {name}={list(vals)} is invalid: {name} is an integer, so LO:HI:N must give integers"
            )
        axes.append((name, np.round(vals) if numeric[name].type is int else vals))
    _, grid = _points(axes)
    run = job.function()
    calls = [_task_call(job, numeric, options, point, point_folder(checkpoint, i)) for i, point in enumerate(grid)]
    for values, kw in calls:  # every point's options and sizes are checked before the first point runs
        _rehearse(run, kw, values)
    points: list[SweepPoint] = []
    for values, kw in tqdm(calls, desc="sweep", disable=not progress):
        out = run(**kw).results
        resolved = 1.0 - out["fractions"].get(UNRESOLVED, 0.0)
        share = {
            a: (f / resolved if resolved > 0 else float("nan")) for a, f in out["fractions"].items() if a != UNRESOLVED
        }
        points.append(SweepPoint(values, share, resolved, out.get("median_time")))
    names = tuple(dict.fromkeys(a for p in points for a in p.fractions))
    sw = Sweep(axes=tuple(axes), points=tuple(points), attractors=names)
    inputs = {"task": task, "vary": list(vary), **options}
    return _result(sw, inputs, f"{task}: basins over {' × '.join(n for n, _ in axes)}")
