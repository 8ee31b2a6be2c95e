"""Numbers that describe the data (and the initialisation scale) are array leaves of every built-in Problem: a
new value reuses the compiled programs, problems stack and run in one vmapped call, and the run identity (the
traced program with its constants) still tells them apart. Sizes, lists and flags stay static."""

from __future__ import annotations

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _props import no_compilation

import popdyn
from popdyn import _identity as identity
from popdyn.exact import Chain
from popdyn.tasks.decision_list import DecisionList, ReducedDecisionList, random_lists, random_perm
from popdyn.tasks.markov import AttentionScalar, Canonical, Transformer
from popdyn.tasks.scb import Reduced2D, Reduced4D

VG = eqx.filter_jit(lambda prob, th: jax.value_and_grad(prob.loss)(th))
INIT = eqx.filter_jit(lambda prob, key: prob.init(key))

L, N_TOK, LISTS, PERM = 4, 2, random_lists(4, 2, seed=1), random_perm(4, seed=2)


def _theta(prob, seed=0):
    """A generic point: the template's shapes filled with N(0, 0.7²)."""
    leaves, tree = jax.tree_util.tree_flatten(prob.template())
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree_util.tree_unflatten(
        tree, [0.7 * jax.random.normal(k, t.shape) for k, t in zip(keys, leaves, strict=False)]
    )


# name → builder from one data value v (the problems of one name share shapes and static fields)
BUILDERS = {
    "canonical-profiled": lambda v: Canonical(v, 0.3),
    "canonical-trained": lambda v: Canonical(0.4, v, bias="trained"),
    "canonical-profiled-q": lambda v: Canonical(0.35, v),
    "attention-scalar": lambda v: AttentionScalar(v, 0.3, N=3),
    "attention-scalar-profiled": lambda v: AttentionScalar(0.2, v, N=3, bias="profiled"),
    "decision-list-W": lambda v: DecisionList(L, N_TOK, LISTS, PERM, c=1.0 + v, train="W"),
    "decision-list-both": lambda v: DecisionList(L, N_TOK, LISTS, PERM, c=1.0 + v, init_eps=v),  # c: V₀ only
    "reduced-decision-list": lambda v: ReducedDecisionList(L, N_TOK, (1, 2), 1.0 + 3.0 * v),
    "scb-2d": lambda v: Reduced2D(0.5 + v, 0.6 + 0.5 * v, 3, 0.4 + v),
    "scb-4d": lambda v: Reduced4D(0.5 + v, 0.6 + 0.5 * v, 3, 0.4 + v),
}
# the data values: each name compiles for the first and reuses the programs for the others
VALUES = (0.2, 0.45, 0.1)
# the loss depends on the data in each of these (DecisionList "both" and AttentionScalar "profiled" only add
# V₀ = cP and another solver; they are stacked below)
RECOMPILE_CASES = (
    "canonical-profiled",
    "canonical-trained",
    "canonical-profiled-q",
    "attention-scalar",
    "decision-list-W",
    "reduced-decision-list",
    "scb-2d",
    "scb-4d",
)


