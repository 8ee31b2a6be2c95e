"""``popdyn reproduce teacher-rates | teacher-heatmaps`` (docs/models/teacher.md §5, §8) at small (D, K)."""

import numpy as np
import pytest

from popdyn.figures.teacher import SETTINGS, teacher_heatmaps, teacher_rates

pytestmark = pytest.mark.slow  # every test here runs end-to-end jobs or large instances

SMALL = {"cnn": (9, 3), "gcn": (9, 3), "sts": (9, 3), "gslp": (9, 1)}
SOME = (("cnn", "relu"), ("gcn", "relu"))  # one compiled shape; all six: `popdyn reproduce`


def test_rates_figure():
    """Every setting's late constant within 2% of KD(D−K)/4 with loss slope −1; CNN and GCN with the same
    (D, K, ‖V*‖) give the same numbers (identical curves, §4.2); online SGD's cosine rises to near 1."""
    res = teacher_rates(sizes=SMALL, horizon=3000, ood_samples=100, online_steps=200, settings=SOME, progress=False)
    r = res.results
    assert {f"{n}_{a}" for n, a in SOME} <= set(r) and set(SOME) < set(SETTINGS)
    for n, a in SOME:
        row = r[f"{n}_{a}"]
        assert abs(row["late_constant_ratio"] - 1) < 0.02 and abs(row["slopes"]["excess"] + 1) < 0.02, (n, a, row)
        assert row["max_lambda_over_one_over_lr"] <= 1 + 1e-9
    assert r["cnn_relu"]["late_constant"] == r["gcn_relu"]["late_constant"]
    np.testing.assert_array_equal(res.arrays["rates_cnn_relu"]["excess"], res.arrays["rates_gcn_relu"]["excess"])
    assert 0.9 < r["online_cosine"]["final"] <= 1.0
    assert "teacher-rates" in res.figures


def test_heatmaps_learn_the_support():
    """At the end (ηT = 300 × onset) every S has the pattern of S*: above 0.9/K exactly on its support, with
    K·p > 0.95 there, for all six settings (gslp's K = 1 included)."""
    res = teacher_heatmaps(sizes=SMALL, horizon=300, progress=False)
    assert len(res.results) == len(SETTINGS)
    for key, row in res.results.items():
        assert row["support_value"] * row["K"] > 0.95, (key, row)
        assert row["max_abs_S_minus_S_star"] < 0.05 / row["K"], (key, row)
        S, S_star = res.arrays[f"S_{key}"]["S"], res.arrays[f"S_{key}"]["S_star"]
        np.testing.assert_allclose(S.sum(axis=0), 1.0, rtol=1e-12)
        assert np.all((S > 0.9 / row["K"]) == (S_star > 0))
