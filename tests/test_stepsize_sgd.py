"""The step-size audit's SGD thresholds (docs/sgd.md, "In the step-size audit and on the command line"):
``step_size_audit(..., batch=B)`` and ``popdyn stepsize MODEL --batch B``.

The model is a least-squares regression through the origin on four equally weighted points, ℓ(θ, x) = ½(xθ − y)²,
where both thresholds have closed forms. Each example's Hessian is H_i = x_i², so H = m₂ = E x², and GD's threshold
is 2/m₂. Linearised SGD moves δ = θ − θ* by δ ← (1 − ηĤ_B)δ, Ĥ_B the minibatch mean of the x_i², so
E δ² ← E[(1 − ηĤ_B)²] E δ² with E Ĥ_B = m₂ and Var Ĥ_B = c_B (m₄ − m₂²), c_B = 1/B with replacement and
(n − B)/(B(n − 1)) without: the factor 1 − 2ηm₂ + η²(m₂² + c_B(m₄ − m₂²)) is ≤ 1 iff
η ≤ η*(B) = 2m₂/(m₂² + c_B(m₄ − m₂²)); η*(1) = 2m₂/m₄ with replacement [derived].
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from _docs import doc_module

import popdyn
from popdyn.analysis import hessian_matrix, sgd_threshold, step_size_audit, threshold_curve
from popdyn.analysis._stepsize import SGD_FIELDS, SGD_VERDICTS, check_sgd, run_saddle_tol
from popdyn.dynamics import gradient_descent
from popdyn.exact import WeightedTable
from popdyn.jobs._sgd_audit import sgd_curves
from popdyn.plot import plot_sgd_thresholds, plot_step_size_audit

SGD_MD = Path(__file__).resolve().parents[1] / "docs" / "sgd.md"
SECTION = "## In the step-size audit and on the command line"
X = np.array([0.5, 1.0, 1.5, 2.0])
Y = np.array([0.4, 1.1, 1.4, 2.2])
M2, M4 = np.mean(X**2), np.mean(X**4)
THETA_STAR = np.array([np.mean(X * Y) / M2])
GD_EDGE = 2 / M2


def eta_star(c_b: float) -> float:
    """η*(B) of the regression for the minibatch factor c_B (module docstring)."""
    return 2 * M2 / (M2**2 + c_b * (M4 - M2**2))


def example_loss(th, ex):
    return 0.5 * (ex["x"] * th[0] - ex["y"]) ** 2


def regression():
    """The regression as a user's model (``test_stepsize_sgd:regression``), started at θ = 0."""
    table = WeightedTable.uniform({"x": X, "y": Y})
    return popdyn.Problem.from_examples(example_loss, np.zeros(1), data=table, init_scale=0.0)


def norm_loss(th, ex):
    """ℓ(θ, x) = ½(x‖θ‖ − y)², θ ∈ R³: the regression's data through ‖θ‖, whose minima are the sphere ‖θ‖ = θ*."""
    return 0.5 * (ex["x"] * jnp.linalg.norm(th) - ex["y"]) ** 2


def sphere():
    """The regression through the norm as a user's model (``test_stepsize_sgd:sphere``), started at ‖θ‖ = 1: a valley
    of minima (the sphere) whose tangent plane the examples' Hessians act on, (x(xθ* − y)/θ*)·I there, while the
    distance to it, ‖θ‖ − θ*, moves as the regression's θ − θ*; so 2/λ_max = 2/m₂ and η*_⊥(B) = η*(B) of the
    regression, and λ_max(E_i N_i²) = E[x²(xθ* − y)²]/θ*² (docs/sgd.md, "Flat directions")."""
    table = WeightedTable.uniform({"x": X, "y": Y})
    return popdyn.Problem.from_examples(norm_loss, np.array([0.6, 0.0, 0.8]), data=table, init_scale=0.0)


def no_examples():
    """A model that declares no examples (``Problem.from_loss``)."""
    return popdyn.Problem.from_loss(lambda th: 0.5 * np.mean(X**2) * th[0] ** 2, np.zeros(1), init_scale=0.0)


def double_well(th, x):
    """ℓ(θ, x) = (θ₀² − x)²/4 + θ₁²/2: a saddle at 0 and minima at (±√E x, 0), where H_i = diag(3E x − x, 1)."""
    return (th[0] ** 2 - x["x"]) ** 2 / 4 + th[1] ** 2 / 2


