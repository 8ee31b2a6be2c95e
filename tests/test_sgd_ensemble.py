"""SGD's exact step-size condition checked against real SGD (docs/sgd.md, "SGD runs"): ensembles of
``popdyn.dynamics.SGD`` runs, vmapped, drawing their minibatches from the problem's own examples, started a small
distance r from a minimum θ*, decay in mean square at η = 0.98 η*(B) and grow at η = 1.02 η*(B), where η*(B) is
``popdyn.sgd_threshold``'s, on three problems: a least-squares regression on an isotropic table (where η*(B) has a
closed form), a user's tanh network with an interpolating minimum, and the linear bilinear teacher.

Near θ* each run follows δ ← (I − ηĤ_b)δ (exactly, on the quadratic losses; to O(r) relative on the tanh
network), so E‖δ_t‖² and E‖δ_t‖⁴ are given exactly by the maps of E[δδᵀ] and E[δ^{⊗4}], built by enumerating
every minibatch (``_sgd_maps``). ‖δ_t‖² is a product of random factors, heavy-tailed as t grows; each ensemble's
steps t and seeds S are chosen such that its exact standard error SE = √((E‖δ_t‖⁴ − (E‖δ_t‖²)²)/S) puts the
predicted E‖δ_t‖² at least 8 SE below ‖δ_0‖² at 0.98 η* and 8 SE above it at 1.02 η* (asserted). The ensemble's
mean is then asserted within 4 SE of the prediction, which leaves it at least 4 SE on the predicted side of
‖δ_0‖². In every case 1.02 η* is below GD's 2/λ_max, so the growth is SGD's instability, not GD's. float64,
fixed seeds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _sgd_maps import exact_moments
from jax.flatten_util import ravel_pytree

import popdyn
from popdyn.dynamics import SGD, SaveAt
from popdyn.exact import WeightedTable
from popdyn.tasks.teacher import BilinearTeacher, cnn_pooling


def squared(th, x):
    return 0.5 * (x["x"] @ th - x["y"]) ** 2


def regression(points, theta_star):
    """Least squares on the rows of ``points`` with realisable labels y = x·θ*: every example's loss vanishes at θ*."""
    table = WeightedTable.uniform({"x": points, "y": points @ theta_star})
    return popdyn.Problem.from_examples(squared, np.zeros(points.shape[1]), data=table)


def polygon(n, radius):
    """n equally spaced points on the circle of this radius: a spherical (n − 1)-design."""
    angles = 2 * np.pi * np.arange(n) / n + 0.3
    return radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)


def icosahedron(radius):
    """The 12 vertices of an icosahedron on the sphere of this radius: a spherical 5-design."""
    phi = (1 + math.sqrt(5)) / 2
    v = [(0, s, t * phi) for s in (1, -1) for t in (1, -1)]
    v = np.array([p[k:] + p[:k] for p in v for k in range(3)], dtype=float)
    return radius * v / np.linalg.norm(v, axis=1, keepdims=True)


def isotropic_threshold(d, radius, p):
    """η*(B) = 2d/(α²(1 − p + pd)) for examples on a sphere of radius α forming a spherical 4-design, p = c_B.
    [derived: H_i = x_i x_iᵀ, H = α²I/d and E[(x̂ᵀCx̂) x̂x̂ᵀ] = (tr C · I + 2C)/(d(d + 2)), so T_η maps I to
    (1 − 2ηα²/d + η²α⁴((1 − p)/d² + p/d)) I and traceless C to a multiple of itself with a larger threshold.]"""
    return 2 * d / (radius**2 * (1 - p + p * d))


