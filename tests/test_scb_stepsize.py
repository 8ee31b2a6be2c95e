"""SCB step-size audit: the whitened problem is Algorithm 1's preconditioned projected GD, its Hessian holds
the reduced system's eigenvalues, and ``popdyn stepsize scb`` classifies step sizes around 2/λ* (docs/models/scb.md
§4, §10)."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import numpy as np
import pytest

import popdyn
from popdyn.curvature import hessian_matrix
from popdyn.jobs.scb._training import preconditioner
from popdyn.jobs.scb.commands import stepsize_scb
from popdyn.tasks.scb import Reduced2D, SparseBigram, Whitened, random_instance

pytestmark = pytest.mark.slow  # every test here runs end-to-end jobs or large instances

PROB = SparseBigram(*random_instance(jax.random.PRNGKey(4), 4, 6, 2))


def test_gd_on_whitened_coordinates_is_preconditioned_projected_gd():
    """θ(u_t) for plain GD on u equals θ_t of θ ← θ − η·Π D^{-1}∇L, step for step (from a generic start)."""
    key_v, key_a = jax.random.split(jax.random.PRNGKey(1))
    theta0 = {
        "V": PROB.P + 0.1 * jax.random.normal(key_v, PROB.P.shape),
        "A": PROB.Qm + 0.1 * jax.random.normal(key_a, PROB.Qm.shape),
    }
    white = Whitened(PROB, theta0)
    ref = popdyn.gradient_descent(
        PROB, theta0, lr=0.3, steps=60, record_every=6, save_params=True, precondition=preconditioner(PROB)
    )
    run = popdyn.gradient_descent(white, white.init(None), lr=0.3, steps=60, record_every=6, save_params=True)
    mapped = jax.vmap(white.theta)(run.params)
    for b in ("V", "A"):
        np.testing.assert_allclose(mapped[b], ref.params[b], rtol=0, atol=1e-13, err_msg=b)
    np.testing.assert_allclose(run.loss, ref.loss, rtol=1e-13)
    back = white.at(ref.final)
    for b in ("V", "A"):
        np.testing.assert_allclose(white.theta(back)[b], ref.final[b], atol=1e-14)


def test_whitened_hessian_holds_the_reduced_eigenvalues():
    """𝓜 is invariant, so the roots of λ² − (q̄ + c)λ + c/T (the 2-D system at (1, 1)) are eigenvalues of
    the whitened Hessian at (P, Qm); λ_max bounds them and the (P, −Qm) zero mode is projected out only in
    part (column sums fixed), so the smallest eigenvalue is 0."""
    white = Whitened(PROB)
    u = white.at({"V": PROB.P, "A": PROB.Qm})
    H = np.asarray(eqx.filter_jit(hessian_matrix)(white, u))  # one compiled program, not op by op
    spectrum = np.linalg.eigvalsh(H)
    for root in Reduced2D.from_instance(PROB).eigenvalues_at_minimum():
        assert np.min(np.abs(spectrum - root)) < 1e-12, (root, spectrum)
    # λ_max's own program builds H and diagonalises it with XLA's solver: a backward-stable eigensolver on the same
    # H agrees with LAPACK's to n·ε·‖H‖₂, not bit for bit (the last bits follow the host's vector extensions)
    bound = H.shape[0] * np.finfo(H.dtype).eps * np.max(np.abs(spectrum))
    assert abs(float(popdyn.lambda_max(white, u, method="exact")) - spectrum[-1]) <= bound
    assert abs(spectrum[0]) < 1e-12


# the command line's test runs the first of these rates at these settings: its programs are the ones compiled here
STEPSIZE = dict(N=4, T=6, Q=2, seed=4, steps=600, record_every=30)


def test_stepsize_scb_classifies_step_sizes_around_the_edge():
    res = stepsize_scb(**STEPSIZE)
    lam = res.results["lambda_star_whitened"]
    runs = res.results["runs"]
    assert [r["lr"] for r in runs] == [0.5, 0.9 * 2 / lam, 1.1 * 2 / lam]
    assert [r["past_stability_edge"] for r in runs] == [False, False, True]
    assert runs[0]["monotone_safe"] and runs[0]["loss_rises"] == 0
    assert runs[-1]["status"] == "diverged" and runs[0]["status"] != "diverged"
    assert runs[1]["status"] == "converged" and runs[-1]["loss_rises"] > 0


def test_stepsize_scb_cli(tmp_path, run_cli):
    out = tmp_path / "s"
    argv = [a for k, v in STEPSIZE.items() for a in (f"--{k.replace('_', '-')}", v)]
    proc = run_cli("stepsize", "scb", *argv, "--lr", "0.5", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["stepsize.npz", "stepsize.png", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["inputs"]["lr"] == [0.5] and summary["results"]["runs"][0]["status"] != "diverged"
    bad = tmp_path / "bad"
    proc = run_cli("stepsize", "scb", "--lr", "-1", "--out", bad)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "lr=-1" in proc.stderr
    assert not bad.exists()
