"""Scan-and-Snap closed forms (docs/models/scan_snap.md §4 Lemmas 5–9, §5 Theorem 3 / Sec. 6) against direct simulation,
numerical integration and their defining equations."""

import inspect
import math
from functools import partial

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.tasks.scan_snap._closed_forms import (
    B_n,
    Gamma,
    gamma,
    h,
    h_star,
    omega_1,
    scan_time,
    snap_logit,
    transition_time,
    x_star,
)

FIG8 = [(50, eta) for eta in (0.1, 0.2, 0.5, 1.0, 2.0)] + [(1000, eta) for eta in (0.2, 0.5, 1.0, 2.0, 4.0)]


@partial(jax.jit, static_argnums=0)
def _integrate(f, y0, ts, args):
    """Dopri8 at rtol 1e-12, atol 1e-14, saved at ts (ts[0] is the start)."""
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(f),
        diffrax.Dopri8(),
        t0=ts[0],
        t1=ts[-1],
        dt0=None,
        y0=y0,
        args=args,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-14),
        max_steps=100_000,
    )
    return sol.ys


def _zeta(M, n):
    return M / (M - 1) * (np.eye(M)[n] - 1 / M)


# ---- Lemma 6: the continuous h ----------------------------------------------------------------------------------


@pytest.mark.parametrize("M", [10, 100, 1000, 10000])
@pytest.mark.parametrize("eta", [0.5, 4.0])
def test_h_solves_implicit_equation(M, eta):
    t = np.concatenate([[0.0], np.logspace(-8, 6, 801)])
    x = np.asarray(M * h(t, M, eta))
    assert np.all(np.isfinite(x)) and x[0] == 0.0 and np.all(np.diff(x) > 0)
    c = M * eta * t
    # e^x + (M−1)x = c + 1 in the cancellation-free form expm1(x) + (M−1)x = c, relative to c. Since
    # c ≤ x(e^x + M − 1) = x g'(x), a relative residual r bounds the relative error of h by r.
    resid = np.abs(np.expm1(x) + (M - 1) * x - c)
    assert np.all(resid[1:] <= 1e-12 * c[1:])
    assert np.all(np.abs(np.exp(x) + (M - 1) * x - (c + 1)) <= 1e-12 * (c + 1))


def test_h_is_jittable_and_vmaps_over_parameters():
    t = jnp.linspace(0.0, 100.0, 7)
    Ms, etas = jnp.array([10, 100, 1000]), jnp.array([0.5, 1.0, 2.0])
    batched = jax.jit(jax.vmap(h, (None, 0, 0)))(t, Ms, etas)
    for row, M, eta in zip(batched, (10, 100, 1000), (0.5, 1.0, 2.0), strict=False):
        np.testing.assert_allclose(row, h(t, M, eta), rtol=1e-15, atol=0)


# ---- Lemma 5 / 7: the discrete h* -------------------------------------------------------------------------------


@pytest.mark.parametrize("M,eta", FIG8)
def test_h_star_recursion_and_lemma7_gap(M, eta):
    S = 80
    ref = [0.0]
    for _ in range(S):
        ref.append(ref[-1] + eta / (M - 1 + math.exp(M * ref[-1])))
    hs = np.asarray(h_star(S, M, eta))
    assert hs.shape == (S + 1,)
    np.testing.assert_allclose(hs, ref, rtol=1e-15, atol=0)
    gap = hs - np.asarray(h(np.arange(S + 1.0), M, eta))
    assert gap[0] == 0.0
    assert np.all(gap >= 0) and np.all(gap <= 2 * eta / M)  # measured max gap: 0.09–0.11 of the bound


def test_lemma7_gap_tends_to_zero():
    for M, eta in [(50, 1.0), (1000, 4.0)]:
        S = 100_000
        gap = np.asarray(h_star(S, M, eta) - h(np.arange(S + 1.0), M, eta))
        peak = int(np.argmax(gap))
        assert peak < 1000
        # past its peak (s ≤ 6 here) the gap decreases monotonically, and by s = 1e5 it has all but vanished
        assert np.all(np.diff(gap[peak:]) <= 0)
        assert gap[-1] < 1e-3 * gap[peak]  # measured 3e-4 (M = 50) and 8e-5 (M = 1000)


@pytest.mark.parametrize("M,eta", [(50, 0.5), (50, 2.0), (1000, 1.0), (1000, 4.0)])
def test_lemma5_one_class_gd_is_h_star_along_zeta(M, eta):
    n, S = 3, 80
    zeta = _zeta(M, n)
    hs = np.asarray(h_star(S, M, eta))
    w = np.zeros(M)
    for s in range(1, S + 1):
        p = np.exp(w - w.max())
        w = w + eta * (np.eye(M)[n] - p / p.sum())
        np.testing.assert_allclose(w, (M - 1) * hs[s] * zeta, rtol=0, atol=1e-12)


