"""The canonical (e, w) / (e, w, b) model of binary Markov data (docs/models/markov.md §2.2, §3.2, §4, Appendix).

Every reference is one of: the tables of §4.4, §4.6 and the Appendix (checked to their printed precision), the
closed forms of §3.2/§4 re-implemented here in numpy, or brute-force enumeration / Monte-Carlo sampling of the
data distribution. θ is {"e", "w"} (bias profiled) or {"e", "w", "b"} (bias trained).
"""

from __future__ import annotations

import functools
import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy.optimize import minimize_scalar
from scipy.spatial.distance import cdist

import popdyn
from popdyn.analysis import hessian_matrix
from popdyn.tasks.markov import ATTRACTORS, E_SADDLE, W_SADDLE, Canonical

TABLE6 = 1e-6  # tables printed with 6 decimals
TABLE8 = 1e-8  # point-value table printed with 8 decimals
EXACT = 1e-12
NB = 64  # one batch size throughout, so eager primitives compile once and are shared across tests

# Appendix: p, q, π1, H_rate, H_uni, A*, ℓ''(A*), ℓ'(0)
APPENDIX = [
    (0.5, 0.8, 0.384615, 0.619015, 0.666278, -1.386294, 0.043956, +0.071006),
    (0.2, 0.3, 0.400000, 0.544587, 0.673012, +2.233592, 0.044800, -0.120000),
    (0.1, 0.1, 0.500000, 0.325083, 0.693147, +4.394449, 0.022500, -0.200000),
    (0.9, 0.9, 0.500000, 0.325083, 0.693147, -4.394449, 0.022500, +0.200000),
]
# (p, q) covering p > q, p < q, p = q on both sides of p+q = 1
PQ_SWEEP = [(0.5, 0.8), (0.2, 0.3), (0.1, 0.1), (0.9, 0.9), (0.7, 0.2), (0.8, 0.6), (0.3, 0.3), (0.05, 0.6)]


# ---------------------------------------------------------------- independent numpy references


def h(t):
    return -t * math.log(t) - (1.0 - t) * math.log(1.0 - t)


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


def log_sigmoid(x):
    return -np.logaddexp(0.0, -np.asarray(x, dtype=np.float64))


def pis(p, q):
    return q / (p + q), p / (p + q)


def c_np(w):
    return 1.0 + 2.0 * w * np.abs(w)


def logits_np(e, w, b):
    """(f0, f1) of §2.2."""
    return b - e**2 / 2.0, (0.5 + 2.0 * w * np.abs(w)) * e**2 + b


def loss3_np(p, q, e, w, b):
    """L(e, w, b) of §3.2."""
    pi0, pi1 = pis(p, q)
    f0, f1 = logits_np(e, w, b)
    return -pi1 * ((1 - q) * log_sigmoid(f1) + q * log_sigmoid(-f1)) - pi0 * (
        p * log_sigmoid(f0) + (1 - p) * log_sigmoid(-f0)
    )


def f0_star_np(p, q, A):
    """f0* = ln u of §2.2, in the numerically stable branch §2.2 prescribes."""
    A = np.asarray(A, dtype=np.float64)
    K = np.exp(A)
    root = np.sqrt((p - q) ** 2 + 4 * p * q * K)
    if p > q:
        u = ((p - q) + root) / (2 * q * K)
    else:
        u = 2 * p / ((q - p) + root)
    return np.log(u)


def uv_np(p, q, A):
    """(u, v) of §3.2 at gap A: u = π1σ(f1*)(1−σ(f1*)), v = π0σ(f0*)(1−σ(f0*))."""
    pi0, pi1 = pis(p, q)
    f0 = f0_star_np(p, q, A)
    s0, s1 = sigmoid(f0), sigmoid(f0 + A)
    return pi1 * s1 * (1 - s1), pi0 * s0 * (1 - s0)


def energy_np(e, w):
    return e**2 - w**2 - np.sign(w) * np.log(np.abs(w))


def s_np(w):
    return w**2 + np.sign(w) * np.log(np.abs(w))


def th(e, w, b=None):
    t = {"e": jnp.asarray(float(e)), "w": jnp.asarray(float(w))}
    if b is not None:
        t["b"] = jnp.asarray(float(b))
    return t


def batch(e, w, b=None):
    t = {"e": jnp.asarray(np.asarray(e, dtype=np.float64)), "w": jnp.asarray(np.asarray(w, dtype=np.float64))}
    if b is not None:
        t["b"] = jnp.asarray(np.asarray(b, dtype=np.float64))
    return t


def profile_derivatives(prob, A):
    """(ℓ, ℓ', ℓ'') at the gaps A by autodiff of ``profile_loss`` (padded to NB points)."""
    n = len(A)
    x = jnp.asarray(np.resize(np.asarray(A, dtype=np.float64), NB))
    return tuple(np.asarray(o)[:n] for o in _profile_derivatives(prob, x))


@eqx.filter_jit
def _profile_derivatives(prob, x):
    """(ℓ, ℓ', ℓ'') at the gaps x: one compiled program for every (p, q), which are data of ``prob``."""
    d1 = jax.grad(prob.profile_loss)
    return jax.vmap(prob.profile_loss)(x), jax.vmap(d1)(x), jax.vmap(jax.grad(d1))(x)


# ---------------------------------------------------------------- Appendix: per-(p, q) table


@pytest.mark.slow
@pytest.mark.parametrize("p,q,pi1,H_rate,H_uni,A_star,l2,l1_0", APPENDIX)
def test_appendix_table(p, q, pi1, H_rate, H_uni, A_star, l2, l1_0):
    prob = Canonical(p, q)
    A = prob.optimal_gap()
    (ell_0, ell_A), (d1_0, _), (_, d2_A) = profile_derivatives(prob, [0.0, A])
    assert abs(prob.pi1 - pi1) < TABLE6
    assert abs(prob.entropy_rate() - H_rate) < TABLE6
    assert abs(prob.unigram_loss() - H_uni) < TABLE6
    assert abs(A - A_star) < TABLE6
    assert abs(d2_A - l2) < TABLE6
    assert abs(d1_0 - l1_0) < TABLE6
    assert abs(ell_0 - H_uni) < TABLE6
    assert abs(ell_A - H_rate) < TABLE6


