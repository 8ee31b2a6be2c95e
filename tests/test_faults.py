"""Trust under faults (docs/jobs.md, "Outputs"; docs/dynamics.md, "Stopping rules"): no false convergence on tiny
landscapes, closed forms that hold far from the origin and only where the theorem applies, output folders checked
before any computing, one command's results per folder, nothing left behind by a failed or interrupted demo."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from _props import no_compilation

from popdyn._cli import _parser
from popdyn.jobs.markov._commands import basins_markov, converge_markov
from popdyn.tasks.markov import Canonical


@pytest.mark.slow
def test_a_landscape_scaled_to_1e_12_is_not_converged_at_the_start():
    """p = 1e-12: the gradient at (1, 1) is ~7e-12. No start may be called converged where it began, and the
    three theory attractors stay three (the end points are not turned into attractors of their own). A 4 × 4 map:
    the demo's below (p and q are data leaves), one compiled solver."""
    res = basins_markov(1e-12, 0.5, n=4, progress=False)
    status = res.results["status_counts"]
    assert status["converged"] == 0 and status["converged_late"] == 0
    assert res.results["attractors"] == ["global", "local", "saddle"]
    assert not np.any(res.arrays["basins"]["times"] == 0.0)


def test_the_closed_form_limit_holds_far_out_where_w_underflows():
    """From e0 = 90.8 the limit's ln|w∞| ≈ −(e0² − A*) ≈ −8,245: w∞ underflows to +0 and e∞ = √(A*/c(0)) = √A*.
    (A bisection bracket in ln|w| down to −700 only gave NaN.)"""
    prob = Canonical(0.1, 0.1)
    lim = prob.predicted_limit({"e": np.float64(90.804), "w": np.float64(9.392)})
    assert float(lim["e"]) == pytest.approx(math.sqrt(prob.optimal_gap()), rel=1e-12)
    assert 0.0 <= float(lim["w"]) < 1e-300


@pytest.mark.slow
def test_p_plus_q_within_rounding_of_one_uses_no_p_plus_q_not_one_theory():
    with pytest.warns(UserWarning, match="p\\+q"):
        prob = Canonical(0.5, 0.5 - 1e-14)
    assert not prob.theorem_applies()
    with pytest.raises(ValueError, match="p\\+q"):
        prob.predicted_basin({"e": np.float64(1.0), "w": np.float64(1.0)})
    with pytest.warns(UserWarning):  # six starts: the demo's convergence run below, one compiled solver
        res = converge_markov(0.5, 0.5 - 1e-14, n_init=6, t1=10.0)
    assert res.inputs["limit"].startswith("flow end point")
    assert {row["basin"] for row in res.results["rows"]} == {"n/a"}


ARGV = ["stepsize", "markov", "--steps", "5", "--quiet"]


@pytest.mark.slow
def test_an_out_holding_another_commands_results_is_refused_before_computing(tmp_path, run_cli):
    out = tmp_path / "out"
    assert run_cli(*ARGV, "--out", out).returncode == 0
    before = sorted(p.name for p in out.iterdir())
    with no_compilation("JAX compiled before the occupied --out was refused"):
        code, _, err = run_cli("converge", "markov", "--n-init", "1", "--out", out)
    assert code == 2 and "holds the results of another command (stepsize markov)" in err
    assert sorted(p.name for p in out.iterdir()) == before
    assert run_cli(*ARGV, "--out", out).returncode == 0  # the same command again replaces its own results
    # six starts: the demo's convergence run below, one compiled solver
    code, _, err = run_cli("converge", "markov", "--n-init", "6", "--t1", "10", "--out", out, "--replace", "--quiet")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["convergence.npz", "convergence.png", "summary.json"]
    assert json.loads((out / "summary.json").read_text())["command"] == "converge"


def test_an_out_holding_other_files_is_refused(tmp_path, run_cli):
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run_cli(*ARGV, "--out", tmp_path)
    assert code == 2 and "holds files popdyn did not write (notes.txt)" in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("out, message", [("", "must name a folder"), ("/proc/popdyn-test/out", "not writable")])
