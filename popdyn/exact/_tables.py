"""Exact expectations over an enumerated finite input set with probabilities (docs/exact.md).

E[f(X)] = Σ_i w_i f(x_i), exact when X takes the values x_1..x_n with probabilities w_1..w_n. The points and
the weights are array leaves of the table, so a new table of the same shapes reuses a compiled loss, and
``jax.grad`` / ``jax.vmap`` see through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeGuard

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PyTree

SUM_TOL = 1e-12
"""Allowed |Σ w − 1| for float64 weights (lower-precision weights get n·eps of their dtype)."""


def _is_traced(x) -> TypeGuard[jax.core.Tracer]:
    return isinstance(x, jax.core.Tracer)


def keep_dtype(x):
    """The floating dtype of ``x`` to store it in, or None (the default float) for float64 and non-float input,
    so float64 NumPy input neither warns nor fails when x64 is off."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or not np.issubdtype(np.dtype(dtype), np.floating) or np.dtype(dtype) == np.float64:
        return None
    return dtype


def _sum_tolerance(dtype, n: int) -> float:
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating) or np.finfo(dtype).eps <= np.finfo(np.float64).eps:
        return SUM_TOL
    return max(SUM_TOL, n * float(np.finfo(dtype).eps))


def check_probabilities(name: str, w, *, normalize: bool = False) -> np.ndarray:
    """A concrete 1-D probability vector as float64 NumPy: finite, in [0, 1], summing to 1 (ValueError naming
    ``name`` otherwise); with ``normalize`` any finite non-negative vector with a positive sum is rescaled."""
    dtype = getattr(w, "dtype", np.float64)
    try:
        arr = np.asarray(w, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={w!r} is invalid: must be a 1-D array of probabilities") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} has shape {arr.shape}: must be a 1-D array with at least one entry")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(
            f"{name} has a non-finite entry {arr[bad[0]]} at index {bad[0]}: probabilities must be "
            "finite numbers in [0, 1]"
        )
    bad = np.flatnonzero(arr < 0)
    if bad.size:
        raise ValueError(
            f"{name} has a negative entry {arr[bad[0]]} at index {bad[0]}: probabilities must lie in [0, 1]"
        )
    total = float(arr.sum())
    if normalize:
        if total <= 0:
            raise ValueError(f"{name} sums to {total}: normalize=True needs a positive sum")
        return arr / total
    bad = np.flatnonzero(arr > 1)
    if bad.size:
        raise ValueError(f"{name} has an entry {arr[bad[0]]} > 1 at index {bad[0]}: probabilities must lie in [0, 1]")
    tol = _sum_tolerance(dtype, arr.size)
    if abs(total - 1.0) > tol:
        raise ValueError(
            f"{name} sums to {total!r}: probabilities must sum to 1 (within {tol:.3g}); pass normalize=True to rescale"
        )
    return arr


def weighted_sum(
    batch: Callable[[Int[Array, " c"] | None], tuple[Float[Array, " c"], PyTree]],
    total: int,
    chunk: int | None = None,
) -> PyTree:
    """Σ_i w_i v_i over i < ``total``, where ``batch(idx)`` returns the weights and the values (a pytree with
    leading axis len(idx)) of the indices ``idx`` (``idx=None``: all of them, in order). With ``chunk`` the
    indices are taken ``chunk`` at a time inside one ``lax.scan`` (the last chunk padded with index 0 at weight 0),
    so memory stays bounded."""
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1):
        raise ValueError(f"chunk={chunk!r} is out of range: must be None or an integer >= 1")

    def contract(w, vals):
        return jax.tree.map(lambda v: jnp.tensordot(w, v, axes=1), vals)

    if chunk is None or chunk >= total:
        return contract(*batch(None))
    chunk = int(chunk)
    n_chunks = -(-total // chunk)

    def part(c):
        idx = c * chunk + jnp.arange(chunk)
        valid = idx < total
        w, vals = batch(jnp.where(valid, idx, 0))
        return contract(jnp.where(valid, w, jnp.zeros_like(w)), vals)

    zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(part, jnp.zeros((), int)))

    def body(acc, c):
        return jax.tree.map(jnp.add, acc, part(c)), None

    acc, _ = jax.lax.scan(body, zero, jnp.arange(n_chunks))
    return acc


