"""The full covariance of the built-in tasks' per-example gradients (docs/sgd.md), not only its trace.

For each task, on the tiny instances of tests/test_task_examples.py at a generic θ:

- ``popdyn.gradient_noise``'s dense Σ equals a brute force taken in the test itself: the gradient of
  ``example_loss`` (``jax.grad``, flattened by ``ravel_pytree``) at every enumerated example, then NumPy's weighted
  mean ḡ = Σ_i w_i g_i and covariance Σ_i w_i (g_i − ḡ)(g_i − ḡ)ᵀ in float64, every entry to 1e-12 of max|Σ|;
  its mean equals ``jax.grad`` of the task's own exact loss to 1e-12 of max|∇L|.
- Σ agrees with Monte Carlo: S examples drawn by their weights, the mean of (g − ḡ)(g − ḡ)ᵀ about the exact ḡ,
  every entry within z standard errors of its own (z ≥ 4, Bonferroni over Σ's distinct entries, so that a correct Σ
  fails with probability ≤ 10⁻³); and 1.1 Σ is more than z standard errors away in some entry, so the check tells a
  wrong covariance.

``Whitened`` (the SCB step-size audit's coordinates) also has its examples average to its loss, and its Σ is the
SCB's Σ carried by the whitening map's Jacobian J = ∂θ/∂u: Σ_u = Jᵀ Σ_θ J.
"""

from __future__ import annotations

from statistics import NormalDist

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from test_task_examples import CLASSES, _assert_examples_average_to_the_loss, _linear_teacher, _theta

import popdyn
from popdyn.exact import Chain
from popdyn.tasks.decision_list import DecisionList, random_lists, random_perm
from popdyn.tasks.markov import AttentionScalar, Canonical, Transformer
from popdyn.tasks.scan_snap import ScanSnap
from popdyn.tasks.scb import SoftmaxBigram, SparseBigram, Whitened, random_instance
from popdyn.tasks.teacher import group_sparse

RTOL = 1e-12
SAMPLES = 40_000
"""Monte Carlo draws per task: enough that 1.1 Σ is told apart, few enough to take well under a second."""


def _scb():
    return SparseBigram(*random_instance(0, N=3, T=2, Q=2))


TASKS = {  # name: (a tiny instance, whether the check belongs to the slow tier)
    "transformer-binary": (lambda: Transformer(Chain.binary(0.2, 0.35), N=3, d=2), True),
    "transformer-3-states": (
        lambda: Transformer(Chain.from_matrix([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]]), N=2, d=2),
        True,
    ),
    "attention-scalar-trained": (lambda: AttentionScalar(0.2, 0.35, N=4, bias="trained"), False),
    "attention-scalar-profiled": (lambda: AttentionScalar(0.2, 0.35, N=3, bias="profiled"), True),
    "decision-list": (
        lambda: DecisionList(4, 2, random_lists(4, 2, seed=1), random_perm(4, seed=2), "distinct", train="both"),
        True,
    ),
    "scan-snap": (lambda: ScanSnap(CLASSES, T=3), True),
    "scan-snap-infinite": (lambda: ScanSnap(CLASSES), True),
    "sparse-bigram": (_scb, False),
    "softmax-bigram": (lambda: SoftmaxBigram(_scb().P, _scb().Qm), True),
    "canonical": (lambda: Canonical(0.2, 0.35, bias="trained", N=5), True),
    "linear-teacher": (lambda: _linear_teacher(group_sparse(2)), True),
}


def _flat_gradients(prob, theta):
    """(G, w): G[i] = ∇_θ ℓ(θ, x_i) flattened, at every point x_i of ``prob.examples()``, with its weight w_i."""
    data = prob.examples()
    grad = jax.jit(jax.vmap(lambda x: ravel_pytree(jax.grad(prob.example_loss)(theta, x))[0]))
    return np.asarray(grad(data.points), np.float64), np.asarray(data.weights, np.float64)


def _assert_covariance_is_brute_force(prob, theta):
    """``gradient_noise``'s mean, trace and dense Σ against the weighted moments of the per-example gradients
    (1e-12 of max|Σ|), and its mean against ∇ of the exact loss; returns (the noise, G, w)."""
    G, w = _flat_gradients(prob, theta)
    assert abs(w.sum() - 1.0) <= RTOL and np.all(w >= 0)
    mean = w @ G
    centred = G - mean
    sigma = (w[:, None] * centred).T @ centred
    noise = popdyn.gradient_noise(prob, theta)
    full = np.asarray(ravel_pytree(jax.grad(prob.loss)(theta))[0])
    assert noise.mean.shape == full.shape == mean.shape and noise.covariance.shape == sigma.shape
    scale = np.abs(full).max()
    assert np.abs(noise.mean - full).max() <= RTOL * scale, np.abs(noise.mean - full).max() / scale
    assert np.abs(mean - full).max() <= RTOL * scale, np.abs(mean - full).max() / scale
    top = np.abs(sigma).max()
    assert top > 0 and np.abs(noise.covariance - sigma).max() <= RTOL * top, np.abs(noise.covariance - sigma).max()
    assert abs(noise.trace - np.trace(sigma)) <= RTOL * np.trace(sigma)
    return noise, G, w


