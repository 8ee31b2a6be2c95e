"""The run-time type checks of tests/conftest.py are on: a call that breaks a jaxtyping annotation of the public
API's engine (a wrong dtype or shape, or sizes that disagree within a call) raises in the tests."""

import importlib.util
import os

import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("beartype") is None or os.environ.get("POPDYN_RUNTIME_TYPES") == "0",
    reason="run-time type checks are off: beartype is not installed, or POPDYN_RUNTIME_TYPES=0",
)


def test_checked_modules_are_instrumented():
    from popdyn.curvature import hessian_matrix
    from popdyn.dynamics import gradient_descent
    from popdyn.exact import WeightedTable
    from popdyn.tasks.markov import Canonical

    for fn in (hessian_matrix, gradient_descent, WeightedTable.__init__):
        assert hasattr(fn, "__wrapped__"), fn  # jaxtyped(typechecker=beartype) wraps every function there
    assert not hasattr(Canonical.loss, "__wrapped__")  # the models are not checked


def test_wrong_dtype_is_caught():
    from popdyn.dynamics._status import count

    assert sum(count(np.array([[0, 0], [1, 2]])).values()) == 4  # NumPy or JAX integer codes, any shape
    with pytest.raises(jaxtyping.TypeCheckError, match="status"):
        count(jnp.zeros(3))  # Int[..., "*B"]: status codes are integers


def test_wrong_shape_is_caught():
    from popdyn.exact import WeightedTable

    with pytest.raises(jaxtyping.TypeCheckError, match="weights"):
        WeightedTable(jnp.zeros((2, 3)), jnp.full((2, 1), 0.5))  # weights: Float[..., " n"], a vector


def test_sizes_that_disagree_are_caught():
    from popdyn.exact import covariance_factor

    covariance_factor(jnp.eye(3))
    with pytest.raises(jaxtyping.TypeCheckError, match="cov"):
        covariance_factor(jnp.ones((2, 3)))  # Float[Array, "d d"]: square
