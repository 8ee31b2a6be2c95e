"""Theorem 2 run exactly by gradient descent (docs/models/decision_lists.md §6): the sanity-run table, infeasible
instances reported as such, and the reported checks against the recorded numbers.

The table of §6 comes from one unknown random draw of (lists, π, V₀ − cP); ours is seed 0. Measured spread over
draws (seed s: lists, π from s, noise from PRNGKey(s)):

* (23, 20, 1): ℒ0 over seeds 0–39 lies in [3.010, 3.030] (mean 3.018, sd 0.005), so §6's 3.029 is a plausible
  draw; λ_max(θ₀) = 1249.3, 1073.6, 1116.8 for seeds 0, 1, 2 (786.1 at V₀ = cP exactly).
* (32, 29, 2): ℒ0 over seeds 0–39 lies in [3.316, 3.533] (mean 3.410, sd 0.054); λ_max(θ₀)/1e5 for seeds 0–12 =
  2.003, 1.951, 1.832, 1.796, 1.738, 1.658, 1.559, 1.655, 2.261, 1.744, 2.058, 1.898, 2.059 (1.098 at V₀ = cP).
"""

import json

import numpy as np
import pytest

from popdyn.jobs._records import summary
from popdyn.jobs.decision_list import _theorem2 as t2
from popdyn.jobs.decision_list._theorem2 import ROUNDING, theorem2_run
from popdyn.tasks.decision_list._theorems import theorem2_A_range, theorem2_instance, theorem2_T_range

# 24 Lanczos steps for λ_max(θ₀): 32 agree with 64 and 128 to ~1e-15 here, and 24 with 32 to 1e-15 at (23, 20, 1)
# and 2e-13 at (32, 29, 2) (measured), far inside every check on λ_max(θ₀), at three quarters of the cost.
ITERS = 24


@pytest.fixture(scope="module")
def run23():
    return theorem2_run(23, 20, 1, max_steps=5, extra_steps=1, lanczos_iters=ITERS)


@pytest.fixture(scope="module")
def run32():
    # Short settings: one λ_max at (32, 29, 2) is a Lanczos over 2048 parameters on C(32, 29) = 4960 subsets
    # (~15 s on 2 CPU cores at 32 steps), so one GD step and no λ_max audit along the path.
    return theorem2_run(32, 29, 2, max_steps=1, extra_steps=0, audit=False, lanczos_iters=ITERS)


@pytest.mark.slow
def test_23_20_1_sanity_run(run23):
    out = run23
    assert out.feasible and out.reason is None and out.status == "max_steps"
    assert out.delta == 1.0 and out.m == 1
    assert abs(out.c - 12249) < 1
    assert round(out.eps, 2) == 3.33
    assert abs(out.L0 - 3.029) < 0.03  # seed 0: 3.0190; §6's 3.029 is within our draws' range
    assert abs(out.lambda_max0 / 1.20e3 - 1) < 0.05  # seed 0: 1249.3
    assert out.first_pc_step == 1  # "PC reached after 1 step"
    assert out.margins[0] <= 0 < out.margins[1]
    assert out.pc_within_T and out.first_pc_le_T_lo
    assert out.V_dev_max_entry[1] <= out.eps  # §6: max|V_1 − cP| = 1.66 ≤ ε = 3.33
    assert out.V_dev_max_entry[1] <= out.eps / 2 + out.lr  # |∂ℒ/∂V| ≤ 1 entrywise (§6)
    assert out.V_within_eps
    assert out.lambda_at_hit < 1e-3 * out.lambda_max0  # the curvature collapses at the hit (§6: 0.56)
    assert out.step_size_held  # η·λ_max(θ_t) ≤ 1 at every recorded θ_t


@pytest.mark.slow
def test_23_20_1_ranges_recomputed_from_measured_L0(run23):
    out = run23
    eps, L0 = out.eps, out.L0
    assert eps == theorem2_instance(23, 20, 1).eps  # the unperturbed ε
    assert out.A_range == list(theorem2_A_range(L0, 20, eps, 1))
    assert out.A == pytest.approx(sum(out.A_range) / 2, rel=1e-15)
    assert out.lr == 1 / out.lambda_max0
    assert out.T_range == list(theorem2_T_range(L0, 1, out.A, out.lr, eps))
    assert 1900 < out.T_range[0] < out.T_range[1] < 2100  # §6 (λ = 1.20e3): [1877, 2000]


@pytest.mark.slow
def test_descent_lemma_fails_at_the_first_step(run23, run32):
    """η = 1/λ_max(θ₀) is no smoothness bound along the first step: its descent-lemma bound is negative, below any
    loss, and the mean curvature the step saw exceeds 1/η (the curvature peaks between θ₀ and θ₁)."""
    for out in (run23, run32):
        assert out.losses[0] - out.lr / 2 * out.grad_norms[0] ** 2 < 0
        assert out.descent_beta[0] > 1 / out.lr
        assert out.descent_inequality_held is False
        assert out.losses[1] < out.losses[0]  # the loss still drops
    assert all(g >= 0 for g in run23.descent_gaps[1:])


