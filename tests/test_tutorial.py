"""The tutorial (docs/tutorial.md) runs as written, block after block in one namespace, and every number it shows
is what its code computes, to the digits it prints."""

import re
from pathlib import Path

import numpy as np
import pytest
from _quick_codegen_a import run_in_quick_process

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"


def _blocks() -> list[str]:
    """The tutorial's Python blocks in order, less the last: a module file for the command line (tested with the
    README's, test_jobs.py)."""
    blocks = re.findall(r"^```python\n(.*?)^```", TUTORIAL.read_text(encoding="utf-8"), flags=re.M | re.S)
    assert "def scalar_net" in blocks[-1]
    return blocks[:-1]


def _near(value, shown: float, digits: float) -> bool:
    """``value`` equals ``shown`` to the precision it is printed with (half a unit of its last digit)."""
    return abs(float(value) - shown) <= 0.5 * digits


def _check_start(ns):
    prob, th0 = ns["prob"], ns["th0"]
    assert prob.n_params() == 2
    assert str(float(th0["a"])).startswith("1.880") and str(float(th0["b"])).startswith("-1.400")
    assert _near(prob.loss(th0), 6.6019, 1e-4)


def _check_one_flow(ns):
    traj = ns["traj"]
    assert _near(traj.final["a"], 1.0202, 1e-4) and _near(traj.final["b"], 0.9802, 1e-4)
    assert traj.status_names[int(traj.status)] == "converged"
    assert _near(traj.t_final, 11.35, 1e-2)


def _check_batch(ns):
    traj = ns["traj"]
    assert traj.status_counts()["converged"] == 256
    assert np.allclose(traj.final["a"] * traj.final["b"], 1.0, atol=1e-6)


def _check_gd(ns):
    counts = ns["traj"].status_counts()
    assert counts["converged"] == 3 and counts["diverged"] == 1


def _check_curvature(ns):
    popdyn, prob = ns["popdyn"], ns["prob"]
    np.testing.assert_allclose(popdyn.hessian_spectrum(prob, ns["theta_star"]), [0.0, 2.0], atol=1e-12)
    assert popdyn.lambda_max(prob, ns["theta_star"]) == pytest.approx(2.0, rel=1e-12)
    np.testing.assert_allclose(popdyn.hessian_spectrum(prob, {"a": 0.0, "b": 0.0}), [-1.0, 1.0], atol=1e-12)


def _check_audit(ns):
    audit = ns["audit"]
    assert list(audit.verdicts()) == ["held", "between", "edge of stability", "diverged"]
    lam = np.asarray(audit.max_lambda)
    assert all(_near(v, s, 1e-2) for v, s in zip(lam[:3], (6.54, 6.63, 7.18), strict=True))
    assert _near(lam[3] / 1e12, 3.5, 0.1)


def _check_basins(ns):
    bf, bm = ns["bf"], ns["bm"]
    assert bf.fractions == pytest.approx({"a+b>0": 0.501, "a+b<0": 0.499, "unresolved": 0.0}, abs=1e-12)
    assert all(_near(bf.stderr[k], 0.0158, 1e-4) for k in ("a+b>0", "a+b<0"))
    assert bm.attractors == ("a+b>0", "a+b<0", "saddle(1) L=0.5")
    assert Path("basins.png").read_bytes()[:4] == b"\x89PNG"


def _check_times(ns):
    times, a0, s = ns["ht"].times, ns["a0"], ns["s"]
    assert all(_near(v, shown, 1e-3) for v, shown in zip(times, (5.577, 4.437, 3.829), strict=True))
    closed = 0.5 * np.log((1 / a0**2 - 1) / (1 / s - 1))
    assert np.max(np.abs(times / closed - 1)) < 1e-6  # "relative errors ~ 1e-8"


def _check_stack(ns):
    out = ns["jax"].vmap(lambda p: p.loss({"a": 1.0, "b": 1.0}))(ns["stack"])
    np.testing.assert_allclose(out, [0.125, 0.0, 0.5], rtol=0, atol=1e-15)


def _check_student(ns):
    popdyn, student, w_star = ns["popdyn"], ns["student"], ns["w_star"]
    assert _near(student.loss(np.zeros(4)), 0.258647, 1e-6)
    assert popdyn.basin_fractions(student, 200, seed=0).fractions == {"teacher": 1.0, "unresolved": 0.0}
    spectrum = np.asarray(popdyn.hessian_spectrum(student, w_star))
    assert all(_near(v, s, 1e-4) for v, s in zip(spectrum, (0.0434, 0.2431, 0.3328, 0.7118), strict=True))


CHECKS = [None, _check_start, _check_one_flow, _check_batch, _check_gd, _check_curvature, _check_audit]
CHECKS += [_check_basins, _check_times, _check_stack, _check_student]


def run_tutorial() -> None:
    """Run the tutorial's blocks in order in one namespace, in the current folder (its figure is written there),
    checking what each block shows after it runs."""
    blocks = _blocks()
    assert len(blocks) == len(CHECKS)
    ns: dict = {}
    for code, check in zip(blocks, CHECKS, strict=True):
        exec(compile(code, str(TUTORIAL), "exec"), ns)
        if check is not None:
            check(ns)


@pytest.mark.slow  # ~1 min: the tutorial's own sizes (1,000 starts, a 48 × 48 map)
def test_the_tutorial_runs_and_shows_what_it_computes(tmp_path):
    """In a new process with cheaper code generation (tests/_quick_codegen_a.py): the tutorial is compile-bound."""
    run_in_quick_process("test_tutorial", "run_tutorial", tmp_path)
