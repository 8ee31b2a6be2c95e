"""Runs over a stack of problems (docs/dynamics.md, "Several problems at once"): problems that differ only in the
values of their array leaves (the points of a phase diagram) are stacked leaf by leaf, and one compiled program per
chunk runs every start on every problem, vmapped over the stack.

A dynamics whose compiled chunk function takes its problem inside a "pieces" module (a field ``prob``) says so with
``chunk_program`` (a ``ChunkProgram``), and ``run_stack`` runs a stack through ``stacked_call``: the chunk's starts
carry the problems on their second axis, (points, P, …), and so do its outputs, so chunking, sharding and
checkpoints along the first axis work unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.tree_util import PyTreeDef
from jaxtyping import PyTree
from tqdm.auto import tqdm

from popdyn._batching import check_chunk_size, map_chunks
from popdyn.dynamics._base import AbstractDynamics, Steady
from popdyn.dynamics._trajectory import Trajectory, finish
from popdyn.problem import Problem, ThetaLike


class ChunkProgram(NamedTuple):
    """What a dynamics compiles for a chunk of starts of one problem (``AbstractDynamics.chunk_program``).

    **Arguments:**

    - ``pieces``: an equinox module holding the problem as its field ``prob`` (and the run's other settings).
    - ``fn``: the compiled chunk function, ``fn(pieces, *inputs, *rest)`` → the outputs ``finish`` packages.
    - ``rest``: ``fn``'s arguments after the per-point inputs, the same for every chunk.
    - ``inputs``: the per-point inputs (starts first), each with a leading points axis.
    - ``rule``: the run's stopping rule, which ``finish`` classifies end points with.
    - ``desc``: the progress bar's label.
    """

    pieces: eqx.Module
    fn: Callable
    rest: tuple
    inputs: tuple
    rule: Steady
    desc: str


def rows(chunk_size: int | None, count: int) -> int | None:
    """Starts per chunk of a stack of ``count`` problems: ``chunk_size`` runs in all (at least one start), so a
    chunk's work and memory do not grow with the stack; None (one chunk) stays None."""
    return None if chunk_size is None else max(1, chunk_size // count)


def same_structure(problems: Sequence[Problem]) -> bool:
    """Whether the problems share one static structure (functions, static fields, leaf shapes and dtypes): then they
    stack (``stack``) and one compiled program serves them all."""
    if not problems:
        return False
    first: PyTreeDef = jax.tree_util.tree_structure(problems[0])
    shapes = [(jnp.shape(x), jnp.result_type(x)) for x in jax.tree_util.tree_leaves(problems[0])]
    for prob in problems[1:]:
        try:
            if jax.tree_util.tree_structure(prob) != first:
                return False
        except (TypeError, ValueError):  # a static field holding an array: == has no single truth value
            return False
        if [(jnp.shape(x), jnp.result_type(x)) for x in jax.tree_util.tree_leaves(prob)] != shapes:
            return False
    return True


def stack(trees: Sequence[PyTree]) -> PyTree:
    """Pytrees of one structure stacked leaf by leaf on a new leading axis."""
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack([jnp.asarray(x) for x in leaves]), *trees)


def stack_points(batches: Sequence[PyTree]) -> PyTree:
    """Batches of starts (one per problem, each with a leading points axis) as one batch of shape (points, P, …)."""
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack([jnp.asarray(x) for x in leaves], axis=1), *batches)