@pytest.mark.parametrize("p,q", PQ_SWEEP)
def test_appendix_quantities_closed_forms(p, q):
    """§1.1 and §3.2: A* = ln[(1−p)(1−q)/(pq)], ℓ(0) = h(π1), ℓ(A*) = π0h(p) + π1h(q),
    ℓ'(0) = π0π1(p+q−1), ℓ'(A*) = 0, ℓ''(A*) = u*v*/(u*+v*) with u* = π1q(1−q), v* = π0p(1−p)."""
    prob = Canonical(p, q)
    pi0, pi1 = pis(p, q)
    assert abs(prob.pi0 - pi0) < 1e-15 and abs(prob.pi1 - pi1) < 1e-15
    A_star = math.log((1 - p) * (1 - q) / (p * q))
    assert abs(prob.optimal_gap() - A_star) < EXACT
    assert np.sign(prob.optimal_gap()) == -np.sign(p + q - 1)
    H_rate, H_uni = pi0 * h(p) + pi1 * h(q), h(pi1)
    assert abs(prob.entropy_rate() - H_rate) < EXACT
    assert abs(prob.unigram_loss() - H_uni) < EXACT
    (ell_0, ell_A), (d1_0, d1_A), (_, d2_A) = profile_derivatives(prob, [0.0, A_star])
    assert abs(ell_0 - H_uni) < EXACT
    assert abs(ell_A - H_rate) < EXACT
    assert abs(d1_0 - pi0 * pi1 * (p + q - 1)) < EXACT
    assert abs(d1_A) < EXACT
    u, v = pi1 * q * (1 - q), pi0 * p * (1 - p)
    assert abs(d2_A - u * v / (u + v)) < EXACT
    # at A*, b* gives the exact conditional probabilities σ(f0*) = p, σ(f1*) = 1−q (§4.5)
    f0 = float(prob.profiled_f0(jnp.asarray(A_star)))
    assert abs(sigmoid(f0) - p) < EXACT
    assert abs(sigmoid(f0 + A_star) - (1 - q)) < EXACT


@pytest.mark.parametrize("p,q", PQ_SWEEP)
def test_profile_derivatives_closed_forms(p, q):
    """ℓ'(A) = π1(σ(f1*) − (1−q)) = −π0(σ(f0*) − p) and ℓ''(A) = uv/(u+v) at many A (§3.2)."""
    prob = Canonical(p, q)
    pi0, pi1 = pis(p, q)
    A = np.concatenate(
        [[-12.0, -6.5, -3.0, -1.0, -0.3, 0.0, 0.2, 0.7, 2.0, 4.5, 9.0, 15.0], np.linspace(-15.0, 15.0, NB - 12)]
    )
    f0_ref = f0_star_np(p, q, A)
    f0 = np.asarray(prob.profiled_f0(jnp.asarray(A)))
    np.testing.assert_allclose(f0, f0_ref, rtol=0, atol=EXACT)
    # u is the positive root of qK u² + (q−p)u − p = 0
    u_root = np.exp(f0)
    K = np.exp(A)
    terms = np.stack([q * K * u_root**2, (q - p) * u_root, np.full_like(A, -p)])
    assert np.all(u_root > 0)
    assert np.max(np.abs(terms.sum(axis=0)) / np.abs(terms).sum(axis=0)) < 1e-14  # relative to the terms

    ell, d1, d2 = profile_derivatives(prob, A)
    s0, s1 = sigmoid(f0_ref), sigmoid(f0_ref + A)
    np.testing.assert_allclose(d1, pi1 * (s1 - (1 - q)), rtol=0, atol=EXACT)
    np.testing.assert_allclose(d1, -pi0 * (s0 - p), rtol=0, atol=EXACT)
    u, v = uv_np(p, q, A)
    np.testing.assert_allclose(d2, u * v / (u + v), rtol=0, atol=EXACT)
    # ℓ(A) itself = L(e, w, b) at f0 = f0*, f1 = f0* + A
    l_ref = -pi1 * ((1 - q) * log_sigmoid(f0_ref + A) + q * log_sigmoid(-f0_ref - A)) - pi0 * (
        p * log_sigmoid(f0_ref) + (1 - p) * log_sigmoid(-f0_ref)
    )
    np.testing.assert_allclose(ell, l_ref, rtol=0, atol=EXACT)


# ---------------------------------------------------------------- Appendix: point values

POINTS = [
    # p, q, e, w, b, A, b*, L_prof, ∂eL, ∂wL, E, L3, ∂(e,w,b)L3
    (
        0.1,
        0.1,
        1.0,
        0.5,
        0.0,
        1.5,
        -0.25,
        0.46187101,
        -0.33123195,
        -0.22082130,
        1.44314718,
        0.46866934,
        (-0.30771176, -0.16894142, 0.05429962),
    ),
    (
        0.9,
        0.9,
        1.0,
        -1.0,
        0.3,
        -1.0,
        1.0,
        0.52407698,
        -0.27754067,
        0.55508134,
        0.0,
        0.58071067,
        (0.02770417, 0.26295043, -0.15917939),
    ),
]


@pytest.mark.parametrize("row", POINTS, ids=["p=q=0.1", "p=q=0.9"])
def test_point_values(row):
    p, q, e, w, b, A, b_star, L_prof, dLe, dLw, E, L3, dL3 = row
    prob = Canonical(p, q)
    prob3 = Canonical(p, q, bias="trained")
    t, t3 = th(e, w), th(e, w, b)
    gap, opt_b, (loss, g), energy, (loss3, g3) = _point_values(prob, prob3, t, t3)
    assert abs(float(gap) - A) < TABLE8
    assert abs(float(opt_b) - b_star) < TABLE8
    assert abs(float(loss) - L_prof) < TABLE8
    assert set(g) == {"e", "w"}
    assert abs(float(g["e"]) - dLe) < TABLE8
    assert abs(float(g["w"]) - dLw) < TABLE8
    assert abs(float(energy) - E) < TABLE8
    assert abs(float(loss3) - L3) < TABLE8
    for k, ref in zip("ewb", dL3, strict=False):
        assert abs(float(g3[k]) - ref) < TABLE8, k
    # the trained loss at b = b* equals the profiled loss
    loss3_at_opt_b = _point_values(prob, prob3, t, th(e, w, float(opt_b)))[4][0]
    assert abs(float(loss3_at_opt_b) - float(loss)) < EXACT


@eqx.filter_jit
def _point_values(prob, prob3, t, t3):
    """(gap, b*, (L, ∇L), energy) of the profiled ``prob`` at ``t`` and (L, ∇L) of the trained ``prob3`` at ``t3``:
    one compiled program for every (p, q), which are data of the problems."""
    vg, vg3 = jax.value_and_grad(prob.loss)(t), jax.value_and_grad(prob3.loss)(t3)
    return prob.gap(t), prob.optimal_bias(t), vg, prob.energy(t), vg3


