"""A task's random draw takes a PRNG key or a seed; a seed becomes a key only after every other argument is checked,
so bad input is refused before JAX compiles anything (the command line's one-line errors rely on it)."""

from __future__ import annotations

import jax
import numpy as np
from jaxtyping import Array

from popdyn import _validate


def as_key(key: Array | int, name: str = "key") -> Array:
    """``key`` itself when it is a PRNG key; a seed (a Python or NumPy integer in [0, 2**32 − 1]) made into
    ``jax.random.PRNGKey(seed)``.

    **Arguments:** ``key`` the key or seed; ``name`` the argument's name in the error for a bad seed."""
    if isinstance(key, (bool, int, np.integer)):
        return jax.random.PRNGKey(_validate.seed(name, key))
    return key
