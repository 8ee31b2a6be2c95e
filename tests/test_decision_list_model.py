"""Decision lists, path B (histogram enumeration) against brute force and the closed forms of
docs/models/decision_lists.md §1, §5, §7."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn import gradient_descent, hessian_spectrum
from popdyn.exact._histograms import Histograms
from popdyn.tasks.decision_list import (
    brute_force_loss,
    brute_force_margin,
    random_lists,
    random_perm,
    rule_probabilities,
)
from popdyn.tasks.decision_list._model import DecisionList, permutation_matrix

CASES = [*(pytest.param(*c, marks=pytest.mark.slow) for c in [(6, 3, 3), (5, 4, 2), (6, 2, 3), (4, 4, 2)]), (5, 1, 2)]


def _random_theta(L, seed, scale=1.0):
    """W ~ N(0, scale²), V ~ N(0, 4 scale²) entrywise, drawn by NumPy (no random-number program to compile per L)."""
    rng = np.random.default_rng(seed)
    W, V = scale * rng.standard_normal((L, L)), 2 * scale * rng.standard_normal((L, L))
    return {"W": jnp.asarray(W), "V": jnp.asarray(V)}


@eqx.filter_jit
def _loss_grad_margin(prob, th):
    """((ℒ, ∇ℒ), margin) of ``prob`` at each point of the batch ``th``: one compiled program."""
    return jax.vmap(lambda t: (jax.value_and_grad(prob.loss)(t), prob.margin(t)))(th)


@eqx.filter_jit
def _loss_and_grad(prob, th):
    """(ℒ, ∇ℒ) of ``prob`` at each point of the batch ``th``: one compiled program."""
    return jax.vmap(jax.value_and_grad(prob.loss))(th)


def _stack(*thetas):
    """The points ``thetas`` as one batch on a leading axis."""
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *thetas)


@pytest.mark.parametrize("distribution", ["distinct", "iid"])
@pytest.mark.parametrize("L,n,M", CASES)
def test_histograms_equal_brute_force(distribution, L, n, M):
    """(F3): loss, gradient and PC margin of path B equal enumeration over all L^n sequences."""
    lists, perm = random_lists(L, M, seed=L + n), random_perm(L, seed=n)
    prob = DecisionList(L, n, lists, perm, distribution, chunk=7)  # 7 divides no table size here
    th = _stack(*(_random_theta(L, s) for s in range(3)))

    def brute(t):
        return brute_force_loss(t["W"], t["V"], L, n, lists, perm, distribution)

    def brute_margin(t):
        return brute_force_margin(t["W"], t["V"], L, n, lists, perm, distribution)

    (v, g), m = _loss_grad_margin(prob, th)
    (vb, gb), mb = jax.jit(jax.vmap(lambda t: (jax.value_and_grad(brute)(t), brute_margin(t))))(th)
    np.testing.assert_allclose(v, vb, atol=1e-13, rtol=0)
    for k in g:
        np.testing.assert_allclose(g[k], gb[k], atol=1e-13, rtol=0)
    np.testing.assert_allclose(m, mb, atol=1e-12, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("distribution", ["distinct", "iid"])
def test_perfect_classification_is_detected(distribution):
    """A W with a steep rule chain in every column and V = cP classifies perfectly; ties at W = 0 do not."""
    L, n = 6, 3
    lists, perm = random_lists(L, 3, seed=1), random_perm(L, seed=2)
    prob = DecisionList(L, n, lists, perm, distribution)
    W = np.zeros((L, L))
    for a, lst in enumerate(lists):
        W[:, a] = -20.0
        W[list(lst), a] = 10.0 * np.arange(len(lst), 0, -1)
    th = {"W": jnp.asarray(W), "V": 5.0 * jnp.asarray(prob.P)}
    zero = {"W": jnp.zeros((L, L)), "V": th["V"]}
    # margin and verdict at th and at zero, one compiled program
    (m, m0), (pc, pc0) = eqx.filter_jit(lambda p, b: jax.vmap(lambda t: (p.margin(t), p.perfectly_classifies(t)))(b))(
        prob, _stack(th, zero)
    )
    assert m > 0 and bool(pc)
    brute = jax.jit(lambda W, V: brute_force_margin(W, V, L, n, lists, perm, distribution))
    assert abs(float(m) - float(brute(th["W"], th["V"]))) < 1e-12
    assert float(m0) <= 0 and not bool(pc0)


@pytest.mark.slow
@pytest.mark.parametrize("L,n,M,c", [(10, 3, 3, 10.0), (8, 5, 2, 3.0), (6, 6, 3, 1.5)])
def test_zero_W_closed_forms(L, n, M, c):
    """§5: ℒ(0, cP) = log(n + (L−n)e^{−c/n}) and the W = 0 gradient (F6), D_distinct."""
    lists, perm = random_lists(L, M, seed=5), random_perm(L, seed=6)
    prob = DecisionList(L, n, lists, perm, c=c, train="W")
    th = prob.init(jax.random.PRNGKey(0))
    assert float(jnp.abs(th["W"]).max()) == 0.0
    loss, grad = _loss_and_grad(prob, _stack(th))
    assert abs(float(loss[0]) - np.log(n + (L - n) * np.exp(-c / n))) < 1e-13
    G = np.asarray(grad["W"][0])
    F6 = np.zeros((L, L))
    for a, lst in enumerate(lists):
        pi = rule_probabilities(L, n, len(lst))
        for b in range(L):
            present = 1.0 if b == a else (n - 1) / (L - 1)
            fires = pi[lst.index(b)] if b in lst else 0.0
            F6[b, a] = c / (n * L) * (present / n - fires)
    np.testing.assert_allclose(G, F6, atol=1e-14)


@pytest.mark.slow
def test_zero_W_outputs_are_shared():
    """Fact 5: at W = 0 every query of a sequence outputs softmax(V h / n)."""
    L, n = 6, 4
    prob = DecisionList(L, n, random_lists(L, 2, seed=0), random_perm(L, seed=0), "iid")
    V = jax.random.normal(jax.random.PRNGKey(3), (L, L))
    tokens, logc = jnp.array([1, 4, 0, 0]), jnp.log(jnp.array([3.0, 1.0, 0.0, 0.0]))
    z = eqx.filter_jit(prob.logits)({"W": jnp.zeros((L, L)), "V": V}, tokens, logc)
    h = jnp.zeros(L).at[jnp.array([1, 4])].set(jnp.array([3.0, 1.0]))
    np.testing.assert_allclose(z[:, 0], V @ h / n, atol=1e-15)
    np.testing.assert_allclose(z[:, 1], V @ h / n, atol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("distribution", ["distinct", "iid"])
def test_invariances(distribution):
    """Fact 4: column sums of ∇_W ℒ and ∇_V ℒ vanish and the loss ignores per-column shifts."""
    L, n = 5, 3
    prob = DecisionList(L, n, random_lists(L, 3, seed=4), random_perm(L, seed=4), distribution)
    th = _random_theta(L, 11)
    u = jnp.arange(L) * 0.37
    shifted = {"W": th["W"] + u[None, :], "V": th["V"] - u[None, :]}
    loss, grad = _loss_and_grad(prob, _stack(th, shifted))
    g = jax.tree_util.tree_map(lambda x: x[0], grad)
    np.testing.assert_allclose(g["W"].sum(axis=0), 0.0, atol=1e-15)
    np.testing.assert_allclose(g["V"].sum(axis=0), 0.0, atol=1e-15)
    assert abs(float(loss[1] - loss[0])) < 1e-13


@pytest.mark.slow
def test_conservation_and_null_vectors():
    """Fact 4 consequences: GD conserves 1ᵀW and 1ᵀV, and the Hessian has 2L exact null vectors."""
    L, n = 5, 3
    prob = DecisionList(L, n, random_lists(L, 3, seed=4), random_perm(L, seed=4))
    th = _random_theta(L, 11)
    traj = gradient_descent(prob, th, lr=0.5, steps=50)
    for k in ("W", "V"):
        np.testing.assert_allclose(traj.final[k].sum(axis=0), th[k].sum(axis=0), atol=1e-12)
    eig = np.asarray(hessian_spectrum(prob, th))
    assert np.sum(np.abs(eig) < 1e-10) >= 2 * L


def test_bad_input_is_rejected():
    lists, perm = random_lists(5, 2, seed=0), random_perm(5, seed=0)
    with pytest.raises(ValueError, match="n=6 is out of range"):
        DecisionList(5, 6, lists, perm)
    DecisionList(5, 6, lists, perm, "iid")  # i.i.d. tokens may repeat: n > L is fine
    with pytest.raises(ValueError, match="must end in its own token 1"):
        DecisionList(5, 3, ((0,), (2,), (2,), (3,), (4,)), perm)
    with pytest.raises(ValueError, match="entries must be distinct"):
        DecisionList(5, 3, ((0,), (3, 3, 1), (2,), (3,), (4,)), perm)
    with pytest.raises(ValueError, match="must be a permutation of 0..4"):
        DecisionList(5, 3, lists, (0, 1, 2, 3, 3))
    with pytest.raises(ValueError, match="distribution='uniform' is invalid"):
        DecisionList(5, 3, lists, perm, "uniform")
    with pytest.raises(ValueError, match="L=1 is out of range"):
        DecisionList(1, 1, ((0,),), (0,))
    with pytest.raises(ValueError, match="c=-1.0 is out of range"):
        DecisionList(5, 3, lists, perm, c=-1.0)
    with pytest.raises(ValueError, match="n=9 is too large for exact histogram enumeration"):
        Histograms(60, 9, distinct=True)


def test_permutation_matrix_convention():
    """§0: P e_b = e_{π(b)}."""
    perm = (2, 0, 1)
    P = permutation_matrix(perm)
    for b in range(3):
        assert np.argmax(P @ np.eye(3)[b]) == perm[b]


@pytest.mark.slow
@pytest.mark.parametrize("distribution", ["distinct", "iid"])
def test_evaluate_picks_the_structured_path_where_it_applies(distribution):
    """§3 C is used automatically for V = cP and column-structured W, and equals path B there."""
    L, n = 6, 3
    lists = random_lists(L, 3, seed=7)
    prob = DecisionList(L, n, lists, random_perm(L, seed=8), distribution)
    W = np.full((L, L), -0.4)
    for a, lst in enumerate(lists):
        W[list(lst), a] = np.linspace(1.0, 0.2, len(lst))
    th = {"W": jnp.asarray(W), "V": 3.0 * jnp.asarray(prob.P)}
    value, path = prob.evaluate(th)
    assert path == "structured" and abs(value - float(prob.loss(th))) < 1e-13
    assert prob.evaluate(dict(th, V=th["V"].at[0, 0].add(0.01)))[1] == "histograms"  # V ≠ cP
    distractor = next(b for b in range(L) if b not in lists[0])
    assert prob.evaluate(dict(th, W=th["W"].at[distractor, 0].add(0.1)))[1] == "histograms"  # W not structured
