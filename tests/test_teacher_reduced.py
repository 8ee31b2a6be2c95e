"""Bilinear teacher, reduced 2-D system: the loss and gradient on the invariant manifold against the full model,
the first step from zero, the linear closed forms, full-matrix GD against reduced GD (with the invariants of
§4.1), identical curves across teachers, and the late-time constants (docs/models/teacher.md §3.6, §4, §5.2, §10).

References: the full model of test_teacher_model (itself checked against Monte Carlo), embedded and iterated with
popdyn.gradient_descent; the closed forms of §3.6 (first step), §4.2 (linear case) and §5.2 (late constant).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn import gradient_descent
from popdyn.tasks.teacher import (
    BilinearTeacher,
    TeacherReduced,
    cnn_pooling,
    embed,
    kappa,
    late_constant,
    make_teacher,
    project,
    random_V,
)

EXACT = 1e-13
ALPHAS = (0.0, 0.1, 1.0)
D, K = 8, 2
V_STAR = np.asarray(random_V(jax.random.PRNGKey(5), 2, 3, norm=1.5))


def teacher(alpha, **kw):
    act = ("relu", None) if alpha == 0.0 else ("linear", None) if alpha == 1.0 else ("leaky", alpha)
    return BilinearTeacher(cnn_pooling(D, K), V_STAR, *act, **kw)


def reduced_theta(C1, delta):
    return {"C1": jnp.asarray(C1, float), "Delta": jnp.asarray(delta, float)}


@eqx.filter_jit
def loss_and_grad(prob, theta):
    return jax.value_and_grad(prob.loss)(theta)


# ---------------------------------------------------------------- the manifold (§4.1–§4.2)


@pytest.mark.parametrize("zero_init", ("limit", "c0=1"))
@pytest.mark.parametrize("alpha", ALPHAS)
def test_reduced_loss_and_gradient_equal_the_full_model(alpha, zero_init):
    """At θ = embed(C1, Δ): Lr = L, and ∇L = (∂Lr/∂C1 / v)V* ⊕ (∂Lr/∂Δ / (K(D−K)))B, B = ∂A/∂Δ (the gradient is
    tangent, so the manifold is invariant and ``precondition`` maps reduced GD to full GD); also at C1 = 0."""
    full = teacher(alpha, sigma_x=1.2, sigma_eps=0.3, zero_init=zero_init)
    red = TeacherReduced.from_teacher(full)
    B = full.logits(1.0)
    for C1, delta in ((0.0, 0.0), (0.0, 2.0), (0.4, 0.0), (1.3, 5.0), (-0.7, -3.0), (0.9, 60.0)):
        th = reduced_theta(C1, delta)
        Lr, gr = loss_and_grad(red, th)
        L, g = loss_and_grad(full, embed(full, th))
        np.testing.assert_allclose(Lr, L, rtol=EXACT)
        step = red.precondition(gr)
        np.testing.assert_allclose(g["W"], step["C1"] * full.V_star, rtol=1e-12, atol=EXACT)
        np.testing.assert_allclose(g["A"], step["Delta"] * B, rtol=1e-12, atol=EXACT)
        back = project(full, embed(full, th))
        np.testing.assert_allclose([back["C1"], back["Delta"]], [C1, delta], rtol=EXACT, atol=EXACT)


def first_step_limit(alpha):
    """−dLr/dC1 / v at C1 = 0+, σ_x = 1, Δ = 0 (§3.6): (1−α)²√(D−K)/(2π√K) + α + (1−α)²(π − θ0)/(2π)."""
    g = (1 - alpha) ** 2 / (2 * math.pi)
    return g * math.sqrt(D - K) / math.sqrt(K) + alpha + g * (math.pi - math.acos(math.sqrt(K / D)))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_first_step_from_zero(alpha):
    """ "limit": −∂Lr/∂C1 / v at (0, 0) equals the §3.6 formula and the one-sided derivative of Lr(C1, 0) at 0+
    (Lr is exactly quadratic in C1 > 0, so the Richardson quotient (4Lr(h) − Lr(2h) − 3Lr(0))/(2h) is exact);
    "c0=0"/"c0=1": σ'(0)(1+α)/2 with σ'(0) = α + (1−α)c0. All values are per unit of v (σ_x = 1)."""
    red = TeacherReduced(D, K, 2.5, alpha)
    _, g = loss_and_grad(red, red.init(None))
    np.testing.assert_allclose(-g["C1"] / 2.5, first_step_limit(alpha), rtol=1e-12)
    assert float(g["Delta"]) == 0.0
    h = 1e-3
    Lr = [float(loss_and_grad(red, reduced_theta(c, 0.0))[0]) for c in (0.0, h, 2 * h)]
    one_sided = (4 * Lr[1] - Lr[2] - 3 * Lr[0]) / (2 * h)
    np.testing.assert_allclose(-one_sided / 2.5, first_step_limit(alpha), rtol=1e-9)
    for c0 in (0, 1):
        red_c0 = TeacherReduced(D, K, 2.5, alpha, zero_init=f"c0={c0}")
        _, g = loss_and_grad(red_c0, red_c0.init(None))
        np.testing.assert_allclose(-g["C1"] / 2.5, (alpha + (1 - alpha) * c0) * (1 + alpha) / 2, rtol=1e-12, atol=EXACT)


def test_linear_closed_forms():
    """Identity σ, σ_x = 1 (§4.2): Lr − L_opt = (v/2)[C1²Dn² − 2C1Dp + D/K], dC1/dt = Dp − Dn²C1,
    dΔ/dt = √D p q v C1(1/K − C1(p − q))."""
    v = 2.5
    red = TeacherReduced(D, K, v, 1.0, sigma_eps=0.5, M=3)
    for C1, delta in ((0.7, 3.0), (1.2, -1.0), (0.1, 15.0)):
        th = reduced_theta(C1, delta)
        p, q = (float(x) for x in red.attention_values(th["Delta"]))
        n2 = K * p**2 + (D - K) * q**2
        np.testing.assert_allclose(p, 1 / (K + (D - K) * math.exp(-delta / math.sqrt(D))), rtol=EXACT)
        L, g = loss_and_grad(red, th)
        np.testing.assert_allclose(
            L - 0.5 * 3 * D * 0.25, v / 2 * (C1**2 * D * n2 - 2 * C1 * D * p + D / K), rtol=1e-12
        )
        step = red.precondition(g)
        np.testing.assert_allclose(-step["C1"], D * p - D * n2 * C1, rtol=1e-12)
        np.testing.assert_allclose(-step["Delta"], math.sqrt(D) * p * q * v * C1 * (1 / K - C1 * (p - q)), rtol=1e-12)


# ---------------------------------------------------------------- GD from zero (§4.1, §10, item 3)


def invariant_residuals(prob, params):
    """Relative residuals of W ∥ V*, A two-valued, zero column sums, KC2 = (D−K)C3 and the p formula, along a run."""
    W, A = np.asarray(params["W"]), np.asarray(params["A"])
    V, mask = np.asarray(prob.V_star), np.asarray(prob.S_star) > 0
    C1 = np.einsum("tmd,md->t", W, V) / float(prob.v)
    scale = 1.0 + np.abs(A).max()
    C2 = np.array([a[mask].mean() for a in A])
    C3 = -np.array([a[~mask].mean() for a in A])
    delta = C2 + C3
    S = np.asarray(jax.vmap(lambda a: prob.attention({"A": a}))(A))
    p = 1 / (K + (D - K) * np.exp(-delta / math.sqrt(D)))
    return {
        "parallel": np.abs(W - C1[:, None, None] * V).max() / (1 + np.abs(W).max()),
        "two_valued": max(
            np.abs(a[mask] - c2).max() + np.abs(a[~mask] + c3).max() for a, c2, c3 in zip(A, C2, C3, strict=False)
        )
        / scale,
        "column_sums": np.abs(A.sum(axis=1)).max() / scale,
        "C2_C3": np.abs(K * C2 - (D - K) * C3).max() / scale,
        "p": max(np.abs(s[mask] - pt).max() for s, pt in zip(S, p, strict=False)),
    }


@pytest.mark.slow
@pytest.mark.parametrize("alpha", ALPHAS)
def test_full_gd_from_zero_stays_on_the_manifold_and_equals_reduced_gd(alpha):
    """Full-matrix GD from W = 0, A = 0 ("limit" convention; the other conventions give the same step maps by
    test_reduced_loss_and_gradient_equal_the_full_model) against reduced GD with ``precondition``."""
    full = teacher(alpha)
    red = TeacherReduced.from_teacher(full)
    lr, steps = 0.2, 150
    tf = gradient_descent(full, full.init(None), lr=lr, steps=steps, save_params=True)
    tr = gradient_descent(red, red.init(None), lr=lr, steps=steps, save_params=True, precondition=red.precondition)
    for name, r in invariant_residuals(full, tf.params).items():
        assert r < 1e-13, (name, r)
    C1 = np.asarray(tr.params["C1"])
    assert C1[-1] > 1.0  # well into the run: C1 overshoots 1 (§4.2)
    proj = jax.vmap(lambda th: project(full, th))(tf.params)
    np.testing.assert_allclose(proj["C1"], C1, rtol=0, atol=1e-10)
    np.testing.assert_allclose(proj["Delta"], tr.params["Delta"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(tf.loss, tr.loss, rtol=1e-10)


@pytest.mark.slow
def test_teachers_with_equal_sizes_give_identical_curves():
    """CNN, GCN, STS and a relabelled CNN (S* → ΠS*Πᵀ) at (D, K) = (9, 3) with ‖V*‖² = 3 (STS: V* = I_3), and GSLP,
    CNN and GCN at (6, 1) with M = 1: the same loss curve from zero (§4.2)."""
    key = jax.random.PRNGKey(7)
    perm = np.asarray(jax.random.permutation(key, 9))
    kw = {"d": 3, "key": key, "v_norm": math.sqrt(3), "activation": "relu"}
    cnn = make_teacher("cnn", 9, 3, M=3, **kw)
    groups = [
        [
            cnn,
            BilinearTeacher(np.asarray(cnn.S_star)[perm][:, perm], cnn.V_star, "relu"),
            make_teacher("gcn", 9, 3, M=3, **kw),
            make_teacher("sts", 9, 3, d=3, activation="relu"),
        ],
        [make_teacher("gslp", 6, **kw), make_teacher("cnn", 6, 1, M=1, **kw), make_teacher("gcn", 6, 1, M=1, **kw)],
    ]
    for group in groups:
        curves = [gradient_descent(prob, prob.init(None), lr=0.3, steps=60).loss for prob in group]
        assert float(curves[0][-1]) < 0.75 * float(curves[0][0])
        for prob, curve in zip(group, curves, strict=False):
            np.testing.assert_allclose(float(prob.v), 3.0, rtol=EXACT)
            np.testing.assert_allclose(curve, curves[0], rtol=1e-11)


# ---------------------------------------------------------------- late time (§5.2, §10, item 4)


@pytest.mark.slow
def test_late_time_constants():
    """Reduced GD (= full GD) at η = 1/λ_max(teacher), 10⁶ steps, v = 4, (D, K) = (8, 2): ηT(L − L_opt) →
    KD(D−K)/4 = 24 within 2% and a log-log slope of −1 within 0.02 over the last decade of ηT, for α = 0, 0.1, 1;
    ε, ‖W − V*‖ and ‖S − S*‖ within 2% of their §5.2 asymptotes."""
    assert late_constant(D, K) == 24.0
    for alpha in ALPHAS:
        red = TeacherReduced(D, K, 4.0, alpha)
        eta = 1.0 / (kappa(alpha) * D / K)  # 1/λ_max at the teacher (D/K dominates v/(K²D) here)
        assert red.late_onset() < 1e3
        run = gradient_descent(
            red, red.init(None), lr=eta, steps=1_000_000, record_every=50_000, precondition=red.precondition
        )
        t = np.asarray(run.ts) * eta
        excess = np.asarray(run.loss) - red.L_opt
        ratio = t[-1] * excess[-1] / late_constant(D, K)
        late = t >= t[-1] / 10
        slope = np.polyfit(np.log(t[late]), np.log(excess[late]), 1)[0]
        errors, asymptotes = red.errors(run.final), red.asymptotics(t[-1])
        error_ratios = {name: float(value / getattr(asymptotes, name)) for name, value in errors._asdict().items()}
        np.testing.assert_allclose(ratio, 1.0, rtol=0.02, err_msg=f"alpha={alpha}")
        assert abs(slope + 1.0) < 0.02, (alpha, slope)
        np.testing.assert_allclose(list(error_ratios.values()), 1.0, rtol=0.02, err_msg=str(error_ratios))


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((8, 8, 1.0, 0.0), {}, r"K=8 is out of range: must be an integer in \[1, D\)"),
        ((1, 1, 1.0, 0.0), {}, "D=1 is out of range"),
        ((8, 2, 0.0, 0.0), {}, "v=0.0 is out of range"),
        ((8, 2, 1.0, 1.5), {}, r"alpha=1.5 is out of range: must lie in \[0, 1\]"),
        ((8, 2, 1.0, 0.0, -1.0), {}, "sigma_x=-1.0 is out of range"),
        ((8, 2, 1.0, 0.0, 1.0, -0.1), {}, "sigma_eps=-0.1 is out of range"),
        ((8, 2, 1.0, 0.0), {"M": 0}, "M=0 is out of range"),
        (
            (8, 2, 1.0, 0.0),
            {"zero_init": "zero"},
            "zero_init='zero' is invalid: must be one of 'limit', 'c0=0', 'c0=1'",
        ),
    ],
)
def test_reduced_validation(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        TeacherReduced(*args, **kwargs)
