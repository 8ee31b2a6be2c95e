"""The job layer (docs/jobs.md): every (command, task) job declares its options once in the registry, the CLI
is generated from it (per-task --help, an option a job does not use refused), a user's own model runs through
all four commands from a module path, and sweeps over data parameters compile once and match closed forms."""

import ast
import inspect
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from _docs import doc_module

import popdyn
from popdyn.jobs import _registry as registry
from popdyn.jobs._registry import COMMANDS, DECLARED, JOBS, MODEL, REGISTRY, TASKS, Job, Option, lookup, registered

README = Path(__file__).resolve().parents[1] / "README.md"

ALL_FLAGS = sorted({o.flag for j in JOBS for o in j.options})


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j.command}-{j.task}")
def test_every_option_is_a_parameter_of_its_job_and_every_parameter_an_option(job):
    assert job.declared_params() == job.signature_params()
    flags = [o.flag for o in job.options]
    assert len(flags) == len(set(flags))


def _function_default(job: Job, name: str):
    """The default of keyword ``name`` of the function that takes it: ``job``'s, or, for an option that ``job``
    forwards, its ``forwards_to`` job's."""
    params = inspect.signature(job.function()).parameters
    if name not in params:
        assert job.forwards_to is not None, name
        return _function_default(lookup(job.forwards_to, job.task), name)
    return params[name].default


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j.command}-{j.task}")
def test_a_job_functions_defaults_are_its_options_defaults(job):
    """What ``inspect.signature`` shows, and so what a Python call without the keyword gets, is the registry's."""
    defaults = job.defaults()
    assert set(defaults) == {p for o in job.options for p in o.params}
    for name, value in defaults.items():
        got = _function_default(job, name)
        assert got == value and type(got) is type(value), (name, got, value)


@pytest.mark.parametrize("target", sorted({j.target for j in JOBS}))
def test_no_job_function_restates_an_option_default(target):
    """In the source, every option parameter of a job function has the default ``DECLARED``, and the function is
    ``registered``."""
    fn = next(j for j in JOBS if j.target == target).function()
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    assert isinstance(node, ast.FunctionDef)
    assert [ast.unparse(d) for d in node.decorator_list] == ["registered"]
    args = node.args
    positional = args.posonlyargs + args.args
    written = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults) :], args.defaults, strict=True))
    written |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None}
    options = {p for j in JOBS if j.target == target for p in j.defaults()}
    taken = options & {a.arg for a in positional + args.kwonlyargs}
    assert taken
    for name in taken:
        assert name in written and ast.unparse(written[name]) == "DECLARED", (name, ast.unparse(written.get(name)))


def test_registered_gives_a_function_its_options_defaults(monkeypatch):
    def probe(a, b=DECLARED, *, c: str = DECLARED, progress=True):
        return a, b, c, progress

    target = f"{probe.__module__}:probe"
    job = Job("basins", "probe", target, "", (Option("--b", int, 3), Option("--c", str, "x")))
    monkeypatch.setattr(registry, "JOBS", (*registry.JOBS, job))
    assert registered(probe) is probe
    assert str(inspect.signature(probe)) == "(a, b=3, *, c: str = 'x', progress=True)"
    assert probe(1) == (1, 3, "x", True) and probe(1, 4, c="y", progress=False) == (1, 4, "y", False)

    def probe(a, b=3, *, c=DECLARED):  # restates --b's default
        return a

    with pytest.raises(TypeError, match="default of b is 3, but an Option declares it: write DECLARED"):
        registered(probe)

    def probe(a, *, c=DECLARED):  # b is an option but not given DECLARED: fine only where b is not a parameter
        return a, c

    assert registered(probe)(0) == (0, "x")

    def probe(a, b=DECLARED, *, c=DECLARED, d=DECLARED):
        return a

    with pytest.raises(TypeError, match="default of d is DECLARED, but no Option declares it"):
        registered(probe)
    other = Job("converge", "probe", target, "", (Option("--b", int, 4),))
    monkeypatch.setattr(registry, "JOBS", (*registry.JOBS, other))
    with pytest.raises(TypeError, match="declare two defaults of b: 3 and 4"):
        registered(probe)

    def unknown(a=DECLARED):
        return a

    with pytest.raises(TypeError, match="the function of no job"):
        registered(unknown)


