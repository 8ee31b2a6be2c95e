"""Bilinear teacher: the Gaussian kernels against Monte Carlo and exact special cases, the exact population loss
against Monte Carlo of the generative model, derivatives (finite at the teacher and at zero, equal to finite
differences elsewhere), the zero-initialisation conventions, λ_max at the teacher, builders and validation
(docs/models/teacher.md §1–§3, §6, §10).

References: draws of the model (Monte Carlo, tolerance 4 standard errors computed from the draws), central finite
differences, the closed forms of §3.4 (L(0), the linear factorisation), §3.6 (the first step from zero) and §6
(λ_max).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.analysis import hessian_matrix, hessian_spectrum
from popdyn.tasks.teacher import (
    ZERO_INITS,
    BilinearTeacher,
    cnn_pooling,
    cycle_gcn,
    entry_loss,
    group_sparse,
    kappa,
    kfun,
    limit_partials,
    make_teacher,
    norm_toward,
    random_V,
    token_selection,
)

EXACT = 1e-13
MC_SE = 4.0  # Monte Carlo tolerance in standard errors
ALPHAS = (0.0, 0.1, 1.0)
D, K = 6, 2
V_STAR = np.asarray(random_V(jax.random.PRNGKey(0), 2, 3))
GENERIC = [(1.0, 1.0, 0.5), (0.7, 1.3, -0.6 * 0.91), (2.0, 0.5, 0.95), (1.0, 1.0, -0.99), (0.3, 2.0, 0.0)]


def teacher(activation="relu", alpha=None, **kw):
    return BilinearTeacher(cnn_pooling(D, K), V_STAR, activation, alpha, **kw)


def activation_of(alpha):
    return ("relu", None) if alpha == 0.0 else ("linear", None) if alpha == 1.0 else ("leaky", alpha)


def random_theta(prob, seed, scale=1.0):
    kW, kA = jax.random.split(jax.random.PRNGKey(100 + seed))
    return {"W": scale * jax.random.normal(kW, (prob.M, prob.d)), "A": scale * jax.random.normal(kA, (prob.D, prob.D))}


def finite_tree(tree):
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(tree))


flat_hessian = eqx.filter_jit(hessian_matrix)


@eqx.filter_jit
def loss_and_grad(prob, theta):
    return jax.value_and_grad(prob.loss)(theta)


def k_of(x):
    """K at x = (a, b, c, α)."""
    return kfun(x[0], x[1], x[2], x[3])


k_value, k_grad, k_hess = jax.jit(k_of), jax.jit(jax.grad(k_of)), jax.jit(jax.hessian(k_of))


# ---------------------------------------------------------------- kernels (§3.3, §3.5)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_kernel_against_monte_carlo(alpha):
    """E[σ(u)σ(v)] = K(a, b, c) and E[σ(u)²] = κa² for (u, v) with stds a, b and covariance c, within 4 SE."""

    def act(z):
        return np.maximum(z, alpha * z)

    z1, z2 = np.random.default_rng(1).standard_normal((2, 400_000))
    for a, b, c in GENERIC:
        rho = c / (a * b)
        u, w = a * z1, b * (rho * z1 + math.sqrt(1 - rho**2) * z2)
        prod = act(u) * act(w)
        se = prod.std(ddof=1) / math.sqrt(prod.size)
        assert abs(float(kfun(a, b, c, alpha)) - prod.mean()) < MC_SE * se, (a, b, c)
        sq = act(u) ** 2
        assert abs(kappa(alpha) * a * a - sq.mean()) < MC_SE * sq.std(ddof=1) / math.sqrt(sq.size)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_kernel_exact_cases(alpha):
    """ρ = 1: E[σ(au)σ(bu)] = κab; ρ = −1: −αab (relu(u)relu(−u) = 0); ρ = 0: α·0 + (1−α)²ab/(2π)."""
    a, b = 0.7, 1.9
    np.testing.assert_allclose(kfun(a, b, a * b, alpha), kappa(alpha) * a * b, rtol=EXACT)
    np.testing.assert_allclose(kfun(a, b, -a * b, alpha), -alpha * a * b, rtol=EXACT, atol=EXACT)
    np.testing.assert_allclose(kfun(a, b, 0.0, alpha), (1 - alpha) ** 2 * a * b / (2 * math.pi), rtol=EXACT, atol=EXACT)
    np.testing.assert_allclose(entry_loss(a, a, a * a, alpha), 0.0, atol=EXACT)


def central(f, x, e, h=1e-4):
    """Fourth-order central difference of f at x along e (error O(h⁴) + O(ε/h))."""
    return (-f(x + 2 * h * e) + 8 * f(x + h * e) - 8 * f(x - h * e) + f(x - 2 * h * e)) / (12 * h)


@pytest.mark.parametrize("alpha", (0.0, 0.1, 0.7))
def test_kernel_derivatives_match_finite_differences(alpha):
    """Gradient in (a, b, c, α) and Hessian in (a, b, c) at generic points against central differences."""
    eye = np.eye(4)
    for a, b, c in GENERIC:
        x = jnp.array([a, b, c, alpha])
        np.testing.assert_allclose(k_grad(x), [central(k_value, x, e) for e in eye], rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(k_hess(x)[:3], [central(k_grad, x, e) for e in eye[:3]], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_kernel_derivatives_finite_at_degenerate_points(alpha):
    """ρ = ±1 (the teacher), a = 0 (zero initialisation) and b = 0: grad and Hessian finite; ∂K/∂c at ρ = 1 is
    α + (1−α)²/2 (θ = 0) and at ρ = −1 it is α; at b = 0 the partials are those at fixed c = 0."""
    for x in ([0.7, 1.3, 0.91], [0.7, 1.3, -0.91], [0.0, 1.3, 0.0], [0.7, 0.0, 0.0], [0.0, 0.0, 0.0]):
        x = jnp.array(x + [alpha])
        assert finite_tree((k_grad(x), k_hess(x))), x
    g = (1 - alpha) ** 2 / (2 * math.pi)
    np.testing.assert_allclose(k_grad(jnp.array([0.7, 1.3, 0.91, alpha]))[:3], [0, 0, alpha + g * math.pi], atol=EXACT)
    np.testing.assert_allclose(k_grad(jnp.array([0.7, 1.3, -0.91, alpha]))[:3], [0, 0, alpha], atol=EXACT)
    np.testing.assert_allclose(
        k_grad(jnp.array([0.7, 0.0, 0.0, alpha]))[:3], [0, g * 0.7, alpha + g * math.pi / 2], atol=EXACT
    )


@jax.jit
def k_grad_at_zero(b, alpha, zero):
    """(∂K/∂a, ∂K/∂c) at a = c = 0 with the partials ``zero`` supplied for a = 0."""
    return jax.grad(lambda a_, c_: kfun(a_, b, c_, alpha, zero=zero), argnums=(0, 1))(0.0, 0.0)


@pytest.mark.parametrize("alpha", (0.0, 0.1))
def test_limit_partials_are_the_a_to_zero_limit(alpha):
    """∂K/∂a, ∂K/∂c at a = 1e-9 along a fixed ρ equal limit_partials(b, ρ), and ``zero`` supplies them at a = 0."""
    a, b = 1e-9, 1.3
    for rho in (-0.8, 0.0, 0.4, 1.0):
        lim = limit_partials(b, rho, alpha)
        grad = k_grad(jnp.array([a, b, rho * a * b, alpha]))
        np.testing.assert_allclose([grad[0], grad[2]], lim, rtol=1e-12, atol=EXACT)
        np.testing.assert_allclose(k_grad_at_zero(b, alpha, lim), lim, rtol=EXACT)


def test_norm_toward_gradient():
    """‖x‖ with gradient x/‖x‖, and the given unit direction u at x = 0 (Hessian finite there)."""
    u = jnp.array([0.6, 0.8])
    grad, hess = jax.jit(jax.grad(norm_toward)), jax.jit(jax.hessian(norm_toward))
    np.testing.assert_allclose(grad(jnp.zeros(2), u), u, rtol=EXACT)
    x = jnp.array([3.0, -4.0])
    np.testing.assert_allclose(norm_toward(x, u), 5.0, rtol=EXACT)
    np.testing.assert_allclose(grad(x, u), x / 5.0, rtol=EXACT)
    assert finite_tree(hess(jnp.zeros(2), u))


# ---------------------------------------------------------------- the exact loss (§3.4)


@pytest.mark.slow
@pytest.mark.parametrize("activation, alpha", [("linear", None), ("relu", None), ("leaky", 0.3)])
def test_loss_against_monte_carlo(activation, alpha):
    prob = teacher(activation, alpha, sigma_x=1.3, sigma_eps=0.4)
    for seed, scale in ((0, 1.0), (1, 0.3)):
        theta = random_theta(prob, seed, scale)
        est, se = prob.sampled_loss(theta, jax.random.PRNGKey(seed), 40_000)
        exact = float(loss_and_grad(prob, theta)[0])
        assert abs(exact - float(est)) < MC_SE * float(se), (seed, exact, est, se)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_loss_at_zero_and_at_the_teacher(alpha):
    """L(0) − L_opt = (1+α²)σ_x²vD/(4K); L(V*, S*) = L_opt, also at ``teacher_params`` (Δ large) (§3.4, §10, item 2)."""
    prob = teacher(*activation_of(alpha), sigma_x=1.3, sigma_eps=0.4)
    L0 = (1 + alpha**2) * 1.3**2 * float(prob.v) * D / (4 * K)
    np.testing.assert_allclose(loss_and_grad(prob, prob.init(None))[0] - prob.L_opt, L0, rtol=EXACT)
    np.testing.assert_allclose(prob.L_opt, 0.5 * prob.M * D * 0.4**2, rtol=EXACT)
    np.testing.assert_allclose(eqx.filter_jit(prob.loss_at)(prob.V_star, prob.S_star), prob.L_opt, atol=EXACT * L0)
    np.testing.assert_allclose(loss_and_grad(prob, prob.teacher_params())[0], prob.L_opt, atol=EXACT * L0)


def test_linear_loss_factorises():
    """Identity σ: L − L_opt = (σ_x²/2)(‖W‖²‖S‖² − 2⟨W,V*⟩⟨S,S*⟩ + v‖S*‖²) = (σ_x²/2)‖Sᵀ⊗W − S*ᵀ⊗V*‖² (§3.4)."""
    prob = teacher("linear", sigma_x=0.8, sigma_eps=0.2)
    for seed in range(3):
        theta = random_theta(prob, seed)
        W, S, V, Ss = theta["W"], prob.attention(theta), prob.V_star, prob.S_star
        factored = (
            0.5
            * 0.64
            * (jnp.sum(W**2) * jnp.sum(S**2) - 2 * jnp.sum(W * V) * jnp.sum(S * Ss) + prob.v * jnp.sum(Ss**2))
        )
        kron = 0.5 * 0.64 * jnp.sum((jnp.kron(S.T, W) - jnp.kron(Ss.T, V)) ** 2)
        np.testing.assert_allclose(loss_and_grad(prob, theta)[0] - prob.L_opt, factored, rtol=1e-12)
        np.testing.assert_allclose(kron, factored, rtol=1e-12)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_derivatives_match_finite_differences(alpha):
    """Directional derivative and Hessian-vector product at a generic θ against central differences."""
    prob = teacher(*activation_of(alpha), sigma_x=1.1)
    theta, direction = random_theta(prob, 0), random_theta(prob, 10)
    flat, unflat = jax.flatten_util.ravel_pytree(theta)
    e = jax.flatten_util.ravel_pytree(direction)[0]

    def value(x):
        return loss_and_grad(prob, unflat(x))[0]

    def slope(x):
        return e @ jax.flatten_util.ravel_pytree(loss_and_grad(prob, unflat(x))[1])[0]

    g = jax.flatten_util.ravel_pytree(loss_and_grad(prob, theta)[1])[0]
    np.testing.assert_allclose(e @ g, central(value, flat, e), rtol=1e-9)
    np.testing.assert_allclose(e @ flat_hessian(prob, theta) @ e, central(slope, flat, e), rtol=1e-8)


@pytest.mark.parametrize("zero_init", ZERO_INITS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_derivatives_finite_at_teacher_and_zero(alpha, zero_init):
    """Gradient and Hessian finite at W = 0 (a = 0), at the teacher (ρ = 1) and at W = V*, S uniform; the gradient
    vanishes at the teacher (the minimum)."""
    prob = teacher(*activation_of(alpha), zero_init=zero_init)
    for theta in (prob.init(None), prob.teacher_params(), {"W": prob.V_star, "A": jnp.zeros((D, D))}):
        assert finite_tree((loss_and_grad(prob, theta), flat_hessian(prob, theta)))
    g = loss_and_grad(prob, prob.teacher_params())[1]
    assert max(float(jnp.max(jnp.abs(x))) for x in jax.tree_util.tree_leaves(g)) < 1e-12


# ---------------------------------------------------------------- zero initialisation (§3.6)


def first_step_limit(alpha, D, K):
    """−dL/dC1/‖V*‖² at C1 = 0+, σ_x = 1, uniform S (§3.6)."""
    th0 = math.acos(math.sqrt(K / D))
    g = (1 - alpha) ** 2 / (2 * math.pi)
    return g * math.sqrt(D - K) / math.sqrt(K) + alpha + g * (math.pi - th0)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_limit_convention_gradient_at_zero(alpha):
    """ "limit": ∇_W L(0) = −σ_x² F V* with F the §3.6 formula, ∇_A L(0) = 0, and ∇L(0) = lim ∇L(δV*), δ → 0+."""
    sx = 1.3
    prob = teacher(*activation_of(alpha), sigma_x=sx)
    g0 = loss_and_grad(prob, prob.init(None))[1]
    np.testing.assert_allclose(g0["W"], -(sx**2) * first_step_limit(alpha, D, K) * prob.V_star, rtol=1e-12)
    np.testing.assert_array_equal(g0["A"], 0.0)
    g_delta = loss_and_grad(prob, {"W": 1e-8 * prob.V_star, "A": jnp.zeros((D, D))})[1]
    np.testing.assert_allclose(g_delta["W"], g0["W"], atol=1e-7)  # O(δ‖∇²L‖), ‖∇²L‖ = O(1)


@eqx.filter_jit
def expectation_gradient(prob, strict, n, key):
    """Monte Carlo of the expectation-form ∇_W at W = 0 with σ written as a ``where`` (strict: z > 0, else z >= 0):
    (mean, standard error) from per-sample autodiff gradients."""
    X, Y = prob.sample(key, n)
    S = prob.attention(prob.init(None))
    alpha = prob.alpha

    def per_sample(W, x, y):
        z = W @ x @ S
        out = jnp.where(jnp.where(strict, z > 0, z >= 0), z, alpha * z)
        return 0.5 * jnp.sum((y - out) ** 2)

    g = jax.vmap(jax.grad(per_sample), in_axes=(None, 0, 0))(jnp.zeros((prob.M, prob.d)), X, Y)
    return g.mean(0), g.std(0, ddof=1) / math.sqrt(n)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", ALPHAS)
def test_expectation_conventions_at_zero(alpha):
    """ "c0=0"/"c0=1": ∇_W L(0) = −σ_x²σ'(0)(1+α)/2 V*, σ'(0) = α + (1−α)c0 — equal to a Monte Carlo of autodiff
    through ``where(z > 0)`` / ``where(z >= 0)``; for ReLU with c0 = 0 it vanishes; for the identity every
    convention gives −σ_x²V*."""
    for c0, strict in ((0.0, True), (1.0, False)):
        prob = teacher(*activation_of(alpha), sigma_x=1.3, sigma_eps=0.2, zero_init=f"c0={c0:g}")
        g0 = loss_and_grad(prob, prob.init(None))[1]["W"]
        slope = (alpha + (1 - alpha) * c0) * (1 + alpha) / 2
        np.testing.assert_allclose(g0, -1.69 * slope * prob.V_star, rtol=1e-12, atol=EXACT)
        mean, se = expectation_gradient(prob, jnp.asarray(strict), 50_000, jax.random.PRNGKey(int(c0)))
        assert np.all(np.abs(np.asarray(mean - g0)) < MC_SE * np.asarray(se) + EXACT)
    if alpha == 1.0:
        limit = teacher("linear", sigma_x=1.3, sigma_eps=0.2)
        np.testing.assert_allclose(g0, loss_and_grad(limit, prob.init(None))[1]["W"], rtol=EXACT)


# ---------------------------------------------------------------- λ_max at the teacher (§6)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("k, v_norm", [(2, 1.0), (2, 20.0), (1, 30.0)])
def test_lambda_max_at_teacher(alpha, k, v_norm):
    """Exact spectrum of ∇²L in (W, A) at ``teacher_params`` (S = S* to rounding) against κσ_x²max(D/K, v/(K²D)):
    (2, 1) D/K dominates, (2, 20) v/(K²D) dominates (400/24 > 3). K = 1 (one-hot columns): the softmax Jacobian
    vanishes at S*, the A block is 0 and λ_max = κσ_x²D although v/D = 150 > D = 6 [derived correction].
    Tolerance: identity 1e-12; ReLU/leaky 1e-7, because at ρ = 1 the Hessian's singular rank-1 term
    (a, c)-Hessian ∝ 1/Q cancels only to ε/Q with Q = √(a²b² − c²) ~ √ε of rounding (measured ≤ 5e-9)."""
    prob = BilinearTeacher(
        cnn_pooling(D, k), random_V(jax.random.PRNGKey(1), 2, 3, v_norm), *activation_of(alpha), sigma_x=1.2
    )
    expected = kappa(alpha) * 1.44 * (max(D / k, v_norm**2 / (k * k * D)) if k > 1 else D)
    np.testing.assert_allclose(prob.lambda_max_at_teacher(), expected, rtol=EXACT)
    spectrum = hessian_spectrum(prob, prob.teacher_params())
    np.testing.assert_allclose(spectrum[-1], expected, rtol=1e-12 if alpha == 1.0 else 1e-7)
    assert float(spectrum[0]) > -1e-12 * expected  # a minimum (with the A block's null space)


# ---------------------------------------------------------------- builders (§1.1)


def test_builders():
    np.testing.assert_array_equal(cnn_pooling(6, 2), np.kron(np.eye(3), np.full((2, 2), 0.5)))
    gcn = cycle_gcn(20, 3)
    tri = (np.eye(20) + np.roll(np.eye(20), 1, axis=0) + np.roll(np.eye(20), -1, axis=0)) / 3
    np.testing.assert_array_equal(gcn, tri)
    assert np.all(np.count_nonzero(cycle_gcn(9, 5), axis=0) == 5)
    np.testing.assert_array_equal(cycle_gcn(9, 5), cycle_gcn(9, 5).T)
    sts = token_selection(5, 2, targets=[1, 3])
    np.testing.assert_array_equal(sts, np.outer([0, 0.5, 0, 0.5, 0], np.ones(5)))
    np.testing.assert_array_equal(token_selection(5, 2)[:2], 0.5)
    np.testing.assert_array_equal(group_sparse(4, 2), np.outer(np.eye(4)[2], np.ones(4)))
    np.testing.assert_allclose(jnp.linalg.norm(random_V(jax.random.PRNGKey(3), 2, 5, norm=1.7)), 1.7, rtol=EXACT)
    key = jax.random.PRNGKey(4)
    sts_t = make_teacher("sts", 8, 2, d=3, activation="linear")
    assert (sts_t.M, sts_t.K) == (3, 2) and np.array_equal(sts_t.V_star, np.eye(3))
    gslp = make_teacher("gslp", 8, d=3, key=key, v_norm=2.0, activation="relu")
    assert (gslp.M, gslp.K, float(gslp.alpha)) == (1, 1, 0.0)
    np.testing.assert_allclose(gslp.v, 4.0, rtol=EXACT)
    assert float(make_teacher("gcn", 9, 3, d=2, M=4, key=key).alpha) == 0.1  # default leaky slope [our choice]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: cnn_pooling(6, 4), "K=4 is invalid for cnn"),
        (lambda: cnn_pooling(6, 6), r"K=6 is out of range: must be an integer in \[1, D\)"),
        (lambda: cnn_pooling(6, 0), "K=0 is out of range"),
        (lambda: cnn_pooling(1, 1), "D=1 is out of range"),
        (lambda: cnn_pooling(-4, 2), "D=-4 is out of range"),
        (lambda: cycle_gcn(8, 2), "K=2 is invalid for gcn: must be odd"),
        (lambda: token_selection(5, 2, targets=[1, 1]), "targets=.* is invalid"),
        (lambda: token_selection(5, 2, targets=[1, 5]), "targets=.* is invalid"),
        (lambda: group_sparse(4, 4), "i_star=4 is out of range"),
        (lambda: random_V(jax.random.PRNGKey(0), 0, 3), "M=0 is out of range"),
        (lambda: random_V(jax.random.PRNGKey(0), 2, 3, norm=-1.0), "norm=-1.0 is out of range"),
        (lambda: make_teacher("mlp", 8, 2, d=3), "name='mlp' is invalid: must be one of 'cnn', 'gcn', 'sts', 'gslp'"),
        (lambda: make_teacher("sts", 8, 2, d=3, M=2), "M=2 is invalid for sts"),
        (lambda: make_teacher("gslp", 8, 2, d=3, key=jax.random.PRNGKey(0)), "invalid for gslp"),
        (lambda: make_teacher("cnn", 8, 2, d=3, M=2), "key=None is invalid"),
        (lambda: make_teacher("cnn", 8, 2, d=3, key=jax.random.PRNGKey(0)), "M=None is invalid"),
    ],
)
def test_builder_validation(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"S_star": np.eye(4)[:3]}, "S_star with shape"),
        ({"S_star": -cnn_pooling(4, 2)}, "S_star with shape"),
        ({"S_star": np.eye(4) * 0.5}, "S_star is invalid"),
        ({"S_star": np.ones((4, 4)) / 4}, "S_star is invalid"),
        ({"S_star": np.hstack([cnn_pooling(4, 2)[:, :3], np.eye(4)[:, :1]])}, "S_star is invalid"),
        ({"V_star": np.ones(3)}, "V_star with shape"),
        ({"V_star": np.full((2, 2), np.nan)}, "V_star with shape"),
        ({"V_star": np.zeros((2, 2))}, "V_star with shape"),
        ({"activation": "tanh"}, "activation='tanh' is invalid: must be one of 'linear', 'relu', 'leaky'"),
        ({"activation": "leaky", "alpha": 1.0}, r"alpha=1.0 is out of range: must lie in \[0, 1\)"),
        ({"activation": "leaky", "alpha": -0.1}, "alpha=-0.1 is out of range"),
        ({"activation": "relu", "alpha": 0.2}, "alpha=0.2 is invalid for activation='relu'"),
        ({"sigma_x": 0.0}, "sigma_x=0.0 is out of range"),
        ({"sigma_eps": -1.0}, "sigma_eps=-1.0 is out of range"),
        ({"zero_init": "c0=0.5"}, "zero_init='c0=0.5' is invalid: must be one of 'limit', 'c0=0', 'c0=1'"),
    ],
)
def test_teacher_validation(kwargs, match):
    args = {"S_star": cnn_pooling(4, 2), "V_star": np.ones((2, 2)), **kwargs}
    with pytest.raises(ValueError, match=match):
        BilinearTeacher(**args)
