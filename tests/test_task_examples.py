"""Every built-in task declares its per-example data (docs/problem.md, "Per-example data"; docs/sgd.md): one
training example as its paper samples it, with ``examples()`` an exact measure and ``example_loss`` the loss of one
example.

For each task, on a tiny instance: Σ_i w_i ℓ(θ, x_i) equals the task's own exact loss to 1e-12 relative at several
random θ, and ``popdyn.gradient_noise``'s mean and trace equal those of per-example gradients taken one by one over
the data enumerated by brute force in the test itself (every sequence, context or draw with its probability, the
loss of each written out literally). Where a brute force cannot reach (the canonical model's default 512-token
sequences, the teacher's Gaussian draws) the exact trace is checked against Monte Carlo within 4 standard errors,
and the teacher's quadrature against a finer rule. Sizes beyond exact enumeration, and the non-polynomial teachers,
are refused by name.
"""

from __future__ import annotations

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import popdyn
from popdyn.exact import Chain, GaussHermite, WeightedTable, sample
from popdyn.tasks.decision_list import DecisionList, random_lists, random_perm
from popdyn.tasks.decision_list._brute_force import brute_force_logits, sequence_table
from popdyn.tasks.markov import AttentionScalar, Canonical, Transformer
from popdyn.tasks.scan_snap import ScanSnap, make_classes
from popdyn.tasks.scb import SoftmaxBigram, SparseBigram, random_instance
from popdyn.tasks.teacher import BilinearTeacher, cnn_pooling, group_sparse, random_V

RTOL = 1e-12


def _theta(prob, seed, scale=0.7):
    """A generic point: the template's shapes filled with N(0, scale²)."""
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(lambda t: jnp.asarray(scale * rng.standard_normal(t.shape)), prob.template())


LOSS = eqx.filter_jit(lambda prob, theta: prob.loss(theta))
AVERAGE = eqx.filter_jit(lambda prob, theta: prob.examples().expectation(lambda x: prob.example_loss(theta, x)))


def _assert_examples_average_to_the_loss(prob, seeds=(0, 1, 2)):
    """Σ_i w_i ℓ(θ, x_i) = L(θ) to RTOL relative at random θ; the weights are a probability vector."""
    data = prob.examples()
    assert isinstance(data, WeightedTable)
    assert abs(float(jnp.sum(data.weights)) - 1.0) <= RTOL
    for seed in seeds:
        theta = _theta(prob, seed)
        expected, got = float(LOSS(prob, theta)), float(AVERAGE(prob, theta))
        assert abs(got - expected) <= RTOL * abs(expected), (seed, got, expected)


def _assert_noise_matches(prob, theta, points, weights, loss_of):
    """``gradient_noise``'s ḡ and tr Σ against per-example gradients of ``loss_of(θ, point)`` taken one by one
    (an explicit loop) over brute-force ``points`` with probabilities ``weights``, and NumPy weighted moments."""
    weights = np.asarray(weights, np.float64)
    assert abs(weights.sum() - 1.0) <= RTOL
    grad = jax.jit(jax.grad(loss_of))
    G = np.stack([np.asarray(ravel_pytree(grad(theta, x))[0]) for x in points])
    mean = weights @ G
    trace = float(weights @ np.sum((G - mean) ** 2, axis=1))
    noise = popdyn.gradient_noise(prob, theta)
    assert np.linalg.norm(noise.mean - mean) <= RTOL * np.linalg.norm(mean)
    assert trace > 0 and abs(noise.trace - trace) <= RTOL * trace, (noise.trace, trace)


def _assert_monte_carlo(trace, mean, grads):
    """The exact tr Σ = E‖g − ḡ‖² within 4 standard errors of its Monte Carlo estimate from draws' gradients."""
    sq = np.sum((np.asarray(grads) - mean) ** 2, axis=1)
    se = sq.std(ddof=1) / math.sqrt(sq.size)
    assert abs(sq.mean() - trace) <= 4 * se, (sq.mean(), trace, se)


def _binary_ce(logit, y):
    return -(y * jax.nn.log_sigmoid(logit) + (1 - y) * jax.nn.log_sigmoid(-logit))