def test_the_task_sweeps_and_the_tasks_are_read_off_the_declarations():
    swept = {j.task for j in JOBS if j.sweep}
    assert swept == {"decision-list", "scan-snap", "scb", "teacher"}
    forwarding = {t: j for (c, t), j in REGISTRY.items() if c == "sweep" and j.forwards_to is not None}
    assert set(forwarding) == swept
    assert {t for c, t in REGISTRY if c == "sweep"} == swept | {"markov", MODEL}
    for task, sweep in forwarding.items():
        basins = REGISTRY[("basins", task)]
        assert sweep.forwards_to == "basins" and sweep.fixed == {"task": task} and sweep.target.endswith(":sweep_task")
        assert sweep.options[0].flag == "--vary" and sweep.options[1:] == basins.options
    assert TASKS == tuple(dict.fromkeys(j.task for j in JOBS if j.task != MODEL))
    assert TASKS == ("markov", "decision-list", "scan-snap", "scb", "teacher")
    with pytest.raises(ValueError, match="only a basins job is swept"):
        Job("converge", "markov", "popdyn.jobs.markov._commands:converge_markov", "", (), sweep=True)


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j.command}-{j.task}")
def test_help_lists_the_jobs_own_options_only(job, run_cli):
    code, out, _ = run_cli(job.command, job.task, "--help")
    assert code == 0
    listed = set(re.findall(r"^\s+(--[A-Za-z][\w-]*)", out, flags=re.M))
    assert listed == {o.flag for o in job.options} | {"--out", "--quiet", "--replace"} | (
        {"--checkpoint", "--coordinator", "--num-processes", "--process-id"} if job.takes_checkpoint else set()
    )
    for o in job.options:
        entry = re.search(rf"^\s+{re.escape(o.flag)}(?=[\s,])(.*?)(?=^\s+-|\Z)", out, flags=re.M | re.S).group(1)
        assert o.help in " ".join(entry.split())
        if o.default not in (None, ()):  # an empty list of values has no default to show
            assert "default" in entry


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j.command}-{j.task}")
def test_an_option_the_job_does_not_use_is_refused(job, run_cli, tmp_path):
    own = {o.flag for o in job.options}
    foreign = next(f for f in ALL_FLAGS if f not in own)
    code, out, err = run_cli(job.command, job.task, foreign, "1", "--out", str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and foreign in err
    assert not (tmp_path / "o").exists()


def test_a_method_specific_option_with_the_other_method_is_refused(run_cli, tmp_path):
    code, _, err = run_cli("basins", "markov", "--lr", "0.1", "--grid", "4", "--out", str(tmp_path / "o"))
    assert code == 2 and "--lr applies only with --method gd" in err
    code, _, err = run_cli("basins", "markov", "--method", "gd", "--t1", "5", "--out", str(tmp_path / "o"))
    assert code == 2 and "--t1 applies only with --method flow" in err


def test_every_command_has_markov_and_the_user_model():
    for command in COMMANDS:
        assert (command, "markov") in REGISTRY and (command, MODEL) in REGISTRY


def _readme_model(tmp_path, monkeypatch):
    """The README's model file, importable from tmp_path, and its commands."""
    return doc_module(README, "## Your own model on the command line", "double_well", tmp_path, monkeypatch)


@pytest.mark.slow
def test_the_console_script_finds_a_model_in_the_current_folder(tmp_path, monkeypatch):
    """``popdyn stepsize double_well:double_well`` from the folder that holds double_well.py, with nothing on
    PYTHONPATH: the console script, unlike ``python -m``, does not put the current folder on sys.path."""
    _readme_model(tmp_path, monkeypatch)
    script = Path(sys.executable).with_name("popdyn")
    if not script.exists():
        pytest.skip("the popdyn console script is not installed next to this interpreter")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [script, "stepsize", "double_well:double_well", "--steps", "5", "--out", "o", "--quiet"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["command"] == "stepsize"


@pytest.mark.slow
def test_the_readme_user_model_runs_through_all_four_commands(tmp_path, monkeypatch, run_cli):
    commands = _readme_model(tmp_path, monkeypatch)
    assert [c[1] for c in commands] == ["basins", "converge", "stepsize", "sweep"]
    import double_well

    for argv in commands:
        out = tmp_path / argv[1]
        code, _, err = run_cli(*argv[1:], "--out", str(out), "--quiet")
        assert code == 0, err
        summary = json.loads((out / "summary.json").read_text())
        assert summary["command"] == argv[1] and summary["inputs"]["task"] == "double_well:double_well"
        assert (out / f"{argv[1]}.png").read_bytes()[:4] == b"\x89PNG"
        assert (out / f"{argv[1]}.npz").is_file()
        results = summary["results"]
        if argv[1] == "basins":  # symmetric wells at x = ±√2, the boundary x = 0 between grid columns: half each
            assert results["fractions"]["right"] == results["fractions"]["left"] == 0.5
        elif argv[1] == "converge":
            assert results["reached"] == 8
        elif argv[1] == "stepsize":  # λ_max at the end (the right well, L'' = 3x² − c = 2): 1/η = 10 held
            assert results["runs"][0]["verdict"] == "held" and results["runs"][1]["verdict"] == "diverged"
        else:  # the basins of the x-flow split at the middle root of x³ − x + tilt = 0
            inits = jax.vmap(double_well.double_well().init)(jax.random.split(jax.random.PRNGKey(0), 64))
            x0 = np.asarray(inits["x"])
            for point in results["points"]:
                tilt = point["values"]["tilt"]
                roots = np.sort(np.roots([1.0, 0.0, -1.0, tilt]).real)
                assert point["fractions"]["right"] == pytest.approx(np.mean(x0 > roots[1]))


def test_a_factory_that_is_not_a_problem_or_takes_other_keywords_is_refused(tmp_path, monkeypatch, run_cli):
    _readme_model(tmp_path, monkeypatch)
    code, _, err = run_cli("basins", "double_well:loss", "--grid", "4", "--out", str(tmp_path / "o"))
    assert code == 2 and "double_well:loss" in err
    code, _, err = run_cli("basins", "double_well:double_well", "--param", "width=3", "--out", str(tmp_path / "o"))
    assert code == 2 and "'width' is not a keyword" in err
    code, _, err = run_cli("basins", "nowhere_module:f", "--out", str(tmp_path / "o"))
    assert code == 2 and "cannot import" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_markov_sweep_shows_the_p_plus_q_transition_and_compiles_once(caplog):
    """Off the line p + q = 1 the fractions of resolved starts equal the closed-form partition
    (docs/models/markov.md §4.4) of the same starts, on both sides of it, every point names its attractors by the
    task's names, and the flow's batch solver compiles once for all (p, q)."""
    from popdyn.jobs._sweep import sweep_markov

    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        res = sweep_markov(p_lo=0.1, p_hi=0.9, q_lo=0.1, q_hi=0.9, points=3, grid=8, chunk=64)
    compiles = [r for r in caplog.records if "Finished XLA compilation of jit(_solve_batch)" in r.getMessage()]
    assert len(compiles) <= 1
    sides = set()
    for point in res.results["points"]:
        p, q = point["values"]["p"], point["values"]["q"]
        if point["predicted_fractions"] is None:
            assert abs(p + q - 1) < 1e-9
            continue
        sides.add(p + q > 1)
        assert point["resolved_fraction"] == 1.0
        for name, f in point["predicted_fractions"].items():
            assert point["fractions"][name] == pytest.approx(f, abs=1.5 / 64)
    assert sides == {True, False}
    # one attractor is one name at every (p, q): the task's own names, never a printed loss level
    names = {name for point in res.results["points"] for name in point["fractions"]}
    assert names <= {"global", "local", "saddle"} and {"global", "local"} <= names
    below = [pt for pt in res.results["points"] if pt["values"]["p"] + pt["values"]["q"] < 1]
    above = [pt for pt in res.results["points"] if pt["values"]["p"] + pt["values"]["q"] > 1]
    assert max(pt["fractions"]["local"] for pt in below) < min(pt["fractions"]["local"] for pt in above)


def test_vary_is_checked():
    from popdyn.jobs._sweep import parse_vary

    for bad, match in (("c", "NAME=LO:HI:N"), ("c=1:0:3", "vary c"), ("c=0:1:1", "vary c N"), ("c=a:1:3", "numbers")):
        with pytest.raises(ValueError, match=re.escape(match)):
            parse_vary([bad])
    with pytest.raises(ValueError, match="two distinct"):
        parse_vary(["c=0:1:3", "c=0:1:3"])


@pytest.mark.slow
def test_a_task_sweep_is_its_basins_job_at_every_value():
    """``sweep decision-list --vary c=…`` reports, at every c, the shares of the basins job run alone at that c."""
    sweep, basins = REGISTRY[("sweep", "decision-list")], REGISTRY[("basins", "decision-list")]
    res = sweep.function()(**sweep.keywords({"vary": ["c=0.5:2:2"], "grid": 4}, progress=False, checkpoint=None))
    values = [pt["values"]["c"] for pt in res.results["points"]]
    assert values == [0.5, 2.0]
    for point in res.results["points"]:
        alone = basins.function()(**basins.keywords({"grid": 4, "c": point["values"]["c"]}, False, None)).results
        assert point["fractions"] == {k: v for k, v in alone["fractions"].items() if k != "unresolved"}
        assert point["resolved_fraction"] == 1.0 - alone["fractions"].get("unresolved", 0.0)
    assert res.results["points"][0]["fractions"] != res.results["points"][1]["fractions"]  # c moves the basins


@pytest.mark.slow
def test_a_task_sweep_over_a_rate_compiles_once(caplog):
    """η_Z is an array leaf of the scan-snap basins job's problem, so every value reuses one compiled solver."""
    from popdyn.jobs._sweep import sweep_task

    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        res = sweep_task("scan-snap", vary=["eta-z=0.05:0.2:2"], grid=3)
    compiles = [r for r in caplog.records if "Finished XLA compilation of jit(_solve_batch)" in r.getMessage()]
    assert len(compiles) == 1
    assert [pt["values"]["eta_z"] for pt in res.results["points"]] == [0.05, 0.2]
    assert all(pt["resolved_fraction"] == 1.0 for pt in res.results["points"])


def test_a_task_sweep_refuses_what_it_cannot_sweep(run_cli, tmp_path):
    from popdyn.jobs._sweep import sweep_task

    with pytest.raises(ValueError, match=r"vary 'grid' is not an option to sweep for scb: one of N, T, Q, seed, t1"):
        sweep_task("scb", vary=["grid=4:8:2"])
    with pytest.raises(ValueError, match="N is an integer"):
        sweep_task("scb", vary=["N=10:11:3"])
    out = tmp_path / "o"
    code, _, err = run_cli("sweep", "teacher", "--vary", "alpha=0:0.5:2", "--alpha", "0.1", "--out", str(out))
    assert code == 2 and "--alpha is also swept with --vary: give it once" in err and not out.exists()


@pytest.mark.parametrize(
    "task,vary,message",
    [
        ("teacher", "D=4:1000000:2", "at D=1000000: a teacher with D=1,000,000 tokens needs about"),
        ("scb", "N=10:1000000:2", "at N=1000000: an instance with N=1,000,000, T=50 needs about"),
        ("teacher", "D=2:8:2", "at D=2: K=2 is out of range"),
    ],
)
def test_a_task_sweep_checks_every_point_before_the_first_runs(task, vary, message, run_cli, tmp_path, monkeypatch):
    """A point the basins job refuses (a size too large to hold, a value out of range) is refused with one line
    before any point runs (no batch is traced: every run's identity is taken first) and nothing is written."""
    import popdyn._identity

    def ran(*args, **kwargs):
        raise AssertionError("a point ran before the refused point was checked")

    monkeypatch.setattr(popdyn._identity, "run", ran)
    out = tmp_path / "o"
    code, _, err = run_cli("sweep", task, "--vary", vary, "--grid", "2", "--out", str(out))
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_readme_command_table_is_the_registry():
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Commands\s*$(.*?)(?=^## )", text, flags=re.M | re.S).group(1)
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| task")]
    table = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        task = MODEL if "module.path:factory" in cells[0] else cells[0].strip("`")
        table |= {(command, task) for command, mark in zip(COMMANDS, cells[1:], strict=False) if mark == "✓"}
    assert table == set(REGISTRY)


@pytest.mark.slow
def test_markov_basins_take_the_papers_training_options(run_cli, tmp_path):
    """Trained bias, heavy-ball momentum and an absolute gtol reach the engine (recorded in the summary); the
    closed-form comparison is made for the profiled bias only."""
    out = tmp_path / "o"
    code, _, err = run_cli(
        "basins",
        "markov",
        "--grid",
        "4",
        "--method",
        "gd",
        "--steps",
        "50",
        "--momentum",
        "0.5",
        "--bias",
        "trained",
        "--gtol",
        "1e-6",
        "--out",
        out,
        "--quiet",
    )
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert {k: summary["inputs"][k] for k in ("bias", "momentum", "gtol")} == {
        "bias": "trained",
        "momentum": 0.5,
        "gtol": 1e-6,
    }
    assert summary["results"]["agreement_with_theory"] is None
    code, _, err = run_cli("basins", "markov", "--momentum", "0.5", "--out", tmp_path / "p")
    assert code == 2 and "--momentum applies only with --method gd" in err


@pytest.mark.slow
def test_the_dynamics_settings_reach_the_run_from_the_command_line(tmp_path, monkeypatch, run_cli):
    """--solver, --rtol, --atol and --max-steps make the job's dynamics object: the map is the one Python draws with
    that object, the summary records the settings, and a flow setting given with --method gd is refused."""
    import diffrax

    from popdyn.dynamics import GradientFlow, Steady, pid_controller

    _readme_model(tmp_path, monkeypatch)
    import double_well

    out = tmp_path / "o"
    argv = ["basins", "double_well:double_well", "--grid", "4", "--solver", "kvaerno5", "--rtol", "1e-9"]
    code, _, err = run_cli(*argv, "--atol", "1e-12", "--max-steps", "5000", "--out", out, "--quiet")
    assert code == 0, err
    inputs = json.loads((out / "summary.json").read_text())["inputs"]
    assert (inputs["solver"], inputs["rtol"], inputs["atol"], inputs["max_steps"]) == ("kvaerno5", 1e-9, 1e-12, 5000)
    assert inputs["method"] == "flow" and inputs["gtol"] is None
    prob = double_well.double_well()
    grid = popdyn.Grid.square("x", "y", -3.0, 3.0, 4, base=prob.init(jax.random.PRNGKey(0)))
    flow = GradientFlow(
        solver=diffrax.Kvaerno5(),
        controller=pid_controller(1e-9, 1e-12),
        stopping=Steady(rtol=1e-9, atol=1e-12),
        max_steps=5000,
    )
    bm = popdyn.basin_map(prob, grid, flow)
    with np.load(out / "basins.npz") as saved:
        np.testing.assert_array_equal(saved["labels"], bm.labels, strict=True)
        np.testing.assert_array_equal(saved["times"], bm.times, strict=True)
    code, _, err = run_cli("basins", "double_well:double_well", "--method", "gd", "--solver", "kvaerno5", "--out", out)
    assert code == 2 and "--solver applies only with --method flow" in err
    code, _, err = run_cli("converge", "double_well:double_well", "--rtol", "0", "--out", tmp_path / "c")
    assert code == 2 and "rtol" in err and not (tmp_path / "c").exists()


@pytest.mark.slow
def test_a_sweep_where_nothing_resolves_says_so(tmp_path, monkeypatch, run_cli):
    """One GD step resolves no run: every point's line says so (no "nan% of resolved") and the figure's panels say
    why they are empty."""
    _readme_model(tmp_path, monkeypatch)
    argv = ["sweep", "double_well:double_well", "--vary", "tilt=-0.3:0.3:2", "--n-init", "4", "--method", "gd"]
    code, out, err = run_cli(*argv, "--steps", "1", "--out", tmp_path / "o")
    assert code == 0, err
    assert "nan" not in out and out.count("no run resolved") == 2, out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [p["resolved_fraction"] for p in summary["results"]["points"]] == [0.0, 0.0]
