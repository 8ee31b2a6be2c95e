"""SCB: the closed-form population loss against brute force and Monte Carlo, the gradient and Hessian formulas,
the canonical tiny instance and input validation (docs/models/scb.md §1–§5, §10).

References: the reference numbers of §10 as exact fractions, brute-force enumeration of all N^(T+1) sequences, exact
draws of the generative model, and the §3/§4 formulas re-implemented here.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.tasks.scb import (
    MAX_SEQUENCES,
    SoftmaxBigram,
    SparseBigram,
    brute_force_loss,
    minibatch_gradient,
    per_sample_gradients,
    per_sample_loss,
    random_instance,
    sequence_table,
)

EXACT = 1e-14  # a few ulp of O(1) quantities
CANON_P = np.array([[0.9, 0.2], [0.1, 0.8]])
CANON = SparseBigram(CANON_P, np.eye(2))


MID = (3, 4, 2)  # (N, T, Q) of the mid-sized instances: one shape, so each jitted helper compiles once


def instance(N, T, Q, seed):
    return SparseBigram(*random_instance(jax.random.PRNGKey(seed), N, T, Q))


def random_theta(prob, seed, scale=1.0):
    kV, kA = jax.random.split(jax.random.PRNGKey(1000 + seed))
    return {"V": scale * jax.random.normal(kV, (prob.N, prob.N)), "A": scale * jax.random.normal(kA, (prob.T, prob.N))}


def flat(theta):
    return jnp.concatenate([theta["V"].ravel(), theta["A"].ravel()])


def unflat(prob, x):
    n = prob.N**2
    return {"V": x[:n].reshape(prob.N, prob.N), "A": x[n:].reshape(prob.T, prob.N)}


@eqx.filter_jit
def full_hessian(prob, theta):
    """∇²L on x = (row-major vec V, row-major vec A)."""
    return jax.hessian(lambda x: prob.loss(unflat(prob, x)))(flat(theta))


@eqx.filter_jit
def value_and_grad(prob, theta):
    return jax.value_and_grad(prob.loss)(theta)


@eqx.filter_jit
def brute_value_and_grad(data, model, theta):
    """Brute force on the instance ``data`` (a SparseBigram) with the attention of ``model`` (linear or softmax)."""
    return jax.value_and_grad(lambda th: brute_force_loss(data, th["V"], model.attention(th)))(theta)


# ---------------------------------------------------------------- §3/§4 formulas, re-implemented


def sigma(prob):
    mu = np.asarray(prob.mu)
    return np.diag(mu) - np.outer(mu, mu)


def grad_formula(prob, theta):
    """∇_V L = Σ_k μ_k[−(a_k·q_k)PΣ − (1ᵀa_k)(Pμ)μᵀ + ‖a_k‖²VΣ + (1ᵀa_k)²(Vμ)μᵀ],
    ∇_{a_k} L = μ_k[−tr(VΣPᵀ)q_k − ((Vμ)·(Pμ))1 + tr(VΣVᵀ)a_k + ‖Vμ‖²(1ᵀa_k)1] (§3)."""
    P, Qm, mu, S = np.asarray(prob.P), np.asarray(prob.Qm), np.asarray(prob.mu), sigma(prob)
    V, A = np.asarray(theta["V"]), np.asarray(theta["A"])
    gV = np.zeros_like(V)
    gA = np.zeros_like(A)
    for k in range(prob.N):
        a, q = A[:, k], Qm[:, k]
        gV += mu[k] * (
            -(a @ q) * P @ S - a.sum() * np.outer(P @ mu, mu) + (a @ a) * V @ S + a.sum() ** 2 * np.outer(V @ mu, mu)
        )
        gA[:, k] = mu[k] * (
            -np.trace(V @ S @ P.T) * q - (V @ mu) @ (P @ mu) + np.trace(V @ S @ V.T) * a + (V @ mu) @ (V @ mu) * a.sum()
        )
    return gV, gA


def preconditioned_formula(prob, theta, project):
    """∇̃_V = Σ_k μ_k[−(a_k·q_k)(P − μ1ᵀ) + ‖a_k‖²V(I − μ1ᵀ) + ((1ᵀa_k)²Vμ − (1ᵀa_k)μ)1ᵀ],
    ∇̃_{a_k} = −tr(VΣPᵀ)q_k − (μᵀVμ)1 + tr(VΣVᵀ)a_k + ‖Vμ‖²(1ᵀa_k)1, then Π_T if ``project`` (§4)."""
    P, Qm, mu, S = np.asarray(prob.P), np.asarray(prob.Qm), np.asarray(prob.mu), sigma(prob)
    V, A = np.asarray(theta["V"]), np.asarray(theta["A"])
    N, T = prob.N, prob.T
    one = np.ones(N)
    gV = np.zeros_like(V)
    gA = np.zeros_like(A)
    for k in range(N):
        a, q = A[:, k], Qm[:, k]
        gV += mu[k] * (
            -(a @ q) * (P - np.outer(mu, one))
            + (a @ a) * V @ (np.eye(N) - np.outer(mu, one))
            + np.outer(a.sum() ** 2 * V @ mu - a.sum() * mu, one)
        )
        gA[:, k] = -np.trace(V @ S @ P.T) * q - mu @ V @ mu + np.trace(V @ S @ V.T) * a + (V @ mu) @ (V @ mu) * a.sum()
    if project:
        gA = (np.eye(T) - np.ones((T, T)) / T) @ gA
    return gV, gA


def hessian_from_blocks(prob):
    """∇²L at (P, Qm) from §3: VV = I_N ⊗ (q̄Σ + μμᵀ); A-column k: μ_k(cI_T + ‖μ‖²11ᵀ), distinct columns
    uncoupled; ∂²L/∂V_ij∂A_tk = μ_k[q_tk (PΣ)_ij + μ_iμ_j]."""
    P, Qm, mu, S = np.asarray(prob.P), np.asarray(prob.Qm), np.asarray(prob.mu), sigma(prob)
    N, T = prob.N, prob.T
    c, qbar, mu_sq = float(prob.c), float(prob.qbar), float(prob.mu_sq)
    H = np.zeros((N * N + T * N,) * 2)
    H[: N * N, : N * N] = np.kron(np.eye(N), qbar * S + np.outer(mu, mu))
    HA = np.zeros((T, N, T, N))
    for k in range(N):
        HA[:, k, :, k] = mu[k] * (c * np.eye(T) + mu_sq * np.ones((T, T)))
    H[N * N :, N * N :] = HA.reshape(T * N, T * N)
    cross = mu[None, None, None, :] * (
        Qm[None, None, :, :] * (P @ S)[:, :, None, None] + np.outer(mu, mu)[:, :, None, None]
    )  # (i, j, t, k)
    H[: N * N, N * N :] = cross.reshape(N * N, T * N)
    H[N * N :, : N * N] = H[: N * N, N * N :].T
    return H


# ---------------------------------------------------------------- the canonical instance (§10)


def test_canonical_instance_numbers():
    p = CANON
    np.testing.assert_allclose(p.mu, [2 / 3, 1 / 3], rtol=EXACT)
    np.testing.assert_allclose(p.P @ p.mu, p.mu, rtol=EXACT)
    np.testing.assert_allclose(p.c, 49 / 225, rtol=EXACT)
    np.testing.assert_allclose(p.qbar, 1.0, rtol=EXACT)
    np.testing.assert_allclose(p.mu_sq, 5 / 9, rtol=EXACT)
    np.testing.assert_allclose(p.L_star, 17 / 150, rtol=EXACT)
    theta0 = p.init(jax.random.PRNGKey(0))
    np.testing.assert_allclose(theta0["V"], [[2 / 3, 2 / 3], [1 / 3, 1 / 3]], rtol=EXACT)
    np.testing.assert_allclose(theta0["A"], np.full((2, 2), 0.5), rtol=0)
    np.testing.assert_allclose(p.loss(theta0), 2 / 9, rtol=EXACT)
    np.testing.assert_allclose(brute_value_and_grad(p, p, theta0)[0], 2 / 9, rtol=EXACT)
    star = {"V": p.P, "A": p.Qm}
    np.testing.assert_allclose(p.loss(star), 17 / 150, rtol=EXACT)
    np.testing.assert_allclose(brute_value_and_grad(p, p, star)[0], 17 / 150, rtol=EXACT)
    np.testing.assert_allclose(p.distances(star), (0.0, 0.0), atol=0)
    np.testing.assert_allclose(p.distances(theta0), (np.sqrt(49 / 225), np.sqrt(1 - 1 / 2)), rtol=EXACT)
    np.testing.assert_allclose(p.signals(star), (1.0, 1.0), rtol=EXACT)
    np.testing.assert_allclose(p.signals(theta0), (0.0, 0.0), atol=EXACT)


@pytest.mark.parametrize("project", [False, True])
def test_canonical_preconditioned_gradient_at_start(project):
    """∇̃_V = −(P − μ1ᵀ)/T = [[−7/60, 14/60], [7/60, −14/60]] and ∇̃_A = 0 (to rounding) at (μ1ᵀ, 11ᵀ/2)."""
    p = CANON
    theta0 = p.init(jax.random.PRNGKey(0))
    d = p.precondition(value_and_grad(p, theta0)[1], project=project)
    np.testing.assert_allclose(d["V"], np.array([[-7, 14], [7, -14]]) / 60, rtol=0, atol=EXACT)
    np.testing.assert_allclose(d["A"], np.zeros((2, 2)), rtol=0, atol=1e-15)


def test_canonical_hessian_has_one_zero_mode():
    """The raw 8×8 Hessian at (P, I): exactly one zero eigenvalue, eigenvector ∝ (P, −I); λ_max > 0 (§10)."""
    p = CANON
    H = full_hessian(p, {"V": p.P, "A": p.Qm})
    lam, vecs = np.linalg.eigh(np.asarray(H))
    assert abs(lam[0]) < 1e-14, lam
    assert lam[1] > 0.05, lam  # the rest is safely positive: one zero mode only
    u = np.asarray(flat({"V": p.P, "A": -p.Qm}))
    np.testing.assert_allclose(abs(vecs[:, 0] @ u) / np.linalg.norm(u), 1.0, rtol=EXACT)
    np.testing.assert_allclose(H, hessian_from_blocks(p), rtol=0, atol=EXACT)


# ---------------------------------------------------------------- brute force, Monte Carlo, formulas


@pytest.mark.parametrize("N,T,Q", [(2, 1, 1), (2, 3, 2), (3, 3, 3)])
def test_closed_form_equals_brute_force(N, T, Q):
    """Loss and gradient at random (V, A) (not only the ground truth), three instances per size."""
    for seed in range(3):
        p = instance(N, T, Q, seed)
        theta = random_theta(p, seed)
        v, g = value_and_grad(p, theta)
        vb, gb = brute_value_and_grad(p, p, theta)
        np.testing.assert_allclose(v, vb, rtol=1e-13)
        for name in ("V", "A"):
            np.testing.assert_allclose(g[name], gb[name], rtol=1e-12, atol=1e-13)


def test_brute_force_size_cap():
    p = SparseBigram(np.full((4, 4), 0.25), np.full((8, 4), 1 / 8))  # 4^9 = 262144 sequences
    assert 4**9 > MAX_SEQUENCES
    with pytest.raises(ValueError, match=r"N\^\(T\+1\) = 4\^9"):
        sequence_table(p)
    seqs, probs = sequence_table(instance(3, 3, 3, 0))
    assert seqs.shape == (81, 4)
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=EXACT)


@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_formulas_equal_autodiff(seed):
    """§3 ∇_V L, ∇_{a_k} L and the §4 preconditioned forms (with and without Π_T) against jax.grad."""
    p = instance(*MID, seed)
    theta = random_theta(p, seed)
    g = value_and_grad(p, theta)[1]
    gV, gA = grad_formula(p, theta)
    np.testing.assert_allclose(g["V"], gV, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g["A"], gA, rtol=1e-12, atol=1e-13)
    for project in (False, True):
        d = p.precondition(g, project=project)
        dV, dA = preconditioned_formula(p, theta, project)
        np.testing.assert_allclose(d["V"], dV, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(d["A"], dA, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(p.precondition(g, project=True)["A"].sum(axis=0), 0.0, atol=1e-13)


@eqx.filter_jit
def autodiff_per_sample(prob, theta, data):
    """jax.grad of each draw's loss ½‖e_y − V X a_k‖², unpreconditioned."""

    def one(*draw):
        return jax.grad(lambda th: per_sample_loss(prob, th, tuple(x[None] for x in draw))[0])(theta)

    return jax.vmap(one)(*data)


