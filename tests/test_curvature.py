"""Hessian curvature: exact spectra vs Lanczos extremes, signedness, breakdown (docs/models/markov.md §4.1, §4.6)."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn.curvature import extreme_eigenvalues, hessian_matrix, lanczos_extremes
from popdyn.tasks.markov import Canonical

N = 40


class Quadratic(popdyn.Problem):
    """θ = {"x": R^n}, L = ½ xᵀAx + amp·Σ cos(x_i): ∇²L = A − amp·diag(cos x)."""

    A: jax.Array
    amp: jax.Array

    def loss(self, theta):
        x = theta["x"]
        return 0.5 * x @ self.A @ x + self.amp * jnp.sum(jnp.cos(x))

    def init(self, key):
        return {"x": jax.random.normal(key, (self.A.shape[0],))}

    def hessian(self, x):
        return np.asarray(self.A) - float(self.amp) * np.diag(np.cos(np.asarray(x)))


def _indefinite(n=N, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    ev = np.linspace(-3.0, 5.0, n)  # both signs
    A = Q @ np.diag(ev) @ Q.T
    return Quadratic(jnp.asarray(0.5 * (A + A.T)), jnp.asarray(0.1))


def _random_points(n_points, n, seed):
    return {"x": jax.random.normal(jax.random.PRNGKey(seed), (n_points, n))}


@pytest.fixture(scope="module")
def big():
    return _indefinite()


# ---- Markov problems -----------------------------------------------------------------------------
# One batch shape per problem so that each jitted function compiles once for the whole module.
W_LINE = np.array([-0.5, -0.2, 0.3, 0.8, -1.5, -2.0])  # e = 0: four local maxima (c > 0), two minima (c < 0)
W_GLOBAL = np.array([0.5, -0.3])  # points of Γ* for p = q = 0.1 (A* > 0 needs c(w) > 0)
N_RANDOM = 24


def _markov_points(prob, seed):
    z = jax.random.uniform(jax.random.PRNGKey(seed), (N_RANDOM, 3), minval=-2.5, maxval=2.5)
    c = 1 + 2 * W_GLOBAL * np.abs(W_GLOBAL)
    e_glob = np.sqrt(prob.optimal_gap() / c)
    theta = {
        "e": jnp.concatenate([z[:, 0], jnp.zeros(len(W_LINE)), e_glob]),
        "w": jnp.concatenate([z[:, 1], W_LINE, W_GLOBAL]),
    }
    if prob.bias == "trained":
        # b = b*(e, w): logit(π1) = 0 on e = 0 for p = q, and logit(p) + e²/2 on Γ*
        b_glob = math.log(prob.p / (1 - prob.p)) + e_glob**2 / 2
        theta["b"] = jnp.concatenate([z[:, 2], jnp.zeros(len(W_LINE)), b_glob])
    return theta


N_MARKOV = N_RANDOM + len(W_LINE) + len(W_GLOBAL)
LINE = slice(N_RANDOM, N_RANDOM + len(W_LINE))
GLOBAL = slice(N_RANDOM + len(W_LINE), N_MARKOV)


def _markov(bias):
    prob = Canonical(0.1, 0.1, bias=bias)
    theta = _markov_points(prob, seed=3)
    exact = tuple(np.asarray(a) for a in extreme_eigenvalues(prob, theta, method="exact"))
    lanczos = tuple(np.asarray(a) for a in extreme_eigenvalues(prob, theta, method="lanczos"))
    return prob, theta, exact, lanczos


@pytest.fixture(scope="module")
def profiled():
    return _markov("profiled")


@pytest.fixture(scope="module")
def trained():
    return _markov("trained")


@pytest.mark.slow
@pytest.mark.parametrize("bias", ["profiled", "trained"])
def test_exact_and_lanczos_agree_on_markov(request, bias):
    prob, theta, (lo_e, hi_e), (lo_l, hi_l) = request.getfixturevalue(bias)
    assert prob.bias == bias
    assert lo_e.shape == hi_e.shape == (N_MARKOV,)
    np.testing.assert_allclose(lo_l, lo_e, rtol=0, atol=1e-8)
    np.testing.assert_allclose(hi_l, hi_e, rtol=0, atol=1e-8)
    assert np.all(lo_e <= hi_e)
    # the e = 0 points in the local-max region (c > 0 for p+q < 1) are strict saddles: λ_min < 0
    assert np.all(lo_e[LINE][:4] < -1e-2)
    # and the random points do probe both signs of λ_min
    assert np.any(lo_e[:N_RANDOM] < -1e-2) and np.any(lo_e[:N_RANDOM] > 1e-6)
    # auto picks the exact path at this size; lambda_max / lambda_min are its two ends
    np.testing.assert_array_equal(np.asarray(popdyn.lambda_max(prob, theta)), hi_e)
    np.testing.assert_array_equal(np.asarray(popdyn.lambda_min(prob, theta)), lo_e)


def test_unigram_line_spectrum_and_signedness(profiled):
    """§4.1: on e = 0 the profiled Hessian is diag(2c(w)·π0π1(p+q−1), 0); λ_max is signed, never |λ|."""
    prob, theta, (lo, hi), _ = profiled
    c = 1 + 2 * W_LINE * np.abs(W_LINE)
    curv = 2 * c * prob.pi0 * prob.pi1 * (prob.p + prob.q - 1)
    spec = np.asarray(popdyn.hessian_spectrum(prob, theta))
    assert spec.shape == (N_MARKOV, 2)
    np.testing.assert_allclose(spec[LINE], np.sort(np.stack([curv, np.zeros_like(curv)], 1), axis=1), atol=1e-12)
    np.testing.assert_array_equal(spec[:, 0], lo)
    np.testing.assert_array_equal(spec[:, -1], hi)
    # local maxima (c > 0): λ_max = 0 and λ_min = 2c·ℓ'(0) < 0 (not |λ_min|)
    np.testing.assert_allclose(hi[LINE][:4], 0.0, atol=1e-12)
    np.testing.assert_allclose(lo[LINE][:4], curv[:4], rtol=1e-12)
    # local minima (c < 0): λ_max = 2c·ℓ'(0) > 0, λ_min = 0
    np.testing.assert_allclose(hi[LINE][4:], curv[4:], rtol=1e-12)
    np.testing.assert_allclose(lo[LINE][4:], 0.0, atol=1e-12)


def _lambda_star(prob, e, w):
    """§4.6: λ_max at Γ* = [u*v*/(u*+v*)](4e²c² + 16w²e⁴)."""
    p, q = float(prob.p), float(prob.q)
    c = 1 + 2 * w * np.abs(w)
    u, v = prob.pi1 * q * (1 - q), prob.pi0 * p * (1 - p)
    return u * v / (u + v) * (4 * e**2 * c**2 + 16 * w**2 * e**4)


def test_global_minimum_lambda_max_formula(profiled):
    """§4.6: at Γ* the profiled Hessian has rank one, with λ_max given in closed form."""
    prob, theta, (lo, hi), (lo_l, hi_l) = profiled
    lam = _lambda_star(prob, np.asarray(theta["e"][GLOBAL]), W_GLOBAL)
    np.testing.assert_allclose(hi[GLOBAL], lam, rtol=1e-10)
    np.testing.assert_allclose(hi_l[GLOBAL], lam, rtol=1e-10)
    assert np.all(np.abs(lo[GLOBAL]) < 1e-10 * lam)
    assert lam[0] == pytest.approx(1.365698, abs=2e-6)  # §4.6 table: (0.1, 0.1) at (1.711617, 0.5)


def test_global_minimum_lambda_max_regression_p05_q08():
    prob = Canonical(0.5, 0.8)
    w = -1.5
    e = math.sqrt(prob.optimal_gap() / (1 + 2 * w * abs(w)))
    lam = _lambda_star(prob, e, w)
    assert lam == pytest.approx(1.101358, abs=2e-6)  # §4.6 table: (0.5, 0.8) at (0.629352, −1.5)
    spec = np.asarray(popdyn.hessian_spectrum(prob, {"e": jnp.asarray(e), "w": jnp.asarray(w)}))
    assert spec.shape == (2,)
    assert spec[1] == pytest.approx(lam, rel=1e-10)
    assert abs(spec[0]) < 1e-10 * lam


def test_three_parameter_hessian_at_global_minimum():
    """§4.6: for (e, w, b) at a global minimum, H = Jᵀ diag(v*, u*) J exactly."""
    p, q, w = 0.5, 0.8, -1.5
    prob = Canonical(p, q, bias="trained")
    c = 1 + 2 * w * abs(w)
    e = math.sqrt(prob.optimal_gap() / c)
    b = math.log(p / (1 - p)) + e**2 / 2
    theta = {"e": jnp.asarray(e), "w": jnp.asarray(w), "b": jnp.asarray(b)}
    J = np.array([[-e, 0.0, 1.0], [e * (1 + 4 * w * abs(w)), 4 * abs(w) * e**2, 1.0]])
    u, v = prob.pi1 * q * (1 - q), prob.pi0 * p * (1 - p)
    H = J.T @ np.diag([v, u]) @ J
    perm = [2, 0, 1]  # a dict pytree flattens in key order: b, e, w
    H_num = np.asarray(eqx.filter_jit(hessian_matrix)(prob, theta))
    np.testing.assert_allclose(H_num, H[np.ix_(perm, perm)], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(H_num, H_num.T)


# ---- a larger custom Problem ------------------------------------------------------------------------
def test_exact_spectrum_matches_analytic_hessian(big):
    theta = _random_points(4, N, seed=1)
    spec = np.asarray(popdyn.hessian_spectrum(big, theta))
    assert spec.shape == (4, N)
    for i in range(4):
        ref = np.linalg.eigvalsh(big.hessian(theta["x"][i]))
        np.testing.assert_allclose(spec[i], ref, rtol=0, atol=1e-10)
    assert np.all(spec[:, 0] < 0) and np.all(spec[:, -1] > 0)  # indefinite: both signs


def test_exact_and_lanczos_agree_on_large_problem(big):
    theta = _random_points(4, N, seed=2)
    lo_e, hi_e = extreme_eigenvalues(big, theta, method="exact")
    lo_l, hi_l = extreme_eigenvalues(big, theta, method="lanczos", iters=N)
    np.testing.assert_allclose(lo_l, lo_e, rtol=0, atol=1e-8)
    np.testing.assert_allclose(hi_l, hi_e, rtol=0, atol=1e-8)
    ref = np.array([np.linalg.eigvalsh(big.hessian(x))[[0, -1]] for x in np.asarray(theta["x"])])
    np.testing.assert_allclose(np.stack([lo_e, hi_e], 1), ref, rtol=0, atol=1e-10)
    # auto uses the exact path for this size, and lambda_max / lambda_min are its two ends
    np.testing.assert_array_equal(popdyn.lambda_max(big, theta), hi_e)
    np.testing.assert_array_equal(popdyn.lambda_min(big, theta), lo_e)


def test_truncated_lanczos_interlaces(big):
    theta = _random_points(4, N, seed=5)
    lo_e, hi_e = (np.asarray(a) for a in extreme_eigenvalues(big, theta, method="exact"))
    for iters in (8,):
        lo_l, hi_l = (np.asarray(a) for a in extreme_eigenvalues(big, theta, method="lanczos", iters=iters))
        assert np.all(hi_l <= hi_e + 1e-10)
        assert np.all(lo_l >= lo_e - 1e-10)
        assert np.all(lo_l <= hi_l)
    # truncation really is an approximation here (so the inequality above is not an equality in disguise)
    assert np.max(hi_e - hi_l) > 1e-3


def test_negative_definite_lambda_max_is_negative():
    n = N
    prob = Quadratic(jnp.asarray(-np.diag(np.arange(1.0, n + 1))), jnp.asarray(0.0))
    theta = _random_points(4, n, seed=6)
    for method in ("exact", "lanczos"):
        lam_max = np.asarray(popdyn.lambda_max(prob, theta, method=method, iters=n))
        lam_min = np.asarray(popdyn.lambda_min(prob, theta, method=method, iters=n))
        np.testing.assert_allclose(lam_max, -1.0, rtol=0, atol=1e-9)
        np.testing.assert_allclose(lam_min, -float(n), rtol=0, atol=1e-9)


@pytest.mark.parametrize("diag", [np.tile([1.0, -1.0], N // 2), np.full(N, 2.0), np.r_[np.full(N - 1, 0.5), -3.0]])
def test_lanczos_breakdown_gives_right_extremes(diag):
    """Only one or two distinct eigenvalues: the Krylov space is invariant after 1–2 steps."""
    prob = Quadratic(jnp.asarray(np.diag(diag)), jnp.asarray(0.0))
    theta = _random_points(4, N, seed=7)
    lo, hi = extreme_eigenvalues(prob, theta, method="lanczos", iters=N)
    np.testing.assert_allclose(lo, diag.min(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(hi, diag.max(), rtol=0, atol=1e-10)
    # the single-point function, another start vector, iters > n (clamped to n)
    lo1, hi1 = _lanczos_one(prob, {"x": theta["x"][0]}, iters=N + 24, seed=3)
    assert float(lo1) == pytest.approx(diag.min(), abs=1e-10)
    assert float(hi1) == pytest.approx(diag.max(), abs=1e-10)


_lanczos_one = eqx.filter_jit(lanczos_extremes)


def test_lanczos_extremes_single_point_matches_exact(big):
    x = _random_points(1, N, seed=8)["x"][0]
    ref = np.linalg.eigvalsh(big.hessian(x))
    lo, hi = _lanczos_one(big, {"x": x}, iters=N + 24, seed=3)
    assert float(lo) == pytest.approx(ref[0], abs=1e-8)
    assert float(hi) == pytest.approx(ref[-1], abs=1e-8)


def test_bad_method_raises():
    prob = Canonical(0.1, 0.1)
    theta = {"e": jnp.asarray(1.0), "w": jnp.asarray(0.5)}
    with pytest.raises(ValueError, match="method"):
        extreme_eigenvalues(prob, theta, method="bogus")
    with pytest.raises(ValueError, match="method"):
        popdyn.lambda_max(prob, theta, method="bogus")
