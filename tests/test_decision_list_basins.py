"""``popdyn basins decision-list``: the rule order learned in a list-length-2 column (docs/models/decision_lists.md
§3 C), checked against the full-W flow of the exact model and the §4 PC criterion."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from popdyn import gradient_flow
from popdyn.analysis import first_passage
from popdyn.jobs.decision_list._theorem1 import theorem1_run
from popdyn.jobs.decision_list.commands import RULE_ORDERS, basins_decision_list, plane_to_column, rule_order
from popdyn.tasks.decision_list import random_perm
from popdyn.tasks.decision_list._classification import pc_slacks
from popdyn.tasks.decision_list._model import DecisionList
from popdyn.tasks.decision_list._reduced_flow import ReducedDecisionList


def test_plane_coordinates():
    """(x, y) ↦ (w_1, w_2, u) has zero column sum w_1 + w_2 + (L−2)ω and inverts to (w_1 − w_2, ω − w_2)."""
    L = 7
    x, y = np.array([0.3, -1.2]), np.array([2.0, 0.5])
    s = plane_to_column(x, y, L)["m2"]
    w1, w2, om = s[:, 0], s[:, 1], s[:, 2] / np.sqrt(L - 2)
    np.testing.assert_allclose(w1 + w2 + (L - 2) * om, 0.0, atol=1e-15)
    np.testing.assert_allclose(w1 - w2, x, atol=1e-15)
    np.testing.assert_allclose(om - w2, y, atol=1e-15)
    assert RULE_ORDERS[int(rule_order(np.array([1.0, 0.0, -np.sqrt(L - 2)]), L))] == "a1>a2>ω"


@pytest.mark.slow
def test_basin_labels_agree_with_the_full_model():
    L, n, c, t1 = 6, 3, 8.0, 3.0
    res = basins_decision_list(L, n, c=c, grid=6, t1=t1, n_times=60)
    r = res.results
    assert abs(sum(r["fractions"].values()) - 1) < 1e-12 and r["fractions"]["a1>a2>ω"] > 0
    labels = res.arrays["basins"]["labels"]
    xs = res.arrays["basins"]["x"]
    # every list has length 2 here, so the full W is one structured column per token
    lists = tuple((((a + 1) % L), a) for a in range(L))
    full = DecisionList(L, n, lists, random_perm(L, seed=0), c=c, train="W")
    red = ReducedDecisionList(L, n, (2,), c)
    for i, j in ((0, 0), (5, 0), (2, 3), (5, 5)):
        th = {"m2": jnp.asarray(plane_to_column(xs[j], xs[i], L)["m2"])}
        W0 = red.embed(th, lists)
        fin = np.asarray(gradient_flow(full, {"W": W0}, t1=t1, ts=None).final["W"])
        col = fin[:, 0]  # column of token 0, list (1, 0)
        state = np.array([col[1], col[0], np.sqrt(L - 2) * col[2]])
        assert int(rule_order(state, L)) == labels[i, j]
        is_pc = bool(np.all(pc_slacks(fin, lists, n) > 0))
        assert is_pc == (labels[i, j] == 0)
    # the batched first-passage map equals the single-point computation, and T* from W0 = 0 is Theorem 1's
    T_map = res.arrays["basins"]["T_star"]
    i, j = 1, 4
    T_one, _ = first_passage(
        red, {"m2": jnp.asarray(plane_to_column(xs[j], xs[i], L)["m2"])}, red.pc_slack, t1, n_grid=60
    )
    assert T_map[i, j] == pytest.approx(T_one[0], rel=1e-9, nan_ok=True)
    T_thm = {col["m"]: col["T_star"] for col in theorem1_run(L, n, 2, c=c).columns}[2]
    assert r["T_star_from_zero"] == pytest.approx(T_thm, rel=2e-2)  # 60 records over 9 decades vs 4000


@pytest.mark.slow
def test_cli_basins(tmp_path, run_cli):
    """The command line runs the job and writes its summary and maps. Same sizes, c, horizon and records as the
    test above (the programs it compiled are reused): the command line's plumbing is what is tested here."""
    out = tmp_path / "b"
    argv = ("--L", "6", "--n", "3", "--c", "8", "--grid", "6", "--t1", "3", "--records", "60")
    proc = run_cli("basins", "decision-list", *argv, "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "summary.json").read_text())["results"]
    assert set(res["fractions"]) == set(RULE_ORDERS) and res["order_from_zero"] in RULE_ORDERS
    assert (res["L"], res["n"], res["c"], res["t1"]) == (6, 3, 8.0, 3.0)
    data = np.load(out / "basins.npz")
    assert data["labels"].shape == (6, 6) and data["T_star"].shape == (6, 6)
