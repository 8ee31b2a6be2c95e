"""The ``popdyn`` command line (run as a real subprocess), API input validation, and atomic result writing."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np
import pytest

import popdyn
from popdyn.io import write_results
from popdyn.jobs.markov import _commands as commands
from popdyn.tasks.markov import Canonical

REPO = Path(__file__).resolve().parents[1]

BAD = {  # name: (argv, text naming the parameter in the error line)
    "p": (["basins", "markov", "--p", "1.5"], "p=1.5"),
    "q": (["basins", "markov", "--q", "0"], "q=0"),
    "grid": (["basins", "markov", "--grid", "1"], "grid"),
    "range": (["basins", "markov", "--range", "3", "-3"], "range"),
    "task": (["basins", "teacherz"], "teacherz"),
    "sweep-without-vary": (["sweep", "decision-list"], "vary is missing"),
    "lr": (["stepsize", "markov", "--lr", "-1"], "lr"),
    "eps": (["converge", "markov", "--eps", "0"], "eps"),
}
IN_PROCESS = {k for k in BAD if k not in ("p", "task")}  # as a subprocess: two; the rest through cli.main (fast)
GOOD = {
    "basins": ["basins", "markov", "--grid", "8", "--quiet"],
    "converge": ["converge", "markov", "--n-init", "2", "--quiet"],
    "stepsize": ["stepsize", "markov", "--steps", "20", "--quiet"],
    "flat": [
        "basins",
        "markov",
        "--p",
        "0.5",
        "--q",
        "0.5",
        "--grid",
        "4",
        "--method",
        "gd",
        "--steps",
        "10",
        "--quiet",
    ],
}


def _run(argv, base: Path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = base / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "popdyn._cli", *argv, "--out", str(out)],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, out


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """Every CLI invocation of this module, run concurrently (each is a fresh interpreter)."""
    jobs = {("bad", k): argv for k, (argv, _) in BAD.items() if k not in IN_PROCESS}
    jobs |= {("good", k): argv for k, argv in GOOD.items()}
    bases = {key: tmp_path_factory.mktemp(f"cli-{key[0]}-{key[1]}") for key in jobs}
    with ThreadPoolExecutor(max_workers=3) as pool:
        # the slow successful runs first
        order = sorted(jobs, key=lambda k: k[0] != "good")
        futures = {key: pool.submit(_run, jobs[key], bases[key]) for key in order}
        results = {key: f.result() for key, f in futures.items()}
    return {key: (proc, out, bases[key]) for key, (proc, out) in results.items()}


# ---- bad input: one line, exit 2, nothing written -------------------------------------------------
@pytest.mark.parametrize("name", sorted(IN_PROCESS))
def test_bad_input_is_a_one_line_error_in_process(tmp_path, run_cli, name):
    """The same contract through ``cli.main`` (what the console script calls), without a new interpreter."""
    argv, names = BAD[name]
    proc = run_cli(*argv, "--out", tmp_path / "out")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("popdyn: error:") and names in lines[0], proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # neither the output nor a temporary folder


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(BAD) - IN_PROCESS))
def test_bad_input_is_a_one_line_error(cli, name):
    proc, out, base = cli[("bad", name)]
    names = BAD[name][1]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("popdyn: error:"), lines[0]
    assert names in lines[0], lines[0]
    assert proc.stdout == ""
    assert not out.exists()
    assert list(base.iterdir()) == []  # no temporary folder left behind either


@pytest.mark.slow
def test_p_plus_q_equal_one_is_allowed_with_a_warning(cli):
    proc, out, base = cli[("good", "flat")]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("popdyn: warning:") and "flat" in lines[0]
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert sum(summary["results"]["fractions"].values()) == pytest.approx(1.0, abs=1e-12)
    assert summary["results"]["agreement_with_theory"] is None  # docs/models/markov.md §4.4: no closed form at p+q = 1


# ---- successful runs ------------------------------------------------------------------------------
def _check_ok(proc, out, base, files):
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "popdyn: error" not in proc.stderr
    assert proc.stdout == ""  # --quiet
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    assert [p.name for p in base.iterdir()] == ["out"]  # the temporary folder is gone
    for f in files:
        if f.endswith(".png"):
            assert (out / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    for key in ("inputs", "results", "versions", "devices", "dtype", "wall_time_s"):
        assert key in summary, key
    for pkg in ("jax", "diffrax", "equinox", "optax"):
        assert isinstance(summary["versions"][pkg], str) and summary["versions"][pkg]
    assert summary["versions"]["jax"] == jax.__version__
    assert isinstance(summary["devices"], list) and summary["devices"]
    assert summary["dtype"] == "float64"
    assert isinstance(summary["wall_time_s"], float) and summary["wall_time_s"] > 0
    return summary


@pytest.mark.slow
def test_basins_command_writes_results(cli):
    proc, out, base = cli[("good", "basins")]
    summary = _check_ok(proc, out, base, ["summary.json", "basins.npz", "basins.png"])
    assert summary["command"] == "basins"
    assert summary["inputs"]["grid"] == 8 and summary["inputs"]["p"] == 0.1 and summary["inputs"]["q"] == 0.1
    assert summary["inputs"]["range"] == [-3.0, 3.0]
    fr = summary["results"]["fractions"]
    assert set(fr) == {"global", "local", "saddle", "unresolved"}
    assert sum(fr.values()) == pytest.approx(1.0, abs=1e-12)
    with np.load(out / "basins.npz") as z:
        labels, w, e = z["labels"], z["w"], z["e"]
    assert labels.shape == (8, 8)
    np.testing.assert_allclose(w, np.linspace(-3.0, 3.0, 8))
    np.testing.assert_allclose(e, np.linspace(-3.0, 3.0, 8))
    # rows are e, columns are w: compare with the closed-form basins at (e_j, w_i)
    prob = Canonical(0.1, 0.1)
    W, E = np.meshgrid(w, e)
    theta = {"e": E.ravel(), "w": W.ravel()}
    pred = np.asarray(jax.vmap(prob.predicted_basin)(theta)).reshape(8, 8)
    far = np.asarray(prob.separatrix_distance(theta)).reshape(8, 8) > 0.05
    np.testing.assert_array_equal(labels[far], pred[far])
    assert not np.array_equal(pred[far], pred.T[far])  # the orientation check can tell rows from columns
    for name, f in fr.items():
        k = ("global", "local", "saddle").index(name) if name != "unresolved" else -1
        assert f == pytest.approx(np.mean(labels == k) if k >= 0 else np.mean(labels < 0), abs=1e-15)


@pytest.mark.slow
def test_converge_command_writes_results(cli):
    proc, out, base = cli[("good", "converge")]
    summary = _check_ok(proc, out, base, ["summary.json", "convergence.npz", "convergence.png"])
    assert summary["inputs"]["n_init"] == 2
    assert len(summary["results"]["rows"]) == 2
    with np.load(out / "convergence.npz") as z:
        assert z["dist"].shape[0] == 2 and z["ts"].shape == z["dist"].shape
        assert z["rate_predicted"].shape == (2,)


@pytest.mark.slow
def test_same_inputs_and_seed_give_bit_identical_arrays(cli, tmp_path, run_cli):
    """Results you can trust: rerunning ``converge markov`` (random initialisations drawn from --seed) in this
    process gives arrays bit for bit equal to the console script's run in its own process, and the same results."""
    proc, out, base = cli[("good", "converge")]
    again = tmp_path / "again"
    assert run_cli(*GOOD["converge"], "--out", again).returncode == 0
    with np.load(out / "convergence.npz") as a, np.load(again / "convergence.npz") as b:
        assert a.files == b.files
        for name in a.files:
            assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes(), name
    first, second = (json.loads((d / "summary.json").read_text()) for d in (out, again))
    assert first["inputs"] == second["inputs"] and first["results"] == second["results"]