# ---------------------------------------------------------------- the profiled bias b*


@pytest.mark.parametrize("p,q", PQ_SWEEP)
def test_optimal_bias_characterisation_sweep(p, q):
    """π1σ(f1*) + π0σ(f0*) = π1 for every A (§2.2), across p > q, p < q and p = q."""
    prob = Canonical(p, q)
    pi0, pi1 = pis(p, q)
    A = jnp.asarray(np.concatenate([np.linspace(-40.0, 40.0, NB - 1), [prob.optimal_gap()]]))
    f0 = np.asarray(prob.profiled_f0(A))
    assert np.all(np.isfinite(f0))
    resid = pi1 * sigmoid(f0 + np.asarray(A)) + pi0 * sigmoid(f0) - pi1
    assert np.max(np.abs(resid)) < 1e-13
    # ∂L/∂b = g0 + g1 = 0 at b* (through the trained model)
    prob3 = Canonical(p, q, bias="trained")
    rng = np.random.default_rng(3)
    e, w = rng.uniform(-2.5, 2.5, NB), rng.uniform(-2.5, 2.5, NB)
    b_star = prob.optimal_bias(batch(e, w))
    np.testing.assert_allclose(np.asarray(b_star), f0_star_np(p, q, c_np(w) * e**2) + e**2 / 2, rtol=0, atol=EXACT)
    gb = jax.vmap(jax.grad(prob3.loss))(batch(e, w, b_star))["b"]
    assert np.max(np.abs(np.asarray(gb))) < 1e-13


@pytest.mark.parametrize("p,q", [(0.5, 0.8), (0.8, 0.5), (0.1, 0.1), (0.9, 0.9), (0.7, 0.2)])
def test_profiled_loss_is_brute_force_min_over_b(p, q):
    prob = Canonical(p, q)
    prob3 = Canonical(p, q, bias="trained")
    rng = np.random.default_rng(7)
    for e, w in rng.uniform(-2.0, 2.0, size=(6, 2)):
        t = th(e, w)
        b_star = float(prob.optimal_bias(t))
        res = minimize_scalar(
            lambda b, e=e, w=w: loss3_np(p, q, e, w, b), bracket=(b_star - 3.0, b_star + 3.0), method="brent", tol=1e-12
        )
        L_prof = float(prob.loss(t))
        assert abs(L_prof - res.fun) < 1e-10
        assert L_prof <= res.fun + 1e-14
        assert abs(res.x - b_star) < 1e-5
        # b* beats any other bias
        for b in b_star + np.array([-1.0, -0.1, -1e-3, 1e-3, 0.1, 1.0]):
            assert L_prof < float(prob3.loss(th(e, w, b)))


@pytest.mark.parametrize("p,q", [(0.5, 0.8), (0.8, 0.5), (0.1, 0.1), (0.9, 0.9)])
def test_profiled_loss_finite_for_large_gaps(p, q):
    prob = Canonical(p, q)
    ell, d1, d2 = profile_derivatives(prob, np.linspace(-500.0, 500.0, NB))
    assert np.all(np.isfinite(ell)) and np.all(np.isfinite(d1)) and np.all(np.isfinite(d2))
    # ℓ is convex with its minimum H_rate at A*
    assert np.all(ell >= prob.entropy_rate() - 1e-15)
    assert np.all(d2 >= 0.0)
    assert np.all(np.diff(d1) >= -1e-15)
    # (e, w) points with |A| up to 500 and beyond, both signs of c(w)
    rng = np.random.default_rng(8)
    e = np.concatenate(
        [
            [np.sqrt(500.0), -np.sqrt(500.0), np.sqrt(500 / 3.5), 12.0, -20.0, 0.5],
            rng.choice([-1, 1], NB - 6) * rng.uniform(3.0, 25.0, NB - 6),
        ]
    )
    w = np.concatenate([[0.0, 0.0, -1.5, 1.1, -2.0, 30.0], rng.uniform(-3.0, 3.0, NB - 6)])
    A_pts = c_np(w) * e**2
    assert np.max(np.abs(A_pts)) > 500
    t = batch(e, w)
    L = np.asarray(jax.vmap(prob.loss)(t))
    g = jax.vmap(jax.grad(prob.loss))(t)
    assert np.all(np.isfinite(L))
    assert np.all(np.isfinite(np.asarray(g["e"]))) and np.all(np.isfinite(np.asarray(g["w"])))


# ---------------------------------------------------------------- the loss against the data


def _enumerated_loss(p, q, f0, f1, N):
    """§3.1 by enumerating all 2^(N+1) sequences x_1..x_{N+1} with weights π_{x1} Π P."""
    P = np.array([[1 - p, p], [q, 1 - q]])
    pi = np.array(pis(p, q))
    seqs = np.array(list(itertools.product((0, 1), repeat=N + 1)))
    weight = pi[seqs[:, 0]]
    for n in range(N):
        weight = weight * P[seqs[:, n], seqs[:, n + 1]]
    assert abs(weight.sum() - 1.0) < 1e-14
    logit = np.where(seqs[:, :N] == 1, f1, f0)
    y = seqs[:, 1:]
    ce = -(y * log_sigmoid(logit) + (1 - y) * log_sigmoid(-logit))
    return float((weight * ce.mean(axis=1)).sum())


@pytest.mark.parametrize("p,q", [(0.5, 0.8), (0.8, 0.3), (0.1, 0.1), (0.2, 0.3)])
def test_loss_equals_brute_force_enumeration(p, q):
    prob3 = Canonical(p, q, bias="trained")
    prob = Canonical(p, q)
    rng = np.random.default_rng(5)
    for e, w, b in rng.uniform(-1.5, 1.5, size=(5, 3)):
        f0, f1 = logits_np(e, w, b)
        ref = _enumerated_loss(p, q, f0, f1, N=6)
        assert abs(float(prob3.loss(th(e, w, b))) - ref) < 1e-13
        # profiled: the same with b = b*
        t = th(e, w)
        f0s, f1s = logits_np(e, w, float(prob.optimal_bias(t)))
        assert abs(float(prob.loss(t)) - _enumerated_loss(p, q, f0s, f1s, N=6)) < 1e-13