@pytest.mark.slow
@pytest.mark.parametrize("name", RECOMPILE_CASES)
def test_a_new_data_value_compiles_nothing(name):
    """The same jitted value-and-gradient and ``gradient_descent`` serve every data value: after one problem,
    problems with other values compile nothing (with static data fields each value compiled anew). The values
    against per-problem references are checked by the stacked test below."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probs = [BUILDERS[name](v) for v in VALUES]  # built first: AttentionScalar runs its count DP eagerly
    theta = _theta(probs[0])
    first = VG(probs[0], theta)
    first_gd = popdyn.gradient_descent(probs[0], theta, lr=0.1, steps=5)
    with no_compilation(f"{name}: a new data value compiled again"):
        again = [VG(prob, theta) for prob in probs[1:]]
        gd = [popdyn.gradient_descent(prob, theta, lr=0.1, steps=5) for prob in probs[1:]]
    values = [float(first[0])] + [float(v) for v, _ in again]
    assert len(set(values)) == len(values)  # the reused programs see the new data
    for value, traj in zip(values, [first_gd, *gd], strict=False):
        assert np.asarray(traj.loss).shape == np.asarray(first_gd.loss).shape
        np.testing.assert_allclose(np.asarray(traj.loss)[0], value, rtol=1e-13)


@pytest.mark.slow
def test_a_new_initialisation_scale_compiles_nothing():
    """init_std (Canonical, AttentionScalar, Transformer), init_eps and c (DecisionList: V₀ = cP + noise) are
    leaves: one compiled ``init`` serves every value, and the draws change with it."""
    chain = Chain.binary(0.2, 0.3)
    groups = [
        [Canonical(0.2, 0.3, init_std=s) for s in (0.01, 0.5)],
        [AttentionScalar(0.2, 0.3, N=3, init_std=s) for s in (0.01, 0.5)],
        [Transformer(chain, N=3, d=2, init_std=s) for s in (0.02, 1.0)],
        [DecisionList(L, N_TOK, LISTS, PERM, init_eps=s) for s in (0.01, 0.5)],
        [DecisionList(L, N_TOK, LISTS, PERM, c=c, init_eps=0.1) for c in (1.0, 3.0)],
    ]
    key = jax.random.PRNGKey(3)
    for small, large in groups:
        a = INIT(small, key)
        with no_compilation(f"{type(small).__name__}: a new initialisation scale compiled again"):
            b = INIT(large, key)
        ref = large.init(key)
        for x, y in zip(jax.tree_util.tree_leaves(b), jax.tree_util.tree_leaves(ref), strict=False):
            np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-15)
        assert any(
            not np.allclose(x, y)
            for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=False)
        )


def _stack(probs):
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *probs)


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILDERS)
def test_stacked_problems_run_in_one_vmapped_call(name):
    """``jax.tree.map(jnp.stack)`` over problems of one structure gives a batch that vmaps with a batch of θ (in one
    jitted call); every member equals its own problem's value and gradient (to 1e-13), computed by the per-problem
    program ``VG``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probs = [BUILDERS[name](v) for v in VALUES]
    thetas = [_theta(probs[0], seed) for seed in range(len(probs))]
    values, grads = eqx.filter_jit(eqx.filter_vmap(lambda prob, th: jax.value_and_grad(prob.loss)(th)))(
        _stack(probs), jax.tree_util.tree_map(lambda *x: jnp.stack(x), *thetas)
    )
    for i, (prob, theta) in enumerate(zip(probs, thetas, strict=False)):
        ref_value, ref_grad = VG(prob, theta)
        np.testing.assert_allclose(values[i], ref_value, rtol=1e-13, atol=1e-15)
        for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref_grad), strict=False):
            np.testing.assert_allclose(a[i], b, rtol=1e-13, atol=1e-14)


@pytest.mark.slow
def test_canonical_closed_forms_trace_and_vmap():
    """The report closed forms are Python floats on a concrete problem and arrays under jit/vmap, equal to 1e-13;
    the attractor residuals, the predicted basin and limit run on a traced problem as on a concrete one."""
    pqs = [(0.7, 0.2), (0.5, 0.8), (0.1, 0.1), (0.9, 0.9), (0.2, 0.3)]
    probs = [Canonical(p, q) for p, q in pqs]
    for prob in probs:
        for v in (prob.pi0, prob.pi1, prob.entropy_rate(), prob.unigram_loss(), prob.optimal_gap()):
            assert type(v) is float
        assert all(type(v) is float for v in prob.separatrix_w_range())

    def forms(prob):
        return (
            prob.pi0,
            prob.pi1,
            prob.entropy_rate(),
            prob.unigram_loss(),
            prob.optimal_gap(),
            *prob.separatrix_w_range(),
        )

    batched = eqx.filter_jit(eqx.filter_vmap(forms))(_stack(probs))
    for i, prob in enumerate(probs):
        np.testing.assert_allclose([b[i] for b in batched], forms(prob), rtol=1e-13, atol=1e-15)

    theta = {"e": jnp.array([0.3, -1.2, 0.0, 2.0]), "w": jnp.array([-0.5, 0.8, -0.2, -1.5])}
    residuals = eqx.filter_jit(lambda prob, th: {k: jax.vmap(f)(th) for k, f in prob.attractors().items()})
    basin = eqx.filter_jit(lambda prob, th: jax.vmap(prob.predicted_basin)(th))
    limit = eqx.filter_jit(lambda prob, th: jax.vmap(prob.predicted_limit)(th))
    for prob in probs[:2]:  # p > q with p+q < 1, p < q with p+q > 1
        for traced, eager in (
            (residuals(prob, theta), {k: jax.vmap(f)(theta) for k, f in prob.attractors().items()}),
            (basin(prob, theta), jax.vmap(prob.predicted_basin)(theta)),
            (limit(prob, theta), jax.vmap(prob.predicted_limit)(theta)),
        ):
            for a, b in zip(jax.tree_util.tree_leaves(traced), jax.tree_util.tree_leaves(eager), strict=False):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_scb_reduced_closed_forms_trace_and_vmap():
    """L*, the saddle and the eigenvalues at the minimum: floats on a concrete system, arrays under vmap."""
    reds = [Reduced2D(c, qbar, 4, mu) for c, qbar, mu in ((0.3, 0.5, 0.2), (0.7, 0.9, 0.5), (1.2, 0.4, 0.9))]
    forms = lambda red: (red.L_star, *red.saddle(), *red.eigenvalues_at_minimum())  # noqa: E731
    for red in reds:
        assert all(type(v) is float for v in forms(red))
    batched = eqx.filter_vmap(forms)(_stack(reds))
    for i, red in enumerate(reds):
        np.testing.assert_allclose([np.broadcast_to(b, (3,))[i] for b in batched], forms(red), rtol=1e-13)


