"""Batches of initialisations: detecting a batch axis, and mapping a jitted function over chunks.

A batch is a parameter pytree whose every leaf has one extra leading axis compared with the
problem's ``template()``. Chunks have a fixed size (the last one is padded by repeating its first
point and trimmed afterwards) so each function compiles once per shape and memory stays bounded; each
chunk is spread over the process's devices, several processes take turns at the chunks (docs/distributed.md),
and finished chunks can be checkpointed to disk to resume a long run.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import warnings
from collections.abc import Callable, Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import PyTreeDef
from jaxtyping import Array, PyTree, Shaped
from tqdm.auto import tqdm

from popdyn import _identity as identity
from popdyn import _sharding as sharding
from popdyn import _validate, distributed
from popdyn._checkpoint import ChunkStore
from popdyn.problem import Problem, Theta, ThetaLike, check_problem

_CHECKED: set = set()
_WARNED_FLOAT32: list = []

FLOAT32_WARNING = (
    "popdyn is running in float32 (jax_enable_x64 is off): exact losses, stopping rules and basin labels "
    "are only as good as float32's 1e-7; call jax.config.update('jax_enable_x64', True) before any "
    "JAX work (docs/problem.md, 'Precision')"
)


def warn_if_float32() -> None:
    """Warn once per process when JAX's default float is float32: the engine's tolerances assume float64."""
    if jnp.result_type(float) == jnp.float32 and not _WARNED_FLOAT32:
        _WARNED_FLOAT32.append(True)
        warnings.warn(FLOAT32_WARNING, stacklevel=3)


def checked(prob: Problem) -> Problem:
    """``prob`` after ``popdyn.problem.check_problem``, run once per problem structure and leaf shapes (a new data
    value needs no new check, as it compiles nothing new)."""
    key = (
        jax.tree_util.tree_structure(prob),
        tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in jax.tree_util.tree_leaves(prob)),
    )
    warn_if_float32()
    if key not in _CHECKED:
        check_problem(prob)
        _CHECKED.add(key)
    return prob


def batch_size(prob: Problem, theta: ThetaLike) -> int | None:
    """Leading batch size of ``theta`` (None when it is a single point); ValueError on shape mismatch."""
    template = checked(prob).template()
    t_def: PyTreeDef  # annotated: jaxlib ships no stubs, so the inferred treedef type has no attributes for mypy
    tdef: PyTreeDef
    t_leaves, t_def = jax.tree_util.tree_flatten(template)
    leaves, tdef = jax.tree_util.tree_flatten(theta)
    if tdef != t_def:
        raise ValueError(f"theta has structure {tdef}, but the problem expects {t_def}")
    sizes: set[int | None] = set()
    for (path, leaf), t in zip(jax.tree_util.tree_flatten_with_path(theta)[0], t_leaves, strict=False):
        shape = np.shape(leaf)
        name = jax.tree_util.keystr(path)
        if shape == t.shape:
            sizes.add(None)
        elif len(shape) == len(t.shape) + 1 and shape[1:] == t.shape:
            sizes.add(shape[0])
        else:
            raise ValueError(f"theta{name} has shape {shape}: expected {t.shape} or (batch, *{t.shape})")
    if len(sizes) != 1:
        raise ValueError(f"theta leaves disagree on the batch axis: sizes {sorted(sizes, key=str)}")
    return sizes.pop()


def as_batch(prob: Problem, theta: ThetaLike) -> tuple[Theta, bool]:
    """(theta with a leading batch axis, whether the input already had one), in the default float dtype."""
    n = batch_size(prob, theta)
    theta = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype=jnp.result_type(float)), theta)
    if n is None:
        return jax.tree_util.tree_map(lambda x: x[None], theta), False
    return theta, True


def unbatch(tree, batched: bool):
    """Drop the leading batch axis again when the caller passed a single point."""
    return tree if batched else jax.tree_util.tree_map(lambda x: x[0], tree)


def check_chunk_size(chunk_size: int | None) -> None:
    """``chunk_size`` is None (one chunk) or an integer >= 1; checked by every batched entry point before any work."""
    if chunk_size is not None:
        _validate.int_at_least("chunk_size", chunk_size, 1)


LARGE = 1 << 16
"""Batches above this many points get their output memory estimated (one trace of ``fn``) before they run."""

MEMORY_SHARE = 0.8
"""A run whose arrays would need more than this share of the machine's memory is refused before it starts."""


