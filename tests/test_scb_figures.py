"""``popdyn reproduce scb-fig1 | scb-fig3`` (spec scb.md §5, §7) at small scale."""

import json
import subprocess
import sys

import numpy as np

from popdyn.figures.scb import scb_fig3


def test_fig1_cli_proximal_recovers_sgd_does_not(tmp_path):
    """Fig. 1 with the Gaussian surrogate: after normalisation the proximal end point is within 0.05 of the
    truth in both μ-distances; SGD with the same large step, and with a small step, is not (on A)."""
    out = tmp_path / "f1"
    proc = subprocess.run([sys.executable, "-m", "popdyn.cli", "reproduce", "scb-fig1", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((out / "summary.json").read_text())["results"]
    assert r["proximal"]["normalised_dist_A"] < 0.05 and r["proximal"]["normalised_dist_V"] < 0.05
    assert r["sgd"]["normalised_dist_A"] > 0.05 and r["sgd_small"]["normalised_dist_A"] > 0.05
    assert r["stage1_steps"] is not None
    m = np.load(out / "fig1_sgd_small.npz")
    assert m["steps"][-1] == 3000 and np.all(np.isfinite(m["dist_A"]))
    assert (out / "scb-fig1.png").stat().st_size > 10_000


def test_fig3_delta_is_exactly_zero_at_the_start_and_small_for_sgd():
    """Δ is 0 at the shared start; SGD tracks the noise-free population process (‖Δ_A‖_μ < 0.1), the
    proximal iterate drifts away from it along the scaling symmetry (α_V up, α_A down: the ℓ1 bias, §5)."""
    res = scb_fig3(steps=1000, progress=False)
    for key in ("proximal", "sgd"):
        m = res.arrays[f"fig3_{key}"]
        assert m["delta_A_mu"][0] == 0.0 and m["delta_V_fro"][0] == 0.0
    r = res.results
    assert r["sgd"]["max_delta_A_mu"] < 0.1 < r["proximal"]["max_delta_A_mu"]
    assert r["proximal"]["final_alpha_V"] > r["sgd"]["final_alpha_V"]
    assert r["proximal"]["final_alpha_A"] < r["sgd"]["final_alpha_A"]