@pytest.mark.slow
def test_reported_checks_match_recorded_numbers(run23):
    out = run23
    steps, lr = out.steps, out.lr
    assert steps == 2 and out.ts == [0.0, 1.0, 2.0]
    for key in ("losses", "grad_norms", "margins", "lambdas", "V_dev_max_entry", "V_dev_inf_norm"):
        assert len(getattr(out, key)) == steps + 1, key
    losses, gn = np.array(out.losses), np.array(out.grad_norms)
    gaps = losses[:-1] - lr / 2 * gn[:-1] ** 2 - losses[1:]
    np.testing.assert_allclose(out.descent_gaps, gaps, rtol=0, atol=1e-12)
    held = bool(np.all(gaps >= -ROUNDING * np.maximum(1.0, np.abs(losses[:-1]))))
    assert out.descent_inequality_held == held
    for gap, beta in zip(gaps, out.descent_beta, strict=False):  # the gap is (η²‖∇ℒ‖²/2)(1/η − β)
        assert (gap >= 0) == (beta <= 1 / lr)
    lam = out.lambdas
    assert lam[0] == out.lambda_max0 and out.lambda_at_hit == lam[out.first_pc_step]
    assert out.max_lambda_along == max(lam)
    assert out.eta_times_max_lambda == lr * max(lam)
    assert out.step_size_held == (lr * max(lam) <= 1 + ROUNDING)
    assert out.V_within_eps == all(d <= out.eps for d in out.V_dev_max_entry)
    assert out.V_within_eps_inf_norm == all(d <= out.eps for d in out.V_dev_inf_norm)
    assert out.V_within_eps_inf_norm is False  # a row sum of |U(−ε/2, ε/2)| noise over L = 23 entries exceeds ε
    assert out.loss_rises == 0
    json.dumps(summary(out), allow_nan=False)


@pytest.mark.slow
def test_32_29_2_sanity_run(run32):
    out = run32
    assert out.feasible and out.delta == pytest.approx(3 / 31, rel=1e-15) and out.m == 2
    assert round(out.c, -3) == 293_000  # §6: 2.93e5
    assert abs(out.L0 - 3.362) < 0.03  # seed 0: 3.3722
    assert out.first_pc_step == 1 and out.pc_within_T and out.first_pc_le_T_lo
    assert out.V_dev_max_entry[1] <= out.eps and out.V_within_eps
    L, n, c = 32, 29, out.c
    assert 0.5 < out.lambda_max0 / (c**2 / (L * n**3)) < 2  # "about c²/(L·n³), within a factor of about 2"
    assert out.lambda_max0 == pytest.approx(2.0032148e5, rel=1e-6)  # seed 0, regression
    assert out.lambdas == [out.lambda_max0, None] and out.max_lambda_along is None  # audit=False
    json.dumps(summary(out), allow_nan=False)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="λ_max(θ₀) varies by ~10% over draws (1.56e5–2.26e5, seeds 0–12); "
    "§6's 1.80e5 is one unknown draw and seed 0 gives 2.003e5 (+11.3%)",
)
def test_32_29_2_lambda_max0_within_5_percent_of_the_reference(run32):
    assert abs(run32.lambda_max0 / 1.80e5 - 1) < 0.05


def test_infeasible_instance_is_reported_and_not_run(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("an infeasible instance must not be run")

    monkeypatch.setattr(t2, "gradient_descent", forbidden)
    monkeypatch.setattr(t2, "lambda_max", forbidden)
    out = theorem2_run(8, 5, 2)
    assert out.feasible is False and "162" in out.reason
    assert 5 * out.L0**2 <= 162 * 2 and out.A_range is None
    assert out.steps == 0 and out.first_pc_step is None
    assert all(getattr(out, k) is None for k in ("lambda_max0", "lr", "T_range", "losses", "margins", "descent_gaps"))
    json.dumps(summary(out), allow_nan=False)


def test_empty_A_range_is_reported_and_not_run(monkeypatch):
    """n·ℒ0² > 162m, but at the given ε the A-range (√(4mℒ0/ε), ℒ0 − 6ε/n) is empty."""
    real = t2.theorem2_instance
    monkeypatch.setattr(t2, "theorem2_instance", lambda L, n, M: real(L, n, M)._replace(eps=0.05))
    monkeypatch.setattr(t2, "gradient_descent", lambda *a, **k: pytest.fail("must not run"))
    out = theorem2_run(23, 20, 1)
    assert 20 * out.L0**2 > 162
    assert out.feasible is False and out.reason.startswith("empty A-range") and out.A_range is None
    assert out.lambda_max0 is None and out.losses is None


@pytest.mark.parametrize(
    "kwargs", [{"max_steps": 0}, {"extra_steps": -1}, {"seed": -1}, {"lr": 0.0}, {"lanczos_iters": 0}]
)
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        theorem2_run(23, 20, 1, **kwargs)
