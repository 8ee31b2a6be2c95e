"""Property tests of the sparse-contextual-bigram task's constructors: every invalid value raises
a ValueError naming its parameter before any JAX work; every valid instance gives a finite loss and gradient at
random points, and a short GD run reports every point as finite or with a non-OK status. SparseBigram's (P, Qm, μ)
are array leaves, so one compiled loss (and one compiled GD loop) serves every instance of one shape.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _props import (
    NON_FINITE,
    WRONG_TYPE,
    bad_int,
    bad_positive,
    check_per_point,
    examples,
    raises_naming,
    tree_finite,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import popdyn
from popdyn.tasks.scb import Reduced2D, Reduced4D, SoftmaxBigram, SparseBigram, Whitened, random_instance

N, T = 3, 4  # the shape of the valid-value suite
P0 = np.full((N, N), 1.0 / N)
Q0 = np.full((T, N), 1.0 / T)


def _columns(shape):
    """Column-stochastic matrices of ``shape`` with any zero pattern (an all-zero column gets its mass on row 0)."""

    def normalise(A):
        A = A.copy()
        A[0, A.sum(axis=0) == 0] = 1.0
        return A / A.sum(axis=0, keepdims=True)

    return hnp.arrays(float, shape, elements=st.one_of(st.just(0.0), st.floats(1e-3, 1.0))).map(normalise)


@st.composite
def bad_matrix(draw, name: str):
    """A P (N x N, column-stochastic, irreducible) or Qm (T x N, columns in the simplex) with one rule broken."""
    A = (P0 if name == "P" else Q0).copy()
    kind = draw(st.sampled_from(["shape", "entry", "column", "type"] + (["reducible"] if name == "P" else [])))
    if kind == "shape":
        shapes = [(N,), (N, N + 1), (1, 1), (N, N, 1)] if name == "P" else [(N,), (T, N + 1), (0, N), (T, N, 1)]
        return draw(hnp.arrays(float, st.sampled_from(shapes), elements=st.floats(0, 1)))
    if kind == "type":
        return draw(st.sampled_from([None, "abc", [["a"] * N] * N, [[1, 2], [3]]]))
    i, j = draw(st.integers(0, A.shape[0] - 1)), draw(st.integers(0, N - 1))
    if kind == "entry":
        A[i, j] = draw(st.one_of(st.floats(max_value=-1e-9), NON_FINITE))
    elif kind == "column":
        A[:, j] *= draw(st.one_of(st.floats(0, 0.999), st.floats(1.001, 10.0)))
    else:  # token 0 only ever follows itself: no unique stationary law with mu > 0
        A = np.eye(N)
    return A


# ---- invalid values -------------------------------------------------------------------------------------
@settings(max_examples=examples(60))
@given(ctor=st.sampled_from(["SparseBigram", "SoftmaxBigram"]), which=st.sampled_from(["P", "Qm"]), data=st.data())
def test_instance_matrices_are_validated(ctor, which, data):
    """SparseBigram and SoftmaxBigram refuse a P that is not column-stochastic and irreducible, or a Qm whose
    columns are not distributions over T positions, naming the matrix."""
    bad = data.draw(bad_matrix(which), label=which)
    P, Qm = (bad, Q0) if which == "P" else (P0, bad)
    raises_naming(which, SparseBigram if ctor == "SparseBigram" else SoftmaxBigram, P, Qm)


@settings(max_examples=examples(40))
@given(option=st.sampled_from(["N", "T", "Q", "Q>T"]), data=st.data())
def test_random_instance_sizes_are_validated(option, data):
    """random_instance(key, N, T, Q) needs N >= 2, T >= 1 and 1 <= Q <= T, naming the size."""
    sizes = {"N": 3, "T": 4, "Q": 2}
    if option == "Q>T":
        option, sizes["Q"] = "Q", data.draw(st.integers(5, 10**9), label="Q")
    else:
        sizes[option] = data.draw(bad_int({"N": 2, "T": 1, "Q": 1}[option]), label=option)
    raises_naming(option, random_instance, jax.random.PRNGKey(0), **sizes)


@settings(max_examples=examples(50))
@given(cls=st.sampled_from([Reduced2D, Reduced4D]), option=st.sampled_from(["c", "qbar", "T", "mu_sq"]), data=st.data())
def test_reduced_systems_validate_their_scalars(cls, option, data):
    """Reduced2D/4D(c, qbar, T, mu_sq): c > 0, T >= 2, 1/T < qbar <= 1 and 0 < mu_sq <= 1, each named."""
    args = {"c": 0.5, "qbar": 0.5, "T": 4, "mu_sq": 0.4}
    out_of_range = {
        "c": bad_positive(),
        "T": bad_int(2),
        "qbar": st.one_of(st.floats(max_value=0.25), st.floats(min_value=1.0 + 1e-9), NON_FINITE, WRONG_TYPE),
        "mu_sq": st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0 + 1e-9), NON_FINITE, WRONG_TYPE),
    }
    args[option] = data.draw(out_of_range[option], label=option)
    raises_naming(option, cls, **args)


@settings(max_examples=examples(20))
@given(what=st.sampled_from(["batch", "prob"]), data=st.data())
def test_sampler_and_whitened_inputs_are_validated(what, data):
    """SparseBigram.sample needs a batch >= 1; Whitened needs a SparseBigram."""
    if what == "batch":
        raises_naming("batch", SparseBigram(P0, Q0).sample, jax.random.PRNGKey(0), data.draw(bad_int(1), "batch"))
    else:
        raises_naming("prob", Whitened, data.draw(st.one_of(WRONG_TYPE, st.just(P0)), label="prob"))


# ---- valid values ---------------------------------------------------------------------------------------
_value_and_grad = eqx.filter_jit(lambda prob, theta: jax.value_and_grad(prob.loss)(theta))


@settings(max_examples=examples(30))
@given(
    P=hnp.arrays(float, (N, N), elements=st.floats(1e-3, 1.0)).map(lambda P: P / P.sum(axis=0)),
    Qm=_columns((T, N)),
    softmax=st.booleans(),
    V=hnp.arrays(float, (N, N), elements=st.floats(-1e3, 1e3)),
    A=hnp.arrays(float, (T, N), elements=st.floats(-1e3, 1e3)),
)
def test_loss_and_gradient_are_finite_for_every_instance(P, Qm, softmax, V, A):
    """Every valid instance (positive column-stochastic P, any sparse Qm) gives a finite linear- or
    softmax-attention loss and gradient at random (V, A or W)."""
    prob = SoftmaxBigram(P, Qm) if softmax else SparseBigram(P, Qm)
    theta = {"V": jnp.asarray(V), "W" if softmax else "A": jnp.asarray(A)}
    assert tree_finite(_value_and_grad(prob, theta))
    assert tree_finite(prob.init(None))


@settings(max_examples=examples(10))
@given(seed=st.integers(0, 2**32 - 1))
def test_random_instances_are_valid(seed):
    """random_instance draws instances that SparseBigram accepts, with finite c, q̄ in (1/T, 1] and L* >= 0."""
    prob = SparseBigram(*random_instance(jax.random.PRNGKey(seed), N, T, 2))
    assert math.isfinite(float(prob.c)) and 1 / T < float(prob.qbar) <= 1 + 1e-12 and float(prob.L_star) >= -1e-12


_GD_PROBLEM = SparseBigram(*random_instance(jax.random.PRNGKey(0), N, T, 2))


@pytest.mark.slow
@settings(max_examples=examples(10))
@given(
    V=hnp.arrays(float, (4, N, N), elements=st.floats(-1e3, 1e3)),
    A=hnp.arrays(float, (4, T, N), elements=st.floats(-1e3, 1e3)),
    lr=hnp.arrays(float, 4, elements=st.floats(1e-3, 1e4)),
)
def test_gradient_descent_reports_every_point(V, A, lr):
    """A short GD run from any batch of points and step sizes never raises: each point ends finite with an OK
    status, or is marked diverged / NaN."""
    check_per_point(popdyn.gradient_descent(_GD_PROBLEM, {"V": V, "A": A}, lr=lr, steps=4, record_every=2))