def check_memory(nbytes: float, what: str) -> None:
    """ValueError when ``nbytes`` exceed MEMORY_SHARE of physical memory (``POPDYN_MEMORY_CHECK=off`` goes ahead
    anyway; docs/jobs.md, "Checks before computing"): a clear refusal instead of an allocation failure or an
    XLA abort after minutes of work."""
    if os.environ.get("POPDYN_MEMORY_CHECK", "").lower() == "off":
        return
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no estimate to compare with
        return
    if nbytes > MEMORY_SHARE * total:
        raise ValueError(
            f"{what} needs about {nbytes / 1e9:,.1f} GB of memory, more than {MEMORY_SHARE:.0%} of this "
            f"machine's {total / 1e9:.1f} GB: use smaller sizes, fewer initialisations or fewer records, or set "
            "POPDYN_MEMORY_CHECK=off to go ahead anyway"
        )


def _nbytes(tree) -> float:
    return float(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(tree)))


_REHEARSING = contextvars.ContextVar("popdyn_rehearsing", default=False)


class Rehearsed(Exception):
    """Raised by ``map_chunks`` inside ``rehearsal()``: everything before the first chunk was checked."""


@contextlib.contextmanager
def rehearsal() -> Iterator[None]:
    """Run code up to its first batched computation: ``map_chunks`` checks its sizes (``check_memory``) and then
    raises ``Rehearsed`` instead of tracing or computing anything, and writes no checkpoint. A job called inside
    ``rehearsal()`` thus validates its arguments and builds its problem, and stops. Used by sweeps to check every
    point's options and sizes before the first point runs."""
    token = _REHEARSING.set(True)
    try:
        yield
    finally:
        _REHEARSING.reset(token)


def map_chunks(
    fn: Callable,
    theta: PyTree[Shaped[Array, "n ..."]],
    chunk_size: int | None,
    *,
    progress: bool = False,
    desc: str = "chunks",
    checkpoint: str | os.PathLike | None = None,
):
    """Apply ``fn`` (a jitted function of a batch) to fixed-size chunks of ``theta``; concatenate outputs.

    Each chunk is split over the process's devices (``popdyn._sharding``); its size is ``chunk_size`` (all of
    ``theta`` when None) rounded up to a multiple of the device count. With ``checkpoint`` (a directory), finished
    chunks are saved there and, on a later call of the same run, loaded instead of recomputed. "The same run" is
    the run's identity (``popdyn._identity.run``): the program ``fn`` traces to on a chunk, constants and data
    values included, ``theta``, the chunk size and the versions; it binds the checkpoint's chunks
    (``popdyn._checkpoint``) and is recorded for the command's ``summary.json``. With several processes
    (``popdyn.distributed``), every process compares its identity with the others' before any work (ValueError on
    every process when they differ), whole chunks are dealt out to the processes and every process returns every
    output, bit for bit those of one process; process 0 alone writes the checkpoint (docs/distributed.md). Inside
    ``rehearsal()`` it stops (``Rehearsed``) once the sizes are checked.
    """
    n = jax.tree_util.tree_leaves(theta)[0].shape[0]
    check_chunk_size(chunk_size)
    several = jax.process_count() > 1
    size = sharding.padded_size(n if chunk_size is None else min(chunk_size, n))
    rows = [min(size, n - start) for start in range(0, n, size)]
    if n > LARGE:  # outputs of all chunks, held as chunks and once concatenated
        per_point = _nbytes(jax.eval_shape(fn, jax.tree_util.tree_map(lambda x: x[:size], theta))) / size
        check_memory(2 * per_point * n, f"a batch of {n:,} initialisations")
    if _REHEARSING.get():
        raise Rehearsed
    if checkpoint is None and not several and sharding.device_count() == 1 and (chunk_size is None or chunk_size >= n):
        identity.run(fn, theta, theta, n)  # traced once: the call below reuses the trace
        return fn(theta)

    def chunk(i):
        start = i * size
        idx = np.arange(start, start + size)
        idx = np.where(idx < start + rows[i], idx, start)  # pad by repeating the first point of the chunk
        return jax.tree_util.tree_map(lambda x: x[idx], theta)

    def run(i):
        """Chunk ``i``'s outputs as NumPy arrays, padding included."""
        return sharding.gather(fn(sharding.place(chunk(i))))

    run_id = identity.run(fn, chunk(0), theta, size)
    expected = jax.eval_shape(fn, chunk(0)) if checkpoint is not None or several else None
    info = {"n_points": n, "chunk_size": size, "n_chunks": len(rows)}
    open_store = None if checkpoint is None else (lambda: ChunkStore(checkpoint, run_id, expected, info))

    if several:
        store, outs = _resume_everywhere(rows, expected, open_store, run_id)
    else:
        store = None if open_store is None else open_store()
        outs = [store.load(i, r) if store is not None and store.has(i) else None for i, r in enumerate(rows)]
    # the chunks still to compute go out in turns of one per process: todo[k] to process k mod count
    me, count = jax.process_index(), jax.process_count()
    todo = [i for i, out in enumerate(outs) if out is None]
    idle = None if expected is None else jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), expected)
    with tqdm(
        total=len(rows), initial=len(rows) - len(todo), desc=desc, disable=not progress or me > 0, leave=False
    ) as bar:
        for first in range(0, len(todo), count):
            turn = todo[first : first + count]
            every = sharding.from_every_process(run(turn[me]) if me < len(turn) else idle)
            for p, i in enumerate(turn):
                outs[i] = jax.tree_util.tree_map(lambda x, p=p, i=i: x[p, : rows[i]], every)
                if store is not None:
                    store.save(i, outs[i])
                bar.update(1)
    return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.concatenate(xs)), *outs)