@pytest.fixture(scope="module")
def draws():
    """(instance, θ, 2^16 exact draws): one batch shape for every sampling test."""
    p = instance(*MID, 7)
    return p, random_theta(p, 7, scale=0.5), p.sample(jax.random.PRNGKey(11), 2**16)


def test_per_sample_gradient_is_autodiff_of_per_sample_loss(draws):
    """§5: g_V = −r(Xa_k)ᵀ, g_{a_k} = −XᵀVᵀr (other columns 0), preconditioned — per draw, exactly."""
    p, theta, data = draws
    got = per_sample_gradients(p, theta, data, project=True)
    raw = autodiff_per_sample(p, theta, data)
    want = p.precondition(raw, project=True)
    for name in ("V", "A"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(np.count_nonzero(np.asarray(raw["A"]).any(axis=1), axis=1), 1)  # column k only


def test_monte_carlo_agrees_with_closed_form(draws):
    """Mean per-sample loss and preconditioned gradients of 2^16 exact draws within 4 standard errors."""
    p, theta, data = draws
    B = 2**16
    X, k, y = data
    assert X.shape == (B, p.T) and k.shape == (B,) and y.shape == (B,)
    losses = per_sample_loss(p, theta, data)
    se = float(jnp.std(losses)) / np.sqrt(B)
    assert abs(float(jnp.mean(losses) - p.loss(theta))) < 4 * se
    # the marginals of the last token and of y are μ (Pμ = μ, §1)
    mu = np.asarray(p.mu)
    for tokens in (k, y):
        freq = np.bincount(np.asarray(tokens), minlength=p.N) / B
        assert np.all(np.abs(freq - mu) < 4 * np.sqrt(mu * (1 - mu) / B))
    exact = p.precondition(value_and_grad(p, theta)[1], project=True)
    per_sample = per_sample_gradients(p, theta, data, project=True)
    mean = minibatch_gradient(p, theta, data, project=True)
    for name in ("V", "A"):
        np.testing.assert_allclose(mean[name], jnp.mean(per_sample[name], axis=0), rtol=1e-12, atol=1e-15)
        sd = jnp.std(per_sample[name], axis=0)
        assert np.all(np.abs(np.asarray(mean[name] - exact[name])) < 4 * np.asarray(sd) / np.sqrt(B)), name


# ---------------------------------------------------------------- minimisers and the Hessian


@pytest.mark.parametrize("s", [-3.0, -1.0, -0.4, 0.25, 1.0, 2.5])
def test_minimiser_curve(s):
    """L(sP, Qm/s) = L* with zero gradient for every s ≠ 0 (§3); the attractor residual vanishes there only."""
    p = instance(*MID, 2)
    theta = {"V": s * p.P, "A": p.Qm / s}
    v, g = value_and_grad(p, theta)
    np.testing.assert_allclose(v, p.L_star, rtol=0, atol=EXACT)
    for name in ("V", "A"):
        np.testing.assert_allclose(g[name], 0.0, atol=EXACT)
    residual = p.attractors()["minimum"]
    assert float(residual(theta)) < 1e-14
    off = {"V": theta["V"], "A": theta["A"].at[0, 0].add(1e-3)}
    assert float(residual(off)) > 1e-4
    assert float(p.loss(off)) > float(p.L_star)


def test_attractor_residual_at_zero_scale():
    p = instance(*MID, 0)
    assert float(p.attractors()["minimum"]({"V": jnp.zeros((3, 3)), "A": p.Qm})) == np.inf


@pytest.mark.parametrize("seed", [0, 1])
def test_hessian_blocks_and_zero_mode_at_minimum(seed):
    """jax.hessian at (P, Qm) equals the §3 blocks (row-major vec) and annihilates (P, −Qm)."""
    p = instance(*MID, seed)
    H = np.asarray(full_hessian(p, {"V": p.P, "A": p.Qm}))
    np.testing.assert_allclose(H, hessian_from_blocks(p), rtol=0, atol=1e-13)
    u = np.asarray(flat({"V": p.P, "A": -p.Qm}))
    assert np.linalg.norm(H @ u) < 1e-13 * np.linalg.norm(u)
    lam = np.linalg.eigvalsh(H)
    assert abs(lam[0]) < 1e-13 and lam[1] > 1e-3, lam


# ---------------------------------------------------------------- softmax variant


def test_softmax_variant_equals_linear_and_brute_force():
    """L_softmax(V, W) = L_linear(V, softmax(W)) = brute force with a_k = softmax(W e_k), values and gradients."""
    N, T, Q = 3, 3, 2
    for seed in range(2):
        s = SoftmaxBigram(*random_instance(jax.random.PRNGKey(seed), N, T, Q))
        kV, kW = jax.random.split(jax.random.PRNGKey(50 + seed))
        theta = {"V": jax.random.normal(kV, (N, N)), "W": 2.0 * jax.random.normal(kW, (T, N))}
        A = jax.nn.softmax(theta["W"], axis=0)
        np.testing.assert_allclose(A.sum(axis=0), 1.0, rtol=EXACT)
        np.testing.assert_allclose(s.loss(theta), s.linear.loss({"V": theta["V"], "A": A}), rtol=EXACT)
        v, g = value_and_grad(s, theta)
        vb, gb = brute_value_and_grad(s.linear, s, theta)
        np.testing.assert_allclose(v, vb, rtol=1e-13)
        for name in ("V", "W"):
            np.testing.assert_allclose(g[name], gb[name], rtol=1e-12, atol=1e-13)
    canon = SoftmaxBigram(CANON_P, np.eye(2))
    np.testing.assert_allclose(canon.loss(canon.init(jax.random.PRNGKey(0))), 2 / 9, rtol=EXACT)


# ---------------------------------------------------------------- instances, batching, validation


def test_random_instance_structure():
    N, T, Q = 5, 7, 3
    P, Qm = random_instance(jax.random.PRNGKey(3), N, T, Q)
    assert P.shape == (N, N) and Qm.shape == (T, N)
    np.testing.assert_allclose(P.sum(axis=0), 1.0, rtol=EXACT)
    np.testing.assert_allclose(Qm.sum(axis=0), 1.0, rtol=EXACT)
    assert np.all(np.asarray(P) > 0)
    np.testing.assert_array_equal((np.asarray(Qm) > 0).sum(axis=0), Q)
    p = SparseBigram(P, Qm)
    assert float(p.mu.min()) > 0
    np.testing.assert_allclose(p.P @ p.mu, p.mu, atol=EXACT)
    assert 1 / Q <= float(p.qbar) <= 1.0
    P2, _ = random_instance(jax.random.PRNGKey(4), N, T, Q)
    assert not np.allclose(P, P2)


def test_vmap_over_parameters_and_instances():
    p = instance(*MID, 0)
    thetas = [random_theta(p, s) for s in range(3)]
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *thetas)
    np.testing.assert_allclose(jax.vmap(p.loss)(batch), [p.loss(t) for t in thetas], rtol=EXACT)
    probs = [instance(*MID, s) for s in range(3)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *probs)
    got = eqx.filter_vmap(lambda q, t: q.loss(t))(stacked, batch)
    np.testing.assert_allclose(got, [q.loss(t) for q, t in zip(probs, thetas, strict=False)], rtol=EXACT)


