"""A task's random draw takes a PRNG key or a seed (popdyn.tasks._keys.as_key): the same instance either way, NumPy
integers accepted, bad seeds refused by name before any JAX program runs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from popdyn.tasks._keys import as_key
from popdyn.tasks.scb import random_instance
from popdyn.tasks.teacher.builders import random_V


def test_a_seed_and_its_key_draw_the_same_instance():
    key = jax.random.PRNGKey(7)
    np.testing.assert_array_equal(np.asarray(as_key(7)), np.asarray(key))
    np.testing.assert_array_equal(np.asarray(as_key(np.int64(7))), np.asarray(key))
    assert as_key(key) is key
    for draw in (lambda k: random_instance(k, 3, 4, 2), lambda k: (random_V(k, 3, 2),)):
        by_seed, by_numpy, by_key = draw(7), draw(np.uint32(7)), draw(key)
        for a, b, c in zip(by_seed, by_numpy, by_key, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
            np.testing.assert_array_equal(np.asarray(b), np.asarray(c))


@pytest.mark.validation
@pytest.mark.parametrize("seed", [-1, 2**32, True])
def test_a_bad_seed_is_refused_by_name(seed):
    with pytest.raises(ValueError, match=r"key=.* must be an integer in \[0, 2\*\*32 - 1\]"):
        as_key(seed)
    with pytest.raises(ValueError, match=r"key=.* must be an integer"):
        random_V(seed, 3, 2)
