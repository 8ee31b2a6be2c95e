"""Scan-and-Snap jobs (popdyn.jobs._scan_snap) at tiny settings, their numbers against the closed forms of
docs/models/scan_snap.md: the transition time t₀ (Lemmas 6 and 8, Remark 1, Theorem 2), the Hessian at θ = 0 and
Lemma 5's exact GD solution, and Theorem 3's ranking of distinct tokens on a basin map."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn.curvature import hessian_matrix
from popdyn.jobs._scan_snap import (
    basins_scan_snap,
    converge_scan_snap,
    decoder_log_odds,
    hessian_at_zero,
    shared_query_classes,
    stepsize_scan_snap,
)
from popdyn.tasks.scan_snap import ScanSnap, h, h_star, x_star

RTOL = 1e-8  # the flow tolerance the converge tests run at (the job's default)


def _distinct_weights(n_distinct):
    return np.linspace(0.1, 1.0, n_distinct)  # Dataset2's unnormalised distinct-token weights (§7)


# ---- converge ------------------------------------------------------------------------------------
# The job's default instance, K = 10 classes, M = 200, η_Y = 0.5, 10 distinct tokens per class: every converge run
# below but the worked case's M = 1000 has these shapes, so all of them share one compiled solver.
K10, M200, ETA_Y = 10, 200, 0.5


@pytest.fixture(scope="module")
def overlap_k10():
    """One common token at K = 10, M = 200, η_Y/η_Z ∈ {1, 10, 100} (Remark 1's bracket)."""
    return converge_scan_snap(K=K10, M=M200, eta_y=ETA_Y, ratios=(1.0, 10.0, 100.0), n_common=1, rtol=RTOL)


@pytest.mark.slow
def test_converge_hits_the_closed_form_t0_and_overlap_brackets_it(overlap_k10):
    """Disjoint supports: Z never moves and the measured t₀ is Lemma 6's K(2(M−1)x*−1)/(Mη_Y) for every η_Y/η_Z.
    One common token: t₀ < measured < t₀/(1−ρ₀) (Remark 1), later for larger η_Y/η_Z, with the signs of Theorem 2.
    At the job's default K = 10, M = 200 (the orthogonal and the overlapping classes have the same shapes)."""
    K, M, eta_y = K10, M200, ETA_Y
    orth = converge_scan_snap(K=K, M=M, eta_y=eta_y, ratios=(10.0, 1.0), n_common=0, rtol=RTOL)
    closed = orth.results["closed_form"]
    xs, t0 = closed["x_star"], closed["t0"]
    assert np.exp(xs) == pytest.approx((M - 1) * xs, rel=1e-12) and xs > np.log(M)  # Lemma 8's larger root
    assert M * float(h(t0 / K, M, eta_y)) == pytest.approx(xs, rel=1e-12)  # Lemma 6: M h(t₀/K) = x*
    # §5's sharp t₀ = 2K x*/η_Y differs from the exact crossing by K(2x* + 1)/(Mη_Y) exactly
    assert closed["t0_sharp"] - t0 == pytest.approx(K * (2 * xs + 1) / (M * eta_y), rel=1e-9)
    assert closed["t0_leading"] == pytest.approx(2 * K * np.log(M) / eta_y, rel=1e-14)
    assert closed["rho0"] == 0.0
    assert [r["ratio"] for r in orth.results["rows"]] == [1.0, 10.0]  # sorted
    for r in orth.results["rows"]:
        assert r["status"] == "reached"
        assert abs(r["t0_measured"] / t0 - 1) <= 100 * RTOL, r
        assert r["common_logit_change"] is None and abs(r["top_distinct_logit_change"]) < 1e-12  # Z never moves
    assert all(orth.results["checks"].values())

    over = overlap_k10
    d = _distinct_weights(10)
    rho0 = 1.0 / (1.0 + np.sum(d**2))  # f_nᵀf_n' at Z = 0: the common token's share of ‖P(·|n)‖²
    closed1 = over.results["closed_form"]
    assert closed1["rho0"] == pytest.approx(rho0, rel=1e-12)
    assert closed1["t0"] == pytest.approx(t0, rel=1e-15) and closed1["t0_remark1"] == pytest.approx(t0 / (1 - rho0))
    rows = over.results["rows"]
    measured = np.array([r["t0_measured"] for r in rows])
    assert np.all(measured > t0 * (1 + 1e3 * RTOL)), (
        measured / t0
    )  # slower than orthogonal classes, beyond solver error
    assert np.all(measured < t0 / (1 - rho0)), measured / t0
    assert np.all(np.diff(measured) > 1e3 * RTOL * t0), measured  # later for larger η_Y/η_Z
    common = np.array([r["common_logit_change"] for r in rows])
    top = np.array([r["top_distinct_logit_change"] for r in rows])
    assert np.all(common < 0) and np.all(top > 0)  # Theorem 2 (b) and (a)
    assert np.all(np.diff(-common) < 0)  # less attention moved by the snap for larger η_Y/η_Z (Sec. 6, (c))
    assert all(over.results["checks"].values())
    assert set(over.arrays) == {"converge"} and set(over.figures) == {"converge"}
    assert any("direction" in line and "FAILS" not in line for line in over.lines)


def test_decoder_log_odds_is_M_h_along_the_closed_form():
    """With orthonormal features, Y = Σ_n f_n w_nᵀ, w_n = (M−1)hζ_n (Lemma 5/6's decoder) gives x̄ = M h."""
    classes = shared_query_classes(3, 0, 2, M=12)
    prob = ScanSnap(classes)
    M = classes.M
    f = np.asarray(prob.features(prob.init(None)))
    zeta = M / (M - 1) * (np.eye(M)[classes.label] - 1 / M)
    for hv in (0.0, 0.01, 0.3, 2.0):
        Y = f.T @ ((M - 1) * hv * zeta)
        x = float(decoder_log_odds(prob, {"Y": jnp.asarray(Y), "Z": jnp.zeros((M, M))}))
        assert x == pytest.approx(M * hv, rel=1e-12, abs=1e-12)


@pytest.mark.slow
def test_converge_worked_case(overlap_k10):
    """The worked case of §5, K = 10, M = 1000, η_Y = 0.5 (about 20 s): the closed forms and the measured t₀ of
    orthogonal classes; then the bracket with one common token at the job's default M = 200 (each flow at
    M = 1000 runs ~10 s; the M = 200 runs are those of the test above)."""
    K, M, eta_y = 10, 1000, 0.5
    orth = converge_scan_snap(K=K, M=M, eta_y=eta_y, ratios=(10.0,), n_common=0)
    c = orth.results["closed_form"]
    assert orth.inputs["worked_case"]
    assert c["t0_leading"] == pytest.approx(2 * K * np.log(M) / eta_y, rel=1e-14)
    assert c["t0_scan_end"] == pytest.approx(K * np.log(M) / eta_y, rel=1e-14)
    assert c["t0_sharp"] == pytest.approx(2 * K * float(x_star(M)) / eta_y, rel=1e-14)
    assert c["t0_sharp"] == pytest.approx(2 * (1 + c["omega_1"]) * K * np.log(M) / eta_y, rel=1e-12)
    assert orth.results["rows"][0]["t0_measured"] == pytest.approx(c["t0"], rel=100 * RTOL)
    over = overlap_k10
    assert over.inputs["M"] == 200 and over.inputs["K"] == K and over.inputs["eta_y"] == eta_y
    t = [r["t0_measured"] for r in over.results["rows"] if r["ratio"] in (1.0, 100.0)]
    c1 = over.results["closed_form"]
    assert c1["t0"] < t[0] < t[1] < c1["t0_remark1"]  # measured 289.57 < 294.93 < 299.35 < 364.79


# ---- stepsize ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_stepsize_against_the_hessian_at_zero_and_lemma5():
    """λ_max(θ_0) of the audit against the Hessian at 0 (§5's Y–Y block; exact with disjoint supports), the
    recorded GD loss against Lemma 5, and λ_max falling along the run."""
    lrs, steps, M = (1.0, 5.0, 20.0), 20, 17  # 2M² > 512: the engine's end-point checks take the Lanczos path
    res = stepsize_scan_snap(lrs=lrs, steps=steps, record_every=2, K=2, n_common=0, n_distinct=4, M=M)
    classes = shared_query_classes(2, 0, 4, M)
    prob = ScanSnap(classes)
    # the exact dense Hessian at θ = 0 by autodiff; θ flattens as (Y, Z), so its first M² rows and columns are Y–Y
    H = np.asarray(jax.jit(lambda t: hessian_matrix(prob, t))(prob.init(None)))
    # §5's Y–Y block at θ = 0, Σ_n π_n (f_n f_nᵀ) ⊗ (I − 11ᵀ/M)/M, against autodiff
    f = np.asarray(prob.features(prob.init(None)))
    G = f.T @ (classes.weights[:, None] * f)
    yy_block = np.kron(G, np.eye(M) - np.ones((M, M)) / M) / M
    np.testing.assert_allclose(H[: M * M, : M * M], yy_block, atol=1e-14)
    zero = res.results["hessian_at_zero"]
    assert zero == hessian_at_zero(classes)._asdict()
    assert zero["lambda_Y_block"] == pytest.approx(np.linalg.eigvalsh(yy_block)[-1], rel=1e-12)
    dense = np.linalg.eigvalsh(H)
    assert zero["lambda_max"] == pytest.approx(dense[-1], rel=1e-10)  # the derived closed form, exact Hessian
    K = classes.K
    for r, lr in zip(res.results["runs"], lrs, strict=False):
        assert r["lambda_max_start"] == pytest.approx(zero["lambda_max"], rel=1e-8)  # Lanczos in the audit
        assert r["lambda_end"] < r["lambda_max_start"]
        assert r["one_over_lr"] == 1 / lr and r["two_over_lr"] == 2 / lr
    # Lemma 5: the exact GD loss on disjoint equally likely classes
    ts = res.arrays["stepsize"]["steps"].astype(int)
    loss = res.arrays["stepsize"]["loss"]
    for i, lr in enumerate(lrs):
        hs = np.asarray(h_star(steps, M, lr / K))[ts[i]]
        np.testing.assert_allclose(loss[i], np.log1p((M - 1) * np.exp(-M * hs)), rtol=1e-10)
    assert all(res.results["checks"].values())
    assert res.arrays["stepsize"]["lambda_max"].shape == (3, steps // 2 + 1)

    over = stepsize_scan_snap(lrs=lrs, steps=steps, record_every=2, K=2, n_common=1, n_distinct=3, M=M)
    z1 = over.results["hessian_at_zero"]
    assert z1["lambda_max"] is None  # overlapping supports: only the Y–Y block bound
    lam0 = np.array([r["lambda_max_start"] for r in over.results["runs"]])
    assert np.all(lam0 >= z1["lambda_Y_block"]) and np.ptp(lam0) <= 1e-8 * lam0[0]
    assert (
        set(over.results["checks"]) == {"start_at_least_Y_block"} and over.results["checks"]["start_at_least_Y_block"]
    )
    assert [r["lr"] for r in over.results["runs"]] == list(lrs)


@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
def test_stepsize_with_momentum_leaves_lemma5_out():
    """Lemma 5 solves plain GD: with momentum the job records the runs and their audit thresholds, no Lemma 5
    check, and λ_max(θ_0) still equals the closed form. Three rates, 20 steps, M = 17 as in the test above: the
    same shapes, so its compiled end-point checks and Lanczos audit are reused (momentum enters the audit only
    through its thresholds)."""
    lrs = (1.0, 0.5, 0.25)
    res = stepsize_scan_snap(lrs=lrs, steps=20, record_every=2, K=2, n_common=0, n_distinct=4, M=17, momentum=0.9)
    runs = res.results["runs"]
    assert res.inputs["momentum"] == 0.9 and [r["lr"] for r in runs] == list(lrs)
    for run, lr in zip(runs, lrs, strict=True):
        assert run["momentum"] == 0.9
        assert run["stability_threshold"] == pytest.approx(3.8 / lr) and "lemma5_loss_max_rel_error" not in run
    assert set(res.results["checks"]) == {"start_at_least_Y_block", "start_matches_closed_form"}
    assert all(res.results["checks"].values())
    assert not any("Lemma 5" in line for line in res.lines[-len(lrs) :]) and "momentum 0.9" in res.lines[0]


# ---- basins --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_basins_follow_theorem3_on_the_zero_decoder_column(tmp_path):
    """On x = Y[l₂, n₀](0) = 0 the winner is argmax_l P(l|n)e^{z_ml(0)} (Theorem 3) at every grid point; a positive
    initial decoder weight on l₂ lets it win from lower logits; chunks and checkpoints reach basin_map."""
    ck = tmp_path / "ck"
    res = basins_scan_snap(
        grid=5, decoder_range=(-1.0, 1.0), logit_range=(-0.5, 1.5), chunk=10, progress=False, checkpoint=ck
    )
    lab = res.arrays["basins"]["labels"]
    ys, xs = res.arrays["basins"]["y"], res.arrays["basins"]["x"]
    assert lab.shape == (5, 5) and np.all(lab >= 0) and res.results["resolved_fraction"] == 1.0
    classes = shared_query_classes(2, 1, 3)
    P = classes.probs[0]
    dist = np.flatnonzero(classes.distinct()[0])
    top, runner = dist[np.argsort(-P[dist])[:2]]
    tok = res.results["tokens"]
    assert (tok["top"], tok["runner_up"]) == (top, runner)
    tie = np.log(P[top] / P[runner])
    assert res.results["theorem3_tie"] == pytest.approx(tie, rel=1e-14)
    assert res.results["distinct_token_probs"] == {int(tok): pytest.approx(P[tok], rel=1e-14) for tok in dist}
    names = res.results["attractors"]
    assert names == [f"token {tok} wins" for tok in dist]
    predicted = [
        names.index(f"token {dist[np.argmax(np.log(P[dist]) + np.where(dist == runner, y, 0.0))]} wins") for y in ys
    ]
    j0 = int(np.flatnonzero(xs == 0.0)[0])
    assert list(lab[:, j0]) == predicted and res.results["agreement_on_x0_column"] == 1.0
    assert len(set(predicted)) == 2  # the column crosses the tie
    b = res.results["boundary_logit_per_column"]
    assert None not in b and np.all(np.diff(b) <= 0)  # x > 0: the runner-up wins from lower logits
    assert abs(b[j0] - tie) <= (ys[1] - ys[0]) / 2
    assert len(list(ck.glob("chunk_*.npz"))) == 3  # 25 starts in chunks of 10
    again = basins_scan_snap(
        grid=5, decoder_range=(-1.0, 1.0), logit_range=(-0.5, 1.5), chunk=10, progress=False, checkpoint=ck
    )
    np.testing.assert_array_equal(again.arrays["basins"]["labels"], lab)


# ---- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "job, kwargs, name",
    [
        (converge_scan_snap, dict(K=0), "K"),
        (converge_scan_snap, dict(M=20), "M"),  # 1 + 10·10 + 1 + 10 tokens needed
        (converge_scan_snap, dict(M=None), "M"),
        (converge_scan_snap, dict(eta_y=0.0), "eta_y"),
        (converge_scan_snap, dict(ratios=()), "ratios"),
        (converge_scan_snap, dict(ratios=(1.0, -2.0)), "ratios"),
        (converge_scan_snap, dict(ratios=(float("nan"),)), "ratios"),
        (converge_scan_snap, dict(n_common=-1), "n_common"),
        (converge_scan_snap, dict(n_distinct=0), "n_distinct"),
        (converge_scan_snap, dict(rtol=0.1), "rtol"),
        (stepsize_scan_snap, dict(lrs=()), "lrs"),
        (stepsize_scan_snap, dict(lrs=(0.5, 0.0)), "lrs"),
        (stepsize_scan_snap, dict(steps=0), "steps"),
        (stepsize_scan_snap, dict(steps=10, record_every=3), "record_every"),
        (stepsize_scan_snap, dict(record_every=0), "record_every"),
        (stepsize_scan_snap, dict(K=1.5), "K"),
        (stepsize_scan_snap, dict(M=5), "M"),
        (basins_scan_snap, dict(grid=1), "grid"),
        (basins_scan_snap, dict(decoder_range=(1.0, -1.0)), "decoder_range"),
        (basins_scan_snap, dict(logit_range=(0.0, float("inf"))), "logit_range"),
        (basins_scan_snap, dict(n_distinct=1), "n_distinct"),
        (basins_scan_snap, dict(eta_y=-1.0), "eta_y"),
        (basins_scan_snap, dict(eta_z=0.0), "eta_z"),
        (basins_scan_snap, dict(gtol=0.0), "gtol"),
        (basins_scan_snap, dict(t1=float("inf")), "t1"),
        (basins_scan_snap, dict(chunk=0), "chunk"),
    ],
)
def test_invalid_inputs_name_the_parameter(job, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        job(**kwargs)