@pytest.mark.parametrize("p,q,e,w,b", [(0.5, 0.8, 0.9, -0.7, 0.2), (0.2, 0.3, 1.3, 0.4, -0.5)])
def test_loss_monte_carlo(p, q, e, w, b):
    prob3 = Canonical(p, q, bias="trained")
    rng = np.random.default_rng(20240613)
    n_seq, N = 200_000, 6
    pi0, pi1 = pis(p, q)
    x = np.empty((n_seq, N + 1), dtype=np.int64)
    x[:, 0] = rng.random(n_seq) < pi1
    flip_prob = np.array([p, q])  # P(switch | current)
    for n in range(N):
        flip = rng.random(n_seq) < flip_prob[x[:, n]]
        x[:, n + 1] = np.where(flip, 1 - x[:, n], x[:, n])
    f0, f1 = logits_np(e, w, b)
    logit = np.where(x[:, :N] == 1, f1, f0)
    y = x[:, 1:]
    per_seq = (-(y * log_sigmoid(logit) + (1 - y) * log_sigmoid(-logit))).mean(axis=1)
    mean, se = per_seq.mean(), per_seq.std(ddof=1) / math.sqrt(n_seq)
    L = float(prob3.loss(th(e, w, b)))
    assert abs(mean - L) < 4 * se
    assert se < 2e-3  # the check has teeth


# ---------------------------------------------------------------- gradients (§3.2)


@pytest.mark.parametrize("p,q", [(0.5, 0.8), (0.2, 0.3), (0.1, 0.1), (0.9, 0.9), (0.7, 0.2)])
def test_gradient_formulas(p, q):
    pi0, pi1 = pis(p, q)
    rng = np.random.default_rng(17)
    e, w, b = rng.uniform(-2.0, 2.0, (3, NB))
    # profile: ∂L/∂e = 2e c(w) ℓ'(A), ∂L/∂w = 4|w| e² ℓ'(A)
    prob = Canonical(p, q)
    A = c_np(w) * e**2
    lp = pi1 * (sigmoid(f0_star_np(p, q, A) + A) - (1 - q))
    g = jax.vmap(jax.grad(prob.loss))(batch(e, w))
    np.testing.assert_allclose(np.asarray(g["e"]), 2 * e * c_np(w) * lp, rtol=0, atol=EXACT)
    np.testing.assert_allclose(np.asarray(g["w"]), 4 * np.abs(w) * e**2 * lp, rtol=0, atol=EXACT)
    # 3-parameter: g1 = π1(σ(f1) − (1−q)), g0 = π0(σ(f0) − p)
    prob3 = Canonical(p, q, bias="trained")
    f0, f1 = logits_np(e, w, b)
    g1, g0 = pi1 * (sigmoid(f1) - (1 - q)), pi0 * (sigmoid(f0) - p)
    g3 = jax.vmap(jax.grad(prob3.loss))(batch(e, w, b))
    assert set(g3) == {"e", "w", "b"}
    np.testing.assert_allclose(np.asarray(g3["e"]), e * (g1 * (1 + 4 * w * np.abs(w)) - g0), rtol=0, atol=EXACT)
    np.testing.assert_allclose(np.asarray(g3["w"]), 4 * np.abs(w) * e**2 * g1, rtol=0, atol=EXACT)
    np.testing.assert_allclose(np.asarray(g3["b"]), g0 + g1, rtol=0, atol=EXACT)
    np.testing.assert_allclose(
        np.asarray(jax.vmap(prob3.loss)(batch(e, w, b))), loss3_np(p, q, e, w, b), rtol=0, atol=1e-13
    )


def test_loss_is_even_in_e():
    prob = Canonical(0.5, 0.8)
    prob3 = Canonical(0.5, 0.8, bias="trained")
    rng = np.random.default_rng(2)
    e, w, b = rng.uniform(-2.0, 2.0, (3, NB))
    L = np.asarray(jax.vmap(prob.loss)(batch(e, w)))
    np.testing.assert_array_equal(L, np.asarray(jax.vmap(prob.loss)(batch(-e, w))))
    L3 = np.asarray(jax.vmap(prob3.loss)(batch(e, w, b)))
    np.testing.assert_array_equal(L3, np.asarray(jax.vmap(prob3.loss)(batch(-e, w, b))))


# ---------------------------------------------------------------- Hessians (§4.6, §4.1)

GLOBAL_WS = {
    (0.1, 0.1): [-0.6, -0.3, 0.0, 0.5, 1.0, 2.5],
    (0.2, 0.3): [-0.5, 0.2, 1.5],
    (0.9, 0.9): [-0.75, -1.0, -1.5, -3.0],
    (0.5, 0.8): [-0.8, -1.5, -2.2],
}
LINE_WS = [-3.0, -1.2, -0.9, -0.5, -0.1, 0.0, 0.3, 1.0, 2.5]
# §4.6 regression rows: (p, q) -> (e, w, λ_max)
REGRESSION = {(0.1, 0.1): (1.711617, 0.5, 1.365698), (0.5, 0.8): (0.629352, -1.5, 1.101358)}
SPECTRUM_PQ = [(0.1, 0.1), (0.5, 0.8)]  # p+q < 1 and p+q > 1; each hessian_spectrum call compiles


@functools.cache
def spectra(p, q):
    """popdyn.hessian_spectrum at Γ* points, e = 0 points and the regression points, in one call
    (the function compiles on every call, so the points are batched)."""
    prob = Canonical(p, q)
    wg = np.array(GLOBAL_WS[(p, q)])
    eg = np.asarray(prob.global_minimum_e(jnp.asarray(wg)))
    wl = np.array(LINE_WS)
    e, w = [eg, np.zeros_like(wl)], [wg, wl]
    if (p, q) in REGRESSION:
        e_reg, w_reg, _ = REGRESSION[(p, q)]
        e_proj = float(prob.global_minimum_e(jnp.asarray(w_reg)))
        e.append(np.array([e_reg, e_proj]))
        w.append(np.array([w_reg, w_reg]))
    ev = np.asarray(popdyn.hessian_spectrum(prob, batch(np.concatenate(e), np.concatenate(w))))
    assert ev.shape == (sum(map(len, e)), 2)
    assert np.all(np.diff(ev, axis=1) >= 0)  # ascending
    n1, n2 = len(wg), len(wl)
    return {"global": (eg, wg, ev[:n1]), "line": (wl, ev[n1 : n1 + n2]), "regression": ev[n1 + n2 :]}


def hessians(prob, e, w, b=None):
    """popdyn.analysis.hessian_matrix at a batch of points (padded to NB points so that every call has the same
    shapes)."""
    n = len(e)
    assert n <= NB
    pad = lambda x: np.resize(np.asarray(x, dtype=np.float64), NB)  # noqa: E731
    t = batch(pad(e), pad(w), None if b is None else pad(b))
    return np.asarray(_hessian_matrices(prob, t))[:n]