def regions(threshold: float) -> np.ndarray:
    """One learning rate in each region: below η*(B), between η*(B) and 2/λ_max, above 2/λ_max."""
    return np.array([0.5 * threshold, 0.5 * (threshold + GD_EDGE), 1.2 * GD_EDGE])


RATES = regions(eta_star(1.0))


@pytest.fixture(scope="module")
def regression_run():
    """GD at the three rates: from θ = 0 at the first two; at the third from θ* itself, as GD reaches no minimum
    where η > 2/λ_max unless it starts there (then it is steady at once)."""
    prob = regression()
    starts = np.stack([np.zeros(1), np.zeros(1), THETA_STAR])
    traj = gradient_descent(prob, starts, lr=RATES, steps=200, save_params=True)
    return prob, traj


@pytest.mark.slow
def test_the_verdicts_and_thresholds_at_each_rate(regression_run):
    prob, traj = regression_run
    audit = step_size_audit(prob, traj, batch=1)
    assert traj.status_names[0] == "converged" and np.all(np.asarray(traj.status) == 0)
    assert list(audit.sgd_verdicts()) == list(SGD_VERDICTS[:3])
    assert audit.batch == 1 and audit.replace is True
    np.testing.assert_allclose(audit.sgd_threshold, 2 * M2 / M4, rtol=1e-12)
    np.testing.assert_allclose(audit.gd_threshold, GD_EDGE, rtol=1e-12)
    for i in range(3):
        end = traj.final[i]
        assert audit.sgd_threshold[i] == pytest.approx(sgd_threshold(prob, end, 1), rel=1e-12)
        lam = np.linalg.eigvalsh(np.asarray(hessian_matrix(prob, end)))[-1]
        assert audit.gd_threshold[i] == pytest.approx(2 / lam, rel=1e-12)
        row = audit.row(i)
        assert row.sgd_verdict == SGD_VERDICTS[i] and row.sgd_reason == ""
        words = audit.sgd_words(i)
        assert f"2/λ_max = {GD_EDGE:.6g}" in words and f"η*(B) = {2 * M2 / M4:.6g}" in words


def test_the_existing_fields_do_not_change(regression_run):
    """An audit with a minibatch size adds its fields to each row; every other value is the same, bit for bit."""
    prob, traj = regression_run
    plain = step_size_audit(prob, traj).summary()
    with_sgd = step_size_audit(prob, traj, batch=2, replace=False).summary()
    assert isinstance(plain, list) and isinstance(with_sgd, list)
    for before, after in zip(plain, with_sgd, strict=True):
        assert set(after) == set(before) | set(SGD_FIELDS) and not set(before) & set(SGD_FIELDS)
        assert json.dumps({k: after[k] for k in before}) == json.dumps(before)
        assert after["sgd_threshold"] == pytest.approx(eta_star((4 - 2) / (2 * 3)), rel=1e-12)


@pytest.mark.slow
def test_a_saddle_gets_not_a_minimum_and_the_batch_goes_on():
    """Of two runs, the one that ends at a saddle gets "not a minimum" and NaN thresholds; the other its own."""
    table = WeightedTable.uniform({"x": np.array([0.5, 1.5])})
    prob = popdyn.Problem.from_examples(double_well, np.zeros(2), data=table)
    starts = np.array([[0.0, 0.3], [0.5, 0.3]])  # θ₀ = 0 stays 0: the first run ends at the saddle
    traj = gradient_descent(prob, starts, lr=0.5, steps=400, save_params=True)
    assert [traj.status_names[int(s)] for s in traj.status] == ["saddle", "converged"]
    audit = step_size_audit(prob, traj, batch=1)
    row = audit.row(0)
    assert row.sgd_verdict == "not a minimum" and "saddle" in row.sgd_reason
    assert np.isnan(row.sgd_threshold) and np.isnan(row.gd_threshold)
    assert audit.sgd_words(0) == "not a minimum: the run ended with status saddle"
    # at (1, 0), H_i = diag(3 − x_i, 1) are diagonal: η*(1) = min_a 2E h_a/E h_a² = 2·2/4.25, 2/λ_max = 2/2
    end = traj.final[1]
    assert audit.sgd_threshold[1] == pytest.approx(sgd_threshold(prob, end, 1), rel=1e-12)
    assert audit.sgd_threshold[1] == pytest.approx(4 / 4.25, rel=1e-6)
    assert audit.gd_threshold[1] == pytest.approx(1.0, rel=1e-6)
    assert audit.row(1).sgd_verdict == "stable for GD and SGD(B)"


