"""Minibatches of an exact measure of examples (docs/sgd.md, "Minibatches: with and without replacement").

A minibatch of B examples is drawn from a ``Measure`` (``popdyn.problem.Measure``: a ``WeightedTable`` or a
``ProductDistribution``) in one of two ways: B i.i.d. draws by the weights w_i (with replacement; for a finite or
quadrature measure this is also what online sampling from the data distribution is), or a uniformly random B-subset
of a finite population of n equally weighted examples (without replacement). ``check_minibatch`` validates the
request against the measure; a ``Sampler`` makes the draws under ``jit``, one minibatch per key.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from popdyn import _validate
from popdyn.exact._product import ProductDistribution
from popdyn.exact._tables import WeightedTable

EQUAL_WEIGHTS_RTOL = 1e-12
"""Sampling without replacement needs every weight within this relative distance of 1/n."""


def support(measure: WeightedTable | ProductDistribution) -> tuple[int, float]:
    """(n, max_i |n w_i − 1|): the number of examples and how far their weights are from equal.

    **Arguments:**

    - ``measure``: a ``WeightedTable`` or a ``ProductDistribution``.
    """
    if isinstance(measure, WeightedTable):
        n = measure.n
        return n, float(np.max(np.abs(np.asarray(measure.weights, np.float64) * n - 1.0)))
    marginals = np.asarray(measure.marginals, np.float64)  # equal weights iff every coordinate is uniform
    spread = max(float(np.max(np.abs(marginals[k, :s] * s - 1.0))) for k, s in enumerate(measure.sizes))
    return measure.size, spread


def check_minibatch(batch: int | None, replace: bool | None, measure: WeightedTable | ProductDistribution) -> int:
    """n, the number of examples of ``measure``, after checking a minibatch of ``batch`` examples drawn from it:
    ValueError naming a bad ``batch`` (an integer ≥ 1, ≤ n without replacement) or ``replace`` (True, False or
    None), or unequal weights without replacement.

    **Arguments:**

    - ``batch``: B, or None (no minibatch: one example).
    - ``replace``: True (i.i.d. draws), False (a B-subset of n equally weighted examples) or None (online draws
      from the measure, as True).
    - ``measure``: the examples.
    """
    if not (replace is None or isinstance(replace, (bool, np.bool_))):
        raise ValueError(
            f"replace={replace!r} is invalid: must be True (i.i.d. draws, with replacement), False (without "
            "replacement from n equally weighted examples) or None (online draws from the measure, as True)"
        )
    n, spread = support(measure)
    if batch is None:
        return n
    batch = _validate.int_at_least("batch", batch, 1)
    if replace is not None and not replace:
        if batch > n:
            raise ValueError(
                f"batch={batch} is out of range: without replacement it must be an integer in [1, {n}] "
                f"(n = {n} examples)"
            )
        if spread > EQUAL_WEIGHTS_RTOL:
            raise ValueError(
                f"replace=False needs n = {n} equally weighted examples, but the weights differ from 1/n by up to "
                f"{spread:.3g} relative: a weighted measure is sampled with replacement (replace=True), or give "
                "equal weights (WeightedTable.uniform)"
            )
    return n


class Sampler(eqx.Module):
    """Draws minibatches of ``batch`` examples from a measure under ``jit``: ``sampler(key)`` is a pytree of B
    examples, each leaf with a leading axis B (a ``ProductDistribution``'s examples are its (d,) value vectors).

    With replacement, a table is sampled by inverting its cumulative weights (computed once; an example of weight 0
    is never drawn) and a product distribution coordinate by coordinate (``ProductDistribution.sample``, no
    enumeration); without replacement, B distinct rows of the table (a product distribution is enumerated once,
    ``as_table``) form a uniformly random subset (``_subset``). Build it with ``Sampler.of`` after
    ``check_minibatch``.

    **Arguments:**

    - ``data``: the measure sampled (a ``WeightedTable``, or a ``ProductDistribution`` with replacement).
    - ``cumulative``: the table's cumulative weights (with replacement), else None.
    - ``batch``: B; ``replace``: with (True) or without (False) replacement.
    """

    data: WeightedTable | ProductDistribution
    cumulative: Array | None
    batch: int = eqx.field(static=True)
    replace: bool = eqx.field(static=True)

    @classmethod
    def of(cls, measure: WeightedTable | ProductDistribution, batch: int, replace: bool) -> Sampler:
        """The sampler of minibatches of ``batch`` examples of ``measure`` (checked by ``check_minibatch``)."""
        if not replace and isinstance(measure, ProductDistribution):
            measure = measure.as_table()
        cumulative = jnp.cumsum(measure.weights) if replace and isinstance(measure, WeightedTable) else None
        return cls(measure, cumulative, int(batch), bool(replace))

    def indices(self, key: Array) -> Array:
        """The B row indices of a table's minibatch drawn with ``key``."""
        data = self.data
        assert isinstance(data, WeightedTable)
        if not self.replace:
            return _subset(key, data.n, self.batch)
        cumulative = self.cumulative
        assert cumulative is not None
        u = jax.random.uniform(key, (self.batch,), dtype=cumulative.dtype) * cumulative[-1]
        return jnp.minimum(jnp.searchsorted(cumulative, u, side="right"), data.n - 1)

    def __call__(self, key: Array) -> PyTree:
        if isinstance(self.data, ProductDistribution):
            return self.data.sample(key, self.batch)
        idx = self.indices(key)
        return jax.tree_util.tree_map(lambda a: a[idx], self.data.points)


def _subset(key: Array, n: int, batch: int) -> Array:
    """The indices of a uniformly random ``batch``-subset of range(n) (in no particular order).

    Floyd's algorithm when B² ≤ n log₂ n: for j = n − B, …, n − 1 draw t uniform in [0, j] and take t, or j when t
    is taken already; every B-subset comes out with probability 1/C(n, B), in B² comparisons whatever n (a minibatch
    of 32 of 10⁵ examples costs what one of 32 of 100 does). Otherwise the first B entries of a random permutation
    (n log n).

    **Arguments:** ``key`` the PRNG key; ``n`` the population size; ``batch`` B ≤ n."""
    if batch * batch > n * max(1.0, math.log2(n)):
        return jax.random.choice(key, n, (batch,), replace=False)
    first = n - batch
    draws = jax.random.randint(key, (batch,), 0, jnp.arange(first + 1, n + 1))

    def take(i, idx):
        t = draws[i]
        return idx.at[i].set(jnp.where(jnp.any(idx == t), first + i, t))

    return jax.lax.fori_loop(0, batch, take, jnp.full(batch, -1, draws.dtype))
