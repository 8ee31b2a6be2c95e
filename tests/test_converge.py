"""The converge job: measured approach rates equal the local rates of docs/models/markov.md §4.6, T_ε matches its
prediction."""

import numpy as np
import pytest

from popdyn.jobs.markov._commands import converge_markov
from popdyn.tasks.markov import Canonical
from popdyn.tasks.markov._canonical import c


@pytest.mark.slow
def test_rates_match_local_theory_both_regimes():
    for p in (0.1, 0.9):
        res = converge_markov(p, p, n_init=4, std=1.0, seed=3, eps=1e-6)
        prob = Canonical(p, p)
        rows = res.results["rows"]
        assert {r["basin"] for r in rows} <= {"global", "local"}
        for r in rows:
            assert r["status"] == "converged"
            assert abs(r["rate_measured"] / r["rate_predicted"] - 1) < 2e-3
            assert abs(r["T_eps"] / r["T_pred"] - 1) < 5e-3
            if r["basin"] == "local":  # §4.6: e decays like exp(−2c(w∞)π0π1(p+q−1)t)
                lam = 2 * float(c(r["w_inf"])) * prob.pi0 * prob.pi1 * (2 * p - 1)
                assert abs(r["rate_predicted"] - lam) < 1e-10
            else:  # rank-one Hessian on Γ*: λ = [u*v*/(u*+v*)](4e²c² + 16w²e⁴)
                u, v = prob.pi1 * p * (1 - p), prob.pi0 * p * (1 - p)
                e, w = r["e_inf"], r["w_inf"]
                lam = u * v / (u + v) * (4 * e**2 * float(c(w)) ** 2 + 16 * w**2 * e**4)
                assert abs(r["rate_predicted"] - lam) < 1e-8 * max(1.0, lam)
        dist = res.arrays["convergence"]["dist"]
        assert (np.nanmin(dist, axis=1) < 1e-6).all()  # every run really entered the ε-ball


@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
def test_p_plus_q_one_measures_against_the_flow_end_point():
    """No closed-form limit at p+q = 1 (§4.4 assumes p+q != 1): the job still runs and says so. Four starts, as in
    the test above: (p, q) are data of the problem, so the flow compiled there is reused."""
    import pytest

    with pytest.warns(UserWarning, match="flat"):
        res = converge_markov(0.5, 0.5, n_init=4, seed=1, t1=100.0)
    assert res.inputs["limit"].startswith("flow end point")
    assert [r["basin"] for r in res.results["rows"]] == ["n/a"] * 4
    dist = res.arrays["convergence"]["dist"]
    finite = dist[np.isfinite(dist)]
    assert finite.min() == 0.0  # the last record is the end point itself