@pytest.mark.parametrize(
    "P,Qm,match",
    [
        (np.ones((2, 3)) / 2, np.eye(2), r"P has shape \(2, 3\)"),
        ([[1.2, 0.5], [-0.2, 0.5]], np.eye(2), r"P\[1,0\]=-0\.2.*\[0, 1\]"),
        ([[0.9, 0.5], [0.2, 0.5]], np.eye(2), r"column 0 of P sums to 1\.1"),
        ([[np.nan, 0.5], [0.5, 0.5]], np.eye(2), r"P\[0,0\]=nan"),
        ([[1.0, 0.5], [0.0, 0.5]], np.eye(2), r"P is reducible.*mu > 0"),  # state 1 transient: μ = (1, 0)
        (np.eye(3), np.eye(3), r"P is reducible"),  # three closed classes: μ not unique
        (CANON_P, np.eye(3), r"Qm has shape \(3, 3\).*N = 2"),
        (CANON_P, [[0.5, 1.5], [0.5, -0.5]], r"Qm\[1,1\]=-0\.5"),
        (CANON_P, [[0.5, 0.5], [0.4, 0.5]], r"column 0 of Qm sums to 0\.9.*T = 2 positions"),
    ],
)
def test_bad_instances_raise(P, Qm, match):
    with pytest.raises(ValueError, match=match):
        SparseBigram(P, Qm)
    with pytest.raises(ValueError, match=match):
        SoftmaxBigram(P, Qm)


@pytest.mark.parametrize(
    "args,match",
    [
        ((1, 3, 1), r"N=1 is out of range"),
        ((3, 0, 1), r"T=0 is out of range"),
        ((3, 2, 0), r"Q=0 is out of range"),
        ((3, 2, 3), r"Q=3 is out of range.*T = 2"),
        ((3, 2.0, 1), r"T=2\.0"),
    ],
)
def test_random_instance_validation(args, match):
    with pytest.raises(ValueError, match=match):
        random_instance(jax.random.PRNGKey(0), *args)


def test_sample_batch_validation():
    with pytest.raises(ValueError, match="batch=0"):
        CANON.sample(jax.random.PRNGKey(0), 0)