@pytest.mark.parametrize("M", [2, 5, 50])
def test_zeta_constants(M):
    Z = np.stack([_zeta(M, i) for i in range(M)])
    G = Z @ Z.T
    np.testing.assert_allclose(np.diag(G), 1 + 1 / (M - 1), rtol=1e-15)
    off = G[~np.eye(M, dtype=bool)]
    np.testing.assert_allclose(off, -M / (M - 1) ** 2, rtol=1e-14)


def _w_rhs(t, w, args):
    e_n, eta = args
    return eta * (e_n - jax.nn.softmax(w))


@pytest.mark.slow
def test_lemma5_continuous_gf_is_h_along_zeta():
    M, n, eta = 50, 7, 0.5
    ts = jnp.linspace(0.0, 200.0, 41)
    ws = _integrate(_w_rhs, jnp.zeros(M), ts, (jnp.eye(M)[n], eta))
    expected = (M - 1) * np.asarray(h(ts, M, eta))[:, None] * _zeta(M, n)
    # measured: 1e-11 of max|w| ≈ 8.5 (the integrator's global error at rtol 1e-12 over t = 200)
    np.testing.assert_allclose(ws, expected, rtol=0, atol=1e-10 * np.abs(expected).max())


# ---- Lemma 8 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("M", [4, 5, 10, 50, 1000, 10**4, 10**6, 10**9])
def test_x_star_is_the_larger_root(M):
    x = float(x_star(M))
    assert x > 1  # e^x/x is minimal at x = 1, so the larger root lies beyond it
    assert abs(math.exp(x) / ((M - 1) * x) - 1) <= 1e-12
    assert float(omega_1(M)) == pytest.approx(x / math.log(M) - 1, rel=1e-15)
    small = 0.0  # the small root by the contraction x ← e^x/(M−1) (slope = x < 1 at the root)
    for _ in range(200):
        small = math.exp(small) / (M - 1)
    assert abs(math.exp(small) / ((M - 1) * small) - 1) <= 1e-14
    assert 1 / (M - 1) <= small <= math.e / (M - 1)  # tiny: ≈ 1/M, Lemma 8's M^{−(1−ω_0)}


def test_omega_1_is_order_lnlnM_over_lnM():
    # x* = ln(M−1) + ln x*, so ω_1 ln M / ln ln M = 1 + ln(1+ω_1)/ln ln M + O(1/(M ln ln M)): in (1, 1.5) here
    ratios = [float(omega_1(M)) * math.log(M) / math.log(math.log(M)) for M in (10**3, 10**6, 10**9, 10**12)]
    assert all(1 < r < 1.5 for r in ratios)
    assert ratios == sorted(ratios, reverse=True)


# ---- γ, Γ, B_n and the snap model -------------------------------------------------------------------------------


