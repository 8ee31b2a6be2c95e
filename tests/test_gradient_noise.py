"""Per-example data (docs/problem.md, "Per-example data") and SGD's exact gradient noise (docs/sgd.md).

``Problem.from_examples`` derives L(θ) = Σ_i w_i ℓ(θ, x_i) from a per-example loss and an exact measure; it is
checked against the same sum written by hand. ``gradient_noise``'s Σ(θ) = Σ_i w_i (g_i − ḡ)(g_i − ḡ)ᵀ is checked
against per-example gradients taken one by one (an explicit loop) and a NumPy covariance, against Monte Carlo
draws of examples and of minibatches (within 4 standard errors, each entry's error estimated from the draws'
fourth moments), the without-replacement factor against every size-B subset of six examples, and the matrix-free
top eigenpairs against ``numpy.linalg.eigh`` of the dense matrix.
"""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import popdyn
from popdyn.analysis import _noise as noise
from popdyn.exact import ProductDistribution, WeightedTable
from popdyn.problem import ExampleProblem

DOCS = Path(__file__).resolve().parents[1] / "docs"

# A two-layer tanh network on eight enumerated points (x, y) with unequal weights: d = 3·2 + 3 = 9 parameters.
X = np.array([[0.3, -1.2], [1.1, 0.4], [-0.7, 0.9], [0.2, 0.2], [-1.4, -0.3], [0.8, -0.8], [-0.1, 1.5], [1.6, 1.0]])
Y = np.array([0.5, -1.0, 0.25, 1.2, -0.4, 0.9, -1.3, 0.1])
W = np.arange(1.0, 9.0) / 36.0
TABLE = WeightedTable({"x": X, "y": Y}, W)
THETA = {
    "W": np.array([[0.9, -0.4], [0.3, 1.1], [-0.8, 0.5]]),
    "a": np.array([0.7, -1.2, 0.4]),
}


def example_loss(th, x):
    return 0.5 * (th["a"] @ jnp.tanh(th["W"] @ x["x"]) - x["y"]) ** 2


def make(table: WeightedTable) -> ExampleProblem:
    zeros = {"W": np.zeros((3, 2)), "a": np.zeros(3)}
    return popdyn.Problem.from_examples(example_loss, zeros, data=table, init_scale=0.5)


PROB = make(TABLE)
UNIFORM = make(WeightedTable.uniform({"x": X, "y": Y}))
SIX = make(WeightedTable.uniform({"x": X[:6], "y": Y[:6]}))


@functools.cache
def _jacobian(fn):
    return jax.jit(jax.jacobian(fn))


def gradients(points, theta, fn=example_loss) -> np.ndarray:
    """(n, d): ∇_θ ℓ(θ, x_i), one example at a time (an explicit loop over the points)."""
    n = len(jax.tree_util.tree_leaves(points)[0])
    rows = []
    for i in range(n):
        x_i = jax.tree_util.tree_map(lambda a, i=i: a[i], points)
        rows.append(np.asarray(ravel_pytree(_jacobian(fn)(theta, x_i))[0]))
    return np.stack(rows)


def weighted_covariance(G: np.ndarray, w: np.ndarray) -> np.ndarray:
    C = G - w @ G
    return (C * w[:, None]).T @ C


G = gradients(TABLE.points, THETA)
SIGMA = weighted_covariance(G, W)


def test_the_loss_is_the_weighted_sum_written_by_hand():
    """L(θ) = Σ_i w_i ℓ(θ, x_i) to 1e-15 relative against the sum written in NumPy, bit for bit against the
    table's own expectation, and its gradient is the weighted sum of the per-example gradients."""
    by_hand = sum(W[i] * 0.5 * (THETA["a"] @ np.tanh(THETA["W"] @ X[i]) - Y[i]) ** 2 for i in range(len(W)))
    loss, grad = eqx.filter_jit(jax.value_and_grad(lambda th, p: p.loss(th)))(THETA, PROB)
    assert abs(float(loss) - by_hand) <= 1e-15 * by_hand
    assert float(PROB.loss(THETA)) == float(TABLE.expectation(lambda x: example_loss(THETA, x)))
    grad = np.asarray(ravel_pytree(grad)[0])
    np.testing.assert_allclose(grad, W @ G, rtol=0, atol=1e-15 * np.linalg.norm(W @ G))
    assert PROB.examples() is TABLE
    assert float(PROB.example_loss(THETA, {"x": X[2], "y": Y[2]})) == float(example_loss(THETA, {"x": X[2], "y": Y[2]}))


