"""OOD error of the teacher task (docs/models/teacher.md §7): the exact linear formula against Monte Carlo with
exponential inputs, its Gaussian special case against the in-distribution loss, and zero at the teacher."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from popdyn.tasks.teacher import BilinearTeacher, cnn_pooling, random_V
from popdyn.tasks.teacher.ood import ood_excess_linear, ood_excess_mc

D, K, M, d = 6, 2, 3, 4


def teacher(activation: str) -> BilinearTeacher:
    return BilinearTeacher(cnn_pooling(D, K), random_V(jax.random.PRNGKey(0), M, d), activation)


def generic_theta(key=1):
    kw, ka = jax.random.split(jax.random.PRNGKey(key))
    return {"W": jax.random.normal(kw, (M, d)), "A": 2.0 * jax.random.normal(ka, (D, D))}


@pytest.mark.slow
def test_linear_formula_matches_monte_carlo_with_exponential_inputs():
    """Exp(rate) entries have mean 1/rate and variance 1/rate²; the drift term m²D‖(W − V*)1‖² is what makes
    the OOD loss differ from the Gaussian one."""
    prob, theta = teacher("linear"), generic_theta()
    for rate in (1.0, 2.0):
        exact = float(ood_excess_linear(prob, theta, mean=1 / rate, var=1 / rate**2))
        est, se = (float(v) for v in ood_excess_mc(prob, theta, jax.random.PRNGKey(5), 200_000, rate=rate))
        assert abs(est - exact) < 4 * se, (rate, est, exact, se)
        assert se < 0.02 * exact  # the check has teeth
    drift = float(ood_excess_linear(prob, theta, mean=1.0, var=0.0))
    assert drift > 0.05 * float(ood_excess_linear(prob, theta))


def test_centred_unit_variance_is_the_in_distribution_excess_loss():
    """With m = 0, s² = σ_x² = 1 the OOD excess is L − L_opt of §3.4 (the same Gaussian second moments)."""
    prob, theta = teacher("linear"), generic_theta(2)
    np.testing.assert_allclose(
        ood_excess_linear(prob, theta, mean=0.0, var=1.0), prob.loss(theta) - prob.L_opt, rtol=1e-13
    )


@pytest.mark.parametrize("activation", ["linear", "relu", "leaky"])
def test_zero_at_the_teacher(activation):
    prob = teacher(activation)
    at = prob.teacher_params()
    est, se = ood_excess_mc(prob, at, jax.random.PRNGKey(3), 1000)
    assert float(est) < 1e-20 and float(se) < 1e-20
    if activation == "linear":
        assert float(ood_excess_linear(prob, at)) < 1e-20


def test_relu_monte_carlo_is_positive_and_bad_input():
    prob = teacher("relu")
    est, se = (float(v) for v in ood_excess_mc(prob, generic_theta(), jax.random.PRNGKey(4), 20_000))
    assert est > 10 * se > 0
    with pytest.raises(ValueError, match="alpha=0"):
        ood_excess_linear(prob, generic_theta())
    with pytest.raises(ValueError, match="rate"):
        ood_excess_mc(prob, generic_theta(), jax.random.PRNGKey(0), 10, rate=-1.0)
    with pytest.raises(ValueError, match="n=1"):
        ood_excess_mc(prob, generic_theta(), jax.random.PRNGKey(0), 1)