@pytest.mark.slow
def test_profiled_loss_derivative_in_the_data_is_the_envelope_one():
    """d/dp of the profiled loss at fixed θ is ∂L/∂p of the trained-bias loss at b = b*(θ) (envelope theorem),
    and matches central differences; the derivative in θ is unchanged by the data tangent."""
    theta = {"e": jnp.asarray(0.8), "w": jnp.asarray(-0.4)}
    for p, q in ((0.2, 0.3), (0.7, 0.2), (0.4, 0.4)):
        prob = Canonical(p, q)
        d_prob = eqx.filter_grad(lambda pr: pr.loss(theta))(prob)
        trained = Canonical(p, q, bias="trained")
        th3 = theta | {"b": prob.optimal_bias(theta)}
        d_trained = eqx.filter_grad(lambda pr, th3=th3: pr.loss(th3))(trained)
        np.testing.assert_allclose([d_prob.p, d_prob.q], [d_trained.p, d_trained.q], rtol=1e-12, atol=1e-14)
        h = 1e-6
        fd_p = (Canonical(p + h, q).loss(theta) - Canonical(p - h, q).loss(theta)) / (2 * h)
        fd_q = (Canonical(p, q + h).loss(theta) - Canonical(p, q - h).loss(theta)) / (2 * h)
        np.testing.assert_allclose([d_prob.p, d_prob.q], [fd_p, fd_q], rtol=1e-7, atol=1e-9)


def test_subnormal_data_values_give_finite_losses():
    """XLA on CPU reads subnormal numbers as zero; the canonical loss takes ln p, ln q, π and the sign of p − q from
    their bit patterns, so subnormal p, q still give finite values and gradients (p > q decided correctly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p, q in ((0.5, 5e-324), (5e-324, 5e-324), (1e-320, 3e-321), (2.3e-308, 2.2e-308), (4e-310, 0.3)):
            for bias in ("profiled", "trained"):
                prob = Canonical(p, q, bias=bias)
                theta = _theta(prob)
                value, grad = jax.value_and_grad(prob.loss)(theta)
                assert np.isfinite(value) and all(np.isfinite(g) for g in jax.tree_util.tree_leaves(grad))
                if bias == "profiled":  # b* is the exact bias: the trained loss there equals the profiled one
                    th3 = theta | {"b": prob.optimal_bias(theta)}
                    np.testing.assert_allclose(Canonical(p, q, bias="trained").loss(th3), value, rtol=1e-13)
                assert 0.0 <= prob.pi1 <= 1.0


def _identity(prob) -> str:
    """The identity of the program a run of ``prob`` traces: its loss, gradient and initialisation."""
    return identity.program(
        lambda th, key: (jax.value_and_grad(prob.loss)(th), prob.init(key)), _theta(prob), jax.random.PRNGKey(0)
    )


def test_run_identities_tell_data_values_apart():
    """The traced program carries the data leaves as constants: problems with other data values differ, equal
    ones agree, although the program's structure is the same."""
    assert _identity(Canonical(0.2, 0.3)) == _identity(Canonical(0.2, 0.3))
    assert _identity(Canonical(0.2, 0.3)) != _identity(Canonical(0.2, 0.35))
    assert _identity(Canonical(0.2, 0.3)) != _identity(Canonical(0.2, 0.3, init_std=0.02))
    assert _identity(Reduced2D(0.5, 0.6, 3, 0.4)) != _identity(Reduced2D(0.5, 0.6, 3, 0.41))
    lists = [DecisionList(L, N_TOK, LISTS, PERM, c=c) for c in (1.0, 2.0)]
    assert _identity(lists[0]) != _identity(lists[1])
    reduced = [ReducedDecisionList(L, N_TOK, (1,), c) for c in (1.0, 1.5)]
    assert _identity(reduced[0]) != _identity(reduced[1])
