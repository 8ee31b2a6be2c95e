"""Helpers shared by the parts of the decision-list benchmark: AOT compilation with XLA's own estimate of the
temporaries, warm timing, formats, the random point θ and path B as a function of the problem's arrays."""

from __future__ import annotations

import os
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from benchmarks._common import aot
from benchmarks._common import fmt_ratio as _fmt_ratio
from popdyn.tasks.decision_list import DecisionList

M_LISTS = 3  # longest list in part 1
MEMORY_FRACTION = 0.8  # run an XLA program only if its temporaries fit in this fraction of the available memory


def aot_memory(fn, *args):
    """(compiled fn, seconds spent tracing + lowering + compiling, XLA temporaries in bytes or None)."""
    compiled, secs = aot(fn, *args)
    try:
        temp = int(compiled.memory_analysis().temp_size_in_bytes)
    except Exception:  # memory analysis is backend-dependent; absent means "unknown"
        temp = None
    return compiled, secs, temp


def call_times(fn, *args, repeats: int, budget: float = 30.0, min_total: float = 1.0, max_calls: int = 2000):
    """(first call's seconds, warm seconds array, last output): the first call, then warm calls (each blocked until
    ready): at least ``repeats`` of them — and more, up to ``max_calls``, until they add up to ``min_total`` seconds,
    so that sub-millisecond timings on a loaded machine rest on many samples — but stopping before the total
    would pass ``budget`` seconds (always at least one)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    warm = []
    while not warm or (
        (len(warm) < repeats or sum(warm) < min_total) and len(warm) < max_calls and sum(warm) + warm[-1] <= budget
    ):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        warm.append(time.perf_counter() - t0)
    return first, np.asarray(warm), out


def fmt_ratio(r: float) -> str:
    """markov_full_mc's ratio format, in scientific notation below 1e-3 (where it would print 0.000×)."""
    return f"{r:.1e}×" if 0 < r < 1e-3 else _fmt_ratio(r)


def available_memory() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def fmt_gb(b: int | None) -> str:
    return "?" if b is None else f"{b / 1e9:.2f} GB"


def flat(tree) -> np.ndarray:
    return np.asarray(ravel_pytree(tree)[0])


def random_theta(L: int, seed: int) -> dict:
    """θ = (W, V) with i.i.d. N(0, 1) entries."""
    kw, kv = jax.random.split(jax.random.PRNGKey(seed))
    return {"W": jax.random.normal(kw, (L, L)), "V": jax.random.normal(kv, (L, L))}


def path_b_fn(prob: DecisionList, kind: str = "value_and_grad"):
    """(fn(arrays, θ), arrays): path B as a function of the problem's arrays, for AOT compilation."""
    arrs, static = eqx.partition(prob, eqx.is_array)

    def loss(a, theta):
        return eqx.combine(a, static).loss(theta)

    if kind == "loss":
        return loss, arrs
    if kind == "value_and_grad":
        return jax.value_and_grad(loss, argnums=1), arrs

    def chunked(a, theta):  # the same Σ over chunks, with the gradient taken inside the scan, chunk by chunk
        p = eqx.combine(a, static)
        T = p.table

        def body(acc, xs):
            sub = eqx.tree_at(
                lambda q: (q.table.tokens, q.table.logc, q.table.prob, q.table.valid), p, tuple(x[None] for x in xs)
            )
            v, g = jax.value_and_grad(sub.loss)(theta)
            return jax.tree_util.tree_map(jnp.add, acc, (v, g)), None

        zero = (jnp.zeros(()), jax.tree_util.tree_map(jnp.zeros_like, theta))
        return jax.lax.scan(body, zero, (T.tokens, T.logc, T.prob, T.valid))[0]

    return chunked, arrs