def _chain_sequences(chain: Chain, length: int):
    """Every sequence of a first-order chain with P(x) = π(x_1) ∏ P(x_n, x_{n+1}), by brute force in NumPy."""
    init, kernel = np.asarray(chain.init), np.asarray(chain.kernel)
    seqs = list(itertools.product(range(chain.V), repeat=length))
    probs = [init[x[0]] * math.prod(kernel[a, b] for a, b in itertools.pairwise(x)) for x in seqs]
    return [jnp.asarray(x) for x in seqs], probs


# ---- Markov: one training sequence x_1..x_{N+1} --------------------------------------------------------------


@pytest.mark.parametrize(
    "chain, N",
    [
        (Chain.binary(0.2, 0.35), 3),
        (Chain.from_matrix([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]]), 2),
        (Chain.binary_order_k([0.2, 0.7, 0.4, 0.9]), 3),
    ],
)
def test_transformer_examples_are_sequences_with_their_observed_next_tokens(chain, N):
    prob = Transformer(chain, N=N, d=2)
    _assert_examples_average_to_the_loss(prob)
    assert prob.examples().n == chain.V ** (N + 1)
    if chain.order != 1 or chain.V != 2:
        return
    seqs, probs = _chain_sequences(chain, N + 1)

    def loss_of(th, x):  # the observed next tokens' cross-entropy, position by position
        logp = jax.nn.log_softmax(prob.logits(th, x[:N]))
        return -jnp.mean(logp[jnp.arange(N), x[1:]])

    _assert_noise_matches(prob, _theta(prob, 3), seqs, probs, loss_of)


@pytest.mark.parametrize("bias", ["profiled", "trained"])
def test_canonical_examples_are_sequences_by_their_transition_counts(bias):
    prob = Canonical(0.2, 0.35, bias=bias, N=5)
    _assert_examples_average_to_the_loss(prob)
    seqs, probs = _chain_sequences(Chain.binary(0.2, 0.35), 6)

    def loss_of(th, x):  # f_{x_n} predicts x_{n+1}
        f0, f1 = prob.logits(th)
        return jnp.mean(_binary_ce(jnp.where(x[:-1] == 1, f1, f0), x[1:]))

    _assert_noise_matches(prob, _theta(prob, 3), seqs, probs, loss_of)


def test_canonical_default_sequence_length_is_exact_and_agrees_with_sampled_sequences():
    prob = Canonical(0.2, 0.35, bias="trained")
    assert prob.N == 512
    _assert_examples_average_to_the_loss(prob, seeds=(0, 1))
    theta = _theta(prob, 2)
    noise = popdyn.gradient_noise(prob, theta)
    x = sample(Chain.binary(0.2, 0.35), 4000, prob.N + 1, np.random.default_rng(0))
    counts = np.stack([np.sum((x[:, :-1] == a) & (x[:, 1:] == b), axis=1) for a in (0, 1) for b in (0, 1)], axis=1)
    grads = jax.vmap(lambda c: ravel_pytree(jax.grad(prob.example_loss)(theta, {"counts": c}))[0])(counts)
    _assert_monte_carlo(noise.trace, noise.mean, grads)


@pytest.mark.parametrize("bias, N", [("trained", 4), ("profiled", 3)])
def test_attention_scalar_examples_are_sequences(bias, N):
    prob = AttentionScalar(0.2, 0.35, N=N, bias=bias)
    _assert_examples_average_to_the_loss(prob)
    seqs, probs = _chain_sequences(prob.chain, N + 1)

    def loss_of(th, x):  # logit(n, x_n, S_n) + b predicts x_{n+1}
        b = th["b"] if bias == "trained" else prob.optimal_bias(th)
        ce = [_binary_ce(prob.logit(th, n, x[n - 1], jnp.sum(x[:n])) + b, x[n]) for n in range(1, N + 1)]
        return jnp.mean(jnp.stack(ce))

    _assert_noise_matches(prob, _theta(prob, 3), seqs, probs, loss_of)


# ---- decision lists and Scan and Snap: one sequence, through its histogram -----------------------------------