@eqx.filter_jit
def _hessian_matrices(prob, t):
    """hessian_matrix at each point of the batch ``t``: one compiled program per bias option and θ's keys."""
    return jax.vmap(lambda x: hessian_matrix(prob, x))(t)


def _lambda_star(p, q, e, w):
    """§4.6: λ_max = [u*v*/(u*+v*)](4e²c² + 16w²e⁴)."""
    pi0, pi1 = pis(p, q)
    u, v = pi1 * q * (1 - q), pi0 * p * (1 - p)
    return u * v / (u + v) * (4 * e**2 * c_np(w) ** 2 + 16 * w**2 * e**4)


@pytest.mark.slow
@pytest.mark.parametrize("p,q", list(GLOBAL_WS))
def test_hessian_rank_one_at_global_minima(p, q):
    prob = Canonical(p, q)
    pi0, pi1 = pis(p, q)
    u, v = pi1 * q * (1 - q), pi0 * p * (1 - p)
    w = np.resize(np.array(GLOBAL_WS[(p, q)]), NB)  # padded by repetition: one shape throughout
    e = np.asarray(prob.global_minimum_e(jnp.asarray(w)))
    assert np.all(np.isfinite(e)) and np.all(e > 0)
    np.testing.assert_allclose(c_np(w) * e**2, prob.optimal_gap(), rtol=0, atol=EXACT)
    # the whole matrix: H = ℓ''(A*) ∇A ∇Aᵀ
    gradA = np.stack([2 * e * c_np(w), 4 * np.abs(w) * e**2], axis=1)
    H = hessians(prob, e, w)
    np.testing.assert_allclose(H, u * v / (u + v) * gradA[:, :, None] * gradA[:, None, :], rtol=0, atol=1e-10)
    # the loss is H_rate there, also at −e
    for sign in (1, -1):
        L = np.asarray(jax.vmap(prob.loss)(batch(sign * e, w)))
        np.testing.assert_allclose(L, prob.entropy_rate(), rtol=0, atol=EXACT)


@pytest.mark.parametrize("p,q", SPECTRUM_PQ)
def test_hessian_spectrum_at_global_minima(p, q):
    eg, wg, ev = spectra(p, q)["global"]
    np.testing.assert_allclose(ev[:, 1], _lambda_star(p, q, eg, wg), rtol=0, atol=1e-10)
    np.testing.assert_allclose(ev[:, 0], 0.0, rtol=0, atol=1e-10)


@pytest.mark.parametrize("p,q", list(REGRESSION))
def test_hessian_regression_rows(p, q):
    e, w, lam = REGRESSION[(p, q)]
    prob = Canonical(p, q)
    # the printed point lies on Γ* to its 6 printed decimals
    e_star = float(prob.global_minimum_e(jnp.asarray(w)))
    assert abs(e - e_star) <= 5e-7
    assert abs(c_np(w) * e**2 - prob.optimal_gap()) < 1e-5
    ev_given, ev_star = spectra(p, q)["regression"]
    assert abs(ev_given[-1] - lam) < 1e-5
    assert abs(ev_star[-1] - lam) < 1e-6
    assert abs(ev_star[-1] - _lambda_star(p, q, e_star, w)) < 1e-10
    assert abs(ev_star[0]) < 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("p,q,ws", [(0.1, 0.1, [-0.5, 0.0, 0.8]), (0.9, 0.9, [-1.0, -2.0]), (0.5, 0.8, [-1.5])])
def test_three_parameter_hessian_at_global_minima(p, q, ws):
    """H = Jᵀ diag(v*, u*) J with rows ∂f0 = (−e, 0, 1), ∂f1 = (e(1+4w|w|), 4|w|e², 1) (§4.6)."""
    prob = Canonical(p, q)
    prob3 = Canonical(p, q, bias="trained")
    pi0, pi1 = pis(p, q)
    u, v = pi1 * q * (1 - q), pi0 * p * (1 - p)
    # hessian_matrix works on the flattened pytree; find where e, w, b land
    order, _ = ravel_pytree({"e": 0.0, "w": 1.0, "b": 2.0})
    perm = np.argsort(np.asarray(order))  # flat index of e, w, b
    w = np.resize(np.array(ws), NB)
    e = np.asarray(prob.global_minimum_e(jnp.asarray(w)))
    b = np.asarray(prob.optimal_bias(batch(e, w)))
    g = jax.vmap(jax.grad(prob3.loss))(batch(e, w, b))
    assert max(float(jnp.max(jnp.abs(g[k]))) for k in "ewb") < EXACT
    Hs = hessians(prob3, e, w, b)
    for i in range(len(ws)):
        H = Hs[i][np.ix_(perm, perm)]
        ei, wi = e[i], w[i]
        J = np.array([[-ei, 0.0, 1.0], [ei * (1 + 4 * wi * abs(wi)), 4 * abs(wi) * ei**2, 1.0]])
        np.testing.assert_allclose(H, J.T @ np.diag([v, u]) @ J, rtol=0, atol=1e-10)
        assert np.linalg.matrix_rank(H, tol=1e-9) == 2


# ---------------------------------------------------------------- the line e = 0 and the saddle (§4.1)


@pytest.mark.parametrize("p,q", [(0.1, 0.1), (0.9, 0.9), (0.5, 0.8), (0.2, 0.3)])
def test_line_e0_hessian(p, q):
    prob = Canonical(p, q)
    pi0, pi1 = pis(p, q)
    w = np.resize(np.array(LINE_WS), NB)
    t = batch(np.zeros_like(w), w)
    g = jax.vmap(jax.grad(prob.loss))(t)
    assert np.all(np.asarray(g["e"]) == 0.0) and np.all(np.asarray(g["w"]) == 0.0)
    np.testing.assert_allclose(np.asarray(jax.vmap(prob.loss)(t)), prob.unigram_loss(), rtol=0, atol=EXACT)
    d2e = 2 * c_np(w) * pi0 * pi1 * (p + q - 1)
    H = hessians(prob, np.zeros_like(w), w)
    expected = np.zeros((len(w), 2, 2))
    expected[:, 0, 0] = d2e
    np.testing.assert_allclose(H, expected, rtol=0, atol=EXACT)
    if (p, q) in SPECTRUM_PQ:
        wl, ev = spectra(p, q)["line"]
        d2e = 2 * c_np(wl) * pi0 * pi1 * (p + q - 1)
        expected = np.sort(np.stack([d2e, np.zeros_like(wl)], axis=1), axis=1)
        np.testing.assert_allclose(ev, expected, rtol=0, atol=EXACT)