def test_another_measure_of_the_same_shapes_compiles_nothing():
    """The measure's numbers are array leaves: a second table (other points, other weights) runs through the
    compiled loss without tracing ℓ again."""
    traces = []

    def counted(th, x):
        traces.append(1)
        return example_loss(th, x)

    zeros = {"W": np.zeros((3, 2)), "a": np.zeros(3)}
    other = WeightedTable({"x": X[::-1] + 0.5, "y": -Y}, W[::-1])
    first = popdyn.Problem.from_examples(counted, zeros, data=TABLE)
    second = popdyn.Problem.from_examples(counted, zeros, data=other)
    loss = eqx.filter_jit(lambda p, th: p.loss(th))
    a = float(loss(first, THETA))
    seen = len(traces)
    b = float(loss(second, THETA))
    assert len(traces) == seen
    assert a == float(first.loss(THETA)) and b == float(second.loss(THETA)) and a != b


def test_the_covariance_is_the_brute_force_one():
    """Σ(θ), its trace, the mean gradient, products Σv, and Σ/B, against the explicit loop (1e-12 of ‖Σ‖)."""
    scale = np.linalg.norm(SIGMA)
    g = popdyn.gradient_noise(PROB, THETA)
    assert g.n == 8 and g.dim == 9 and g.factor == 1.0
    np.testing.assert_allclose(g.mean, W @ G, rtol=0, atol=1e-14 * np.linalg.norm(W @ G))
    np.testing.assert_allclose(g.covariance, SIGMA, rtol=0, atol=1e-12 * scale)
    assert abs(g.trace - np.trace(SIGMA)) <= 1e-12 * scale
    v = np.linspace(-1.0, 1.0, 9)
    np.testing.assert_allclose(g.matvec(v), SIGMA @ v, rtol=0, atol=1e-12 * scale * np.linalg.norm(v))
    b = popdyn.gradient_noise(PROB, THETA, batch=3)
    np.testing.assert_allclose(b.covariance, SIGMA / 3, rtol=0, atol=1e-12 * scale)
    assert abs(b.trace - np.trace(SIGMA) / 3) <= 1e-12 * scale
    online = popdyn.gradient_noise(PROB, THETA, batch=3, replace=None)
    assert online.factor == b.factor and online.replace is None
    grad = jax.grad(PROB.loss)(THETA)  # unravel gives the mean gradient θ's structure back
    for name in ("W", "a"):
        np.testing.assert_allclose(g.unravel(g.mean)[name], grad[name], rtol=0, atol=1e-14 * np.linalg.norm(W @ G))


def test_a_problem_class_can_declare_its_examples():
    """A Problem subclass implementing examples() and example_loss() gets the same noise as from_examples."""

    class TableModel(popdyn.Problem):
        table: WeightedTable

        def loss(self, theta):
            return self.table.expectation(lambda x: example_loss(theta, x))

        def init(self, key):
            return {"W": jax.random.normal(key, (3, 2)), "a": jnp.zeros(3)}

        def examples(self):
            return self.table

        def example_loss(self, theta, x):
            return example_loss(theta, x)

    mine = popdyn.gradient_noise(TableModel(TABLE), THETA)
    np.testing.assert_allclose(mine.covariance, SIGMA, rtol=0, atol=1e-12 * np.linalg.norm(SIGMA))


def test_a_product_distribution_of_examples():
    """A logistic model on x ∈ {−1, 1}³ with independent, unequal coordinates: the loss is the distribution's own
    sum, the covariance the brute-force one over its table of 8 points."""
    marginals = np.array([[0.2, 0.8], [0.35, 0.65], [0.6, 0.4]])
    dist = ProductDistribution(marginals, values=[-1.0, 1.0])

    def logistic(th, x):
        y = jnp.sign(jnp.sum(x))
        return jax.nn.softplus(-y * (th[:3] @ x + th[3]))

    prob = popdyn.Problem.from_examples(logistic, np.zeros(4), data=dist)
    theta = np.array([0.4, -0.3, 0.8, 0.1])
    by_hand = eqx.filter_jit(lambda th, m: m.expectation(lambda x: logistic(th, x)))
    assert float(eqx.filter_jit(lambda th, p: p.loss(th))(theta, prob)) == float(by_hand(theta, dist))
    table = dist.as_table()
    sigma = weighted_covariance(gradients(table.points, theta, logistic), np.asarray(table.weights))
    g = popdyn.gradient_noise(prob, theta, batch=2)
    np.testing.assert_allclose(g.covariance, sigma / 2, rtol=0, atol=1e-12 * np.linalg.norm(sigma))
    with pytest.raises(ValueError, match="replace=False needs n = 8 equally weighted examples"):
        popdyn.gradient_noise(prob, theta, batch=2, replace=False)
    fair = popdyn.Problem.from_examples(
        logistic, np.zeros(4), data=ProductDistribution(np.full((3, 2), 0.5), values=[-1.0, 1.0])
    )
    assert popdyn.gradient_noise(fair, theta, batch=8, replace=False).trace == 0.0