def test_an_unusable_out_is_refused_before_computing(out, message, run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with no_compilation("JAX compiled before the unusable --out was refused"):
        code, _, err = run_cli(*ARGV, "--out", out)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_temporary_folders_of_a_killed_run_are_removed_by_the_next(tmp_path, run_cli):
    stale = tmp_path / ".out.tmp-abc123"
    stale.mkdir()
    (stale / "summary.json").write_text("{}")
    assert run_cli(*ARGV, "--out", tmp_path / "out").returncode == 0
    assert not stale.exists()


def test_negative_numbers_in_exponent_form_are_values():
    args = _parser().parse_args(["basins", "markov", "--range", "-1e3", "1e3"])
    assert args.range == [-1000.0, 1000.0]


@pytest.mark.slow
def test_a_demo_that_fails_or_is_interrupted_writes_nothing(tmp_path, run_cli, monkeypatch):
    import popdyn.jobs._demo as demo

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "stepsize_markov", interrupted)
    code, _, err = run_cli("demo", "--grid", "4", "--out", tmp_path / "demo", "--quiet")
    assert code == 130 and "interrupted" in err
    assert not (tmp_path / "demo").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["basins", "markov", "--grid", "10000000"],
        ["basins", "markov", "--grid", "100000", "--method", "gd"],
        ["converge", "teacher", "--D", "1000000"],
        ["converge", "scb", "--N", "1000000"],
    ],
)
def test_oversize_requests_are_refused_with_an_estimate(argv, run_cli, tmp_path):
    """Before: tracebacks, XLA aborts (exit 134) or requests for hundreds of GB."""
    code, _, err = run_cli(*argv, "--out", tmp_path / "o")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "GB of memory" in err and "POPDYN_MEMORY_CHECK=off" in err
    assert not (tmp_path / "o").exists()


def test_counts_beyond_int32_are_refused_by_name(run_cli, tmp_path):
    code, _, err = run_cli("basins", "markov", "--method", "gd", "--steps", "99999999999999999999", "--out", tmp_path)
    assert code == 2 and "steps=99999999999999999999 is out of range: must be an integer <= 2,147,483,647" in err


# ---- the compilation cache ----------------------------------------------------------------------------------
def test_a_cache_folder_anyone_may_write_and_another_user_owns_is_refused(tmp_path, run_cli, monkeypatch):
    """Whoever writes the cache chooses the programs a run executes."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    if os.getuid() == 0:
        os.chown(shared, 65534, 65534)  # nobody's
    elif Path("/tmp").stat().st_uid != os.getuid() and Path("/tmp").stat().st_mode & 0o002:
        shared = Path("/tmp")
    else:
        pytest.skip("needs a world-writable folder of another user")
    monkeypatch.setenv("POPDYN_CACHE_DIR", str(shared))
    with no_compilation("JAX compiled before the shared cache was refused"):
        code, _, err = run_cli(*ARGV)
    assert code == 2 and err.count("\n") == 1
    assert f"POPDYN_CACHE_DIR={str(shared)!r} is refused: every user may write to that folder" in err


def test_an_unusable_cache_folder_is_one_warning_and_no_cache(monkeypatch, recwarn):
    import jax

    from popdyn._cli import _compilation_cache

    before = jax.config.jax_compilation_cache_dir
    monkeypatch.setenv("POPDYN_CACHE_DIR", "/proc/popdyn-test/cache")
    _compilation_cache()
    assert [str(w.message) for w in recwarn] == [
        "compilation cache /proc/popdyn-test/cache is unusable (No such file or directory); running without it"
    ]
    assert jax.config.jax_compilation_cache_dir == before


@pytest.mark.slow
def test_unreadable_cache_entries_are_one_warning_line(monkeypatch):
    """JAX warns once per program whose cache entry it cannot read: 13 to 18 lines for one command."""
    import warnings

    from popdyn._cli import _one_line_warnings

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    _one_line_warnings()
    text = "".join(
        warnings.formatwarning(
            f"Error reading persistent compilation cache entry for '{name}': error: -3", UserWarning, "f", 1
        )
        for name in ("jit_a", "jit_b", "jit_c")
    )
    assert text.count("\n") == 1 and text.startswith("popdyn: warning: Error reading persistent compilation cache")
