"""The decision-list CLI: infeasible Theorem 2 settings are reported, bad input is one line and exit 2."""

import json

import pytest


def test_stepsize_reports_an_infeasible_setting(tmp_path, run_cli):
    """n·ℒ0² ≤ 162m: reported as infeasible (exit 0, summary written), and no GD is run."""
    out = tmp_path / "out"
    proc = run_cli("stepsize", "decision-list", "--L", "8", "--n", "5", "--M", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "INFEASIBLE, not run" in proc.stdout
    res = json.loads((out / "summary.json").read_text())["results"]
    assert res["feasible"] is False and res["first_pc_step"] is None and res["lambda_max0"] is None
    assert not (out / "theorem2.png").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (("converge", "decision-list", "--L", "4", "--n", "5"), "n=5 is out of range: distinct tokens need"),
        (("converge", "decision-list", "--distribution", "zipf"), "argument --distribution: invalid choice: 'zipf'"),
        (("basins", "decision-list", "--L", "2", "--n", "2"), "L=2 is out of range"),
        (("converge", "decision-list", "--M", "11"), "M=11 is out of range"),
        (("stepsize", "decision-list", "--lr", "1", "2"), "unrecognized arguments: 2"),
        (("converge", "decision-list", "--c", "-3"), "c=-3.0 is out of range"),
    ],
)
def test_bad_input_is_one_line(tmp_path, run_cli, args, message):
    out = tmp_path / "out"
    proc = run_cli(*args, "--out", out)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not out.exists()
