"""SCB stage 1 and stage 2 (docs/models/scb.md §5) at N = 10, T = 50, Q = 2: stage 1's stopping rule, the surrogate's
noise and gradient variance, Δ recorded without storing θ. The acceptance itself (the ℓ1-proximal method
recovers the truth where SGD with the same batch does not) is tested on ``popdyn reproduce scb-fig1``'s output
in test_scb_figures.py: it runs exactly these stage-2 runs."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.jobs._records import summary
from popdyn.jobs.scb._training import (
    Stage1Run,
    gradient_variance,
    population_reference,
    stage1,
    stage1_threshold,
    surrogate_noise,
    trajectory_metrics,
)
from popdyn.tasks.scb import SparseBigram, normalise, random_instance

pytestmark = pytest.mark.slow  # every test here runs end-to-end jobs or large instances


@pytest.fixture(scope="module")
def setting():
    prob = SparseBigram(*random_instance(jax.random.PRNGKey(0), 10, 50, 2))
    s1 = stage1(prob, Q=2)
    return prob, s1


def test_stage1_stops_at_the_threshold(setting):
    prob, s1 = setting
    assert s1.threshold == stage1_threshold(10, 2) == 0.1
    a = s1.alphas
    k = s1.step
    assert a[k].max() >= 0.1 and np.all(a[:k].max(axis=-1) < 0.1)
    assert a[k, 0] > a[k, 1]  # the V signal crosses first (§10)
    np.testing.assert_allclose(prob.signals(s1.theta), a[k], rtol=1e-14)


def test_stage1_chunks_do_not_change_the_result(setting):
    """Chunked early stopping: 3 steps per compiled call gives the same step, signals and θ as 100."""
    prob, s1 = setting
    small = stage1(prob, Q=2, chunk=3)
    assert small.step == s1.step
    np.testing.assert_allclose(small.alphas, s1.alphas, rtol=1e-13, atol=1e-15)
    for b in ("V", "A"):
        np.testing.assert_allclose(small.theta[b], s1.theta[b], rtol=1e-13, atol=1e-15)
    assert stage1(prob, Q=2, max_steps=5, chunk=3).step is None


def test_stage1_record(setting):
    """``stage1`` returns a frozen ``Stage1Run`` whose JSON part is the step and the threshold, without θ and
    the signals."""
    _, s1 = setting
    assert isinstance(s1, Stage1Run)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s1.step = 0
    assert summary(s1) == {"step": s1.step, "threshold": 0.1}
    json.dumps(summary(s1), allow_nan=False)
    assert s1.alphas.shape == (s1.step + 1, 2) and s1.ts.shape == (s1.step + 1,)


def test_surrogate_noise_and_normalise():
    assert surrogate_noise({"V": 0.04, "A": 0.01}, 100) == pytest.approx({"V": 0.02, "A": 0.01})
    theta = {"V": jnp.array([[0.5, -1.0], [1.5, -2.0]]), "A": jnp.array([[2.0, 0.0], [-1.0, 3.0]])}
    n = normalise(theta)
    np.testing.assert_allclose(n["V"], [[0.25, 0.5], [0.75, 0.5]])  # second column had no positive entry
    np.testing.assert_allclose(n["A"], [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="batch"):
        surrogate_noise({"V": 1.0}, 0)


def test_gradient_variance_from_squared_norms_equals_direct_variance(setting):
    """(E‖g‖² − ‖E g‖²)/size with E g the exact population gradient: on the same draws it equals the per-entry
    variance of explicitly formed per-sample gradients up to ‖ḡ − E g‖²-order terms (1%); gradient_variance
    (other draws, in chunks) lies within 4 standard errors of the Monte Carlo mean of ‖g‖²."""
    from popdyn.tasks.scb import per_sample_gradients
    from popdyn.tasks.scb.sampling import per_sample_sq_norms

    prob, s1 = setting
    theta = s1.theta
    # 4000 draws in chunks of 1000, the chunk of gradient_variance below: one compiled sampler and norm for both
    chunks = [prob.sample(key, 1000) for key in jax.random.split(jax.random.PRNGKey(5), 4)]
    data = tuple(jnp.concatenate(parts) for parts in zip(*chunks, strict=True))
    g = per_sample_gradients(prob, theta, data, project=True)
    norms = [per_sample_sq_norms(prob, theta, c, project=True) for c in chunks]
    sq = {b: jnp.concatenate([n[b] for n in norms]) for b in ("V", "A")}
    mean_g = prob.precondition(jax.grad(prob.loss)(theta), project=True)
    var = gradient_variance(prob, theta, jax.random.PRNGKey(6), samples=4000, chunk=1000)
    for b in ("V", "A"):
        np.testing.assert_allclose(sq[b], jnp.sum(g[b] ** 2, axis=(1, 2)), rtol=1e-12)
        size = mean_g[b].size
        formula = (float(jnp.mean(sq[b])) - float(jnp.sum(mean_g[b] ** 2))) / size
        direct = float(jnp.mean(jnp.var(g[b], axis=0)))
        assert abs(formula / direct - 1) < 0.01, (b, formula, direct)
        se = float(jnp.std(sq[b])) / np.sqrt(4000) / size
        assert abs(var[b] - formula) < 4 * np.sqrt(2) * se, (b, var[b], formula, se)


def test_with_reference_records_delta_without_storing_theta(setting):
    """The paired run (state + noise-free reference, one compiled loop) gives the same metrics as two separate
    runs with saved parameters (deterministic case: ℓ1 prox, no noise)."""
    import popdyn
    from popdyn.dynamics import L1Prox
    from popdyn.jobs.scb._training import preconditioner
    from popdyn.tasks.scb import WithReference

    prob, s1 = setting
    pair = WithReference(prob)
    paired = popdyn.gradient_descent(
        pair,
        pair.pair(s1.theta),
        lr=0.1,
        steps=200,
        record_every=20,
        precondition=pair.precondition,
        prox=L1Prox({"A": 0.002}),
        metrics=pair.metrics,
    )
    assert paired.params is None
    run = popdyn.gradient_descent(
        prob,
        s1.theta,
        lr=0.1,
        steps=200,
        record_every=20,
        save_params=True,
        precondition=preconditioner(prob),
        prox=L1Prox({"A": 0.002}),
    )
    separate = trajectory_metrics(prob, run, population_reference(prob, s1.theta, lr=0.1, steps=200, record_every=20))
    assert set(paired.metrics) == set(separate.state.named())
    for k, v in paired.metrics.items():
        np.testing.assert_allclose(v, separate.state.named()[k], rtol=1e-10, atol=1e-14, err_msg=k)
    assert separate.state.delta_A_mu[-1] > 1e-3  # the prox did move the state off the reference