class WeightedTable(eqx.Module):
    """A finite input set with probabilities: ``points`` (n, ...) (or a pytree of arrays with leading axis n) and
    ``weights`` (n,). E[f(X)] = Σ_i w_i f(x_i), exact for a finite support (docs/exact.md).

    Both are array leaves (only their shapes are static): another table of the same shapes runs through the same
    compiled function, and a stack of tables can be ``jax.vmap``-ed over. Concrete weights are checked to be a
    probability vector (finite, in [0, 1], Σ w = 1 within 1e-12 for float64); ``normalize=True`` rescales
    non-negative weights instead. Weights traced inside a transformation are not value-checked."""

    points: PyTree
    weights: Float[Array, " n"]

    def __init__(self, points: PyTree, weights: Float[ArrayLike, " n"] | Sequence[float], *, normalize: bool = False):
        leaves = jax.tree.leaves(points)
        if not leaves:
            raise ValueError("points is empty: must be an array (n, ...) or a pytree of such arrays")
        points = jax.tree.map(jnp.asarray, points)
        leaves = jax.tree.leaves(points)
        if _is_traced(weights):
            weights = jnp.asarray(weights)
            if weights.ndim != 1 or weights.shape[0] == 0:
                raise ValueError(f"weights has shape {weights.shape}: must be a 1-D array with at least one entry")
            if normalize:
                weights = weights / jnp.sum(weights)
        else:
            w = check_probabilities("weights", weights, normalize=normalize)
            weights = jnp.asarray(w, dtype=keep_dtype(weights))
        n = weights.shape[0]
        for leaf in leaves:
            if leaf.ndim == 0 or leaf.shape[0] != n:
                raise ValueError(
                    f"points has a leaf of shape {leaf.shape}: every leaf must have leading axis "
                    f"n = {n}, the length of weights"
                )
        self.points = points
        self.weights = weights

    @property
    def n(self) -> int:
        """Number of points."""
        return self.weights.shape[0]

    @classmethod
    def uniform(cls, points: PyTree) -> WeightedTable:
        """Each of the n points with probability 1/n."""
        leaves = jax.tree.leaves(points)
        if not leaves or np.ndim(leaves[0]) == 0:
            raise ValueError("points is empty or scalar: must be an array (n, ...) or a pytree of such arrays")
        n = np.shape(leaves[0])[0]
        if n == 0:
            raise ValueError("points has n = 0 rows: needs at least one point")
        return cls(points, np.full(n, 1.0 / n))

    @classmethod
    def from_counts(cls, points: PyTree, counts: Int[ArrayLike, " n"] | Sequence[int]) -> WeightedTable:
        """Point i with probability counts[i] / Σ counts (counts: non-negative integers, not all zero)."""
        try:
            c = np.asarray(counts, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"counts={counts!r} is invalid: must be a 1-D array of non-negative integers") from None
        if c.ndim != 1 or c.size == 0:
            raise ValueError(f"counts has shape {c.shape}: must be a 1-D array with at least one entry")
        bad = np.flatnonzero(~np.isfinite(c) | (c < 0) | (c != np.round(c)))
        if bad.size:
            raise ValueError(f"counts has an entry {c[bad[0]]} at index {bad[0]}: counts must be non-negative integers")
        if c.sum() == 0:
            raise ValueError("counts are all zero: at least one count must be positive")
        return cls(points, c / c.sum())

    def expectation(self, fn: Callable[[PyTree], PyTree], chunk: int | None = None) -> PyTree:
        """Σ_i w_i fn(x_i) (fn returns a scalar or a pytree of arrays; the result has its structure). With
        ``chunk`` the points are evaluated ``chunk`` at a time inside a ``lax.scan`` (bounded memory)."""

        def batch(idx):
            if idx is None:
                return self.weights, jax.vmap(fn)(self.points)
            return self.weights[idx], jax.vmap(fn)(jax.tree.map(lambda a: a[idx], self.points))

        return weighted_sum(batch, self.n, chunk)