@pytest.mark.parametrize("p,q", [(0.1, 0.1), (0.9, 0.9), (0.5, 0.8), (0.2, 0.3)])
def test_is_local_min_w_sign_rule(p, q):
    prob = Canonical(p, q)
    w = np.concatenate([np.linspace(-3, 3, 61), [W_SADDLE - 1e-9, W_SADDLE + 1e-9, 3.5]])
    got = np.asarray(prob.is_local_min_w(jnp.asarray(w)))
    np.testing.assert_array_equal(got, (p + q - 1) * c_np(w) > 0)
    explicit = w < W_SADDLE if p + q < 1 else w > W_SADDLE
    np.testing.assert_array_equal(got, explicit)
    # the sign rule is the shape of L just off the line: up at a local min, down at a local max
    L0 = prob.unigram_loss()
    for wi, is_min in zip(w[::6], got[::6], strict=False):
        dL = float(prob.loss(th(1e-3, wi))) - L0
        assert (dL > 0) == bool(is_min)


def test_classify_critical_each_set():
    lo = Canonical(0.1, 0.1)  # p+q < 1
    hi = Canonical(0.9, 0.9)  # p+q > 1
    assert lo.classify_critical(th(0.0, -1.5)) == "local_min"
    assert lo.classify_critical(th(0.0, 0.5)) == "local_max"
    assert lo.classify_critical(th(0.0, -0.5)) == "local_max"
    assert hi.classify_critical(th(0.0, 0.5)) == "local_min"
    assert hi.classify_critical(th(0.0, -0.5)) == "local_min"
    assert hi.classify_critical(th(0.0, -1.5)) == "local_max"
    for prob in (lo, hi):
        assert prob.classify_critical(th(0.0, W_SADDLE)) == "saddle"
        assert prob.classify_critical(th(1.0, 0.5)) == "none"
        assert prob.classify_critical(th(-0.3, -2.0)) == "none"
    for prob, w in ((lo, 0.5), (lo, -0.3), (lo, 2.0), (hi, -1.5), (hi, -0.9)):
        e = float(prob.global_minimum_e(jnp.asarray(w)))
        assert prob.classify_critical(th(e, w)) == "global"
        assert prob.classify_critical(th(-e, w)) == "global"
        assert prob.classify_critical(th(1.001 * e, w)) == "none"
    # Γ* has no point on the wrong side of the saddle
    assert np.isnan(float(lo.global_minimum_e(jnp.asarray(-1.0))))
    assert np.isnan(float(hi.global_minimum_e(jnp.asarray(0.5))))


def test_saddle_constants_and_nature():
    assert W_SADDLE == pytest.approx(-1 / math.sqrt(2), abs=1e-16)
    assert abs(c_np(W_SADDLE)) < 1e-15
    assert abs(E_SADDLE - (-(1 + math.log(2)) / 2)) < 1e-15
    assert abs(E_SADDLE - (-0.8465736)) < 1e-7
    assert tuple(ATTRACTORS) == ("global", "local", "saddle")
    for p, q in ((0.1, 0.1), (0.9, 0.9)):
        prob = Canonical(p, q)
        t = th(0.0, W_SADDLE)
        assert abs(float(prob.energy(t)) - E_SADDLE) < 1e-14
        g = jax.grad(prob.loss)(t)
        assert float(g["e"]) == 0.0 and float(g["w"]) == 0.0
        np.testing.assert_allclose(hessians(prob, [0.0], [W_SADDLE]), 0.0, rtol=0, atol=EXACT)
        # the loss goes down on one side of the saddle and up on the other
        L0 = prob.unigram_loss()
        left = float(prob.loss(th(1e-2, W_SADDLE - 0.05))) - L0
        right = float(prob.loss(th(1e-2, W_SADDLE + 0.05))) - L0
        assert left * right < 0
        assert (right < 0) == (p + q < 1)
    # E(0, w) = −s(w) ≤ E_sad on w < 0, with equality only at the saddle (§4.2)
    prob = Canonical(0.1, 0.1)
    w = -np.geomspace(1e-3, 5.0, NB)
    E = np.asarray(jax.vmap(prob.energy)(batch(np.zeros_like(w), w)))
    assert np.all(E <= E_SADDLE + 1e-15)
    assert np.all(E[np.abs(w - W_SADDLE) > 0.05] < E_SADDLE - 1e-4)


# ---------------------------------------------------------------- energy (§4.2)


def test_energy_values():
    prob = Canonical(0.1, 0.1)
    assert abs(float(prob.energy(th(1.0, 0.5))) - 1.44314718) < TABLE8
    assert abs(float(prob.energy(th(1.0, -1.0))) - 0.0) < TABLE8
    rng = np.random.default_rng(9)
    e, w = rng.uniform(-3, 3, (2, NB))
    np.testing.assert_allclose(np.asarray(jax.vmap(prob.energy)(batch(e, w))), energy_np(e, w), rtol=0, atol=1e-13)
    # undefined on the invariant line w = 0
    assert np.isnan(float(prob.energy(th(0.7, 0.0))))


@pytest.mark.parametrize("p,q", [(0.1, 0.1), (0.9, 0.9), (0.5, 0.8), (0.2, 0.3)])
def test_energy_conserved_by_profiled_gradient_field(p, q):
    """∇E · ∇L = 0 (Lemma 1), and for the (e, w, b) field dE/dt = 2e²∂L/∂b (§2.3)."""
    prob = Canonical(p, q)
    rng = np.random.default_rng(31)
    e = rng.uniform(-3, 3, NB)
    w = rng.choice([-1, 1], NB) * rng.uniform(0.1, 3, NB)
    t = batch(e, w)
    gE = jax.vmap(jax.grad(prob.energy))(t)
    gL = jax.vmap(jax.grad(prob.loss))(t)
    dot = np.asarray(gE["e"] * gL["e"] + gE["w"] * gL["w"])
    assert np.max(np.abs(np.asarray(gL["e"]))) > 1e-2  # nontrivial field
    np.testing.assert_allclose(dot, 0.0, rtol=0, atol=EXACT)
    # and ∇E by hand: (2e, −2w − 1/|w|)
    np.testing.assert_allclose(np.asarray(gE["e"]), 2 * e, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(gE["w"]), -2 * w - 1 / np.abs(w), rtol=0, atol=1e-13)
    # 3-parameter flow: dE/dt = −∇E·∇_(e,w)L3 = 2e² ∂L3/∂b, not zero in general
    prob3 = Canonical(p, q, bias="trained")
    b = rng.uniform(-2, 2, NB)
    g3 = jax.vmap(jax.grad(prob3.loss))(batch(e, w, b))
    dEdt = -np.asarray(gE["e"] * g3["e"] + gE["w"] * g3["w"])
    np.testing.assert_allclose(dEdt, 2 * e**2 * np.asarray(g3["b"]), rtol=0, atol=EXACT)
    assert np.max(np.abs(dEdt)) > 1e-2