@pytest.mark.parametrize(
    "L, n, distribution, train", [(4, 2, "distinct", "both"), (3, 3, "iid", "W"), (4, 3, "distinct", "W")]
)
def test_decision_list_examples_are_sequences_by_their_histograms(L, n, distribution, train):
    lists, perm = random_lists(L, 2, seed=1), random_perm(L, seed=2)
    prob = DecisionList(L, n, lists, perm, distribution=distribution, train=train)
    _assert_examples_average_to_the_loss(prob)
    seqs, probs, labels = sequence_table(L, n, lists, perm, distribution)

    def loss_of(th, x):  # the literal model σ(V X σ(XᵀWX)) on one sequence
        seq, y = x
        z = brute_force_logits(*prob.weights(th), seq[None])[0]
        return -jnp.mean(jax.nn.log_softmax(z, axis=0)[y, jnp.arange(n)])

    _assert_noise_matches(prob, _theta(prob, 3), list(zip(seqs, labels, strict=True)), probs, loss_of)


CLASSES = make_classes(
    np.array([[0.5, 0.3, 0.2, 0.0, 0.0, 0.0], [0.0, 0.4, 0.0, 0.6, 0.0, 0.0]]), [4, 4], [5, 0], [0.6, 0.4]
)


def test_scan_snap_examples_are_sequences_by_their_context_counts():
    prob = ScanSnap(CLASSES, T=3)
    _assert_examples_average_to_the_loss(prob)
    points, probs = [], []
    for k in range(CLASSES.K):
        support = np.flatnonzero(CLASSES.probs[k])
        for context in itertools.product(support, repeat=2):
            points.append((k, jnp.asarray(context)))
            probs.append(CLASSES.weights[k] * math.prod(CLASSES.probs[k, t] for t in context))

    def loss_of(th, x):  # the model evaluated position by position
        return prob.sequence_loss(th, *x)

    _assert_noise_matches(prob, _theta(prob, 3), points, probs, loss_of)


def test_scan_snap_examples_at_infinite_length_are_the_classes():
    prob = ScanSnap(CLASSES)
    _assert_examples_average_to_the_loss(prob)
    _assert_noise_matches(
        prob, _theta(prob, 3), range(CLASSES.K), CLASSES.weights, lambda th, k: prob.class_losses(th)[k]
    )


# ---- sparse contextual bigrams: one draw (x_1..x_{T+1}, y) ---------------------------------------------------


def test_scb_examples_are_the_generative_models_draws():
    prob = SparseBigram(*random_instance(0, N=3, T=2, Q=2))
    _assert_examples_average_to_the_loss(prob)
    _assert_examples_average_to_the_loss(SoftmaxBigram(prob.P, prob.Qm))
    P, Qm, mu = (np.asarray(a) for a in (prob.P, prob.Qm, prob.mu))
    points, probs = [], []
    for x in itertools.product(range(3), repeat=3):
        m = sum(Qm[t, x[-1]] * P[:, x[t]] for t in range(2))  # the law of y given x
        for y in range(3):
            points.append((jnp.asarray(x), y))
            probs.append(math.prod(mu[t] for t in x) * m[y])

    def loss_of(th, draw):  # ½‖e_y − V X a_k‖², X one-hot
        x, y = draw
        X = jax.nn.one_hot(x[:-1], 3).T
        return 0.5 * jnp.sum((jax.nn.one_hot(y, 3) - th["V"] @ X @ th["A"][:, x[-1]]) ** 2)

    _assert_noise_matches(prob, _theta(prob, 3), points, probs, loss_of)


# ---- bilinear teachers: one Gaussian draw (X, E) -------------------------------------------------------------


def _linear_teacher(S_star, M=1, d=1):
    return BilinearTeacher(S_star, random_V(1, M, d), activation="linear", sigma_x=1.3, sigma_eps=0.4)