@pytest.mark.slow
def test_stepsize_command_writes_results(cli):
    proc, out, base = cli[("good", "stepsize")]
    summary = _check_ok(proc, out, base, ["summary.json", "stepsize.npz", "stepsize.png"])
    assert summary["inputs"]["steps"] == 20 and summary["inputs"]["lr"] == [0.5, 2.0, 3.0]
    runs = summary["results"]["runs"]
    assert [r["lr"] for r in runs] == [0.5, 2.0, 3.0]
    assert [r["past_stability_edge"] for r in runs][0] is False and runs[-1]["past_stability_edge"] is True
    with np.load(out / "stepsize.npz") as z:
        assert z["lambda_max"].shape == (3, 21) and z["loss"].shape == (3, 21)
        np.testing.assert_array_equal(z["lr"], [0.5, 2.0, 3.0])


# ---- the API raises ValueError for the same bad values -----------------------------------------------
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: Canonical(p=1.5, q=0.1), "p="),
        (lambda: Canonical(p=0.1, q=0.0), "q="),
        (lambda: Canonical(p=0.0, q=0.5), "p="),
        (lambda: Canonical(p=0.1, q=1.0), "q="),
        (lambda: popdyn.Grid.square("w", "e", -3.0, 3.0, 1), "grid"),
        (lambda: popdyn.Grid.square("w", "e", 3.0, -3.0, 8), "range"),
        (lambda: commands.basins_markov(0.1, 0.1, n=1), "grid"),
        (lambda: commands.basins_markov(0.1, 0.1, n=8, lo=3.0, hi=-3.0), "range"),
        (lambda: commands.basins_markov(1.5, 0.1, n=8), "p="),
        (lambda: commands.stepsize_markov(0.1, 0.1, lrs=(-1.0,)), "lr"),
        (lambda: commands.converge_markov(0.1, 0.1, eps=0.0), "eps"),
        (lambda: popdyn.gradient_descent(Canonical(0.1, 0.1), {"e": 1.0, "w": 0.5}, lr=-1.0), "lr"),
    ],
)
def test_api_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_api_allows_p_plus_q_equal_one_with_a_warning():
    with pytest.warns(UserWarning, match="flat"):
        prob = Canonical(0.5, 0.5)
    assert prob.optimal_gap() == 0.0