# ---------------------------------------------------------------- limits and basins (§4.4)

LIMITS = [
    # p, q, e0, w0, E0, label, e∞, w∞
    (0.1, 0.1, 0.5, -0.5, -0.693147, "global", 2.096374, -0.006171),
    (0.1, 0.1, 0.2, 0.2, 1.609438, "global", 1.405676, 0.782303),
    (0.9, 0.9, 0.2, 0.2, 1.609438, "local", 0.0, 0.192709),
    (0.9, 0.9, 0.5, -1.5, -1.594535, "global", 0.933908, -1.737590),
    (0.5, 0.8, 0.1, 0.1, 2.302585, "local", 0.0, 0.099024),
]


def _check_limit_invariants(prob, e0, w0, lim_e, lim_w, label):
    E0 = energy_np(e0, w0)
    A_star = prob.optimal_gap()
    assert np.all(np.isfinite(lim_e)) and np.all(np.isfinite(lim_w))
    assert np.all(np.sign(lim_w) == np.sign(w0))  # sign(w) preserved
    glob, loc = label == 0, label == 1
    assert np.all(glob | loc)
    # global: on Γ*, same sign of e, same energy
    np.testing.assert_allclose(c_np(lim_w[glob]) * lim_e[glob] ** 2, A_star, rtol=0, atol=1e-10)
    assert np.all(np.sign(lim_e[glob]) == np.sign(e0[glob]))
    np.testing.assert_allclose(energy_np(lim_e[glob], lim_w[glob]), E0[glob], rtol=0, atol=1e-10)
    # local: on e = 0, at a local minimum, same energy
    assert np.all(lim_e[loc] == 0.0)
    assert np.all((prob.p + prob.q - 1) * c_np(lim_w[loc]) > 0)
    np.testing.assert_allclose(-s_np(lim_w[loc]), E0[loc], rtol=0, atol=1e-10)
    # and on the same branch of w as w0
    for lo_, hi_ in ((-np.inf, W_SADDLE), (W_SADDLE, 0.0), (0.0, np.inf)):
        inside = loc & (w0 > lo_) & (w0 < hi_)
        assert np.all((lim_w[inside] > lo_) & (lim_w[inside] < hi_))


# points appended to the random batch: the reference rows and the invariant lines e0 = 0, w0 = 0
SPECIAL = [(-0.4, 0.0), (0.4, 0.0), (0.0, -1.5), (0.0, 0.5), (0.0, -0.3), (0.0, W_SADDLE)]
N_RANDOM = 200


@functools.cache
def limits(p, q):
    """predicted_limit (jit ∘ vmap, one compile per problem) and predicted_basin on 200 random
    initialisations in [−3, 3]², then SPECIAL, then this problem's LIMITS rows."""
    prob = Canonical(p, q)
    rng = np.random.default_rng(123)
    e0, w0 = rng.uniform(-3, 3, (2, N_RANDOM))
    rows = [(r[2], r[3]) for r in LIMITS if (r[0], r[1]) == (p, q)]
    extra = np.array(SPECIAL + rows).T
    e0, w0 = np.concatenate([e0, extra[0]]), np.concatenate([w0, extra[1]])
    t = batch(e0, w0)
    lim = jax.jit(jax.vmap(prob.predicted_limit))(t)
    label = np.asarray(jax.jit(jax.vmap(prob.predicted_basin))(t))
    return e0, w0, np.asarray(lim["e"]), np.asarray(lim["w"]), label


@pytest.mark.parametrize("row", LIMITS, ids=[f"{r[0]},{r[1]};{r[2]},{r[3]}" for r in LIMITS])
def test_predicted_limit_reference_rows(row):
    p, q, e0, w0, E0, label, e_inf, w_inf = row
    prob = Canonical(p, q)
    assert abs(float(prob.energy(th(e0, w0))) - E0) < TABLE6
    e0s, w0s, lim_e, lim_w, labels = limits(p, q)
    (k,) = np.flatnonzero((e0s[N_RANDOM:] == e0) & (w0s[N_RANDOM:] == w0)) + N_RANDOM
    assert ATTRACTORS[labels[k]] == label
    assert abs(lim_e[k] - e_inf) < TABLE6
    assert abs(lim_w[k] - w_inf) < TABLE6
    _check_limit_invariants(prob, e0s[k : k + 1], w0s[k : k + 1], lim_e[k : k + 1], lim_w[k : k + 1], labels[k : k + 1])


def _expected_basin(p, q, e, w):
    """§4.4 regions, written out: 1 for I_min, 0 for I_* (e ≠ 0, w ≠ 0, off the separatrix)."""
    E = energy_np(e, w)
    if p + q < 1:
        local = (w < W_SADDLE) & (E < E_SADDLE)
    else:
        local = (w > 0) | ((w > W_SADDLE) & (w < 0) & (E < E_SADDLE))
    return np.where(local, 1, 0)


