"""Exact expectations beyond Markov chains: weighted tables, product distributions, Gauss–Hermite quadrature.

References are independent of the code under test: Python loops over the table, ``itertools.product`` over the
alphabets, closed forms (∏(2p − 1), Isserlis' theorem, ‖w‖σ/√(2π), exp(a²σ²/2)), finite differences and
Monte-Carlo estimates from the distribution's own sampler.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _quick_codegen_a import quick_codegen_env

from popdyn.exact import GaussHermite, ProductDistribution, WeightedTable, gaussian_expectation

EXACT = 1e-14  # relative, sums of a handful of float64 terms
QUAD = 1e-12  # relative, quadrature of polynomial moments (node/weight rounding)

COV3 = np.array([[2.0, 0.6, 0.3], [0.6, 1.0, -0.4], [0.3, -0.4, 1.5]])  # positive definite, non-diagonal
MEAN3 = np.array([0.5, -1.0, 0.25])


def random_table(seed: int = 0, n: int = 7, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.random(n) + 0.05
    return rng.normal(size=(n, d)), w / w.sum()


# ---------------------------------------------------------------------------------------------------------------
# WeightedTable
# ---------------------------------------------------------------------------------------------------------------


def f_table(x):
    return jnp.sin(x[0]) * x[1] + x[2] ** 3 - x[0] * x[2]


def test_table_matches_python_loop():
    X, w = random_table()
    table = WeightedTable(X, w)
    want = sum(w[i] * (math.sin(X[i, 0]) * X[i, 1] + X[i, 2] ** 3 - X[i, 0] * X[i, 2]) for i in range(len(w)))
    assert float(table.expectation(f_table)) == pytest.approx(want, rel=EXACT, abs=EXACT)


def test_table_pytree_points_and_pytree_output():
    X, w = random_table(1, n=5)
    y = np.arange(5.0)
    table = WeightedTable({"x": X, "y": y}, w)
    got = table.expectation(lambda p: {"sq": (p["x"] @ np.ones(3) - p["y"]) ** 2, "x": p["x"]})
    want_sq = sum(w[i] * (X[i].sum() - y[i]) ** 2 for i in range(5))
    want_x = sum(w[i] * X[i] for i in range(5))
    assert float(got["sq"]) == pytest.approx(want_sq, rel=EXACT)
    np.testing.assert_allclose(np.asarray(got["x"]), want_x, rtol=EXACT, atol=EXACT)


def squared_loss(theta, table):
    return table.expectation(lambda p: (p["x"] @ theta - p["y"]) ** 2)


def test_table_gradient_hand_derived_and_finite_differences():
    X, w = random_table(2, n=9, d=3)
    y = np.random.default_rng(3).normal(size=9)
    table = WeightedTable({"x": X, "y": y}, w)
    theta = jnp.array([0.3, -0.7, 1.1])
    g = np.asarray(jax.grad(squared_loss)(theta, table))
    hand = 2 * np.sum((w * (X @ np.asarray(theta) - y))[:, None] * X, axis=0)  # ∇ Σ w (θ·x − y)² = 2 Σ w (θ·x − y) x
    np.testing.assert_allclose(g, hand, rtol=1e-13, atol=1e-14)
    h = 1e-6
    fd = [(squared_loss(theta + h * e, table) - squared_loss(theta - h * e, table)) / (2 * h) for e in jnp.eye(3)]
    np.testing.assert_allclose(g, np.asarray(fd), rtol=1e-8, atol=1e-9)
    # weights are leaves too: ∂E/∂w_i = f(x_i)
    gw = jax.grad(lambda t: squared_loss(theta, t))(table).weights
    np.testing.assert_allclose(np.asarray(gw), (X @ np.asarray(theta) - y) ** 2, rtol=1e-13)


@pytest.mark.parametrize("chunk", [1, 2, 4, 9, 50])
def test_table_chunked_equals_unchunked(chunk):
    X, w = random_table(4, n=9)
    table = WeightedTable(X, w)
    full = table.expectation(lambda x: jnp.stack([f_table(x), x[0] ** 2]))
    got = table.expectation(lambda x: jnp.stack([f_table(x), x[0] ** 2]), chunk=chunk)
    np.testing.assert_allclose(np.asarray(got), np.asarray(full), rtol=EXACT, atol=EXACT)
    theta = jnp.array([0.5, 0.1, -0.2])
    g_full = jax.grad(lambda t: table.expectation(lambda x: jnp.tanh(x @ t)))(theta)
    g_chunk = jax.grad(lambda t: table.expectation(lambda x: jnp.tanh(x @ t), chunk=chunk))(theta)
    np.testing.assert_allclose(np.asarray(g_chunk), np.asarray(g_full), rtol=EXACT, atol=EXACT)


def test_table_new_weights_compile_nothing_new():
    traces = []

    def fn(x):
        traces.append(1)  # runs once per trace, never at execution
        return f_table(x)

    run = jax.jit(lambda t: t.expectation(fn))
    X1, w1 = random_table(5)
    X2, w2 = random_table(6)
    assert len(jax.tree.leaves(WeightedTable(X1, w1))) == 2
    a = run(WeightedTable(X1, w1))
    n_traces = len(traces)
    b = run(WeightedTable(X2, w2))
    c = run(WeightedTable(X1, w2))
    assert len(traces) == n_traces, "a table of the same shapes must reuse the compiled function"
    assert float(a) == pytest.approx(float(WeightedTable(X1, w1).expectation(f_table)), rel=EXACT)
    assert float(b) == pytest.approx(float(WeightedTable(X2, w2).expectation(f_table)), rel=EXACT)
    assert float(c) == pytest.approx(float(np.sum(w2 * np.asarray(jax.vmap(f_table)(X1)))), rel=EXACT)
    assert float(b) != float(a)


def test_vmap_over_a_stack_of_tables():
    tables = [WeightedTable(*random_table(s)) for s in range(4)]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *tables)
    got = jax.vmap(lambda t: t.expectation(f_table))(stacked)
    want = [float(t.expectation(f_table)) for t in tables]
    np.testing.assert_allclose(np.asarray(got), want, rtol=EXACT)


def test_uniform_from_counts_normalize():
    X = np.arange(6.0).reshape(3, 2)
    assert float(WeightedTable.uniform(X).expectation(lambda x: x[1])) == pytest.approx(3.0, rel=EXACT)
    counts = WeightedTable.from_counts(X, [1, 0, 3])
    assert float(counts.expectation(lambda x: x[0])) == pytest.approx((0 * 1 + 4 * 3) / 4, rel=EXACT)
    norm = WeightedTable(X, [2.0, 0.0, 6.0], normalize=True)
    np.testing.assert_allclose(np.asarray(norm.weights), [0.25, 0.0, 0.75], rtol=EXACT)
    # built inside a transformation (traced weights): no value checks, normalize still applies
    got = jax.jit(lambda c: WeightedTable(X, c, normalize=True).expectation(lambda x: x[0]))(jnp.array([1.0, 0, 3]))
    assert float(got) == pytest.approx(3.0, rel=EXACT)


# ---------------------------------------------------------------------------------------------------------------
# ProductDistribution
# ---------------------------------------------------------------------------------------------------------------

P_BERN = np.array([0.2, 0.65, 0.9, 0.4, 0.55])


def rademacher(p):
    """Coordinates X_k = ±1 with P(X_k = 1) = p_k."""
    return ProductDistribution(np.stack([1 - p, p], axis=1), values=[-1.0, 1.0])


def test_product_bernoulli_closed_forms():
    dist = rademacher(P_BERN)
    m = 2 * P_BERN - 1  # E[X_k]
    assert float(dist.expectation(jnp.prod)) == pytest.approx(np.prod(m), rel=EXACT)
    # E[(Σ x)²] = Σ_k E[x_k²] + Σ_{j≠k} m_j m_k = d + (Σ m)² − Σ m²
    want = len(m) + m.sum() ** 2 - (m**2).sum()
    assert float(dist.expectation(lambda x: jnp.sum(x) ** 2)) == pytest.approx(want, rel=EXACT)
    np.testing.assert_allclose(np.asarray(dist.expectation(lambda x: x)), m, rtol=EXACT, atol=EXACT)


def test_product_gradient_wrt_marginals():
    def prod_mean(p):  # built from traced marginals inside grad
        return ProductDistribution(jnp.stack([1 - p, p], axis=1), values=jnp.array([-1.0, 1.0])).expectation(jnp.prod)

    g = np.asarray(jax.grad(prod_mean)(jnp.asarray(P_BERN)))
    m = 2 * P_BERN - 1
    want = [2 * np.prod(np.delete(m, k)) for k in range(len(m))]  # ∂/∂p_k ∏(2p_j − 1)
    np.testing.assert_allclose(g, want, rtol=1e-13)


def test_product_brute_force_ragged_alphabets():
    marg = [np.array([0.1, 0.9]), np.array([0.2, 0.5, 0.3]), np.array([0.25, 0.25, 0.4, 0.1]), np.array([1.0])]
    vals = [np.array([-1.0, 1.0]), np.array([0.0, 2.0, 5.0]), np.array([-3.0, 0.5, 1.0, 4.0]), np.array([7.0])]
    dist = ProductDistribution(marg, values=vals)
    assert dist.sizes == (2, 3, 4, 1) and dist.size == 24

    def f(x):
        return jnp.cos(x[0] * x[1]) + x[2] ** 2 * x[3] - x[1] * x[2]

    want = 0.0
    for a in itertools.product(*(range(len(m)) for m in marg)):
        x = [vals[k][a[k]] for k in range(4)]
        p = math.prod(marg[k][a[k]] for k in range(4))
        want += p * (math.cos(x[0] * x[1]) + x[2] ** 2 * x[3] - x[1] * x[2])
    for chunk in (None, 1, 5, 4096):
        assert float(dist.expectation(f, chunk=chunk)) == pytest.approx(want, rel=EXACT)
    table = dist.as_table()
    assert table.points.shape == (24, 4)  # rows in mixed radix, first coordinate most significant
    np.testing.assert_array_equal(np.asarray(table.points[:2]), [[-1.0, 0.0, -3.0, 7.0], [-1.0, 0.0, 0.5, 7.0]])
    assert float(table.expectation(f)) == pytest.approx(want, rel=EXACT)


def test_product_default_alphabet_is_indices():
    dist = ProductDistribution([[0.5, 0.5], [0.1, 0.2, 0.7]])
    assert float(dist.expectation(lambda x: x[1])) == pytest.approx(0.2 + 2 * 0.7, rel=EXACT)


def test_product_monte_carlo_from_sample():
    dist = rademacher(P_BERN)
    X = np.asarray(dist.sample(jax.random.PRNGKey(0), 200_000))
    assert X.shape == (200_000, 5) and set(np.unique(X)) <= {-1.0, 1.0}
    for fn, fn_np in [(jnp.prod, lambda X: X.prod(axis=1)), (lambda x: jnp.sum(x) ** 2, lambda X: X.sum(1) ** 2)]:
        samples = fn_np(X)
        se = samples.std(ddof=1) / math.sqrt(len(samples))
        assert abs(samples.mean() - float(dist.expectation(fn))) < 4 * se
    se = np.sqrt(P_BERN * (1 - P_BERN) / len(X))
    assert np.all(np.abs((X == 1).mean(axis=0) - P_BERN) < 4 * se)


def test_product_point_count_limit():
    dist = rademacher(np.full(23, 0.5))
    with pytest.raises(ValueError, match=r"d=23 .*2\^23 = 8388608 points"):
        dist.expectation(jnp.sum)
    with pytest.raises(ValueError, match=r"d=23 .*max_points=4194304"):
        dist.as_table()
    with pytest.raises(ValueError, match=r"d=3 .*2×3×2 = 12 points .*max_points=10"):
        ProductDistribution([[0.5, 0.5], [0.2, 0.3, 0.5], [1.0, 0.0]]).expectation(jnp.sum, max_points=10)


# ---------------------------------------------------------------------------------------------------------------
# Gauss–Hermite
# ---------------------------------------------------------------------------------------------------------------


def isserlis(mu, cov, idx) -> float:
    """E[∏_k X_{idx_k}], X ~ N(mu, cov): expand X = mu + Y and sum Isserlis pairings of the centred factors."""
    total = 0.0
    for mask in itertools.product([0, 1], repeat=len(idx)):
        centred = [i for i, m in zip(idx, mask, strict=False) if m]
        const = math.prod(mu[i] for i, m in zip(idx, mask, strict=False) if not m)
        total += const * _pairings(cov, centred)
    return total


def _pairings(cov, idx) -> float:
    if not idx:
        return 1.0
    if len(idx) % 2:
        return 0.0
    first, rest = idx[0], idx[1:]
    return sum(cov[first, rest[j]] * _pairings(cov, rest[:j] + rest[j + 1 :]) for j in range(len(rest)))


def monomials(d: int, degree: int) -> list[tuple[int, ...]]:
    """Index tuples of every monomial of total degree ≤ degree in d variables (the empty tuple is 1)."""
    return [c for k in range(degree + 1) for c in itertools.combinations_with_replacement(range(d), k)]


def monomial_values(monos: list[tuple[int, ...]], d: int):
    """x ↦ (∏_k x_{m_k})_m for the index tuples ``monos``, as one vectorised function (exponent matrix)."""
    E = np.array([[m.count(i) for i in range(d)] for m in monos])
    return lambda x: jnp.prod(x[None, :] ** E, axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("degree", [0, 1, 2, 3, 4, 5, 6])
def test_gauss_hermite_exact_for_monomials_up_to_degree(d, degree):
    mu, cov = MEAN3[:d], COV3[:d, :d]
    monos = monomials(d, degree)
    got = np.asarray(gaussian_expectation(monomial_values(monos, d), jnp.asarray(mu), jnp.asarray(cov), degree))
    want = np.array([isserlis(mu, cov, list(m)) for m in monos])
    np.testing.assert_allclose(got, want, rtol=QUAD, atol=QUAD)


def test_gauss_hermite_named_moments():
    S = COV3
    zero = jnp.zeros(3)
    second = np.asarray(gaussian_expectation(lambda x: jnp.outer(x, x), zero, S, 2))
    np.testing.assert_allclose(second, S, rtol=QUAD)  # E[X_i X_j] = Σ_ij
    assert float(gaussian_expectation(lambda x: x**4, 0.0, 1.7, 4)) == pytest.approx(3 * 1.7**2, rel=QUAD)
    got = float(gaussian_expectation(lambda x: x[0] ** 2 * x[1] ** 2, zero, S, 4))
    assert got == pytest.approx(S[0, 0] * S[1, 1] + 2 * S[0, 1] ** 2, rel=QUAD)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_gauss_hermite_degree_is_the_real_boundary(n):
    """The n-node rule (degree 2n − 1) is exact on x^{2n−2} and wrong on x^{2n}: E[Z^{2n}] = (2n − 1)!! while the
    rule gives (2n − 1)!! − n! (the Gauss–Hermite remainder n! f^{(2n)}/(2n)! for f = x^{2n})."""
    degree = 2 * n - 1
    rule = GaussHermite(1, degree)
    assert rule.n_per_axis == n and GaussHermite(1, degree - 1).n_per_axis == n
    double_fact = math.prod(range(2 * n - 1, 0, -2))
    below = float(gaussian_expectation(lambda x: x ** (2 * n - 2), 0.0, 1.0, degree))
    assert below == pytest.approx(math.prod(range(2 * n - 3, 0, -2)), rel=QUAD)
    above = float(gaussian_expectation(lambda x: x ** (2 * n), 0.0, 1.0, degree))
    assert above == pytest.approx(double_fact - math.factorial(n), rel=QUAD)
    assert float(gaussian_expectation(lambda x: x ** (2 * n), 0.0, 1.0, degree + 1)) == pytest.approx(double_fact)
    # same boundary in 2-D with a non-diagonal cov: some monomial of total degree 2n is missed
    mu, cov = MEAN3[:2], COV3[:2, :2]
    monos = [m for m in monomials(2, 2 * n) if len(m) == 2 * n]
    got = gaussian_expectation(monomial_values(monos, 2), mu, cov, degree)
    want = np.array([isserlis(mu, cov, list(m)) for m in monos])
    assert np.max(np.abs(np.asarray(got) - want) / np.abs(want)) > 1e-3


@pytest.mark.parametrize("d", [1, 2, 3])
def test_gauss_hermite_relu_converges(d):
    cov, w = COV3[:d, :d], np.array([1.0, -2.0, 0.5])[:d]
    exact = math.sqrt(w @ cov @ w) / math.sqrt(2 * math.pi)  # E[relu(w·X)] = ‖w‖_Σ / √(2π)
    errs = [
        abs(float(gaussian_expectation(lambda x: jax.nn.relu(x @ w), jnp.zeros(d), cov, deg)) - exact) / exact
        for deg in (3, 7, 15, 31)
    ]
    assert all(b < a for a, b in itertools.pairwise(errs)), errs
    assert errs[-1] < 0.03


def test_gauss_hermite_exp_high_degree():
    a, mu, var = 1.5, 0.3, 2.0
    got = float(gaussian_expectation(lambda x: jnp.exp(a * x), mu, var, 60))
    assert got == pytest.approx(math.exp(a * mu + a**2 * var / 2), rel=1e-10)
    assert float(gaussian_expectation(lambda x: jnp.exp(a * x), 0.0, var, 10)) != pytest.approx(
        math.exp(a**2 * var / 2), rel=1e-10
    )
    v = np.array([0.4, -0.3, 0.2])
    got = float(gaussian_expectation(lambda x: jnp.exp(x @ v), MEAN3, COV3, 30))
    assert got == pytest.approx(math.exp(v @ MEAN3 + v @ COV3 @ v / 2), rel=1e-10)


@pytest.mark.slow
def test_gauss_hermite_gradients_wrt_mean_and_cov():
    """E[X1² X2²] = Σ11Σ22 + 2Σ12² + μ1²Σ22 + μ2²Σ11 + 4μ1μ2Σ12 + μ1²μ2² (Isserlis)."""

    def moment(mu, cov):
        return gaussian_expectation(lambda x: x[0] ** 2 * x[1] ** 2, mu, cov, 4)

    mu, S = jnp.array([0.5, -1.0]), jnp.asarray(COV3[:2, :2])
    gm, gS = jax.jit(jax.grad(moment, argnums=(0, 1)))(mu, S)
    m1, m2, s11, s12, s22 = 0.5, -1.0, COV3[0, 0], COV3[0, 1], COV3[1, 1]
    np.testing.assert_allclose(
        np.asarray(gm),
        [2 * m1 * s22 + 4 * m2 * s12 + 2 * m1 * m2**2, 2 * m2 * s11 + 4 * m1 * s12 + 2 * m1**2 * m2],
        rtol=1e-12,
    )
    assert float(gS[0, 0]) == pytest.approx(s22 + m2**2, rel=1e-12)
    assert float(gS[1, 1]) == pytest.approx(s11 + m1**2, rel=1e-12)
    assert float(gS[0, 1] + gS[1, 0]) == pytest.approx(4 * s12 + 4 * m1 * m2, rel=1e-12)  # symmetric direction
    # vmap over means with the same cov, and the gradient of a sum over a batch of covariances (each one program,
    # not op by op)
    mus = jnp.stack([mu, -mu, 2 * mu])
    got = jax.jit(jax.vmap(lambda m: moment(m, S)))(mus)
    np.testing.assert_allclose(
        np.asarray(got), [isserlis(np.asarray(m), np.asarray(S), [0, 0, 1, 1]) for m in mus], rtol=QUAD
    )
    g = jax.jit(jax.grad(lambda covs: jnp.sum(jax.vmap(lambda c: moment(mu, c))(covs))))(jnp.stack([S, 2 * S]))
    assert np.all(np.isfinite(np.asarray(g)))
    # at cov = I (repeated eigenvalues) the untaken eigen-decomposition branch must not leak NaN into the gradient,
    # also under vmap where both branches are evaluated
    g = jax.jit(jax.vmap(jax.grad(lambda c: moment(jnp.zeros(2), c))))(jnp.stack([jnp.eye(2), 3 * jnp.eye(2)]))
    np.testing.assert_allclose(np.asarray(g), [np.eye(2), 3 * np.eye(2)], rtol=1e-12, atol=1e-12)


def test_gauss_hermite_singular_psd_cov():
    v = np.array([1.0, -2.0])
    rank1 = np.outer(v, v)
    got = np.asarray(gaussian_expectation(lambda x: jnp.stack([x[0] * x[1], x[0] ** 4]), jnp.zeros(2), rank1, 4))
    np.testing.assert_allclose(got, [v[0] * v[1], 3 * v[0] ** 4], rtol=QUAD)
    zero_row = np.array([[0.0, 0.0], [0.0, 2.0]])  # Cholesky divides by the zero pivot: eigen fallback
    got = np.asarray(
        gaussian_expectation(lambda x: jnp.stack([x[0] ** 2, x[1] ** 2, x[1] ** 4]), MEAN3[:2], zero_row, 4)
    )
    np.testing.assert_allclose(
        got, [MEAN3[0] ** 2, 2 + MEAN3[1] ** 2, isserlis(MEAN3[:2], zero_row, [1] * 4)], rtol=QUAD
    )
    # the same fallback under jit, where cov is traced
    got = jax.jit(lambda c: gaussian_expectation(lambda x: x[1] ** 2, jnp.zeros(2), c, 2))(zero_row)
    assert float(got) == pytest.approx(2.0, rel=QUAD)


def test_gauss_hermite_rule_object_is_static_and_reused():
    rule = GaussHermite(2, 5)
    assert rule.n_per_axis == 3 and rule.size == 9 and rule.nodes.shape == (9, 2)
    assert rule.weights.sum() == pytest.approx(1.0, rel=EXACT) and np.all(rule.weights > 0)
    assert jax.tree.leaves(rule) == []  # nothing traced: the nodes are compile-time constants
    traces = []

    def fn(x):
        traces.append(1)
        return x[0] ** 2 * x[1] ** 2

    run = jax.jit(lambda m, c: rule.expectation(fn, m, c))
    run(jnp.zeros(2), jnp.eye(2))
    n_traces = len(traces)
    S = jnp.asarray(COV3[:2, :2])
    got = run(jnp.zeros(2), S)
    assert len(traces) == n_traces
    assert float(got) == pytest.approx(float(S[0, 0] * S[1, 1] + 2 * S[0, 1] ** 2), rel=QUAD)
    table = rule.table(jnp.zeros(2), S)
    assert float(table.expectation(lambda x: x[0] * x[1])) == pytest.approx(float(S[0, 1]), rel=QUAD)
    chunked = rule.expectation(lambda x: x[0] ** 2 * x[1] ** 2, jnp.zeros(2), S, chunk=4)
    assert float(chunked) == pytest.approx(float(got), rel=EXACT)


def test_gauss_hermite_node_limit():
    with pytest.raises(ValueError, match=r"degree=100 in d=6 .*51\^6"):
        GaussHermite(6, 100)
    with pytest.raises(ValueError, match=r"degree=100 in d=6"):
        gaussian_expectation(jnp.sum, jnp.zeros(6), jnp.eye(6), 100)


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------

X4 = np.arange(4.0)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: WeightedTable(X4, [0.5, 0.3, 0.3, -0.1]),
            r"weights has a negative entry -0\.1 at index 3: .*\[0, 1\]",
        ),
        (lambda: WeightedTable(X4, [0.5, 0.3, 0.3, 0.1]), r"weights sums to 1\.2.*must sum to 1"),
        (lambda: WeightedTable(X4, [0.5, 0.5, np.nan, 0.0]), r"weights has a non-finite entry nan at index 2"),
        (lambda: WeightedTable(X4, [1.5, -0.5, 0.0, 0.0]), r"weights has a negative entry"),
        (lambda: WeightedTable(X4, [0.0, 0.0, 0.0, 0.0], normalize=True), r"weights sums to 0\.0"),
        (lambda: WeightedTable(X4, [0.5, 0.5]), r"points has a leaf of shape \(4,\).*n = 2"),
        (lambda: WeightedTable({"a": X4, "b": np.zeros(3)}, np.full(4, 0.25)), r"points has a leaf of shape \(3,\)"),
        (lambda: WeightedTable(X4, np.full((2, 2), 0.25)), r"weights has shape \(2, 2\)"),
        (lambda: WeightedTable(np.zeros(0), np.zeros(0)), r"weights has shape \(0,\)"),
        (lambda: WeightedTable.from_counts(X4, [1, 2, -1, 0]), r"counts has an entry -1\.0 at index 2"),
        (lambda: WeightedTable.from_counts(X4, [1, 2.5, 1, 0]), r"counts has an entry 2\.5 at index 1"),
        (lambda: WeightedTable.from_counts(X4, [0, 0, 0, 0]), r"counts are all zero"),
        (lambda: WeightedTable.uniform(np.zeros((0, 2))), r"points has n = 0"),
        (lambda: WeightedTable.uniform(X4).expectation(jnp.sin, chunk=0), r"chunk=0"),
        (lambda: ProductDistribution([[0.5, 0.5], [1.2, -0.2]]), r"marginals\[1\] has a negative entry -0\.2"),
        (lambda: ProductDistribution([[0.5, 0.5], [0.6, 0.6]]), r"marginals\[1\] sums to 1\.2"),
        (lambda: ProductDistribution(np.full((2, 2, 2), 0.5)), r"marginals has shape \(2, 2, 2\)"),
        (lambda: ProductDistribution([[0.5, 0.5], []]), r"marginals\[1\] is empty"),
        (lambda: ProductDistribution([[0.5, 0.5]], values=[-1.0, 0.0, 1.0]), r"values has shape \(3,\).*V = 2"),
        (lambda: ProductDistribution([[0.5, 0.5], [1.0]], values=[[0, 1], [0, 1]]), r"values has coordinate sizes"),
        (lambda: ProductDistribution([[0.5, 0.5]]).sample(jax.random.PRNGKey(0), 0), r"n=0"),
        (
            lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), [[1.0, 2.0], [2.0, 1.0]], 2),
            r"cov is not positive semidefinite: its smallest eigenvalue is -1",
        ),
        (lambda: gaussian_expectation(jnp.sum, 0.0, -1.0, 2), r"cov is not positive semidefinite"),
        (lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), [[1.0, 0.5], [0.0, 1.0]], 2), r"cov is not symmetric"),
        (  # checked at the covariance's own scale: a tiny indefinite one was once accepted and its negative
            # eigenvalue clipped to 0, a different Gaussian with no error
            lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), [[1e-20, 2e-20], [2e-20, 1e-20]], 2),
            r"cov is not positive semidefinite: its smallest eigenvalue is -1e-20",
        ),
        (lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), [[1e-20, 5e-21], [0.0, 1e-20]], 2), r"not symmetric"),
        (lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), np.ones((2, 3)), 2), r"cov has shape \(2, 3\).*square"),
        (lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), np.eye(3), 2), r"cov has shape \(3, 3\).*\(2, 2\)"),
        (lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), [[1.0, np.inf], [np.inf, 1.0]], 2), r"cov=.*finite"),
        (lambda: gaussian_expectation(jnp.sum, 0.0, np.eye(2), 2), r"cov has shape \(2, 2\).*scalar variance"),
        (lambda: gaussian_expectation(jnp.sum, np.zeros((2, 2)), np.eye(2), 2), r"mean has shape \(2, 2\)"),
        (lambda: GaussHermite(2, 3).expectation(jnp.sum, np.zeros(3), np.eye(2)), r"mean has shape \(3,\)"),
        (lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), jnp.eye(2), -1), r"degree=-1 .*integer >= 0"),
        (lambda: gaussian_expectation(jnp.sum, jnp.zeros(2), jnp.eye(2), 2.5), r"degree=2\.5"),
        (lambda: GaussHermite(0, 2), r"d=0"),
    ],
)
@pytest.mark.validation
def test_bad_input_names_the_parameter(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.slow
def test_library_stays_float32_without_x64():
    """Importing popdyn.exact leaves x64 off, and the three tools run in float32 on float64 NumPy input."""
    code = (
        "import numpy as np, jax, jax.numpy as jnp, warnings\n"
        "warnings.simplefilter('error')\n"
        "from popdyn.exact import WeightedTable, ProductDistribution, gaussian_expectation\n"
        "assert not jax.config.jax_enable_x64\n"
        "t = WeightedTable(np.arange(10.0), np.full(10, 0.1))\n"
        "assert t.weights.dtype == jnp.float32 and abs(float(t.expectation(lambda x: x)) - 4.5) < 1e-5\n"
        "p = ProductDistribution(np.array([[0.3, 0.7], [0.5, 0.5]]), values=np.array([-1.0, 1.0]))\n"
        "assert abs(float(p.expectation(jnp.sum)) - 0.4) < 1e-6\n"
        "g = gaussian_expectation(lambda x: x[0] ** 2, np.zeros(2), np.eye(2), 2)\n"
        "assert g.dtype == jnp.float32 and abs(float(g) - 1.0) < 1e-5\n"
    )
    # compile-bound: cheaper code generation (tests/_quick_codegen_a.py); dtypes and values to 1e-5 are checked
    env = {k: v for k, v in quick_codegen_env().items() if k != "JAX_ENABLE_X64"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_a_tiny_covariance_is_a_covariance():
    """N(m, Σ) with Σ of scale 1e-20 is accepted (its checks are relative to its own size) and integrates exactly:
    E[x₀² + 3x₀x₁] = Σ₀₀ + m₀² + 3(Σ₀₁ + m₀m₁)."""
    cov = 1e-20 * np.array([[2.0, 0.5], [0.5, 1.0]])
    mean = np.array([1e-10, -2e-10])
    got = gaussian_expectation(lambda x: x[0] ** 2 + 3 * x[0] * x[1], jnp.asarray(mean), jnp.asarray(cov), 2)
    expected = cov[0, 0] + mean[0] ** 2 + 3 * (cov[0, 1] + mean[0] * mean[1])
    assert float(got) == pytest.approx(expected, rel=1e-12)
