"""Structured reduction (docs/models/decision_lists.md §3 C) against its reference value and brute force."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popdyn.tasks.decision_list import brute_force_loss, random_lists, random_perm
from popdyn.tasks.decision_list._reduced import (
    column_loss,
    columns_from_matrix,
    is_column_structured,
    structured_total_loss,
)

DISTRIBUTIONS = ("distinct", "iid")


def _perm_matrix(perm):
    L = len(perm)
    P = np.zeros((L, L))
    P[list(perm), range(L)] = 1.0
    return jnp.asarray(P)


def _embed(params, lists):
    """W with column a equal to ω_a off the list and w_a (list order) on rows L_a."""
    L = len(lists)
    cols = [jnp.full(L, omega).at[jnp.asarray(lst)].set(w) for (w, omega), lst in zip(params, lists, strict=False)]
    return jnp.stack(cols, axis=1)


def _random_params(lists, seed):
    rng = np.random.default_rng(seed)
    return [(jnp.asarray(rng.normal(size=len(lst))), jnp.asarray(rng.normal())) for lst in lists]


def test_reference_value_and_gradient():
    w, omega = jnp.array([0.3, -0.2, 0.5]), jnp.array(-0.1)
    loss, (gw, gomega) = jax.value_and_grad(column_loss, argnums=(0, 1))(w, omega, L=10, n=3, c=10.0)
    assert abs(float(loss) - 0.096103657597) < 1e-11
    expected = np.array([-0.0572673466, -0.0526098676, 0.0658563416, 0.0440208726])
    np.testing.assert_allclose(np.append(gw, gomega), expected, rtol=0, atol=1e-9)


# (L, n, M, seed): list lengths 1..M; (3, 2, 3) has a column with m = L (no distractors), (4, 1, 2) has n = 1.
CASES = [*(pytest.param(*c, marks=pytest.mark.slow) for c in [(5, 3, 3, 0), (6, 4, 3, 2)]), (3, 2, 3, 4), (4, 1, 2, 5)]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("L,n,M,seed", CASES)
def test_matches_brute_force(L, n, M, seed, distribution):
    lists, perm = random_lists(L, M, seed=seed), random_perm(L, seed=seed)
    P = _perm_matrix(perm)
    params = _random_params(lists, seed)

    def reduced(params, c):
        return sum(column_loss(w, om, L=L, n=n, c=c, distribution=distribution) for w, om in params)

    def brute(params, c):
        return brute_force_loss(_embed(params, lists), c * P, L, n, lists, perm, distribution)

    reduced_vg, brute_vg = jax.jit(jax.value_and_grad(reduced)), jax.jit(jax.value_and_grad(brute))
    W = _embed(params, lists)
    assert is_column_structured(W, lists)
    for c in (1.0, 7.5):
        (loss, g_red), (loss_bf, g_bf) = reduced_vg(params, c), brute_vg(params, c)
        np.testing.assert_allclose(loss, loss_bf, rtol=0, atol=1e-12)
        total = structured_total_loss(W, lists, L=L, n=n, c=c, distribution=distribution)
        np.testing.assert_allclose(total, loss, rtol=0, atol=1e-14)
        for (gw, gom), (bw, bom), lst in zip(g_red, g_bf, lists, strict=False):
            np.testing.assert_allclose(gw, bw, rtol=0, atol=1e-10)
            np.testing.assert_allclose(gom, bom if len(lst) < L else 0.0, rtol=0, atol=1e-10)


@pytest.mark.parametrize("L,n,M", [(10, 3, 3), (20, 5, 4), (7, 7, 2)])
def test_zero_W_closed_form(L, n, M):
    lists = random_lists(L, M, seed=L)
    c = 12.0
    total = structured_total_loss(np.zeros((L, L)), lists, L=L, n=n, c=c)
    np.testing.assert_allclose(total, math.log(n + (L - n) * math.exp(-c / n)), rtol=1e-13)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_large_c_is_finite(distribution):
    """c = 600 (and 1e3) at L = 30, n = 8: finite loss and gradient, including absent-slot patterns."""

    def loss(w, omega, c):
        return column_loss(w, omega, L=30, n=8, c=c, distribution=distribution)

    value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    for w, omega, c in [
        ([0.0, 0.0, 0.0], 0.7, 600.0),
        ([4.0, -3.0, 1.0], 0.7, 600.0),
        ([-50.0, 0.0, 50.0], 0.7, 600.0),
        ([1.0, 2.0, 3.0], -1.0, 1e3),
        ([0.0, 0.0, 0.0], 0.0, 1e3),
    ]:
        value, grads = value_and_grad(jnp.asarray(w), jnp.asarray(omega), c)
        assert np.isfinite(value)
        assert all(np.all(np.isfinite(g)) for g in grads)


def test_column_sum_of_gradient_is_zero():
    """Fact 4: the loss ignores a per-column shift, so Σ_i ∂w_i + ∂ω (ω already summed) vanishes."""
    w, omega = jnp.array([0.4, -1.1, 0.2, 0.9]), jnp.array(0.3)
    for distribution in DISTRIBUTIONS:
        gw, gom = jax.grad(column_loss, argnums=(0, 1))(w, omega, L=9, n=4, c=25.0, distribution=distribution)
        assert abs(float(jnp.sum(gw) + gom)) < 1e-13


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(
    shift=st.floats(-30, 30),
    w=st.lists(st.floats(-5, 5), min_size=1, max_size=3),
    omega=st.floats(-5, 5),
    distribution=st.sampled_from(DISTRIBUTIONS),
)
def test_shift_invariance(shift, w, omega, distribution):
    w = jnp.asarray(w)
    kw = dict(L=7, n=3, c=40.0, distribution=distribution)
    base = column_loss(w, jnp.asarray(omega), **kw)
    np.testing.assert_allclose(column_loss(w + shift, jnp.asarray(omega + shift), **kw), base, rtol=1e-12, atol=1e-12)


def test_columns_from_matrix_round_trip_and_rejects_unstructured():
    L = 6
    lists = random_lists(L, 3, seed=7)
    params = _random_params(lists, 7)
    W = np.array(_embed(params, lists))
    for (w, omega), (w0, omega0) in zip(columns_from_matrix(W, lists), params, strict=False):
        np.testing.assert_array_equal(w, w0)
        assert omega == float(omega0)
    a = next(a for a, lst in enumerate(lists) if len(lst) <= L - 2)
    b = next(b for b in range(L) if b not in lists[a])
    W[b, a] += 1e-6
    assert not is_column_structured(W, lists)
    with pytest.raises(ValueError, match=rf"W\[:, {a}\] is not column-structured"):
        columns_from_matrix(W, lists)
    with pytest.raises(ValueError, match="W.shape"):
        columns_from_matrix(np.zeros((L, L + 1)), lists)


def test_rejects_bad_sizes():
    with pytest.raises(ValueError, match="len\\(w\\)=4"):
        column_loss(jnp.zeros(4), jnp.array(0.0), L=3, n=2, c=1.0)
    with pytest.raises(ValueError, match="n=5"):
        column_loss(jnp.zeros(2), jnp.array(0.0), L=4, n=5, c=1.0)
    with pytest.raises(ValueError, match="distribution"):
        column_loss(jnp.zeros(2), jnp.array(0.0), L=4, n=2, c=1.0, distribution="uniform")