@pytest.mark.parametrize("p,q", [(0.1, 0.1), (0.9, 0.9), (0.5, 0.8)])  # each problem compiles once
def test_predicted_limit_batch(p, q):
    prob = Canonical(p, q)
    e0, w0, lim_e, lim_w, label = (x[:N_RANDOM] for x in limits(p, q))
    np.testing.assert_array_equal(label, _expected_basin(p, q, e0, w0))
    assert (label == 0).any() and (label == 1).any()
    _check_limit_invariants(prob, e0, w0, lim_e, lim_w, label)
    # the limits are critical points with the right loss
    L = np.asarray(jax.vmap(prob.loss)(batch(lim_e, lim_w)))
    np.testing.assert_allclose(L[label == 0], prob.entropy_rate(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(L[label == 1], prob.unigram_loss(), rtol=0, atol=EXACT)


@pytest.mark.parametrize("p,q", [(0.1, 0.1), (0.9, 0.9)])
def test_predicted_limit_special_lines(p, q):
    prob = Canonical(p, q)
    e0s, w0s, lim_e, lim_w, labels = (x[N_RANDOM : N_RANDOM + len(SPECIAL)] for x in limits(p, q))
    A_star = prob.optimal_gap()
    for e0, w0, e_inf, w_inf, label in zip(e0s, w0s, lim_e, lim_w, labels, strict=False):
        if w0 == 0.0:
            # w0 = 0 is invariant: e² → A* (same sign of e) when A* > 0, e → 0 when A* < 0
            assert w_inf == 0.0
            if A_star > 0:
                assert abs(e_inf - np.sign(e0) * math.sqrt(A_star)) < EXACT and ATTRACTORS[label] == "global"
            else:
                assert e_inf == 0.0 and ATTRACTORS[label] == "local"
        elif w0 == W_SADDLE:
            assert e_inf == 0.0 and w_inf == w0 and ATTRACTORS[label] == "saddle"
        else:
            # e0 = 0: fixed points stay put; local maxima are no attractor (−1)
            assert e0 == 0.0 and e_inf == 0.0 and w_inf == w0
            assert label == (1 if bool(prob.is_local_min_w(w0)) else -1)
    with pytest.raises(ValueError, match="profiled"):
        Canonical(p, q, bias="trained").predicted_limit(th(0.5, 0.5))


@pytest.mark.slow
def test_gaussian_init_basins():
    """Near the origin: global basin when p+q < 1, unigram local minimum when p+q > 1 (§4.4)."""
    keys = jax.random.split(jax.random.PRNGKey(0), NB)
    t = jax.vmap(Canonical(0.1, 0.1).init)(keys)  # e, w ~ 0.01·N(0, 1) for every (p, q)
    assert set(t) == {"e", "w"} and t["e"].shape == (NB,)
    assert 0.005 < float(jnp.std(t["e"])) < 0.02 and 0.005 < float(jnp.std(t["w"])) < 0.02
    assert np.all(np.asarray(t["e"]) != 0) and (np.asarray(t["w"]) < 0).any() and (np.asarray(t["w"]) > 0).any()
    for (p, q), expected in (
        ((0.1, 0.1), "global"),
        ((0.2, 0.3), "global"),
        ((0.9, 0.9), "local"),
        ((0.5, 0.8), "local"),
    ):
        prob = Canonical(p, q)
        labels = np.asarray(eqx.filter_jit(prob.predicted_basin)(t))  # elementwise: works on a batch directly
        assert np.all(labels == ATTRACTORS.index(expected))
    t3 = Canonical(0.1, 0.1, bias="trained").init(jax.random.PRNGKey(1))
    assert set(t3) == {"e", "w", "b"} and float(t3["b"]) == 0.0


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(p=0.0, q=0.5), r"p=0\.0"),
        (dict(p=1.2, q=0.5), r"p=1\.2"),
        (dict(p=1.0, q=0.5), r"p=1\.0"),
        (dict(p=0.5, q=-0.1), r"q=-0\.1"),
        (dict(p=0.5, q=1.0), r"q=1\.0"),
        (dict(p=0.5, q=float("nan")), r"q=nan"),
        (dict(p="0.5", q=0.5), r"p='0\.5'"),
        (dict(p=0.2, q=0.3, bias="bogus"), r"bias='bogus'"),
        (dict(p=0.2, q=0.3, init_std=0.0), r"init_std=0\.0"),
        (dict(p=0.2, q=0.3, init_std=-1.0), r"init_std=-1\.0"),
    ],
)
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Canonical(**kwargs)


def test_flat_landscape_warns():
    """p+q = 1: i.i.d. data, A* = 0, so Γ* and the line e = 0 coincide (L = H_uni = H_rate there) and
    the e-curvature on e = 0, 2c(w)π0π1(p+q−1), vanishes."""
    with pytest.warns(UserWarning, match="flat"):
        prob = Canonical(0.3, 0.7)
    with pytest.warns(UserWarning, match="flat"):
        Canonical(0.5, 0.5)
    assert prob.optimal_gap() == pytest.approx(0.0, abs=1e-15)
    assert abs(prob.entropy_rate() - h(0.3)) < EXACT and abs(prob.unigram_loss() - h(0.3)) < EXACT
    assert abs(profile_derivatives(prob, [0.0])[1][0]) < EXACT
    rng = np.random.default_rng(4)
    e, w = rng.uniform(-2, 2, (2, NB))
    L = np.asarray(jax.vmap(prob.loss)(batch(e, w)))
    assert np.all(L >= h(0.3) - 1e-15)
    assert np.max(L) > h(0.3) + 1e-3  # not constant: only flat to second order on e = 0
    np.testing.assert_allclose(np.asarray(jax.vmap(prob.loss)(batch(np.zeros(NB), w))), h(0.3), rtol=0, atol=EXACT)
    np.testing.assert_allclose(hessians(prob, [0.0], [0.4]), 0.0, rtol=0, atol=EXACT)
    with pytest.raises(ValueError, match="p\\+q != 1"):
        prob.predicted_basin(th(0.5, 0.5))
    with pytest.raises(ValueError, match="p\\+q != 1"):
        prob.predicted_limit(th(0.5, 0.5))


@pytest.mark.parametrize("p, q", [(0.2, 0.3), (0.9, 0.9)])
def test_separatrix_distance_against_a_dense_brute_force(p, q):
    """The k-d tree search over the arc-length samples agrees with a brute force over 10⁵ samples of the
    branch (even in w and in ln|w|) to the sampling's half spacing, is ~0 on the branch, and is inf beyond
    ``within``."""
    prob = Canonical(p, q)
    lo, hi = prob.separatrix_w_range()
    lo, hi = max(lo, -5.0), min(hi, -1e-20)  # the p+q > 1 branch reaches e ≈ 6.7 by w = −1e-20
    w = np.concatenate([np.linspace(lo, hi, 50_001), -np.exp(np.linspace(np.log(-lo), np.log(-hi), 50_001))])
    e = np.asarray(prob.separatrix_e(w))
    curve = np.concatenate([np.stack([w, e], 1), np.stack([w, -e], 1)])
    curve = curve[np.isfinite(curve).all(1)]
    rng = np.random.default_rng(7)
    on = rng.choice(np.flatnonzero(np.abs(curve[:, 1]) < 3.0), 100)
    pts = np.concatenate([rng.uniform(-3, 3, (200, 2)), curve[on] + rng.normal(0, 0.03, (100, 2)), curve[on]])
    brute = np.concatenate([cdist(part, curve).min(axis=1) for part in np.array_split(pts, 8)])  # every pair
    d = prob.separatrix_distance({"w": pts[:, 0], "e": pts[:, 1]}, within=0.1, spacing=1e-3)
    near = brute < 0.1 - 1e-3
    assert near.sum() > 150 and (~near).sum() > 80
    np.testing.assert_allclose(d[near], brute[near], rtol=0, atol=5e-4 + 1e-4)
    assert np.all(np.isinf(d[brute > 0.1 + 1e-3]))
    assert np.max(d[-100:]) < 5e-4 + 1e-4