def test_isotropic_tables_have_the_closed_form_threshold():
    """A hexagon (d = 2) and an icosahedron (d = 3) of radius α: η*(B) = 2d/(α²(1 − p + pd)) to 1e-12 for every B,
    with replacement (p = 1/B) and without (p = (n − B)/(B(n − 1))); B = 1 gives 2/α², 1/d of GD's 2d/α²."""
    for points, theta_star in (
        (polygon(6, 1.3), np.array([0.6, -0.4])),
        (icosahedron(0.9), np.array([0.3, 1.0, -0.5])),
    ):
        n, d = points.shape
        radius, prob, B = float(np.linalg.norm(points[0])), regression(points, theta_star), np.arange(1, n + 1)
        for replace, p in ((True, 1 / B), (False, (n - B) / (B * (n - 1)))):
            found = popdyn.sgd_threshold(prob, theta_star, B, replace)
            np.testing.assert_allclose(found, isotropic_threshold(d, radius, p), rtol=1e-12, atol=0)
            assert abs(found[0] * radius**2 / 2 - 1) <= 1e-12
        gd = popdyn.mean_square_stability(prob, theta_star, 1).gd_threshold
        assert abs(gd / (2 * d / radius**2) - 1) <= 1e-12


def example_hessians(prob, theta):
    """(H_i = ∇²ℓ(θ, x_i) over the flattened θ for every example, the weights w_i)."""
    flat, unravel = ravel_pytree(theta)
    data = prob.examples()
    hessian = jax.hessian(lambda f, x: prob.example_loss(unravel(f), x))
    return np.asarray(jax.jit(jax.vmap(hessian, in_axes=(None, 0)))(flat, data.points)), np.asarray(data.weights)


def ensemble(prob, theta_star, delta0, eta, B, replace, steps, seeds) -> np.ndarray:
    """‖θ_t − θ*‖²/‖δ_0‖² of ``seeds`` SGD runs of ``steps`` steps from θ* + δ_0 (δ_0 over the flattened θ), recorded
    by the runs themselves (``SaveAt.metrics``)."""
    flat, unravel = ravel_pytree(theta_star)
    save = SaveAt(every=steps, metrics=lambda t: {"d2": jnp.sum((ravel_pytree(t)[0] - flat) ** 2)})
    sgd = SGD(lr=eta, batch=B, replace=replace, steps=steps, seeds=seeds, seed=2, save=save)
    traj = sgd.run(prob, unravel(flat + jnp.asarray(delta0)))
    assert traj.status_counts()["max_steps"] == seeds  # each run still on its way, none diverged
    return np.asarray(traj.metrics["d2"][:, -1]) / np.sum(delta0**2)


def assert_decays_below_and_grows_above(prob, theta_star, Hs, w, delta0, B, replace, steps, seeds, block=None):
    """At 0.98 η*(B) and 1.02 η*(B): the exact E‖δ_t‖²/‖δ_0‖² is ≥ 8 SE on its side of 1, and the ensemble's mean is
    within 4 SE of it (SE the exact standard error of the mean of ``seeds`` runs). ``Hs`` are the examples'
    Hessians on the coordinates ``block`` of the flattened θ where δ moves (all of them by default)."""
    found = popdyn.mean_square_stability(prob, theta_star, B, replace)
    eta_star, gd = float(found.thresholds[0]), found.gd_threshold
    assert 1.02 * eta_star < 0.99 * gd
    moving = delta0 if block is None else delta0[block]
    r2 = float(np.sum(moving**2))
    for factor, side in ((0.98, -1.0), (1.02, 1.0)):
        m2, m4 = exact_moments(Hs, w, B, replace, factor * eta_star, moving, steps)
        exact, se = m2 / r2, math.sqrt((m4 - m2**2) / seeds) / r2
        assert side * (exact - 1.0) >= 8 * se, (factor, exact, se)
        got = ensemble(prob, theta_star, delta0, factor * eta_star, B, replace, steps, seeds)
        assert abs(got.mean() - exact) <= 4 * se, (factor, got.mean(), exact, se)


