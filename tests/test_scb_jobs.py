"""``popdyn converge scb`` and ``popdyn basins scb`` (docs/models/scb.md §4, §10)."""

import json

import numpy as np
import pytest

from popdyn.jobs.scb.commands import converge_scb

pytestmark = pytest.mark.slow  # every test here runs end-to-end jobs or large instances

# the command line's converge test runs these settings too, so its programs are those compiled for the run below
CONVERGE = dict(N=10, T=50, Q=2, seed=0, lr=0.5, eps=0.01, max_steps=16_000)


@pytest.fixture(scope="module")
def converged():
    return converge_scb(**CONVERGE)


def test_converge_scb_stage1_and_late_contraction(converged):
    """Stage 1 ends at the same step on the full matrices and on the 2-D recursion; near (1, 1) the measured
    contraction factor of the distance is the predicted 1 − ηλ_slow."""
    res = converged
    r = res.results
    assert r["stage1_steps"] == r["stage1_steps_reduced"] is not None
    assert max(r["stage1_alphas"]) >= r["threshold"] == 0.1
    # early times: α_V ≈ t/T, so the V signal reaches θ = 0.1 after about θT/η = 10 steps
    assert abs(r["stage1_steps"] - r["stage1_steps_early_time"]) <= 2
    assert r["total_steps"] is not None and r["stable"]
    dist = res.arrays["converge"]["distance"]
    measured = (dist[-1] / dist[-1001]) ** (1 / 1000)  # distance ≈ 1e-8 there: the linear regime
    assert abs(measured - r["contraction_predicted"]) < 1e-9


def test_basins_scb_two_regions_split_by_the_saddle(tmp_path, run_cli):
    out = tmp_path / "b"
    proc = run_cli("basins", "scb", "--grid", "12", "--range", "-2", "2", "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    r = json.loads((out / "summary.json").read_text())["results"]
    f = r["fractions"]
    assert f["minimum"] > 0.2 and f["unresolved"] > 0.2 and f["saddle"] == 0.0
    # every unresolved point is escaping toward (0⁻, −∞): below the saddle, never lost to a solver failure
    assert abs(r["escape_fraction"] - f["unresolved"]) < 1e-12
    assert r["status_counts"]["solver_failed"] == 0 and r["status_counts"]["nan"] == 0
    data = np.load(out / "basins.npz")
    labels = data["labels"]
    assert labels[-1, -1] == 0 and labels[0, 0] == -1  # (2, 2) → minimum; (−2, −2) escapes


def test_converge_scb_cli_and_bad_input(tmp_path, run_cli, converged):
    """The command line at the settings of ``converged`` (given explicitly, --max-steps off its default) runs the
    same job: the same inputs and step counts in summary.json."""
    out = tmp_path / "c"
    argv = [a for k in ("N", "T", "Q", "seed", "lr", "eps") for a in (f"--{k}", CONVERGE[k])]
    proc = run_cli("converge", "scb", *argv, "--max-steps", CONVERGE["max_steps"], "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert {k: summary["inputs"][k] for k in CONVERGE} == CONVERGE and summary["results"]["stage1_steps"] is not None
    for key in ("stage1_steps", "stage1_steps_reduced", "total_steps"):
        assert summary["results"][key] == converged.results[key], key
    bad = tmp_path / "bad"
    proc = run_cli("converge", "scb", "--Q", "7", "--T", "6", "--out", bad)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Q=7" in proc.stderr
    assert not bad.exists()


def test_lambda_max_at_the_optimum_dense_and_lanczos():
    """At (P, Qm): λ_max of the full Hessian, exact (dense eigvalsh) and Lanczos agree; the smallest
    eigenvalue is the (P, −Qm) zero mode, so GD's η ≤ 1/λ_max is the binding step-size condition (§3, §10)."""
    import jax

    from popdyn.analysis import extreme_eigenvalues
    from popdyn.tasks.scb import SparseBigram, random_instance

    prob = SparseBigram(*random_instance(jax.random.PRNGKey(3), 6, 8, 2))
    theta = {"V": prob.P, "A": prob.Qm}
    lo_d, hi_d = (float(v) for v in extreme_eigenvalues(prob, theta, method="exact"))
    lo_l, hi_l = (float(v) for v in extreme_eigenvalues(prob, theta, method="lanczos", iters=40))
    assert abs(hi_l - hi_d) < 1e-10 * hi_d
    assert abs(lo_d) < 1e-12 and lo_l > -1e-10
