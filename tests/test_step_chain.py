"""Gradient descent's step as an optax chain: the links of ``popdyn.dynamics._transforms`` composed in an optimizer
factory give the keyword options' runs bit for bit, compose in orders the keywords cannot express (noise after
momentum, checked against a hand-written loop), take one learning rate per start, and draw Gaussian noise of the
stated variance."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import popdyn
from popdyn.dynamics import block_rates, gaussian_noise, preconditioned

STEPS = 30
DOCS = Path(__file__).parent.parent / "docs" / "dynamics.md"


def _loss(theta):
    a, b = theta["a"], theta["b"]
    return 0.5 * jnp.sum((b @ a[:2] - 1.0) ** 2) + 0.25 * jnp.sum(a**4) + 0.1 * jnp.sum(b**2) * a[2] ** 2


def _init(key):
    return {"a": jax.random.normal(key, (3,)), "b": jax.random.normal(jax.random.fold_in(key, 1), (2, 2))}


@pytest.fixture(scope="module")
def problem():
    prob = popdyn.Problem.from_loss(_loss, _init)
    starts = jax.vmap(_init)(jax.random.split(jax.random.PRNGKey(3), 6))
    return prob, starts


def _halve(g):
    return jax.tree_util.tree_map(lambda x: 0.5 * x, g)


@pytest.mark.slow
def test_the_keywords_are_one_chain_bit_for_bit(problem):
    """precondition, noise, time_scales and momentum as keywords, and the same links as an explicit chain in an
    optimizer factory (P, σξ, τ, heavy ball, −η): identical runs, with one learning rate per start."""
    prob, starts = problem
    lrs = np.linspace(0.02, 0.2, 6)
    sigma, rates, mu = {"a": 0.05, "b": 0.02}, {"a": 2.0}, 0.8

    def chain(lr):
        return optax.chain(
            preconditioned(_halve),
            gaussian_noise(sigma),
            block_rates(rates),
            optax.trace(mu),
            optax.scale_by_learning_rate(lr),
        )

    keywords = popdyn.gradient_descent(
        prob, starts, lrs, STEPS, precondition=_halve, noise=sigma, time_scales=rates, momentum=mu, seed=9
    )
    explicit = popdyn.gradient_descent(prob, starts, lrs, STEPS, optimizer=chain, seed=9)
    # the steps are the same; the statuses may differ: with the keywords the stopping rule reads −τ⊙P(∇L), with an
    # optimizer it reads −∇L
    for k in keywords.final:
        np.testing.assert_array_equal(np.asarray(keywords.final[k]), np.asarray(explicit.final[k]), err_msg=k)
    np.testing.assert_array_equal(np.asarray(keywords.loss), np.asarray(explicit.loss))


@pytest.mark.slow
def test_noise_after_momentum_is_the_hand_written_update(problem):
    """b ← μb + ∇L, θ ← θ − η(b + σξ): noise outside the momentum buffer, which the keywords cannot express, equals a
    loop over the same draws (ξ from the start's key, folded with the step, second half of its split)."""
    prob, starts = problem
    lr, mu, sigma, seed = 0.05, 0.9, 0.03, 4
    traj = popdyn.gradient_descent(
        prob,
        starts,
        lr,
        STEPS,
        optimizer=lambda rate: optax.chain(optax.trace(mu), gaussian_noise(sigma), optax.scale_by_learning_rate(rate)),
        seed=seed,
    )
    keys = jax.random.split(jax.random.PRNGKey(seed), 6)
    grad = jax.jit(jax.grad(_loss))
    for p in range(6):
        theta = jax.tree_util.tree_map(lambda x, p=p: np.asarray(x[p]), starts)
        buffer = jax.tree_util.tree_map(np.zeros_like, theta)
        for i in range(STEPS):
            key_noise = jax.random.split(jax.random.fold_in(keys[p], i))[1]
            g = grad(theta)
            leaves, tree = jax.tree_util.tree_flatten(g)
            leaf_keys = jax.random.split(key_noise, len(leaves))
            draws = [np.asarray(jax.random.normal(k, x.shape, x.dtype)) for x, k in zip(leaves, leaf_keys, strict=True)]
            xi = jax.tree_util.tree_unflatten(tree, draws)
            buffer = jax.tree_util.tree_map(lambda b, d: mu * b + np.asarray(d), buffer, g)
            theta = jax.tree_util.tree_map(lambda x, b, z: x - lr * (b + sigma * z), theta, buffer, xi)
        for k in theta:
            np.testing.assert_allclose(np.asarray(traj.final[k][p]), theta[k], rtol=1e-12, atol=1e-14)
    # and it is not the keywords' heavy ball, whose buffer accumulates the noise
    inside = popdyn.gradient_descent(prob, starts, lr, STEPS, momentum=mu, noise=sigma, seed=seed)
    assert not np.allclose(np.asarray(inside.final["a"]), np.asarray(traj.final["a"]), rtol=1e-6)


@pytest.mark.slow
def test_one_learning_rate_per_start_for_a_composed_chain(problem):
    """A chain factory (heavy ball, per-block rates) takes each start's own learning rate: the batch equals the
    keyword run, where per-start rates were already exact, bit for bit."""
    prob, starts = problem
    lrs = np.array([0.01, 0.03, 0.05, 0.1, 0.15, 0.2])
    chained = popdyn.gradient_descent(
        prob,
        starts,
        lrs,
        STEPS,
        optimizer=lambda lr: optax.chain(block_rates({"b": 0.5}), optax.trace(0.5), optax.scale_by_learning_rate(lr)),
    )
    keywords = popdyn.gradient_descent(prob, starts, lrs, STEPS, momentum=0.5, time_scales={"b": 0.5})
    np.testing.assert_array_equal(np.asarray(chained.loss), np.asarray(keywords.loss))
    np.testing.assert_array_equal(np.asarray(chained.final["b"]), np.asarray(keywords.final["b"]))


@pytest.mark.slow
def test_gaussian_noise_has_the_stated_variance_per_block():
    """20,000 draws of the link on a zero update: mean 0 and variance σ_b² per block (within 4 standard errors;
    σ = 0 for a block not named), each leaf its own stream."""
    link = gaussian_noise({"w": 0.3})
    zero = {"w": jnp.zeros(5), "v": jnp.zeros(3)}
    draw = jax.jit(jax.vmap(lambda k: link.update(zero, link.init(zero), key=k)[0]))
    out = draw(jax.random.split(jax.random.PRNGKey(0), 20_000))
    w = np.asarray(out["w"])
    n = w.size
    assert abs(w.mean()) < 4 * 0.3 / np.sqrt(n)
    var_se = 0.09 * np.sqrt(2.0 / n)  # SE of the sample variance of a Gaussian
    assert abs(w.var() - 0.09) < 4 * var_se
    np.testing.assert_array_equal(np.asarray(out["v"]), 0.0)


@pytest.mark.validation
def test_links_refuse_bad_settings_and_unknown_blocks():
    with pytest.raises(ValueError, match="std"):
        gaussian_noise(-0.1)
    with pytest.raises(ValueError, match=r"rates\['a'\]"):
        block_rates({"a": 0.0})
    with pytest.raises(ValueError, match="precondition"):
        preconditioned(3.0)  # type: ignore[arg-type]  # the wrong type on purpose
    with pytest.raises(ValueError, match="needs a PRNG key"):
        gaussian_noise(0.1).update(jnp.zeros(2), optax.EmptyState())
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['c'\]"):
        block_rates({"c": 2.0}).update({"a": jnp.zeros(2)}, optax.EmptyState())
    with pytest.raises(ValueError, match=r"gaussian_noise names unknown parameter\(s\) \['w'\]"):
        gaussian_noise({"w": 0.1}).update(jnp.zeros(2), optax.EmptyState(), key=jax.random.PRNGKey(0))


@pytest.mark.slow
def test_the_docs_example_runs_noise_after_momentum(problem):
    """docs/dynamics.md's "A step as a chain" example, executed from the page on two starts: its ``step`` is the
    chain trace(0.9) → noise 0.03 → −η, the same run as that chain written here."""
    prob, starts = problem
    section = DOCS.read_text().split("### A step as a chain", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    theta0 = jax.tree_util.tree_map(lambda x: x[:2], starts)
    namespace: dict = {"popdyn": popdyn, "np": np, "prob": prob, "theta0": theta0}
    exec(compile(code.group(1), str(DOCS), "exec"), namespace)
    here = popdyn.gradient_descent(
        prob,
        theta0,
        lr=np.array([0.01, 0.05]),
        steps=500,
        optimizer=lambda lr: optax.chain(optax.trace(0.9), gaussian_noise(0.03), optax.scale_by_learning_rate(lr)),
        seed=0,
    )
    np.testing.assert_array_equal(np.asarray(namespace["traj"].loss), np.asarray(here.loss))
    assert np.all(np.isfinite(np.asarray(here.loss)))


@pytest.mark.parametrize(
    "option",
    [
        {"optimizer": lambda lr: optax.chain(optax.trace(0.9), optax.scale_by_learning_rate(lr))},
        {"precondition": _halve},
        {"time_scales": {"a": 2.0}},
    ],
    ids=["optimizer", "precondition", "time_scales"],
)
@pytest.mark.slow
def test_the_step_size_audit_refuses_a_step_whose_thresholds_differ(problem, option):
    """1/η and 2/η (heavy ball's with μ) on λ_max(∇²L) are plain and heavy-ball GD's thresholds: a run through an
    optimizer's chain (here heavy ball at μ = 0.9, whose edge is 3.8/η, not 2/η), a preconditioner or per-block
    rates is refused, not audited against the wrong ones; the same run without the option is audited."""
    prob, starts = problem
    one = jax.tree_util.tree_map(lambda x: x[0], starts)
    traj = popdyn.gradient_descent(prob, one, 0.1, 10, save_params=True, **option)
    with pytest.raises(ValueError, match=f"traj's step has {next(iter(option))}"):
        popdyn.step_size_audit(prob, traj)
    plain = popdyn.gradient_descent(prob, one, 0.1, 10, save_params=True)
    assert np.isfinite(popdyn.step_size_audit(prob, plain).max_lambda)