def _resume_everywhere(rows: list[int], expected, open_store: Callable | None, run_id: str) -> tuple:
    """(The checkpoint store on process 0, None elsewhere; per chunk its outputs held by the checkpoint, else None,
    the same on every process) in a multi-process run (docs/distributed.md).

    First, before any work, every process sends its run identity ``run_id`` (``popdyn._identity.run``: program,
    data, initialisations, chunk size, versions) in a message of the same size whatever the inputs: if they differ
    (another problem option, grid or version on some process), every process raises ValueError. Process 0 alone
    opens the checkpoint (``open_store``), loads the chunks it holds and sends them to all, so the other processes
    need not see its files; if process 0 cannot use the checkpoint, every process raises ValueError.
    """
    store, held, refused = None, {}, None
    if open_store is not None and distributed.is_writer():
        try:
            store = open_store()
            held = {i: store.load(i, r) for i, r in enumerate(rows) if store.has(i)}
        except (OSError, ValueError) as err:  # raised below, once every process knows to stop
            refused = err
    every = sharding.from_every_process(
        {"run": np.frombuffer(bytes.fromhex(run_id), np.uint8), "refused": np.array([refused is not None])}
    )
    if not (every["run"] == every["run"][0]).all():
        raise ValueError(
            "the processes were given different runs (problem, options, initialisations, chunk sizes or package "
            "versions differ): every process must run the same command on the same inputs (docs/distributed.md)"
        )
    if refused is not None:
        raise refused
    if every["refused"].any():
        raise ValueError(
            "process 0 could not use the checkpoint directory; its error message says why (docs/distributed.md)"
        )
    mask = np.zeros(len(rows), bool)
    mask[list(held)] = True
    every = sharding.from_every_process({"held": mask})  # equal sizes everywhere: the runs agree
    outs: list = [None] * len(rows)
    ids = np.flatnonzero(every["held"][0]).tolist()
    if ids:  # copied from process 0, never recomputed

        def stand_in(r: int):
            return jax.tree_util.tree_map(lambda s: np.zeros((r, *s.shape[1:]), s.dtype), expected)

        sent = sharding.from_every_process([held[i] if i in held else stand_in(rows[i]) for i in ids])
        for i, tree in zip(ids, sent, strict=False):
            outs[i] = jax.tree_util.tree_map(lambda x: x[0], tree)
    return store, outs


def scale_tree(prob: Problem, scales) -> dict[str, float] | None:
    """Per-block multipliers as a full pytree: ``scales`` maps top-level keys of θ to positive floats
    (missing keys → 1). None stays None."""
    if scales is None:
        return None
    template = prob.template()
    if not isinstance(template, dict) or not isinstance(scales, dict):
        raise ValueError("time_scales must be a dict mapping parameter names to positive numbers")
    unknown = set(scales) - set(template)
    if unknown:
        raise ValueError(f"time_scales has unknown parameter(s) {sorted(unknown)}: allowed {sorted(template)}")
    for k, v in scales.items():
        if not (isinstance(v, (int, float)) and v > 0 and np.isfinite(v)):
            raise ValueError(f"time_scales[{k!r}]={v!r} is out of range: must be a finite number > 0")
    return {k: float(scales.get(k, 1.0)) for k in template}


def apply_scales(grad: Theta, scales: Mapping[str, float] | None) -> Theta:
    """u_b ↦ τ_b u_b for each named top-level block b of a dict θ (a block may be a subtree); blocks not named, and
    every block when ``scales`` is None, pass unchanged. The flow's time scales, GD's learning-rate multipliers and
    the ``block_rates`` link of a descent step are this one map.

    **Arguments:** ``grad`` a dict θ-shaped tree; ``scales`` {block: τ_b}, or None."""
    if scales is None:
        return grad
    return {k: jax.tree_util.tree_map(_times(scales[k]), g) if k in scales else g for k, g in grad.items()}


def _times(value: float) -> Callable[[Array], Array]:
    return lambda x: x * value
