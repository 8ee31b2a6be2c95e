"""Theorem 1 (docs/models/decision_lists.md §5): T* from the reduced flow against the reference values of §5,
the bound, the full-W flow and the full model's perfect-classification margin."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdyn import gradient_flow
from popdyn.jobs.decision_list._theorem1 import theorem1_run
from popdyn.tasks.decision_list import random_lists, random_perm
from popdyn.tasks.decision_list._classification import pc_slacks
from popdyn.tasks.decision_list._model import DecisionList
from popdyn.tasks.decision_list._reduced import is_column_structured
from popdyn.tasks.decision_list._reduced_flow import ReducedDecisionList


def _T(run):
    return {col["m"]: col["T_star"] for col in run.columns}


@pytest.fixture(scope="module")
def ref_run():
    return theorem1_run(10, 3, 3, c=10.0)


@pytest.mark.slow
def test_reference_T_star_values(ref_run):
    """§5 regression values (D_distinct, V = cP): (10,3,2,10) 9.888, (10,3,3,10) 6.417, (20,5,3,20) 16.10."""
    T = _T(ref_run)
    assert T[1] == 0.0  # a list of length 1 is learned at any t > 0
    assert abs(T[2] / 9.888 - 1) < 1e-3 and abs(T[3] / 6.417 - 1) < 1e-3
    assert abs(_T(theorem1_run(20, 5, 3, c=20.0))[3] / 16.10 - 1) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("L,n,M,delta,c,t_max", [(10, 3, 2, 0.2222, 124.3, 0.071), (30, 3, 2, 0.0690, 591.8, 0.053)])
def test_theorem_table_rows(L, n, M, delta, c, t_max):
    """§5 table: δ, c and max_m T* at the theorem's c, and T* ≤ T₁ under both readings of γ."""
    run = theorem1_run(L, n, M)
    assert abs(run.delta - delta) < 5e-5 and abs(run.c - c) < 0.05
    assert abs(run.T_star_max - t_max) < 5e-4
    assert run.T_star_le_bound and run.T_star_le_bound_gamma_eq_delta
    assert run.gamma == pytest.approx(run.delta / L, rel=1e-12)


@pytest.mark.slow
def test_counterexample_with_delta_gamma_one():
    """With δ = γ = 1 the bound fails at (L, n, M) = (20, 3, 3): T* = 5.05 > 4.01 (§5)."""
    run = theorem1_run(20, 3, 3, delta=1.0, gamma=1.0)
    assert abs(run.bound - 4.0057) < 1e-4 and abs(run.T_star_max - 5.05) < 5e-3
    assert run.T_star_le_bound is False


@pytest.mark.slow
def test_reduced_flow_is_the_full_W_flow(ref_run):
    """§3 C: from W₀ = 0 the full-W flow (path B over all L² entries) stays column-structured and equals the
    reduced flow with the 1/(L−m) metric on ω, embedded back; and the exact PC margin of the full model, and
    the §4 criterion per column, change sign at the reduced flow's T*. The reduced flow is the one Theorem 1's run
    recorded (``ref_run.trajectory``, 4000 log-spaced records): the full flow is compared with it at the records
    nearest t = 1 and t = 0.98 T*, 1.02 T* for m = 3 and m = 2."""
    L, n, M, c = 10, 3, 3, 10.0
    lists, perm = random_lists(L, M, seed=2), random_perm(L, seed=3)
    full = DecisionList(L, n, lists, perm, c=c, train="W")
    red, rec = ref_run.problem, ref_run.trajectory
    assert isinstance(red, ReducedDecisionList) and red.lengths == (1, 2, 3) and float(red.c) == c
    T = _T(ref_run)
    rts = np.asarray(rec.ts)
    idx = [0] + [int(np.argmin(np.abs(np.log(rts[1:] / t)))) + 1 for t in (1.0, 0.98 * T[3], 1.02 * T[3])]
    idx += [int(np.argmin(np.abs(np.log(rts[1:] / t)))) + 1 for t in (0.98 * T[2], 1.02 * T[2])]
    ts = rts[idx]
    assert ts[0] == 0.0 and ts[2] < T[3] < ts[3] < ts[4] < T[2] < ts[5]
    f = gradient_flow(full, full.init(None), t1=ts[-1], ts=ts, save_params=True, rtol=1e-11, atol=1e-13)
    Wr = jax.jit(jax.vmap(lambda th: red.embed(th, lists)))(
        jax.tree_util.tree_map(lambda x: x[np.array(idx)], rec.params)
    )
    np.testing.assert_allclose(f.params["W"], Wr, atol=1e-9)
    assert is_column_structured(np.asarray(f.final["W"]), lists)
    assert float(jnp.abs(Wr[-1]).max()) > 0.1  # the flow has moved
    margins = np.asarray(jax.vmap(lambda W: full.margin({"W": W}))(f.params["W"]))
    assert np.all(margins[:5] <= 0) and margins[5] > 0  # PC exactly after max_m T* = T*(m = 2)
    length = np.array([len(lst) for lst in lists])
    slack = [pc_slacks(np.asarray(W), lists, n) for W in f.params["W"]]
    assert np.all(slack[2][length == 3] < 0) and np.all(slack[3][length == 3] > 0)
    assert np.all(slack[4][length == 2] < 0) and np.all(slack[5][length == 2] > 0)


@pytest.mark.slow
def test_cli_converge_summary(tmp_path, run_cli):
    out = tmp_path / "t1"
    proc = run_cli("converge", "decision-list", "--L", "10", "--n", "3", "--M", "3", "--c", "10", "--out", out)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "summary.json").read_text())["results"]
    assert {"delta", "gamma", "c", "bound", "columns"} <= set(res)
    assert [col["m"] for col in res["columns"]] == [1, 2, 3] and res["c"] == 10.0
    assert abs(res["columns"][1]["T_star"] / 9.888 - 1) < 1e-3
    assert "T* <= bound" in proc.stdout and (out / "theorem1.png").stat().st_size > 10_000