@eqx.filter_jit
def stacked_call(fn: Callable, pieces: eqx.Module, inputs: tuple, *rest) -> PyTree:
    """``fn(pieces, *inputs, *rest)`` for every problem of a stack: ``pieces.prob`` holds the stacked problem (its
    array leaves with a leading axis P), each of ``inputs`` the chunk's per-point inputs with the problems on axis 1,
    (points, P, …); returns ``fn``'s outputs with the same axes, (points, P, …).

    **Arguments:**

    - ``fn``: a dynamics' compiled chunk function of (pieces, per-point inputs…, other arguments…).
    - ``pieces``: its pieces, with the stacked problem as ``prob``.
    - ``inputs``: the per-point inputs (starts, and for GD their rates and keys), problems on axis 1.
    - ``rest``: ``fn``'s remaining arguments, the same for every problem.
    """

    def one(prob: Problem, part: tuple) -> PyTree:
        return fn(eqx.tree_at(lambda p: p.prob, pieces, prob), *part, *rest)

    out = eqx.filter_vmap(one, in_axes=(eqx.if_array(0), eqx.if_array(1)))(pieces.prob, inputs)  # type: ignore[attr-defined]
    return jax.tree_util.tree_map(lambda x: jnp.moveaxis(x, 0, 1), out)


def finish_each(problems: Sequence[Problem], out: PyTree, dynamics: AbstractDynamics, rule: Steady) -> list[Trajectory]:
    """The Trajectory of each problem from the stacked outputs ``out``, (points, P, …): ``finish`` on its slice, with
    the run's ``dynamics`` and stopping ``rule``."""
    return [
        finish(prob, jax.tree_util.tree_map(lambda x, i=i: x[:, i], out), True, dynamics, rule)
        for i, prob in enumerate(problems)
    ]


def point_folder(checkpoint: str | os.PathLike | None, i: int) -> str | None:
    """The checkpoint folder of problem (parameter point) ``i`` under ``checkpoint`` (None: no checkpoint)."""
    return None if checkpoint is None else os.fspath(Path(checkpoint) / f"point-{i:05d}")


def run_each(
    dynamics: AbstractDynamics,
    problems: Sequence[Problem],
    theta0s: Sequence[ThetaLike],
    *,
    chunk_size: int | None,
    progress: bool,
    checkpoint: str | os.PathLike | None,
) -> list[Trajectory]:
    """``dynamics.run`` on each problem from its starts, one after another (a progress bar over the problems;
    checkpoints in ``point_folder(checkpoint, i)``); every problem after the first reuses the programs compiled for
    it where their structure is shared."""
    pairs = list(zip(problems, theta0s, strict=True))
    return [
        dynamics.run(prob, theta, chunk_size=chunk_size, checkpoint=point_folder(checkpoint, i))
        for i, (prob, theta) in enumerate(tqdm(pairs, desc=dynamics.method, disable=not progress))
    ]


def run_stack(
    dynamics: AbstractDynamics,
    problems: Sequence[Problem],
    theta0s: Sequence[ThetaLike],
    *,
    chunk_size: int | None,
    progress: bool,
    checkpoint: str | os.PathLike | None,
) -> list[Trajectory]:
    """``AbstractDynamics.run_stack``: stacked where the problems share one static structure and the dynamics has a
    ``chunk_program``, every start of every problem in one program per chunk of ``chunk_size`` runs
    (``chunk_size // P`` starts of each problem, ``rows``); else ``run_each``."""
    if len(problems) != len(theta0s):
        raise ValueError(f"theta0s has {len(theta0s)} batches: must have one per problem ({len(problems)})")
    check_chunk_size(chunk_size)
    if same_structure(problems):
        size = rows(chunk_size, len(problems))
        programs = [dynamics.chunk_program(p, t, size) for p, t in zip(problems, theta0s, strict=True)]
        first = programs[0]
        if first is not None:
            pieces = eqx.tree_at(lambda p: p.prob, first.pieces, stack(problems))
            per_point = [p.inputs for p in programs if p is not None]  # all of them: one class makes every program
            inputs = tuple(stack_points(parts) for parts in zip(*per_point, strict=True))
            run = lambda b: stacked_call(first.fn, pieces, b, *first.rest)  # noqa: E731
            out = map_chunks(run, inputs, size, progress=progress, desc=first.desc, checkpoint=checkpoint)
            return finish_each(problems, out, dynamics, first.rule)
    return run_each(dynamics, problems, theta0s, chunk_size=chunk_size, progress=progress, checkpoint=checkpoint)