def test_the_audit_refuses_what_it_cannot_compute(regression_run):
    prob, traj = regression_run
    cases = [
        (dict(prob=no_examples(), batch=1), "batch=1 needs the problem's examples: FunctionProblem declares no"),
        (dict(prob=prob, batch=0), "batch=0"),
        (dict(prob=prob, batch=5, replace=False), "batch=5 is out of range"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            step_size_audit(traj=traj, **kwargs)
    with pytest.raises(ValueError, match=re.escape("momentum=0.5: η*(B) is the condition of plain SGD")):
        check_sgd(prob, 1, True, momentum=0.5)  # what step_size_audit checks first, as the jobs do
    with pytest.raises(ValueError, match="no SGD thresholds"):
        step_size_audit(prob, traj).sgd_verdicts()


def test_the_command_prints_both_thresholds_and_writes_them(tmp_path, run_cli):
    out = tmp_path / "o"
    expected = eta_star((4 - 2) / (2 * 3))  # B = 2 of n = 4 without replacement
    rates = [f"{r:.6f}" for r in regions(expected)]
    argv = ["--lr", *rates, "--steps", "200", "--batch", "2", "--sampling", "without-replacement"]
    proc = run_cli("stepsize", "test_stepsize_sgd:regression", *argv, "--out", out)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = lines.index("  at each end point, SGD with minibatches of B = 2 drawn without replacement "
                       "(mean-square stable for η ≤ η*(B)):")  # fmt: skip
    for line, rate, verdict in zip(lines[head + 1 : head + 3], rates[:2], SGD_VERDICTS[:2], strict=True):
        assert line.startswith(f"  η = {float(rate):<8g}") and line.endswith(verdict)
        assert f"2/λ_max = {GD_EDGE:.6g}, η*(B) = {expected:.6g}" in line
    assert lines[head + 3].endswith("not a minimum: the run ended with status diverged")  # from θ = 0 at η > 2/λ_max
    summary = json.loads((out / "summary.json").read_text())
    assert summary["inputs"]["batch"] == 2 and summary["inputs"]["sampling"] == "without-replacement"
    runs = summary["results"]["runs"]
    assert [r["sgd_verdict"] for r in runs] == [*SGD_VERDICTS[:2], "not a minimum"]
    assert runs[0]["sgd_threshold"] == pytest.approx(expected, rel=1e-12)
    assert runs[1]["gd_threshold"] == pytest.approx(GD_EDGE, rel=1e-12)
    assert runs[2]["sgd_threshold"] is None and runs[2]["replace"] is False and runs[2]["batch"] == 2


@pytest.mark.slow
def test_the_docs_example(tmp_path, monkeypatch, run_cli):
    """The commands of docs/sgd.md's section, run on its module: the first prints the lines the page shows, the
    second finds η*(2) without replacement as the page says, each η*(B) and 2/λ_max is mean_square_stability's at
    the run's end point, and summary.json holds them."""
    commands = doc_module(SGD_MD, SECTION, "lsq", tmp_path, monkeypatch)
    section = SGD_MD.read_text(encoding="utf-8").split(SECTION, 1)[1]
    shown = re.search(r"```text\n(.*?)```", section, re.S)
    assert shown is not None and len(commands) == 2
    import lsq

    prob, theta_star = lsq.regression(), np.linalg.lstsq(lsq.X, lsq.Y, rcond=None)[0]
    for k, argv in enumerate(commands):
        assert argv[:2] == ["popdyn", "stepsize"]
        proc = run_cli(*argv[1:], "--out", tmp_path / f"o{k}")
        assert proc.returncode == 0, proc.stderr
        if k == 0:
            printed, expected = proc.stdout.splitlines(), shown.group(1).splitlines()
            head = printed.index(expected[0])
            assert printed[head : head + len(expected)] == expected
        summary = json.loads((tmp_path / f"o{k}" / "summary.json").read_text())
        runs = summary["results"]["runs"]
        with np.load(tmp_path / f"o{k}" / "stepsize.npz") as arrays:
            assert list(arrays["lr"]) == [1.5, 1.9, 2.2]
        replace = summary["inputs"]["sampling"] == "with-replacement"
        batch = summary["inputs"]["batch"]
        assert [r["status"] for r in runs] == ["converged", "converged", "diverged"]
        for r in runs[:2]:
            found = popdyn.mean_square_stability(prob, theta_star, batch, replace)  # H_i do not depend on θ
            assert r["sgd_threshold"] == pytest.approx(found.thresholds[0], rel=1e-12)
            assert r["gd_threshold"] == pytest.approx(found.gd_threshold, rel=1e-12)
        if k == 1:
            assert f"{runs[0]['sgd_threshold']:.6g}" == "1.96895" and "$\\eta^*(2) = 1.96895$" in section
            assert [r["sgd_verdict"] for r in runs] == ["stable for GD and SGD(B)"] * 2 + ["not a minimum"]


def test_the_figure_shows_the_threshold_against_the_batch_size(tmp_path, run_cli):
    """``--batch B`` adds η*(B) against B at the runs' minimum to the figure and to summary.json: B = 1, 2, 4 = n
    without replacement, each η*(B) the closed form, non-decreasing, η*(n) = 2/λ_max; the diverged run has none."""
    out = tmp_path / "o"
    argv = ["--lr", *map(str, RATES), "--steps", "200", "--batch", "2", "--sampling", "without-replacement"]
    proc = run_cli("stepsize", "test_stepsize_sgd:regression", *argv, "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    (curve,) = summary["results"]["sgd_curves"]
    assert curve["runs"] == [0, 1] and curve["lr"] == list(RATES[:2]) and curve["batch"] == 2
    assert curve["replace"] is False and curve["n"] == 4 and curve["flat_curved"] is False
    assert curve["batches"] == [1, 2, 4]
    closed = [eta_star((4 - b) / (b * 3)) for b in curve["batches"]]
    np.testing.assert_allclose(curve["thresholds"], closed, rtol=1e-12)
    assert np.all(np.diff(curve["thresholds"]) >= 0)
    assert curve["thresholds"][-1] == pytest.approx(curve["gd_threshold"], rel=1e-10)
    assert curve["gd_threshold"] == pytest.approx(GD_EDGE, rel=1e-12)
    assert curve["thresholds"][1] == summary["results"]["runs"][0]["sgd_threshold"]  # the audit's η*(B), bit for bit
    values = ", ".join(f"{b}: {t:.6g}" for b, t in zip(curve["batches"], curve["thresholds"], strict=True))
    assert f"  η*(B) at the end point of η = {RATES[0]:g}, {RATES[1]:g} (2/λ_max = {GD_EDGE:.6g}): B = {values}" in (
        proc.stdout.splitlines()
    )
    png = (out / "stepsize.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_without_a_batch_the_job_writes_what_it_wrote_before(tmp_path, run_cli):
    out = tmp_path / "o"
    proc = run_cli("stepsize", "test_stepsize_sgd:regression", "--lr", "0.5", "--steps", "50", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads((out / "summary.json").read_text())["results"]) == {"runs", "lambda_max_at_start"}
    assert "η*(B)" not in proc.stdout


def test_the_curve_with_replacement_approaches_gd():
    """With replacement the curve runs from B = 1 to the first power of two ≥ max(64, 16 B), the chosen B included:
    η*(B) = 2m₂/(m₂² + (m₄ − m₂²)/B) at each, rising towards 2/λ_max."""
    prob = regression()
    curve = threshold_curve(prob, THETA_STAR, 6, lrs=[0.5, 1.0])
    assert curve.batches.tolist() == [1, 2, 4, 6, 8, 16, 32, 64, 128]
    np.testing.assert_allclose(curve.thresholds, [eta_star(1 / b) for b in curve.batches], rtol=1e-12)
    assert np.all(np.diff(curve.thresholds) > 0) and curve.thresholds[-1] < curve.gd_threshold
    assert curve.threshold == pytest.approx(eta_star(1 / 6), rel=1e-12) and curve.replace is True
    assert curve.runs == () and curve.lrs.tolist() == [0.5, 1.0]
    fig = plot_sgd_thresholds([curve])
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_ylim()[1] >= curve.gd_threshold
    with pytest.raises(ValueError, match="batch=5 is out of range"):
        threshold_curve(prob, THETA_STAR, 5, replace=False)
    with pytest.raises(ValueError, match="must share the chosen B"):
        plot_sgd_thresholds([curve, threshold_curve(prob, THETA_STAR, 2)])


def tilted_well(th, x):
    """ℓ(θ, x) = (θ₀² − x)²/4 + θ₀/10 + θ₁²/2: two minima of different curvature, near θ₀ = ±1."""
    return (th[0] ** 2 - x["x"]) ** 2 / 4 + th[0] / 10 + th[1] ** 2 / 2


@pytest.mark.slow
def test_one_curve_per_distinct_minimum():
    """Runs that end at two minima of different curvature get one curve each; two runs at one minimum share one,
    and each curve's η*(B) at B is the audit's at its runs' end points."""
    table = WeightedTable.uniform({"x": np.array([0.5, 1.5])})
    prob = popdyn.Problem.from_examples(tilted_well, np.zeros(2), data=table)
    starts = np.array([[0.5, 0.3], [-0.5, 0.3], [0.8, -0.2]])
    traj = gradient_descent(prob, starts, lr=np.array([0.5, 0.5, 0.3]), steps=600, save_params=True)
    audit = step_size_audit(prob, traj, batch=1)
    assert list(audit.sgd_verdicts()) == ["stable for GD and SGD(B)"] * 3
    ends = [np.asarray(traj.final)[i] for i in range(3)]
    curves = sgd_curves(prob, ends, audit.rows(), 1, True, run_saddle_tol(traj))
    assert [c.runs for c in curves] == [(0, 2), (1,)]
    assert [c.lrs.tolist() for c in curves] == [[0.5, 0.3], [0.5]]
    assert curves[0].gd_threshold != pytest.approx(curves[1].gd_threshold, rel=1e-3)
    for curve in curves:
        assert curve.threshold == audit.sgd_threshold[curve.runs[0]]
        assert np.all(np.diff(curve.thresholds) >= 0) and np.all(curve.thresholds <= curve.gd_threshold)
    fig = plot_step_size_audit([audit.run(i) for i in range(3)], list(np.asarray(traj.loss)), ["a", "b", "c"], curves)
    assert len(fig.axes) == 3


def test_the_docs_curve_and_figures(tmp_path, monkeypatch):
    """docs/sgd.md's "η*(B) against the batch size": its Python block, run on the page's module, gives the curve the
    page states (the closed form), and each figure it shows is a PNG of at most 150 kB that docs/img/make_figures.py
    makes with the command its caption names."""
    doc_module(SGD_MD, SECTION, "lsq", tmp_path, monkeypatch)
    text = SGD_MD.read_text(encoding="utf-8")
    part = text.split("### η*(B) against the batch size", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", part, re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code.group(1), str(SGD_MD), "exec"), namespace)
    curve = namespace["curve"]
    assert curve.batches.tolist() == [1, 2, 4] and (tmp_path / "eta_star.png").is_file()
    np.testing.assert_allclose(curve.thresholds, [1.77763, 1.96895, 2.05023], rtol=5e-6)
    assert curve.thresholds[-1] == pytest.approx(curve.gd_threshold, rel=1e-10)
    spec = importlib.util.spec_from_file_location("sgd_figures", SGD_MD.parent / "img" / "make_figures.py")
    assert spec is not None and spec.loader is not None
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    for name, make in figures.FIGURES.items():
        png = SGD_MD.parent / "img" / f"sgd_{name}.png"
        assert f"](img/sgd_{name}.png)" in part and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(png.read_bytes()) <= 150_000
        caption = part.split(f"](img/sgd_{name}.png)", 1)[1].split("\n\n")[1]
        assert f"`{make.__doc__}`" in caption and f"make_figures.py {name}`" in caption


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["test_stepsize_sgd:regression", "--batch", "0"], "batch=0"),
        (["test_stepsize_sgd:regression", "--batch", "5", "--sampling", "without-replacement"], "batch=5"),
        (["test_stepsize_sgd:regression", "--sampling", "without-replacement"], "give --batch B too"),
        (["test_stepsize_sgd:regression", "--batch", "1", "--momentum", "0.5"], "momentum=0.5"),
        (["test_stepsize_sgd:no_examples", "--batch", "1"], "FunctionProblem declares no per-example data"),
    ],
)
def test_the_command_refuses_in_one_line(tmp_path, run_cli, argv, message):
    out = tmp_path / "o"
    proc = run_cli("stepsize", *argv, "--out", out)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("popdyn: error: ") and proc.stderr.count("\n") == 1 and message in proc.stderr
    assert not out.exists()


@pytest.mark.slow  # the Markov model's 262,658 examples (sequences of 512 by their transition counts)
def test_the_markov_task_takes_the_option(tmp_path, run_cli):
    """``popdyn stepsize markov --batch B`` on the Markov model's examples: GD ends on the valley of minima Γ*, a
    flat direction of H on which the examples' Hessians act, so η*(B) = 0 (docs/sgd.md, "Flat directions"), and the
    run's η is set against the threshold across the valley η*_⊥(B) < 2/λ_max; 2/λ_max is the audit's own λ_max at
    the end point."""
    out = tmp_path / "o"
    with pytest.warns(UserWarning, match="act on the 1 flat direction"):
        proc = run_cli("stepsize", "markov", "--lr", "0.5", "--batch", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "summary.json").read_text())["results"]["runs"][0]
    assert run["status"] == "converged" and run["sgd_threshold"] == 0.0 and run["batch"] == 2 and run["replace"]
    assert run["gd_threshold"] == pytest.approx(2 / run["lambda_end"], rel=1e-9)
    assert run["valley"] and 0.5 < run["transverse_threshold"] < run["gd_threshold"]
    assert run["valley_growth"] > 0 and run["sgd_verdict"] == SGD_VERDICTS[5]
    line = (
        f"  η = 0.5      2/λ_max = {run['gd_threshold']:.6g}, η*(B) = 0, η*_⊥(B) = {run['transverse_threshold']:.6g} "
        f"across the valley at the end point: {run['sgd_verdict']}"
    )
    assert line in proc.stdout.splitlines()
    (curve,) = json.loads((out / "summary.json").read_text())["results"]["sgd_curves"]
    assert curve["flat_curved"] is True and curve["batches"] == [1, 2, 4, 8, 16, 32, 64]
    assert curve["thresholds"] == [0.0] * 7 and curve["gd_threshold"] == run["gd_threshold"]
    across = curve["transverse_thresholds"]
    assert across[1] == run["transverse_threshold"] and np.all(np.diff(across) >= 0)
    assert across[-1] < run["gd_threshold"]
    # the numbers of docs/sgd.md's Markov figure, whose first run is this one
    assert run["gd_threshold"] == pytest.approx(1.13726, rel=5e-6)
    np.testing.assert_allclose(across[:2], [1.13364, 1.13545], rtol=5e-6)


@pytest.mark.slow
def test_a_valley_of_minima_gets_the_threshold_across_it(tmp_path, run_cli):
    """``popdyn stepsize test_stepsize_sgd:sphere --batch 1``: each run that converges ends on the sphere of minima,
    where η*(B) = 0 (the examples' Hessians act on its tangent plane) and the threshold across it is the
    regression's η*(1) = 2m₂/m₄ (1e-12): below it "stable for GD and, across the valley, for SGD(B)", between it and
    2/λ_max "stable for GD, unstable across the valley"; the line shows η*_⊥(B), and summary.json the new keys, with
    the per-step growth along the valley η²p·E[x²(xθ* − y)²]/θ*² and no gradient noise along it."""
    out = tmp_path / "o"
    argv = ["--lr", *[f"{r:.6f}" for r in RATES], "--steps", "200", "--batch", "1", "--out", out]
    with pytest.warns(UserWarning, match="act on the 2 flat direction"):
        proc = run_cli("stepsize", "test_stepsize_sgd:sphere", *argv)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((out / "summary.json").read_text())["results"]["runs"]
    assert [r["sgd_verdict"] for r in runs] == [*SGD_VERDICTS[5:7], "not a minimum"]
    assert [r["valley"] for r in runs] == [True, True, False] and runs[2]["transverse_threshold"] is None
    lines = proc.stdout.splitlines()
    valley = np.mean(X**2 * (X * THETA_STAR[0] - Y) ** 2) / THETA_STAR[0] ** 2
    for r in runs[:2]:
        assert r["sgd_threshold"] == 0.0 and r["sgd_reason"] == "" and r["status"] == "converged"
        assert r["transverse_threshold"] == pytest.approx(eta_star(1.0), rel=1e-12)
        assert r["gd_threshold"] == pytest.approx(GD_EDGE, rel=1e-12)
        assert r["valley_growth"] == pytest.approx(r["lr"] ** 2 * valley, rel=1e-10)
        assert 0 <= r["valley_diffusion"] <= 1e-12 * r["lr"] ** 2 * np.mean((X * (X * THETA_STAR[0] - Y)) ** 2)
        line = (
            f"  η = {r['lr']:<8g} 2/λ_max = {GD_EDGE:.6g}, η*(B) = 0, η*_⊥(B) = {eta_star(1.0):.6g} across the "
            f"valley at the end point: {r['sgd_verdict']}"
        )
        assert line in lines
    assert any(text.endswith("(mean-square stable for η ≤ η*(B); on a valley of minima, across it for η ≤ η*_⊥(B)):")
               for text in lines)  # fmt: skip
    # the figure's curve is η*_⊥(B) across the valley (η*(B) = 0 at every B), for both runs at the one sphere
    (curve,) = json.loads((out / "summary.json").read_text())["results"]["sgd_curves"]
    assert curve["runs"] == [0, 1] and curve["flat_curved"] is True and curve["thresholds"] == [0.0] * 7
    across = curve["transverse_thresholds"]
    np.testing.assert_allclose(across, [eta_star(1 / b) for b in curve["batches"]], rtol=1e-10)
    assert np.all(np.diff(across) > 0) and across[-1] < GD_EDGE
    values = ", ".join(f"{b}: {t:.6g}" for b, t in zip(curve["batches"], across, strict=True))
    assert any(text.endswith(f"η*_⊥(B) across the valley at the end point of η = {runs[0]['lr']:g}, {runs[1]['lr']:g} "
                             f"(2/λ_max = {GD_EDGE:.6g}): B = {values}") for text in lines)  # fmt: skip


@pytest.mark.slow
def test_the_markov_task_reports_its_valley(tmp_path, monkeypatch, run_cli):
    """``popdyn stepsize markov --batch 1`` on the canonical model with sequences of N = 8 tokens (74 examples
    instead of the default's 262,658): both runs end on Γ*, at η = 0.5 below η*_⊥(1) and at η = 1.0 between η*_⊥(1)
    and 2/λ_max, each with the verdict, the line and the summary keys of a valley; η*_⊥(B), the growth and the
    diffusion along the valley are ``mean_square_stability``'s at the run's end point (1e-12), and the diffusion
    vanishes: every example's loss is a function of the gap A = c(w)e², so its gradient is across Γ*."""
    from popdyn.jobs.markov import _commands
    from popdyn.tasks.markov import Canonical

    monkeypatch.setattr(_commands, "Canonical", lambda p, q: Canonical(p, q, N=8))
    out = tmp_path / "o"
    with pytest.warns(UserWarning, match="act on the 1 flat direction"):
        proc = run_cli("stepsize", "markov", "--lr", "0.5", "1.0", "--batch", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((out / "summary.json").read_text())["results"]["runs"]
    assert [r["sgd_verdict"] for r in runs] == list(SGD_VERDICTS[5:7])
    prob, lines = Canonical(0.1, 0.1, N=8), proc.stdout.splitlines()
    for r in runs:
        end = gradient_descent(
            prob, {"e": jnp.asarray(1.0), "w": jnp.asarray(0.5)}, lr=r["lr"], steps=400, save_params=True
        ).final
        with pytest.warns(UserWarning, match="act on the 1 flat direction"):
            found = popdyn.mean_square_stability(prob, end, 1)
        assert r["valley"] and r["sgd_threshold"] == 0.0 and r["status"] == "converged"
        assert r["transverse_threshold"] == pytest.approx(found.transverse_thresholds[0], rel=1e-12)
        assert r["gd_threshold"] == pytest.approx(found.gd_threshold, rel=1e-12)
        assert r["valley_growth"] == pytest.approx(r["lr"] ** 2 * found.valley_curvature, rel=1e-12)
        assert r["valley_diffusion"] <= 1e-12 * r["lr"] ** 2 * popdyn.gradient_noise(prob, end).trace
        assert f"η*_⊥(B) = {r['transverse_threshold']:.6g} across the valley at the end point: " in "\n".join(lines)
