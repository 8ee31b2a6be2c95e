"""``popdyn reproduce``: the paper's figures from exact dynamics (docs/models/markov.md §5)."""

import json

import numpy as np
import pytest

from popdyn.figures import FIGURES, get_figure, markov_fig1
from popdyn.tasks.markov import Canonical

H_UNI, H_RATE = 0.666278, 0.619015  # §5.4, p = 0.5, q = 0.8


@pytest.mark.slow
def test_fig4_cli_final_losses(tmp_path, run_cli):
    """Acceptance: standard init plateaus at H_uni, rank-one init reaches H_rate (within 2e-3)."""
    out = tmp_path / "f4"
    proc = run_cli("reproduce", "markov-fig4", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "parameters, N = 8" in proc.stdout and "one exact loss + gradient: 256 sequences" in proc.stdout
    res = json.loads((out / "summary.json").read_text())["results"]
    assert abs(res["final_loss"]["standard"] - H_UNI) < 2e-3
    assert abs(res["final_loss"]["rank_one"] - H_RATE) < 2e-3
    prob = Canonical(0.5, 0.8)
    assert abs(res["unigram_loss"] - prob.unigram_loss()) < 1e-15
    # the trap is exact: GD from the standard init ends at H_uni to 1e-5, not merely near it
    assert abs(res["final_loss"]["standard"] - prob.unigram_loss()) < 1e-5
    assert res["n_params"] == 841 and res["sequences_per_loss"] == 256
    assert (out / "markov-fig4.png").stat().st_size > 10_000
    data = np.load(out / "fig4.npz")
    assert data["loss_gd"].shape[0] == 2 and np.all(np.diff(data["loss_gd"][1]) <= 1e-12)  # GD at η=0.1 is monotone


@pytest.mark.slow
def test_fig1_small_grid_matches_closed_form():
    res = markov_fig1(n_basin=16, progress=False)
    for tag in ("pq_lt_1", "pq_gt_1"):
        r = res.results[tag]
        assert r["agreement_with_theory"] >= 0.99
        assert abs(sum(r["fractions"].values()) - 1) < 1e-12
        arr = res.arrays[f"fig1_{tag}"]
        assert arr["loss"].shape == (601, 601) and arr["labels"].shape == (16, 16)
        # the loss grid is the exact loss: its minimum over the grid is ≥ H_rate and close to it
        prob = Canonical(r["p"], r["q"])
        assert arr["loss"].min() >= prob.entropy_rate() - 1e-12
        assert arr["loss"].min() - prob.entropy_rate() < 1e-4


def test_unknown_figure_and_list(run_cli):
    with pytest.raises(ValueError, match="figure='markov-fig9' is unknown"):
        get_figure("markov-fig9")
    proc = run_cli("reproduce", "--list")
    assert proc.returncode == 0 and all(name in proc.stdout for name in FIGURES)


@pytest.mark.slow
def test_fig3_rank_one_emergence():
    from popdyn.figures.markov import markov_fig3, top_singular_share

    res = markov_fig3(steps=200, progress=False)
    share = res.results["share"]
    for k in ("W_V", "W_1", "pos"):
        assert share[k][100] > 0.8 and share[k][100] > share[k][1] + 0.4  # rank one emerges by step 100
    assert abs(res.results["final_loss"] - Canonical(0.2, 0.3).entropy_rate()) < 1e-5
    # the share itself: a rank-one matrix has share 1, an orthogonal one 1/d
    assert abs(top_singular_share(np.outer([1.0, 2.0, 3.0], [1.0, -1.0])) - 1.0) < 1e-14
    assert abs(top_singular_share(np.eye(4)) - 0.25) < 1e-14
