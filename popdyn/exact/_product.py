"""Product distributions over finite alphabets: independent coordinates X_1..X_d (docs/exact.md).

E[f(X)] = Σ_{a ∈ [V_1]×…×[V_d]} (∏_k p_k(a_k)) f(v_1(a_1), …, v_d(a_d)), summed over all ∏_k V_k points in
fixed-size chunks; point i is the mixed-radix expansion of i, first coordinate most significant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree, Real

from popdyn.exact._tables import WeightedTable, _is_traced, check_probabilities, keep_dtype, weighted_sum

MAX_POINTS = 2**22
"""Largest ∏ V_k enumerated by default (d ≤ 22 binary coordinates)."""


def check_point_count(sizes: Sequence[int], max_points: int = MAX_POINTS) -> int:
    """∏ sizes, the number of points of a product grid, or ValueError naming d and the count when it exceeds
    ``max_points``.

    **Arguments:**

    - ``sizes``: the number of values of each of the d coordinates.
    - ``max_points``: the largest product allowed (``MAX_POINTS`` by default).
    """
    total = math.prod(sizes)
    if total > max_points:
        shown = f"{sizes[0]}^{len(sizes)}" if len(set(sizes)) == 1 else "×".join(map(str, sizes))
        raise ValueError(
            f"d={len(sizes)} coordinates are too many for exact enumeration: {shown} = {total} points exceed the "
            f"limit max_points={max_points}; raise max_points or estimate with sample()"
        )
    return total


def _is_row_list(x) -> bool:
    """A non-empty list or tuple of 1-D arrays (one per coordinate, possibly of different lengths)."""
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(np.ndim(r) == 1 for r in x)


def _rows(name: str, rows, pad) -> tuple[np.ndarray | Array, tuple[int, ...]]:
    """A (d, V) array from a 2-D array or a list of 1-D arrays of different lengths (padded with ``pad``): NumPy
    when every input is concrete, JAX when one is traced. Also the per-row sizes."""
    if _is_row_list(rows):
        traced = any(_is_traced(r) for r in rows)
        xp = jnp if traced else np
        try:
            rows = [r if _is_traced(r) else np.asarray(r) for r in rows]
        except (TypeError, ValueError):
            raise ValueError(f"{name}={rows!r} is invalid: must hold arrays of numbers") from None
        sizes = tuple(int(r.shape[0]) for r in rows)
        for k, size in enumerate(sizes):
            if size == 0:
                raise ValueError(f"{name}[{k}] is empty: each coordinate needs at least one entry")
        V, dtype = max(sizes), xp.result_type(*rows)
        return xp.stack([xp.concatenate([r.astype(dtype), xp.full(V - r.shape[0], pad, dtype)]) for r in rows]), sizes
    if not _is_traced(rows):
        try:
            rows = np.asarray(rows)
        except (TypeError, ValueError):
            raise ValueError(f"{name}={rows!r} is invalid: must be a (d, V) array or a list of 1-D arrays") from None
    if rows.ndim != 2 or rows.shape[0] == 0 or rows.shape[1] == 0:
        raise ValueError(f"{name} has shape {rows.shape}: must be (d, V) with d, V >= 1, or a list of 1-D arrays")
    return rows, (int(rows.shape[1]),) * int(rows.shape[0])


class ProductDistribution(eqx.Module):
    """Independent coordinates X_k with law ``marginals[k]`` over the values ``values[k]`` (default 0..V_k−1).

    E[f(X)] = Σ_a ∏_k p_k(a_k) f(v(a)), exact over all ∏ V_k points (docs/exact.md). ``marginals`` is a (d, V)
    array or a list of 1-D laws of different sizes (padded with probability 0); ``values`` is (d, V), (V,) shared
    by all coordinates, or a list like ``marginals`` (e.g. ``[-1, 1]`` for Rademacher-type coordinates). Concrete
    marginals are checked like probability vectors (``normalize=True`` rescales them instead)."""

    marginals: Float[Array, "d V"]
    values: Real[Array, "d V"]  # integer indices 0..V−1 by default
    sizes: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, marginals, values=None, *, normalize: bool = False):
        probs, sizes = _rows("marginals", marginals, 0.0)
        d, V = probs.shape
        if _is_traced(probs):
            probs = probs / jnp.sum(probs, axis=1, keepdims=True) if normalize else probs
        else:
            checked = [
                check_probabilities(f"marginals[{k}]", probs[k, : sizes[k]], normalize=normalize) for k in range(d)
            ]
            probs = jnp.asarray(np.stack([np.pad(c, (0, V - c.size)) for c in checked]), dtype=keep_dtype(probs))
        vals: Array | np.ndarray  # NumPy while checked, stored as JAX
        if values is None:
            vals = jnp.broadcast_to(jnp.arange(V), (d, V))
        elif not _is_row_list(values) and np.ndim(values) == 1:  # one alphabet shared by all coordinates
            vals = values if _is_traced(values) else np.asarray(values)
            if vals.shape[0] != V:
                raise ValueError(f"values has shape {vals.shape}: a shared alphabet must have V = {V} entries")
            vals = jnp.broadcast_to(jnp.asarray(vals, dtype=keep_dtype(vals)), (d, V))
        else:
            rows, vsizes = _rows("values", values, 0)
            want = sizes if _is_row_list(values) else (V,) * d
            if vsizes != want:
                raise ValueError(
                    f"values has coordinate sizes {list(vsizes)}: must match the marginals' sizes {list(want)}"
                )
            vals = jnp.asarray(rows, dtype=keep_dtype(rows))
        self.marginals = probs
        self.values = vals
        self.sizes = sizes

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return len(self.sizes)

    @property
    def size(self) -> int:
        """Number of points ∏ V_k of the support."""
        return math.prod(self.sizes)

    def _digits(self, idx: Int[Array, " B"]) -> Int[Array, "B d"]:
        strides = np.array([math.prod(self.sizes[k + 1 :]) for k in range(self.d)], dtype=np.int64)
        sizes = np.asarray(self.sizes, dtype=np.int64)
        if self.size <= np.iinfo(np.int32).max:
            strides, sizes = strides.astype(np.int32), sizes.astype(np.int32)
        return (idx[:, None] // strides[None, :]) % sizes[None, :]

    def _batch(self, idx: Int[Array, " B"]) -> tuple[Float[Array, " B"], Real[Array, "B d"]]:
        a = self._digits(idx)
        rows = jnp.arange(self.d)[None, :]
        return jnp.prod(self.marginals[rows, a], axis=1), self.values[rows, a]

    def expectation(
        self, fn: Callable[[Real[Array, " d"]], PyTree], chunk: int | None = 4096, max_points: int = MAX_POINTS
    ) -> PyTree:
        """Σ_a P(a) fn(x(a)) over all ∏ V_k points (fn gets the (d,) vector of values; scalar or pytree output),
        ``chunk`` points at a time inside one ``lax.scan``; ValueError when ∏ V_k > ``max_points``."""
        total = check_point_count(self.sizes, max_points)

        def batch(idx):
            w, x = self._batch(jnp.arange(total) if idx is None else idx)
            return w, jax.vmap(fn)(x)

        return weighted_sum(batch, total, chunk)

    def as_table(self, max_points: int = MAX_POINTS) -> WeightedTable:
        """All ∏ V_k points (rows, first coordinate most significant) with their probabilities."""
        total = check_point_count(self.sizes, max_points)
        w, x = self._batch(jnp.arange(total))
        return WeightedTable(x, w)

    def sample(self, key: Array, n: int) -> Real[Array, "n d"]:
        """``n`` i.i.d. draws (n, d) of X, for Monte-Carlo checks."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n={n!r} is out of range: must be an integer >= 1")
        keys = jax.random.split(key, self.d)
        a = jax.vmap(lambda k, p: jax.random.categorical(k, jnp.log(p), shape=(int(n),)))(keys, self.marginals)
        return self.values[jnp.arange(self.d)[:, None], a].T