def test_linear_teacher_examples_are_an_exact_gaussian_rule():
    prob = _linear_teacher(group_sparse(2))
    _assert_examples_average_to_the_loss(prob)
    data = prob.examples()
    points = [{"X": data.points["X"][i], "E": data.points["E"][i]} for i in range(data.n)]

    def loss_of(th, x):  # ½‖V* X S* + E − W X S‖²
        S = jax.nn.softmax(th["A"] / math.sqrt(2), axis=0)
        return 0.5 * jnp.sum((prob.V_star @ x["X"] @ prob.S_star + x["E"] - th["W"] @ x["X"] @ S) ** 2)

    theta = _theta(prob, 3)
    _assert_noise_matches(prob, theta, points, data.weights, loss_of)
    # a finer rule (4 nodes per axis, exact to degree 7) gives the same moments: degree 4 is integrated exactly
    rule = GaussHermite(4, 6)
    z = jnp.asarray(rule.nodes)
    finer = WeightedTable({"X": 1.3 * z[:, :2].reshape(-1, 1, 2), "E": 0.4 * z[:, 2:].reshape(-1, 1, 2)}, rule.weights)
    reference = popdyn.gradient_noise(popdyn.Problem.from_examples(prob.example_loss, theta, data=finer), theta)
    assert abs(popdyn.gradient_noise(prob, theta).trace - reference.trace) <= RTOL * reference.trace


def test_linear_teacher_gradient_noise_agrees_with_sampled_draws():
    prob = _linear_teacher(cnn_pooling(4, 2))
    theta = _theta(prob, 4)
    noise = popdyn.gradient_noise(prob, theta)
    X, Y = prob.sample(jax.random.PRNGKey(5), 20000)
    grads = jax.vmap(lambda x, y: ravel_pytree(jax.grad(prob.residual_loss)(theta, x, y))[0])(X, Y)
    _assert_monte_carlo(noise.trace, noise.mean, grads)


# ---- SGD's threshold runs on a task's examples ---------------------------------------------------------------


def _hessian(prob, theta):
    flat, unravel = ravel_pytree(theta)
    return np.asarray(jax.hessian(lambda v: prob.loss(unravel(v)))(flat))


@pytest.mark.slow
def test_sgd_threshold_on_the_canonical_model_sees_the_noise_along_its_minimum_curve():
    """At a global minimum of the (e, w, b) model the Hessian is flat along Γ*, and every example's Hessian curves
    it (its residual does not vanish, only their mean): SGD has no stable step there, GD's stays 2/λ_max."""
    prob = Canonical(0.2, 0.35, bias="trained", N=8)
    w = 0.5
    e = math.sqrt(prob.optimal_gap() / (1 + 2 * w * abs(w)))
    theta = {"e": jnp.asarray(e), "w": jnp.asarray(w), "b": jnp.asarray(math.log(0.2 / 0.8) + e**2 / 2)}
    with pytest.warns(UserWarning, match="flat direction"):
        found = popdyn.mean_square_stability(prob, theta, [1, 16])
    lam = np.linalg.eigvalsh(_hessian(prob, theta))
    assert found.flat == 1 and found.flat_curved
    assert np.all(found.thresholds == 0.0)
    assert abs(found.gd_threshold - 2 / lam[-1]) <= 1e-10 * found.gd_threshold


# ---- refusals -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Transformer(Chain.binary(0.2, 0.3), N=22, d=1), r"Transformer\.examples\(\).*2\^23"),
        (lambda: AttentionScalar(0.2, 0.3, N=30), r"AttentionScalar\.examples\(\).*2\^31"),
        (lambda: Canonical(0.2, 0.3, N=3000), r"Canonical\.examples\(\).*N=3000.*N <= 2047"),
        (lambda: SparseBigram(*random_instance(0, N=10, T=50, Q=2)), r"SparseBigram\.examples\(\).*N\^\(T\+2\)"),
        (lambda: _linear_teacher(cnn_pooling(8, 2), M=2, d=2), r"BilinearTeacher\.examples\(\).*MAX_NODES"),
        (
            lambda: BilinearTeacher(group_sparse(2), random_V(1, 1, 1), activation="relu"),
            r"BilinearTeacher\.examples\(\).*alpha=0 .*not polynomial",
        ),
        (
            lambda: BilinearTeacher(group_sparse(2), random_V(1, 1, 1), activation="leaky"),
            r"BilinearTeacher\.examples\(\).*alpha=0\.1 .*linear",
        ),
    ],
)
def test_examples_out_of_reach_are_refused_with_the_reason(make, match):
    prob = make()
    with pytest.raises(ValueError, match=match):
        prob.examples()
    with pytest.raises(ValueError, match=match):
        popdyn.gradient_noise(prob, prob.init(jax.random.PRNGKey(0)))