def _monte_carlo(G, w, mean, samples, seed):
    """(estimate, SE): the mean of (g − ḡ)(g − ḡ)ᵀ over ``samples`` examples drawn by their weights (the gradients
    G of the enumerated examples, rows picked by ``numpy``'s ``choice``), about the exact ``mean``; and the
    standard error of each entry's mean, from the sample variance of the products (c_a c_b)² − (c̄_ab)²."""
    idx = np.random.default_rng(seed).choice(len(w), size=samples, p=w)
    c = G[idx] - mean
    estimate = c.T @ c / samples
    second = (c**2).T @ (c**2) / samples  # the mean of (c_a c_b)²
    variance = np.maximum(second - estimate**2, 0.0) * samples / (samples - 1)
    return estimate, np.sqrt(variance / samples)


FAMILY_WISE = 1e-3
"""The chance that some entry of a correct Σ falls outside the band by chance (Bonferroni over the entries)."""


def _band(se):
    """The number of standard errors z allowed per entry: 4, or more where Σ has so many distinct random entries m
    that 4 each would leave a family-wise false alarm above FAMILY_WISE: 2m P(Z > z) = FAMILY_WISE, Z ~ N(0, 1).
    (At d = 72, m = 406, 4 SE per entry was seen to fail 1 seed in 40 for a Σ exact to 1e-12.)"""
    m = int(np.count_nonzero(np.triu(se > 0)))
    return max(4.0, NormalDist().inv_cdf(1 - FAMILY_WISE / (2 * max(m, 1))))


def _assert_monte_carlo(noise, G, w, samples=SAMPLES, seed=0):
    """Every entry of Σ within ``_band`` SE (at least 4) of its Monte Carlo estimate, and 1.1 Σ beyond that in
    some entry (the check tells a covariance 10% too large)."""
    estimate, se = _monte_carlo(G, w, noise.mean, samples, seed)
    sigma, z = noise.covariance, _band(se)
    worst = np.max(np.abs(estimate - sigma) / np.where(se > 0, se, np.inf))
    assert np.all(np.abs(estimate - sigma) <= z * se), f"worst entry {worst:.2f} SE, band {z:.2f} SE"
    assert np.any(np.abs(estimate - 1.1 * sigma) > z * se)


def _run_task(name):
    make, _ = TASKS[name]
    prob = make()
    noise, G, w = _assert_covariance_is_brute_force(prob, _theta(prob, 3))
    _assert_monte_carlo(noise, G, w)


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=pytest.mark.slow) if slow else name for name, (_, slow) in TASKS.items()]
)
def test_gradient_covariance_is_brute_force_and_monte_carlo(name):
    """Quick tier: AttentionScalar with a trained bias (d = 4, n = 32) and SparseBigram (d = 15, n = 81), 4 to 7 s
    each on 2 cores (the first pays JAX's start); slow tier, 2.5 to 13 s each: the other nine (the binary
    Transformer, d = 57, the longest)."""
    _run_task(name)


def test_whitened_examples_loss_and_noise():
    """Whitened: Σ_i w_i ℓ(u, x_i) = L(u) to 1e-12 at three u; Σ against brute force and Monte Carlo; and
    Σ_u = Jᵀ Σ_θ J with J = ∂θ/∂u (the whitening is affine), to 1e-12 of max|Σ_u|."""
    prob = _scb()
    origin = _theta(prob, 5)
    white = Whitened(prob, origin)
    _assert_examples_average_to_the_loss(white)
    u = _theta(white, 3)
    noise, G, w = _assert_covariance_is_brute_force(white, u)
    _assert_monte_carlo(noise, G, w)
    flat, unravel = ravel_pytree(u)
    J = np.asarray(jax.jacobian(lambda v: ravel_pytree(white.theta(unravel(v)))[0])(flat))
    carried = J.T @ popdyn.gradient_noise(prob, white.theta(u)).covariance @ J
    assert np.abs(noise.covariance - carried).max() <= RTOL * np.abs(carried).max()