# ---- write_results is atomic --------------------------------------------------------------------
class _BrokenFigure:
    def get_layout_engine(self):
        return None

    def savefig(self, *args, **kwargs):
        raise RuntimeError("disk full")


class _TinyFigure:
    def get_layout_engine(self):
        return None

    def savefig(self, path, **kwargs):
        Path(path).write_bytes(b"png")


def test_write_results_leaves_nothing_when_a_figure_fails(tmp_path):
    out = tmp_path / "res"
    with pytest.raises(RuntimeError, match="disk full"):
        write_results(out, {"a": 1}, {"arr": {"x": np.arange(3)}}, {"good": _TinyFigure(), "bad": _BrokenFigure()})
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_write_results_writes_everything(tmp_path):
    out = tmp_path / "nested" / "res"
    written = write_results(
        out,
        {"a": np.float64(1.5), "n": np.int64(3), "bad": float("nan"), "arr": np.array([1.0, np.inf])},
        {"arr": {"x": np.arange(3)}},
        {"fig": _TinyFigure()},
    )
    assert sorted(p.name for p in written) == ["arr.npz", "fig.png", "summary.json"]
    assert sorted(p.name for p in out.iterdir()) == ["arr.npz", "fig.png", "summary.json"]
    assert [p.name for p in out.parent.iterdir()] == ["res"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == {"a": 1.5, "n": 3, "bad": None, "arr": [1.0, None]}
    with np.load(out / "arr.npz") as z:
        np.testing.assert_array_equal(z["x"], np.arange(3))


@pytest.mark.slow
def test_basins_summary_counts_statuses_and_judges_theory_on_resolved_points_only(run_cli, tmp_path):
    """A GD map stopped long before every point has converged: the unresolved share is reported as such, the status
    counts are printed, and the agreement with §4.4 is over resolved points (it used to read 0.15, as if the theory
    disagreed, because 85% of the points had simply not arrived)."""
    out = tmp_path / "gd"
    proc = run_cli(
        "basins",
        "markov",
        "--p",
        0.9,
        "--q",
        0.9,
        "--grid",
        16,
        "--method",
        "gd",
        "--lr",
        0.01,
        "--steps",
        500,
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "summary.json").read_text())["results"]
    assert res["fractions"]["unresolved"] > 0.3
    assert res["resolved_fraction"] == pytest.approx(1 - res["fractions"]["unresolved"])
    assert res["agreement_with_theory"] >= 0.99
    assert "resolved points" in res["agreement_over"]
    assert "status: " in proc.stdout and "max_steps" in proc.stdout
