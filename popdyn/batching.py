"""Batches of initialisations: detecting a batch axis, and mapping a jitted function over chunks.

A batch is a parameter pytree whose every leaf has one extra leading axis compared with the
problem's ``template()``. Chunks have a fixed size (the last one is padded by repeating its first
point and trimmed afterwards) so each function compiles once per shape and memory stays bounded; each
chunk is spread over all devices, and finished chunks can be checkpointed to disk to resume a long run.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from popdyn import _validate, sharding
from popdyn.checkpoint import ChunkStore, fingerprint
from popdyn.problem import Problem, Theta, check_problem


_CHECKED: set = set()
_WARNED_FLOAT32: list = []

FLOAT32_WARNING = ("popdyn is running in float32 (jax_enable_x64 is off): exact losses, stopping rules and basin labels "
                   "are only as good as float32's 1e-7; call jax.config.update('jax_enable_x64', True) before any "
                   "JAX work (docs/problem.md, 'Precision')")


def warn_if_float32() -> None:
    """Warn once per process when JAX's default float is float32: the engine's tolerances assume float64."""
    if jnp.result_type(float) == jnp.float32 and not _WARNED_FLOAT32:
        _WARNED_FLOAT32.append(True)
        warnings.warn(FLOAT32_WARNING, stacklevel=3)


def checked(prob: Problem) -> Problem:
    """``prob`` after ``popdyn.problem.check_problem``, run once per problem structure and leaf shapes (a new data
    value needs no new check, as it compiles nothing new)."""
    key = (jax.tree_util.tree_structure(prob),
           tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in jax.tree_util.tree_leaves(prob)))
    warn_if_float32()
    if key not in _CHECKED:
        check_problem(prob)
        _CHECKED.add(key)
    return prob


def batch_size(prob: Problem, theta: Theta) -> int | None:
    """Leading batch size of ``theta`` (None when it is a single point); ValueError on shape mismatch."""
    template = checked(prob).template()
    t_leaves, t_def = jax.tree_util.tree_flatten(template)
    leaves, tdef = jax.tree_util.tree_flatten(theta)
    if tdef != t_def:
        raise ValueError(f"theta has structure {tdef}, but the problem expects {t_def}")
    sizes = set()
    for (path, leaf), t in zip(jax.tree_util.tree_flatten_with_path(theta)[0], t_leaves):
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


def as_batch(prob: Problem, theta: Theta) -> tuple[Theta, bool]:
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


def map_chunks(
    fn: Callable, theta: Theta, chunk_size: int | None, *, progress: bool = False, desc: str = "chunks",
    checkpoint: str | os.PathLike | None = None, depends_on: tuple = (),
):
    """Apply ``fn`` (a jitted function of a batch) to fixed-size chunks of ``theta``; concatenate outputs.

    Each chunk is split over all devices (``popdyn.sharding``); its size is ``chunk_size`` (all of ``theta``
    when None) rounded up to a multiple of the device count. With ``checkpoint`` (a directory), finished
    chunks are saved there and, on a later call with the same inputs, loaded instead of recomputed; the
    directory's fingerprint covers ``theta``, the chunk size and ``depends_on`` (everything else ``fn``'s
    outputs depend on: the problem, the method and its settings), see ``popdyn.checkpoint``.
    """
    n = jax.tree_util.tree_leaves(theta)[0].shape[0]
    check_chunk_size(chunk_size)
    if checkpoint is None and sharding.device_count() == 1 and (chunk_size is None or chunk_size >= n):
        return fn(theta)
    size = sharding.padded_size(n if chunk_size is None else min(chunk_size, n))
    starts = range(0, n, size)

    def chunk(start):
        idx = np.arange(start, start + size)
        idx = np.where(idx < min(start + size, n), idx, start)  # pad by repeating the first point of the chunk
        return jax.tree_util.tree_map(lambda x: x[idx], theta)

    store = None
    if checkpoint is not None:
        fp = fingerprint(theta, size, depends_on)
        store = ChunkStore(checkpoint, fp, jax.eval_shape(fn, chunk(0)),
                           {"n_points": n, "chunk_size": size, "n_chunks": len(starts)})
    outs = [store.load(i, min(size, n - start)) if store is not None and store.has(i) else None
            for i, start in enumerate(starts)]
    with tqdm(total=len(starts), initial=sum(o is not None for o in outs), desc=desc, disable=not progress,
              leave=False) as bar:
        for i, start in enumerate(starts):
            if outs[i] is not None:
                continue
            out = sharding.gather(fn(sharding.place(chunk(start))))
            outs[i] = jax.tree_util.tree_map(lambda x: x[: min(size, n - start)], out)
            if store is not None:
                store.save(i, outs[i])
            bar.update(1)
    return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.concatenate(xs)), *outs)


def scale_tree(prob: Problem, scales) -> Theta | None:
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


def apply_scales(grad: Theta, scales: Theta | None) -> Theta:
    """Multiply each gradient block by its time scale / learning-rate multiplier."""
    if scales is None:
        return grad
    return {k: g * scales[k] for k, g in grad.items()}
