"""Numbers that describe the data (or the initialisation scale) are 0-d float array leaves of a Problem.

A jitted engine function takes the problem as an argument, so a static number would be part of its
compile-cache key: every new value would compile again, and problems could not be stacked and vmapped.
Constructors validate the Python values first and store ``leaf(value)``; closed forms for reports read
them back with ``concrete``, which is a Python float outside transformations and the array inside them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


def leaf(value: float) -> Float[Array, ""]:
    """A validated number as a 0-d array of the default float dtype (float64 under x64); placed on the device
    directly, as ``jnp.asarray`` would run a compiled copy for it."""
    return jax.device_put(np.asarray(value, dtype=jnp.result_type(float)))


def concrete(x):
    """``float(x)`` for a concrete 0-d value; ``x`` itself when traced (jit, vmap, grad) or batched (a stack
    of problems), so a closed form written for floats also runs on arrays."""
    if isinstance(x, jax.core.Tracer) or np.ndim(x) != 0:
        return x
    return float(x)


def floats(*xs) -> tuple:
    """``concrete`` of each value; ``all(isinstance(v, float) for v in floats(...))`` picks the math path."""
    return tuple(concrete(x) for x in xs)


def all_float(values) -> bool:
    """True when every value is a Python float (evaluate with ``math``), else some are arrays (use ``jnp``)."""
    return all(isinstance(v, float) for v in values)