@pytest.mark.slow
def test_a_regression_on_an_isotropic_table():
    """The hexagon of radius 1.3 with realisable labels, 50,000 runs. B = 1 (η* = 2/α², half GD's): at η = 2/α² a step
    reflects δ along one example's direction, so ‖δ‖² barely fluctuates near η*: 32 steps. B = 2 without
    replacement (η* = 0.71 of GD's): heavier tails, 2 steps."""
    points, theta_star = polygon(6, 1.3), np.array([0.6, -0.4])
    prob = regression(points, theta_star)
    Hs, w = example_hessians(prob, jnp.asarray(theta_star))
    delta0 = 1e-3 * np.array([0.8, 0.6])
    assert_decays_below_and_grows_above(prob, theta_star, Hs, w, delta0, 1, True, 32, 50_000)
    assert_decays_below_and_grows_above(prob, theta_star, Hs, w, delta0, 2, False, 2, 50_000)


def student(th, x):
    return th["a"] @ jnp.tanh(th["W"] @ x)


@pytest.mark.slow
def test_a_users_network_at_an_interpolating_minimum():
    """A two-unit tanh network fitting a teacher of its own class on 8 points: zero loss at the teacher, where every
    example's gradient vanishes and SGD's linearised second moment is exactly T_η. One-example SGD (η* = 0.40 of
    GD's) from 10⁻⁴ along the top eigenvector of H: 40,000 runs of 8 steps."""
    X = np.random.default_rng(3).normal(size=(8, 2))
    theta_star = {"W": jnp.asarray([[1.0, -0.5], [0.3, 0.8]]), "a": jnp.asarray([0.9, -0.7])}
    y = np.asarray(jax.vmap(lambda x: student(theta_star, x))(jnp.asarray(X)))
    prob = popdyn.Problem.from_examples(
        lambda th, x: 0.5 * (student(th, x["x"]) - x["y"]) ** 2,
        {"W": np.zeros((2, 2)), "a": np.zeros(2)},
        data=WeightedTable.uniform({"x": X, "y": y}),
    )
    Hs, w = example_hessians(prob, theta_star)
    top = np.linalg.eigh(np.einsum("n,nij->ij", w, Hs))[1][:, -1]
    assert_decays_below_and_grows_above(prob, theta_star, Hs, w, 1e-4 * top, 1, True, 8, 40_000)


@pytest.mark.slow
def test_a_built_in_task_the_linear_teacher():
    """``BilinearTeacher`` (linear, D = 2 tokens, S* = I, d = 2, M = 1, no label noise) at its teacher point: the
    loss of every Gaussian draw vanishes there and is quadratic in W; the attention logits A are saturated (S = S*
    to rounding), a 4-dimensional flat direction that the examples' Hessians do not touch (their A rows and columns
    vanish to 1e-12 of their size), so δ moves in W alone. Draws come from the task's own Gauss–Hermite nodes (729,
    unequal weights) with replacement; one-draw SGD (η* = 0.4 of GD's) from 10⁻² along W (the loss is quadratic in
    W: the recursion is exact at any distance): 100,000 runs of 2 steps."""
    prob = BilinearTeacher(cnn_pooling(2, 1), np.array([[0.7, -0.4]]), activation="linear", sigma_eps=0.0)
    theta_star = prob.teacher_params()
    Hs, w = example_hessians(prob, theta_star)
    W = np.array([4, 5])  # ravel_pytree's order: A (2 × 2), then W (1 × 2)
    assert np.abs(Hs[:, :4, :]).max() <= 1e-12 * np.abs(Hs).max()
    found = popdyn.mean_square_stability(prob, theta_star, 1)
    assert found.flat == 4 and not found.flat_curved
    delta0 = np.zeros(6)
    delta0[W] = 1e-2 * np.array([0.6, 0.8])
    assert_decays_below_and_grows_above(prob, theta_star, Hs[:, 4:, 4:], w, delta0, 1, True, 2, 100_000, block=W)