def assert_within_4_se(draws: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """The draws' (M, d) empirical covariance equals ``expected`` entrywise within 4 standard errors, each from the
    entry's products' own spread (fourth moments); returns the standard errors."""
    M = draws.shape[0]
    c = draws - draws.mean(axis=0)
    products = c[:, :, None] * c[:, None, :]
    estimate = products.sum(axis=0) / (M - 1)
    se = products.std(axis=0) / np.sqrt(M)
    rounding = 1e-12 * np.linalg.norm(expected)
    bad = np.abs(estimate - expected) > 4 * se + rounding
    assert not bad.any(), f"{bad.sum()} entries beyond 4 SE, worst {np.max(np.abs(estimate - expected) / se):.2f} SE"
    assert se.max() < 0.02 * np.linalg.norm(expected)  # sharp enough to tell a wrong factor (below)
    return se


def test_monte_carlo_examples_and_minibatches():
    """Examples drawn from the measure, minibatches of 3 with replacement from it, and 3-subsets of the uniform
    table: each empirical covariance is the exact one within 4 SE, and a wrong factor is told apart."""
    rng = np.random.default_rng(0)
    M, B = 60_000, 3
    assert_within_4_se(G[rng.choice(8, size=M, p=W)], popdyn.gradient_noise(PROB, THETA).covariance)
    means = G[rng.choice(8, size=(M, B), p=W)].mean(axis=1)
    with_replacement = popdyn.gradient_noise(PROB, THETA, batch=B).covariance
    se = assert_within_4_se(means, with_replacement)
    assert np.any(np.abs(with_replacement * B - np.cov(means.T)) > 4 * se)  # Σ instead of Σ/B would fail
    subsets = rng.permuted(np.tile(np.arange(8), (M, 1)), axis=1)[:, :B]
    means = G[subsets].mean(axis=1)
    without = popdyn.gradient_noise(UNIFORM, THETA, batch=B, replace=False)
    assert without.factor == (8 - B) / (B * (8 - 1))
    se = assert_within_4_se(means, without.covariance)
    iid = popdyn.gradient_noise(UNIFORM, THETA, batch=B).covariance
    assert np.any(np.abs(iid - np.cov(means.T)) > 4 * se)  # Σ/B instead would fail


@pytest.mark.parametrize("B", range(1, 7))
def test_without_replacement_against_every_subset(B):
    """The covariance of the mean of a uniformly random B-subset of 6 equally weighted examples, over all C(6, B)
    subsets, is Σ(n − B)/(B(n − 1)) to 1e-12 of ‖Σ‖; at B = n it is exactly 0."""
    G6 = G[:6]
    means = np.stack([G6[list(s)].mean(axis=0) for s in itertools.combinations(range(6), B)])
    c = means - G6.mean(axis=0)
    enumerated = c.T @ c / len(means)
    sigma = weighted_covariance(G6, np.full(6, 1 / 6))
    g = popdyn.gradient_noise(SIX, THETA, batch=B, replace=False)
    np.testing.assert_allclose(g.covariance, enumerated, rtol=0, atol=1e-12 * np.linalg.norm(sigma))
    if B == 6:
        assert g.factor == 0.0 and g.trace == 0.0 and not g.covariance.any()


def _check_top(top: noise.Eigenpairs, dense: np.ndarray, k: int) -> None:
    values, vectors = np.linalg.eigh(dense)
    values, vectors = values[::-1][:k], vectors[:, ::-1][:, :k]
    assert top.converged
    np.testing.assert_allclose(top.values, values, rtol=0, atol=1e-10 * values[0])
    overlaps = np.abs(np.sum(top.vectors * vectors, axis=0))
    np.testing.assert_allclose(overlaps, 1.0, rtol=0, atol=1e-8)
    np.testing.assert_allclose(top.vectors.T @ top.vectors, np.eye(k), rtol=0, atol=1e-12)


def test_top_eigenpairs_against_eigh():
    """top(k) against numpy.linalg.eigh of the dense covariance: on the 9 parameters above (its first block spans
    them all), and on a 48-parameter network over 30 examples, where it iterates passes of 12 vectors."""
    g = popdyn.gradient_noise(PROB, THETA, batch=2)
    assert np.max(np.diff(np.linalg.eigvalsh(g.covariance)[::-1][:4])) < -1e-3 * g.trace  # distinct eigenvalues
    _check_top(g.top(3), g.covariance, 3)
    rng = np.random.default_rng(1)
    points = {"x": rng.normal(size=(30, 3)), "y": rng.normal(size=30)}
    weights = rng.uniform(0.5, 1.5, size=30)
    wide = popdyn.Problem.from_examples(
        example_loss, {"W": np.zeros((12, 3)), "a": np.zeros(12)}, data=WeightedTable(points, weights, normalize=True)
    )
    theta = {"W": rng.normal(size=(12, 3)), "a": rng.normal(size=12)}
    big = popdyn.gradient_noise(wide, theta)
    top = big.top(2)
    assert top.passes > 1 and big.dim == 48
    _check_top(top, big.covariance, 2)
    assert np.all(top.residuals <= 1e-8 * top.values[0])


@pytest.mark.validation
def test_bad_inputs_are_refused_by_name(monkeypatch):
    with pytest.raises(ValueError, match="batch=0 is out of range"):
        popdyn.gradient_noise(PROB, THETA, batch=0)
    with pytest.raises(ValueError, match="batch=2.5 is out of range"):
        popdyn.gradient_noise(PROB, THETA, batch=2.5)
    with pytest.raises(ValueError, match=re.escape("batch=7 is out of range: without replacement it must be an")):
        popdyn.gradient_noise(SIX, THETA, batch=7, replace=False)
    with pytest.raises(ValueError, match=re.escape("[1, 6] (n = 6 examples)")):
        popdyn.gradient_noise(SIX, THETA, batch=7, replace=False)
    assert popdyn.gradient_noise(SIX, THETA, batch=7).factor == 1 / 7  # with replacement B may exceed n
    with pytest.raises(ValueError, match="replace=False needs n = 8 equally weighted examples"):
        popdyn.gradient_noise(PROB, THETA, batch=2, replace=False)
    with pytest.raises(ValueError, match="replace='no' is invalid"):
        popdyn.gradient_noise(PROB, THETA, batch=2, replace="no")
    plain = popdyn.Problem.from_loss(lambda th: jnp.sum(th**2), np.zeros(2))
    with pytest.raises(ValueError, match="FunctionProblem declares no per-example data"):
        popdyn.gradient_noise(plain, np.zeros(2))
    with pytest.raises(ValueError, match="FunctionProblem declares no per-example data"):
        plain.examples()
    with pytest.raises(ValueError, match="theta has a batch axis: gradient_noise takes one unbatched θ"):
        popdyn.gradient_noise(PROB, jax.tree_util.tree_map(lambda a: np.stack([a, a]), THETA))
    g = popdyn.gradient_noise(PROB, THETA)
    for k in (0, 10):
        with pytest.raises(ValueError, match=f"k={k} is out of range"):
            g.top(k)
    monkeypatch.setattr(noise, "DENSE_MAX_DIM", 4)
    with pytest.raises(ValueError, match="θ has d = 9 parameters: the dense covariance is formed for d <= "):
        popdyn.gradient_noise(PROB, THETA).covariance  # noqa: B018  # the property raises


@pytest.mark.validation
def test_from_examples_refuses_what_is_not_a_measure_or_a_scalar_loss():
    zeros = {"W": np.zeros((3, 2)), "a": np.zeros(3)}
    with pytest.raises(ValueError, match="data is a dict: must be a popdyn.exact measure"):
        popdyn.Problem.from_examples(example_loss, zeros, data={"x": X, "y": Y})
    with pytest.raises(ValueError, match="example_loss=3 is invalid"):
        popdyn.Problem.from_examples(3, zeros, data=TABLE)
    with pytest.raises(ValueError, match=re.escape("example_loss(θ, x) returned shape (3,)")):
        popdyn.Problem.from_examples(lambda th, x: th["a"] * x["y"], zeros, data=TABLE)
    with pytest.raises(ValueError, match="init_scale=-1 is out of range"):
        popdyn.Problem.from_examples(example_loss, zeros, data=TABLE, init_scale=-1)


@pytest.mark.parametrize("page, heading", [("sgd.md", "## An example"), ("problem.md", "## Per-example data")])
def test_the_docs_examples_run(page, heading):
    """The example of docs/sgd.md and of docs/problem.md's "Per-example data", executed from the pages: the loss
    is the measure's own sum, and each noise it computes is c_B times the brute-force Σ."""
    section = (DOCS / page).read_text(encoding="utf-8").split(heading, 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    namespace: dict = {}
    exec(compile(code.group(1), str(DOCS / page), "exec"), namespace)
    table, theta, fn, prob = namespace["table"], namespace["theta"], namespace["example_loss"], namespace["prob"]
    assert float(prob.loss(theta)) == float(table.expectation(lambda x: fn(theta, x)))
    sigma = weighted_covariance(gradients(table.points, theta, fn), np.asarray(table.weights))
    computed = [v for v in namespace.values() if isinstance(v, popdyn.GradientNoise)]
    assert computed
    for noise_ in computed:
        np.testing.assert_allclose(noise_.covariance, noise_.factor * sigma, rtol=0, atol=1e-12 * np.linalg.norm(sigma))
    if page == "sgd.md":
        assert [g.factor for g in computed] == [1.0, 0.5, (4 - 2) / (2 * 3)]
        _check_top(namespace["top"], sigma, 1)