def test_gamma_continuous_and_discrete():
    K, M, eta = 3, 50, 0.5
    t = np.arange(0, 40)
    hk = np.asarray(h_star(int(np.ceil(t.max() / K)), M, eta))[-(-t // K)]
    # h*(⌈t/K⌉) is the same recursion, hence bit-identical; 1e-15 allows for numpy's and XLA's exp differing by an ulp
    expected = (M - 1) ** 2 * hk / (M - 1 + np.exp(M * hk))
    np.testing.assert_allclose(gamma(t, K, M, eta, discrete=True), expected, rtol=1e-15, atol=0)
    jitted = jax.jit(gamma, static_argnames="discrete")
    np.testing.assert_allclose(jitted(t, K, M, eta, discrete=True), expected, rtol=1e-15, atol=0)
    tc = np.linspace(0, 400, 9)
    hc = np.asarray(h(tc / K, M, eta))
    np.testing.assert_allclose(gamma(tc, K, M, eta), (M - 1) ** 2 * hc / (M - 1 + np.exp(M * hc)), rtol=1e-14)
    assert float(gamma(0.0, K, M, eta)) == 0.0


def _h_rhs(M, eta_y, h):
    return eta_y / (M - 1 + jnp.exp(M * h))


def _snap_rhs(t, y, args):
    """(h_K, Γ, z, B): the decoder ODE for h_K(t) = h(t/K), ḣ_K = η_Y/(K(M−1+e^{M h_K})); Γ̇ = η_Z γ(t); the snap
    model ż = −C0⁻¹ η_Z γ e^{4z}; Ḃ = η_Z γ/(C0 + 4Γ) with the integrated Γ."""
    K, M, eta_y, eta_z, C0 = args
    hK, G, z, _ = y
    g = eta_z * gamma(t, K, M, eta_y)
    return jnp.stack([_h_rhs(M, eta_y, hK) / K, g, -g * jnp.exp(4 * z) / C0, g / (C0 + 4 * G)])


# (K, M, η_Y, η_Z, C0, t_max): the Fig. 3 setting (t_max = 2.5 t_0 and 25 t_0), Fig. 9's left and right panels with
# K = 1 (the figure omits K), and a small M; each runs well past its t_0 = 2K ln M/η_Y.
SNAP_CASES = [
    (10, 1000, 0.5, 0.5, 0.1, 700.0),
    (10, 1000, 5.0, 0.5, 0.01, 700.0),
    (1, 100, 5.0, 0.5, 0.25, 5.0),
    (1, 10000, 1.0, 1.0, 1.0, 50.0),
    (1, 10, 0.5, 2.0, 1.0, 50.0),
]


@pytest.fixture(scope="module")
def snap_solutions():
    out = []
    for K, M, eta_y, eta_z, C0, t_max in SNAP_CASES:
        ts = jnp.linspace(0.0, t_max, 36)
        ys = _integrate(_snap_rhs, jnp.zeros(4), ts, (K, M, eta_y, eta_z, C0))
        out.append(((K, M, eta_y, eta_z, C0), ts, np.asarray(ys)))
    return out


@pytest.mark.slow
def test_h_matches_ode_and_its_derivative(snap_solutions):
    for (K, M, eta_y, _, _), ts, ys in snap_solutions:
        got = h(ts / K, M, eta_y)
        np.testing.assert_allclose(got, ys[:, 0], rtol=1e-10, atol=0)
        # the last Newton step carries the implicit derivative, dh/dt = η_Y/(M−1+e^{Mh})
        dh = jax.vmap(jax.grad(h), (0, None, None))(ts / K, M, eta_y)
        np.testing.assert_allclose(dh, _h_rhs(M, eta_y, got), rtol=1e-13, atol=0)


def test_Gamma_closed_form_equals_integral_of_gamma(snap_solutions):
    for (K, M, eta_y, eta_z, _), ts, ys in snap_solutions:
        # acceptance is 1e-6; the integrator resolves it to ~1e-11, so 1e-9 keeps a 100× margin
        np.testing.assert_allclose(Gamma(ts, K, M, eta_y, eta_z), ys[:, 1], rtol=1e-9, atol=0)
        dG = jax.vmap(jax.grad(Gamma), (0,) + (None,) * 4)(ts, K, M, eta_y, eta_z)
        np.testing.assert_allclose(dG, eta_z * gamma(ts, K, M, eta_y), rtol=1e-13, atol=1e-300)


def test_snap_logit_and_B_n_against_integration(snap_solutions):
    for (K, M, eta_y, eta_z, C0), ts, ys in snap_solutions:
        np.testing.assert_allclose(snap_logit(ts, K, M, eta_y, eta_z, C0), ys[:, 2], rtol=1e-9, atol=1e-12)
        anchored = B_n(ts, K, M, eta_y, eta_z, C0, anchored=True)
        np.testing.assert_allclose(anchored, ys[:, 3], rtol=1e-9, atol=1e-12)
        paper = B_n(ts, K, M, eta_y, eta_z, C0)
        np.testing.assert_allclose(paper - anchored, math.log(C0) / 4, rtol=0, atol=1e-14)
        assert float(anchored[0]) == 0.0 and float(paper[0]) == pytest.approx(math.log(C0) / 4, rel=1e-15)


def test_B_n_at_t0_depends_only_on_nu():
    # Mη_Y t_0/K = 2M ln M, so h(t_0/K) and hence B_n(t_0) are unchanged when η_Y and η_Z scale together
    K, M, C0, nu = 10, 1000, 0.1, 10.0
    vals = [float(B_n(transition_time(K, M, c * nu), K, M, c * nu, c, C0)) for c in (0.5, 1.0, 2.0, 8.0)]
    np.testing.assert_allclose(vals, vals[0], rtol=1e-14)
    other = float(B_n(transition_time(K, M, 2 * nu), K, M, 2 * nu, 1.0, C0))
    assert abs(other - vals[0]) > 1e-3  # a different ν gives a different value


# ---- transition times -------------------------------------------------------------------------------------------


def test_transition_time_worked_case():
    K, M, eta = 10, 1000, 0.5
    t0 = float(transition_time(K, M, eta))
    assert t0 == pytest.approx(2 * 10 * math.log(1000) / 0.5, rel=1e-15)
    assert t0 == pytest.approx(276.3102111592855, rel=1e-15)
    assert float(scan_time(K, M, eta)) == pytest.approx(t0 / 2, rel=1e-15)
    sharp = float(transition_time(K, M, eta, sharp=True))
    assert sharp == pytest.approx(2 * K * float(x_star(M)) / eta, rel=1e-15)
    assert sharp == pytest.approx(t0 * (1 + float(omega_1(M))), rel=1e-14)
    assert sharp > t0
    assert "eta_z" not in inspect.signature(transition_time).parameters
    times = [float(transition_time(K, M, e, sharp=s)) for s in (False, True) for e in (0.5, 1.0, 2.0, 5.0)]
    assert times[:4] == sorted(times[:4], reverse=True) and times[4:] == sorted(times[4:], reverse=True)


# ---- Lemma 9: two stages ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("M,eta", [(100, 0.5), (1000, 0.5), (1000, 2.0), (10000, 1.0)])
def test_lemma9_scan_stage(M, eta):
    K = 10
    t = np.linspace(0.01, 1.0, 50) * K * math.log(M) / (10 * eta)
    x = np.asarray(M * h(t / K, M, eta))
    rel = eta * t / K / x - 1  # relative error of h ≈ η_Y t/(MK)
    # From Mη_Y τ = Mx + (e^x − 1 − x) and x²/2 ≤ e^x − 1 − x ≤ x² e^x/2: x/(2M) ≤ rel ≤ x e^x/(2M).
    # At t = K ln M/(10η_Y), x < ln M/10, so rel < ln M · M^{0.1}/(20M): 3.7e-3 at M = 100, 6.9e-4 at M = 1000.
    assert np.all(rel >= x / (2 * M) * (1 - 1e-9)) and np.all(rel <= x * np.exp(x) / (2 * M) * (1 + 1e-9))
    assert rel.max() < math.log(M) * M**0.1 / (20 * M)


@pytest.mark.parametrize("M,eta", [(100, 0.5), (1000, 0.5), (1000, 2.0), (10000, 1.0)])
def test_lemma9_snap_stage(M, eta):
    K = 10
    t = float(transition_time(K, M, eta)) * np.logspace(1, 6, 40)  # t ≥ 10 t_0
    x = np.asarray(M * h(t / K, M, eta))
    c = M * eta * t / K
    rel = np.log(c) / x - 1  # relative error of h ≈ ln(Mη_Y t/K)/M
    # x = ln c + ln(1 − u), u = ((M−1)x − 1)/c ∈ (0, 1); u ≤ −ln(1−u) ≤ u/(1−u) with u ≤ ln c/(η_Y τ) gives
    # (M−1)/c − 1/(c x) ≤ rel ≤ 1/(η_Y τ − ln c). At t = 10 t_0, η_Y τ = 20 ln M and the upper bound is
    # 1/(20 ln M − ln(20 M ln M)): 1.2 % at M = 100, 0.8 % at M = 1000.
    tau = t / K
    assert np.all(rel >= (M - 1) / c - 1 / (c * x)) and np.all(rel <= 1 / (eta * tau - np.log(c)))
    assert np.all(np.diff(rel) < 0) and rel[0] < 0.0121 and rel[-1] < 1e-6


# ---- validation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: h(1.0, 1, 0.5), "M"),
        (lambda: h(1.0, 2.5, 0.5), "M"),
        (lambda: h(1.0, 10, 0.0), "eta_y"),
        (lambda: h(-1.0, 10, 0.5), "t"),
        (lambda: h_star(-1, 10, 0.5), "steps"),
        (lambda: h_star(3.0, 10, 0.5), "steps"),
        (lambda: x_star(3), "M"),
        (lambda: omega_1(2), "M"),
        (lambda: transition_time(10, 3, 0.5, sharp=True), "M"),
        (lambda: transition_time(0, 100, 0.5), "K"),
        (lambda: scan_time(10, 100, -1.0), "eta_y"),
        (lambda: gamma(1.0, 0, 100, 0.5), "K"),
        (lambda: Gamma(1.0, 1, 100, 0.5, 0.0), "eta_z"),
        (lambda: B_n(1.0, 1, 100, 0.5, 0.5, 0.0), "C0"),
        (lambda: snap_logit(1.0, 1, 100, 0.5, 0.5, -1.0), "C0"),
    ],
)
def test_bad_inputs_raise(call, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        call()
