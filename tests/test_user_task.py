"""A task and a dynamics of the user's own run through the four commands with no file of popdyn changed: the module
of docs/jobs.md ("Your own task"), written to a folder and named on the command line as its commands say."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from _docs import doc_module

DOCS = Path(__file__).resolve().parents[1] / "docs" / "jobs.md"


def _docs_task(tmp_path, monkeypatch) -> list[list[str]]:
    """The docs' module, importable from tmp_path as ``wells``, and its commands."""
    return doc_module(DOCS, "## Your own task", "wells", tmp_path, monkeypatch)


@pytest.mark.slow  # ~40 s: four commands, each compiling its runs
def test_a_task_and_a_dynamics_of_ones_own_run_through_every_command(tmp_path, monkeypatch, run_cli):
    commands = _docs_task(tmp_path, monkeypatch)
    assert [c[1] for c in commands] == ["basins", "converge", "stepsize", "sweep"]
    import wells

    for argv in commands:
        out = tmp_path / argv[1]
        code, _, err = run_cli(*argv[1:], "--out", str(out), "--quiet")
        assert code == 0, err
        summary = json.loads((out / "summary.json").read_text())
        assert summary["inputs"]["task"] == "wells:WELLS"
        results = summary["results"]
        if argv[1] == "basins":  # the task's plane, labeller and checks; the barrier at x = 0 between columns
            assert (summary["inputs"]["x"], summary["inputs"]["y"]) == ("u", "v")
            assert results["attractors"] == ["left", "right"]
            assert results["fractions"] == {"left": 0.5, "right": 0.5, "unresolved": 0.0}
            assert results["checks"] == {"right_predicted": 0.5, "right_measured": 0.5}
        elif argv[1] == "converge":  # the user's dynamics: every run reaches ‖∇L‖ ≤ 1e-6, timed in its flow time
            assert summary["inputs"]["dynamics"] == "wells:EULER" and summary["inputs"]["method"] == "Euler"
            assert results["reached"] == 8
            times = np.asarray(results["times"])
            assert np.all(np.isfinite(times)) and np.allclose(times / 0.05, np.round(times / 0.05), rtol=0, atol=1e-9)
        elif argv[1] == "stepsize":  # λ_max = 2 at the minima: η = 0.1 holds, η = 1.5 is past 2/λ_max
            verdicts = [r["verdict"] for r in results["runs"]]
            assert verdicts[0] == "held" and verdicts[1] != "held"
        else:  # the user's dynamics at every tilt: the right well's share is the starts right of the barrier
            assert summary["inputs"]["dynamics"] == "wells:EULER"
            x0 = np.asarray(jax.vmap(wells.wells().init)(jax.random.split(jax.random.PRNGKey(0), 32))["x"])
            for point in results["points"]:
                tilt = point["values"]["tilt"]
                x_m = np.sort(np.roots([1.0, 0.0, -1.0, tilt]).real)[1]
                assert point["resolved_fraction"] == 1.0
                assert point["fractions"]["right"] == pytest.approx(np.mean(x0 > x_m), abs=1e-12)


@pytest.mark.validation
def test_a_method_that_is_no_dynamics_or_lacks_what_it_needs_is_refused(tmp_path, monkeypatch, run_cli):
    _docs_task(tmp_path, monkeypatch)
    out = tmp_path / "o"
    code, _, err = run_cli("basins", "wells:WELLS", "--method", "wells:wells", "--out", str(out))
    assert code == 2 and "method='wells:wells'" in err and "AbstractDynamics" in err
    code, _, err = run_cli("basins", "wells:WELLS", "--method", "wells:EULER", "--t1", "5", "--out", str(out))
    assert code == 2 and "--t1 applies only with --method flow" in err
    code, _, err = run_cli("basins", "wells:WELLS", "--method", "wells:NOPE", "--out", str(out))
    assert code == 2 and "has no 'NOPE'" in err
    code, _, err = run_cli("basins", "wells:WELLS", "--method", "sgd", "--out", str(out))
    assert code == 2 and "declares no per-example data" in err  # SGD needs the model's examples
    assert not out.exists()
