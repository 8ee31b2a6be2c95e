"""SGD on the command line (docs/jobs.md, "SGD on the command line"): ``popdyn basins MODEL --method sgd`` writes the
map as probabilities over the seeds beside GD's map at the same step, ``popdyn converge MODEL --method sgd`` the
time to the target as a distribution over the seeds, and ``popdyn spread MODEL`` SGD's spread around GD's path,
predicted against measured; each is the library's own computation, and every SGD option is validated and refused
where it does not apply.

The model is the double well with a noisy tilt of test_sgd_basins.py (minima u = ±1, GD's separatrix u = 0)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from test_sgd_basins import wells

import popdyn
from popdyn.analysis import GradNormBelow, hitting_times
from popdyn.dynamics import SGD, GradientDescent
from popdyn.tasks.markov import Canonical

MODEL = "test_sgd_basins:wells"


@pytest.mark.slow  # SGD, GD, the settling flow and a figure compiled through the command: ~20 s
def test_basins_with_sgd_are_the_librarys_probabilities(tmp_path, run_cli):
    out = tmp_path / "o"
    argv = ["--method", "sgd", "--lr", "0.05", "--steps", "60", "--batch", "2", "--seeds", "3", "--seed", "5"]
    proc = run_cli("basins", MODEL, *argv, "--grid", "4", "--range", "-0.5", "0.5", "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    inputs, results = summary["inputs"], summary["results"]
    assert inputs["method"] == "sgd" and inputs["seeds"] == 3 and inputs["batch"] == 2 and inputs["seed"] == 5
    assert inputs["sampling"] == "with-replacement"
    prob = wells()
    grid = popdyn.Grid.square("u", "v", -0.5, 0.5, 4, base=prob.init(jax.random.PRNGKey(5)))
    sgd = SGD(lr=0.05, steps=60, batch=2, seeds=3, seed=5)
    gd = GradientDescent(lr=0.05, steps=60)
    bp = popdyn.basin_probabilities(prob, grid, sgd, beside=gd)
    saved = np.load(out / "basins.npz")
    np.testing.assert_array_equal(saved["probabilities"], bp.probabilities)
    np.testing.assert_array_equal(saved["labels"], bp.labels)
    np.testing.assert_array_equal(saved["status"], bp.status)
    assert list(saved["attractors"]) == [*bp.attractors, "unresolved"] == results["attractors"] + ["unresolved"]
    # GD's end points, settled and labelled with SGD's, are named by the side of the separatrix u = 0 they start on
    names = np.array([*bp.attractors, "unresolved"])
    sides = np.where(grid.points(prob)["u"] > 0, "u>0", "u<0").reshape(4, 4)
    np.testing.assert_array_equal(names[saved["beside_labels"]], sides)
    shares = bp.probabilities.reshape(-1, 3).mean(axis=0)
    assert results["fractions"] == dict(zip(names, shares.tolist(), strict=True))
    assert results["uncertain_fraction"] == float(np.mean(bp.uncertain(0.1)))
    most_likely = np.argmax(bp.probabilities, axis=-1)
    assert results["agrees_with_beside"] == float(np.mean(most_likely == saved["beside_labels"]))
    assert results["beside_method"] == "gd" and sum(results["status_counts"].values()) == 4 * 4 * 3
    assert (out / "basins.png").stat().st_size > 0
    assert f"u>0: {100 * shares[0]:6.2f}% of runs" in proc.stdout and "uncertain starts" in proc.stdout


@pytest.mark.slow  # SGD to a target through the command: ~10 s
def test_converge_with_sgd_gives_the_times_over_the_seeds(tmp_path, run_cli):
    out = tmp_path / "o"
    argv = ["--method", "sgd", "--lr", "0.1", "--steps", "400", "--batch", "1", "--seeds", "4", "--n-init", "3"]
    proc = run_cli("converge", MODEL, *argv, "--eps", "0.05", "--seed", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    prob = wells()
    theta0 = jax.vmap(prob.init)(jax.random.split(jax.random.PRNGKey(2), 3))
    ht = hitting_times(prob, theta0, GradNormBelow(prob, 0.05), SGD(lr=0.1, steps=400, batch=1, seeds=4, seed=2))
    saved = np.load(out / "converge.npz")
    times = ht.times.reshape(3, 4)
    np.testing.assert_array_equal(saved["times"], times)
    np.testing.assert_array_equal(saved["status"], ht.status.reshape(3, 4))
    results = json.loads((out / "summary.json").read_text())["results"]
    reached = np.isfinite(times)
    assert reached.any(), "no run reached the target: the check below would be empty"
    assert results["seeds"] == 4 and results["reached"] == int(reached.sum())
    assert results["reached_fraction_per_start"] == reached.mean(axis=1).tolist()
    q = np.quantile(times[reached], (0.1, 0.5, 0.9))
    assert [results["time_quantiles"][k] for k in ("q10", "q50", "q90")] == q.tolist()
    for row, r, quartiles in zip(times, reached, results["time_quartiles_per_start"], strict=True):
        assert quartiles == (np.quantile(row[r], (0.25, 0.5, 0.75)).tolist() if r.any() else [None] * 3)
    assert f"reached {int(reached.sum())}/12" in proc.stdout and f"median {q[1]:.6g}" in proc.stdout


@pytest.mark.slow  # the spread recursion and 200 SGD runs compiled through the command: ~15 s
def test_spread_is_the_librarys_prediction_beside_its_measurement(tmp_path, run_cli):
    out = tmp_path / "o"
    argv = ["--lr", "0.05", "--steps", "20", "--record-every", "5", "--seeds", "200", "--seed", "3"]
    proc = run_cli("spread", MODEL, *argv, "--sampling", "without-replacement", "--out", out)
    assert proc.returncode == 0, proc.stderr
    prob = wells()
    theta0 = prob.init(jax.random.PRNGKey(3))
    found = popdyn.sgd_spread(prob, theta0, lr=0.05, batch=1, steps=20, replace=False, record_every=5)
    m = popdyn.measured_spread(prob, found, runs=200, seed=3)
    saved = np.load(out / "spread.npz")
    pairs = {
        "ts": m.ts,
        "predicted_sq_distance": found.expected_sq_distance,
        "measured_sq_distance": m.sq_distance,
        "sq_distance_stderr": m.sq_distance_stderr,
        "predicted_excess_loss": found.expected_excess_loss,
        "measured_excess_loss": m.excess_loss,
        "excess_loss_stderr": m.excess_loss_stderr,
        "gd_loss": found.loss,
    }
    for name, expected in pairs.items():
        np.testing.assert_array_equal(saved[name], expected, err_msg=name)
    results = json.loads((out / "summary.json").read_text())["results"]
    assert results["z"][0] is None and results["z"][1:] == m.z[1:].tolist()
    assert results["max_abs_z"] == float(np.max(np.abs(m.z[1:]))) and results["runs_all_steps"] == m.all_steps
    assert results["factor"] == found.factor and results["examples"] == 2
    assert f"largest |z| after the start: {results['max_abs_z']:.2f}" in proc.stdout
    assert (out / "spread.png").stat().st_size > 0


@pytest.mark.slow  # SGD on the Markov model's 262,658 training sequences, GD and the settling flow: ~60 s
def test_markov_basins_with_sgd_against_the_closed_form(tmp_path, run_cli):
    out = tmp_path / "o"
    argv = ["--p", "0.2", "--q", "0.3", "--grid", "4", "--method", "sgd", "--lr", "0.2", "--steps", "60"]
    proc = run_cli("basins", "markov", *argv, "--seeds", "2", "--batch", "8", "--seed", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    prob, grid = Canonical(0.2, 0.3), popdyn.Grid.square("w", "e", -3.0, 3.0, 4)
    sgd = SGD(lr=0.2, steps=60, seeds=2, batch=8, seed=1)
    bp = popdyn.basin_probabilities(prob, grid, sgd, beside=GradientDescent(lr=0.2, steps=60))
    saved = np.load(out / "basins.npz")
    np.testing.assert_array_equal(saved["probabilities"], bp.probabilities)
    np.testing.assert_array_equal(saved["beside_labels"], bp.beside_labels)
    # the closed form's basin of every start (docs/models/markov.md §4.4), and the share of far starts whose
    # likeliest outcome is it
    theta = grid.points(prob)
    predicted = np.asarray(jax.vmap(prob.predicted_basin)(theta)).reshape(4, 4)
    far = np.asarray(prob.separatrix_distance(theta)).reshape(4, 4) > 0.05
    np.testing.assert_array_equal(saved["predicted"], predicted)
    names = np.array([*bp.attractors, "unresolved"])
    likely = names[np.argmax(bp.probabilities, axis=-1)]
    judged = far & (likely != "unresolved") & (predicted >= 0)
    assert judged.any()
    results = json.loads((out / "summary.json").read_text())["results"]
    expected = np.array(["global", "local", "saddle"])[np.maximum(predicted, 0)]
    assert results["agreement_with_theory"] == float(np.mean((likely == expected)[judged]))


@pytest.mark.slow  # the canonical model's spread and 200 SGD runs through the command: ~15 s
def test_the_markov_task_spread_is_the_canonical_models(tmp_path, run_cli):
    out = tmp_path / "o"
    argv = ["--p", "0.2", "--q", "0.3", "--e0", "0.8", "--w0", "-0.4", "--N", "6", "--lr", "0.05", "--steps", "8"]
    proc = run_cli("spread", "markov", *argv, "--record-every", "4", "--seeds", "200", "--batch", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    prob = Canonical(0.2, 0.3, N=6)
    theta0 = {"e": np.asarray(0.8), "w": np.asarray(-0.4)}
    found = popdyn.sgd_spread(prob, theta0, lr=0.05, batch=2, steps=8, record_every=4)
    m = popdyn.measured_spread(prob, found, runs=200, seed=0)
    saved = np.load(out / "spread.npz")
    np.testing.assert_array_equal(saved["predicted_sq_distance"], found.expected_sq_distance)
    np.testing.assert_array_equal(saved["measured_sq_distance"], m.sq_distance)
    inputs = json.loads((out / "summary.json").read_text())["inputs"]
    assert inputs["task"] == "markov" and inputs["N"] == 6 and inputs["batch"] == 2 and inputs["seeds"] == 200


@pytest.mark.parametrize(
    ("command", "argv", "message"),
    [
        ("basins", [MODEL, "--method", "gd", "--seeds", "3"], "--seeds applies only with --method sgd (here 'gd')"),
        ("basins", [MODEL, "--batch", "2"], "--batch applies only with --method sgd (here 'flow')"),
        ("basins", [MODEL, "--method", "sgd", "--t1", "5"], "--t1 applies only with --method flow (here 'sgd')"),
        ("basins", [MODEL, "--method", "sgd", "--seeds", "0"], "seeds=0 is out of range"),
        ("converge", [MODEL, "--method", "sgd", "--batch", "0"], "batch=0 is out of range"),
        ("converge", [MODEL, "--method", "sgd", "--batch", "3", "--sampling", "without-replacement"], "batch=3"),
        ("converge", [MODEL, "--method", "sgd", "--sampling", "each"], "argument --sampling: invalid choice"),
        ("converge", ["test_stepsize_sgd:no_examples", "--method", "sgd", "--n-init", "1"], "no per-example data"),
        ("sweep", [MODEL, "--vary", "v=0:1:2", "--method", "sgd"], "method='sgd' is invalid"),
        ("basins", [MODEL, "--method", "adam"], "method='adam' is invalid: must be one of 'flow', 'gd', 'sgd'"),
        ("spread", [MODEL, "--steps", "20", "--record-every", "7"], "steps=20 is invalid: must be a multiple of"),
        ("spread", [MODEL, "--seeds", "1"], "seeds=1 is out of range"),
        ("spread", [MODEL, "--batch", "3", "--sampling", "without-replacement"], "batch=3 is out of range"),
        ("spread", ["test_stepsize_sgd:no_examples"], "declares no per-example data"),
        ("spread", [MODEL, "--lr", "0"], "lr=0.0 is out of range"),
        ("spread", ["markov", "--N", "0"], "N=0 is out of range"),
        ("basins", ["markov", "--method", "gd", "--seed", "3"], "--seed applies only with --method sgd (here 'gd')"),
        ("basins", ["markov", "--method", "sgd", "--t1", "3"], "--t1 applies only with --method flow (here 'sgd')"),
        ("spread", ["markov", "--e0", "nan"], "e0=nan"),
    ],
)
def test_sgd_options_are_checked_and_refused_where_unused(tmp_path, run_cli, command, argv, message):
    out = tmp_path / "o"
    proc = run_cli(command, *argv, "--out", out)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("popdyn: error: ") and proc.stderr.count("\n") == 1 and message in proc.stderr
    assert not out.exists()
