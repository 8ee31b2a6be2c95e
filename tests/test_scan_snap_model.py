"""Scan and Snap: exact losses against brute force and Monte Carlo, the §3 gradient formulas, conserved
row sums and the builders (docs/models/scan_snap.md §1–§3, §6)."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.tasks.scan_snap import ScanSnap, make_classes, syn_medium, syn_small

# A tiny instance: M = 6, three classes, two sharing query 4; token 0 is common, supports of size 2–3.
TINY_P = np.array(
    [
        [0.5, 0.3, 0.2, 0.0, 0.0, 0.0],
        [0.4, 0.0, 0.0, 0.6, 0.0, 0.0],
        [0.2, 0.0, 0.0, 0.0, 0.3, 0.5],
    ]
)
TINY = make_classes(TINY_P, query=[4, 4, 5], label=[1, 3, 2], weights=[0.5, 0.3, 0.2])


@eqx.filter_jit
def loss_value(prob: ScanSnap, theta):
    """ℒ(θ), one compiled program per problem structure (a new instance of the same shapes and T reuses it)."""
    return prob.loss(theta)


@eqx.filter_jit
def loss_and_grad(prob: ScanSnap, theta):
    """(ℒ(θ), ∇ℒ(θ)), one compiled program per problem structure, shared by the tests below."""
    return jax.value_and_grad(prob.loss)(theta)


def random_theta(M, seed, scale=1.0):
    kY, kZ = jax.random.split(jax.random.PRNGKey(seed))
    return {"Y": scale * jax.random.normal(kY, (M, M)), "Z": scale * jax.random.normal(kZ, (M, M))}


def brute_force_loss(prob: ScanSnap):
    """θ ↦ Σ_n π_n Σ_{x ∈ supp(n)^{T−1}} Π_t P(x_t|n) ℓ(x): every contextual sequence, evaluated by positions."""
    probs = np.asarray(prob.probs)
    tables = []
    for k in range(prob.K):
        supp = np.flatnonzero(probs[k] > 0)
        seqs = np.array(list(itertools.product(supp, repeat=prob.T - 1)))
        tables.append((k, jnp.asarray(seqs), jnp.asarray(np.prod(probs[k][seqs], axis=1))))

    def loss(theta):
        return sum(
            prob.weights[k] * jnp.dot(w, jax.vmap(lambda x, k=k: prob.sequence_loss(theta, k, x))(seqs))
            for k, seqs, w in tables
        )

    return jax.jit(loss)


@pytest.mark.parametrize("T", [2, 5])
def test_finite_T_loss_and_gradient_equal_brute_force(T):
    prob = ScanSnap(TINY, T=T)
    exact, brute = jax.jit(jax.value_and_grad(prob.loss)), jax.jit(jax.value_and_grad(brute_force_loss(prob)))
    for seed in range(3):
        theta = random_theta(6, seed)
        (v, g), (v_bf, g_bf) = exact(theta), brute(theta)
        np.testing.assert_allclose(v, v_bf, rtol=1e-13)
        for name in ("Y", "Z"):
            np.testing.assert_allclose(g[name], g_bf[name], rtol=1e-11, atol=1e-13)


@pytest.mark.slow
def test_finite_T_loss_tends_to_infinite_T_loss():
    """ℒ_T − ℒ_∞ = a/(T−1) + O(T⁻²): the loss is a smooth function of the empirical frequencies N/(T−1),
    whose covariance is O(1/(T−1)). (T−1)·gap must settle, its increments shrinking about twofold."""
    theta = random_theta(6, 7)
    limit = loss_value(ScanSnap(TINY), theta)
    Ts = (33, 65, 129, 257)
    gaps = np.array([float(loss_value(ScanSnap(TINY, T=T), theta) - limit) for T in Ts])
    assert np.all(np.diff(np.abs(gaps)) < 0), gaps
    scaled = gaps * (np.array(Ts) - 1)
    steps = np.abs(np.diff(scaled))
    assert np.all(steps[1:] < steps[:-1] / 1.8), scaled


@pytest.mark.slow
def test_finite_T_equals_monte_carlo():
    prob = ScanSnap(TINY, T=6)
    theta = random_theta(6, 3)
    keys = jax.random.split(jax.random.PRNGKey(0), 64)
    draws = jax.jit(jax.vmap(lambda k: prob.sampled_loss(theta, k, 4096)))(keys)  # one compiled sampler
    mean, se = float(jnp.mean(draws)), float(jnp.std(draws) / np.sqrt(len(draws)))
    assert abs(mean - float(loss_value(prob, theta))) < 4 * se


def test_infinite_T_loss_closed_form():
    prob = ScanSnap(TINY)
    theta = random_theta(6, 1)
    Y, Z = np.asarray(theta["Y"]), np.asarray(theta["Z"])
    expected = 0.0
    for k in range(3):
        m, n = TINY.query[k], TINY.label[k]
        c = TINY_P[k] * np.exp(Z[m])
        f = c / np.linalg.norm(c)
        logits = Y.T @ f
        expected += TINY.weights[k] * (np.log(np.sum(np.exp(logits))) - logits[n])
    np.testing.assert_allclose(loss_value(prob, theta), expected, rtol=1e-14)


@pytest.mark.slow
def test_population_gradient_formulas_of_section_3():
    """−∇_Y ℒ = Σ π_n f_n (e_n − α_n)ᵀ and −∇_{z_m} ℒ = Σ_{ψ(n)=m} π_n diag(f_n)(I − f_n f_nᵀ) Y (e_n − α_n)."""
    prob = ScanSnap(TINY)
    theta = random_theta(6, 2)
    g = loss_and_grad(prob, theta)[1]
    f = np.asarray(prob.features(theta))
    Y = np.asarray(theta["Y"])
    dY, dZ = np.zeros((6, 6)), np.zeros((6, 6))
    for k in range(3):
        e = np.eye(6)[TINY.label[k]]
        logits = Y.T @ f[k]
        alpha = np.exp(logits - logits.max())
        alpha /= alpha.sum()
        dY += TINY.weights[k] * np.outer(f[k], e - alpha)
        dZ[TINY.query[k]] += TINY.weights[k] * np.diag(f[k]) @ (np.eye(6) - np.outer(f[k], f[k])) @ Y @ (e - alpha)
    np.testing.assert_allclose(-g["Y"], dY, atol=1e-14)
    np.testing.assert_allclose(-g["Z"], dZ, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("T", [None, 4])
def test_gradient_equals_finite_differences(T):
    prob = ScanSnap(TINY, T=T)
    theta = random_theta(6, 5)
    g = loss_and_grad(prob, theta)[1]
    rng = np.random.default_rng(0)
    for _ in range(4):
        d = {k: jnp.asarray(rng.normal(size=(6, 6))) for k in theta}
        h = 1e-5
        plus = loss_value(prob, {k: theta[k] + h * d[k] for k in theta})
        minus = loss_value(prob, {k: theta[k] - h * d[k] for k in theta})
        fd = (plus - minus) / (2 * h)
        exact = sum(jnp.vdot(g[k], d[k]) for k in theta)
        np.testing.assert_allclose(fd, exact, rtol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("T", [None, 4])
def test_row_sums_conserved_and_frozen_entries(T):
    """Ẏ1 = 0, ż_m·1 = 0; z_ml off every support of its query's classes, unused query rows and Y rows of
    tokens in no support never move (§3)."""
    prob = ScanSnap(TINY, T=T)
    g = loss_and_grad(prob, random_theta(6, 4))[1]
    np.testing.assert_allclose(g["Y"].sum(axis=1), 0.0, atol=1e-14)
    np.testing.assert_allclose(g["Z"].sum(axis=1), 0.0, atol=1e-14)
    # query 4 (classes 0, 1) sees tokens {0, 1, 2, 3}; query 5 (class 2) sees {0, 4, 5}
    assert np.all(g["Z"][4, 4:] == 0) and np.all(g["Z"][5, 1:4] == 0)
    assert np.all(g["Z"][:4] == 0)
    np.testing.assert_allclose(g["Y"][np.flatnonzero(TINY_P.sum(0) == 0)], 0.0)


@pytest.mark.slow
def test_attention_still_while_Y_is_zero():
    prob = ScanSnap(syn_small())
    theta = prob.init(jax.random.PRNGKey(0))
    theta["Z"] = random_theta(prob.M, 0)["Z"]
    g = loss_and_grad(prob, theta)[1]
    assert float(jnp.max(jnp.abs(g["Z"]))) == 0.0
    assert float(jnp.max(jnp.abs(g["Y"]))) > 0.0


def test_zero_init_values():
    """ℒ(0) = ln M; c_n(0) = P(·|n); Ẏ(0) = Σ π_n f_n(0)(e_n − 1/M)ᵀ with f_n(0) = P/‖P‖ (§3)."""
    classes = syn_small()
    prob = ScanSnap(classes)
    theta = prob.init(jax.random.PRNGKey(0))
    loss, grad = loss_and_grad(prob, theta)
    assert float(loss) == pytest.approx(np.log(34), rel=1e-15)  # the authors' logged 3.5264
    np.testing.assert_allclose(prob.attention(theta), classes.probs, atol=1e-16)
    f0 = classes.probs / np.linalg.norm(classes.probs, axis=1, keepdims=True)
    expected = sum(
        w * np.outer(f, np.eye(34)[n] - 1 / 34) for w, f, n in zip(classes.weights, f0, classes.label, strict=False)
    )
    np.testing.assert_allclose(-grad["Y"], expected, atol=1e-15)


def test_builders_match_the_authors_layout():
    small = syn_small()
    assert (small.M, small.K) == (34, 2)
    np.testing.assert_allclose(small.probs[0, :10], 1 / 15.5)
    np.testing.assert_allclose(small.probs[0, 10:20], np.arange(1, 11) / 155)
    np.testing.assert_allclose(small.probs[1, 20:30], np.arange(1, 11) / 155)
    assert small.query.tolist() == [30, 31] and small.label.tolist() == [32, 33]
    assert small.common().sum() == 10 and small.distinct().sum(axis=1).tolist() == [10, 10]
    for n_query, M in ((1, 33), (3, 79), (5, 125), (10, 240)):
        med = syn_medium(n_query)
        assert (med.M, med.K) == (M, 2 * n_query)
        assert np.all(np.bincount(med.query)[med.query] == 2)  # two next tokens per query
    # the reference entropy of §6: P restricted to one class's distinct tokens, renormalised
    p = small.probs[0, 10:20] / small.probs[0, 10:20].sum()
    assert -np.sum(p * np.log(p)) == pytest.approx(2.1513, abs=5e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(probs=[[0.5, 0.6]], query=[0], label=[1]), "probs\\[0\\] sums"),
        (dict(probs=[[-0.1, 1.1]], query=[0], label=[1]), "probs has an entry"),
        (dict(probs=[[0.5, 0.5]], query=[2], label=[1]), "query"),
        (dict(probs=[[0.5, 0.5], [0.5, 0.5]], query=[0, 0], label=[1, 1]), "label"),
        (dict(probs=[[0.5, 0.5]], query=[0], label=[1], weights=[0.7]), "weights"),
    ],
)
def test_bad_classes_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_classes(**kwargs)


def test_bad_model_inputs_raise():
    with pytest.raises(ValueError, match="T=1"):
        ScanSnap(TINY, T=1)
    with pytest.raises(ValueError, match="T=200 is too large"):
        ScanSnap(syn_small(), T=200)
    with pytest.raises(ValueError, match="M=7"):
        ScanSnap(TINY, M=7)
    with pytest.raises(ValueError, match="classes"):
        ScanSnap(TINY_P)
