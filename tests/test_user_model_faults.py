"""A user's own model on the command line under faults (docs/jobs.md, "Your own model", "Sweeps"): an error in the
user's code, a bad --param or --vary, a size too large to hold, a sweep whose keyword changes nothing or only the
starts, overlapping attractors, an init that ignores its key, a factory that turns float64 off. Each is one line
``popdyn: error: …`` with exit code 2 and nothing written, or a warning."""

import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _props import no_compilation

import popdyn
from popdyn import _validate

MODELS = """
import jax
import jax.numpy as jnp
import numpy as np
import popdyn
from _tiny_models_d import left, loss, right


def wells(c=1.0, scale=1.0):
    return popdyn.Problem.from_loss(loss, init={"x": 0.3, "y": 0.0}, init_scale=scale, data={"c": c},
                                    attractors={"right": right, "left": left})


def ignores(c=1.0, unused=0.0):
    return wells(c)


def raises():
    raise RuntimeError("boom")


def keyerr():
    return {}["nokey"]


def typeerr():
    return len(3)


def needs(c):
    return wells(c)


def nameerr_loss(th):
    return undefined_name * th["x"]


def nameerr():
    return popdyn.Problem.from_loss(nameerr_loss, init={"x": 0.0})


class Untraceable(popdyn.Problem):
    def loss(self, theta):
        return undefined_name * theta

    def init(self, key):
        return jax.random.normal(key, (2,))


def untraceable():
    return Untraceable()


def big(dim=4, scale=1.0):
    return popdyn.Problem.from_loss(lambda u: jnp.sum(u**2), init=np.zeros(dim), init_scale=scale)


def sized_loss(th, data):
    return jnp.sum((th - data["n"]) ** 2)


def sized(n=1.0):
    if n > 2.5:
        raise ValueError(f"n={n} is too large")
    return popdyn.Problem.from_loss(sized_loss, init=np.zeros(2), data={"n": n})


def float32(c=1.0):
    jax.config.update("jax_enable_x64", False)
    return wells(c)
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A folder on sys.path holding ``faulty_models`` (the factories above), a module with a syntax error and one
    that raises when imported."""
    folder = tmp_path_factory.mktemp("faulty-models")
    (folder / "faulty_models.py").write_text(textwrap.dedent(MODELS))
    (folder / "faulty_syntax.py").write_text("def f(:\n    pass\n")
    (folder / "faulty_import.py").write_text('raise RuntimeError("at import")\n')
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def refused(run_cli, tmp_path, *argv) -> str:
    """Run ``popdyn *argv``; it must exit 2 with one line ``popdyn: error: …`` and write nothing. Returns the line."""
    out = tmp_path / "out"
    code, _, err = run_cli(*argv, "--out", out, "--quiet")
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("popdyn: error: "), err
    assert not out.exists()
    return lines[0]


# ---- errors in the user's code ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec, message",
    [
        ("faulty_models:raises", "factory='faulty_models:raises' raised RuntimeError: boom"),
        ("faulty_models:keyerr", "factory='faulty_models:keyerr' raised KeyError: 'nokey'"),
        ("faulty_models:nameerr", "factory='faulty_models:nameerr' raised NameError: name 'undefined_name' is not"),
        ("faulty_models:untraceable", "traced, raised NameError: name 'undefined_name' is not defined"),
        ("faulty_syntax:f", "importing 'faulty_syntax' raised SyntaxError: invalid syntax"),
        ("faulty_import:f", "importing 'faulty_import' raised RuntimeError: at import"),
        ("./faulty_models:wells", "factory='./faulty_models:wells' is invalid: must be 'module.path:function'"),
    ],
)
def test_an_error_in_the_users_code_is_one_line_naming_it(models, run_cli, tmp_path, spec, message):
    assert message in refused(run_cli, tmp_path, "converge", spec, "--n-init", "1")


def test_a_type_error_inside_the_factory_is_not_a_signature_mismatch(models, run_cli, tmp_path):
    inside = refused(run_cli, tmp_path, "converge", "faulty_models:typeerr", "--n-init", "1")
    assert "raised TypeError: object of type 'int' has no len()" in inside and "cannot be called" not in inside
    mismatch = refused(run_cli, tmp_path, "converge", "faulty_models:needs", "--n-init", "1")
    assert "cannot be called with no arguments: missing a required argument: 'c'" in mismatch


@pytest.mark.validation
def test_an_error_popdyn_raises_inside_the_factory_keeps_its_words(models, run_cli, tmp_path):
    line = refused(run_cli, tmp_path, "converge", "faulty_models:wells", "--param", "scale=-1.0", "--n-init", "1")
    assert line == "popdyn: error: init_scale=-1.0 is out of range: must be a finite number in [0, inf)" in line


def test_a_factory_that_turns_float64_off_is_refused_and_float64_stays_on(models, run_cli, tmp_path):
    assert "turned float64 off" in refused(run_cli, tmp_path, "converge", "faulty_models:float32", "--n-init", "1")
    assert jax.config.read("jax_enable_x64")


# ---- --param and --vary ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, message",
    [
        (["converge", "--param", "c=1e400"], "param c=1e400 is out of range: numbers must be finite (here inf)"),
        (["converge", "--param", "c=-1e400"], "param c=-1e400 is out of range"),
        (["converge", "--param", "c=1", "--param", "c=2"], "param 'c' is given twice (c=1, c=2)"),
        (["sweep", "--vary", "c=0:1:2", "--vary", "c=0:1:3"], "'c' is given twice"),
        (["sweep", "--vary", "c=-1e308:1e308:2"], "the width hi - lo overflows"),
        (["basins", "--range", "-1e308", "1e308"], "range=(-1e+308, 1e+308) is invalid: the width hi - lo overflows"),
    ],
)
def test_bad_params_and_ranges_are_refused(models, run_cli, tmp_path, argv, message):
    assert message in refused(run_cli, tmp_path, argv[0], "faulty_models:wells", *argv[1:])


def test_an_interval_whose_width_overflows_is_refused():
    with pytest.raises(ValueError, match=r"x=\(-1e\+308, 1e\+308\) is invalid: the width"):
        _validate.interval("x", (-1e308, 1e308))
    assert _validate.interval("x", (-1e307, 1e307)) == (-1e307, 1e307)


# ---- sizes: refused with the estimate before anything is allocated ---------------------------------------------
@pytest.mark.parametrize(
    "argv, message",
    [
        (["sweep", "faulty_models:wells", "--vary", "c=0:1:2147483647"], "a sweep over 2,147,483,647 values"),
        (["sweep", "faulty_models:wells", "--vary", "c=0:1:100000", "scale=0:1:100000"], "100,000 × 100,000 values"),
        (
            ["converge", "faulty_models:big", "--param", "dim=100000", "--n-init", "2147483647"],
            "2,147,483,647 initialisations of faulty_models:big",
        ),
        (
            [
                "sweep",
                "faulty_models:big",
                "--param",
                "dim=100000",
                "--vary",
                "scale=0.1:1:2",
                "--n-init",
                "2147483647",
            ],
            "2,147,483,647 initialisations at {'scale': 0.1}",
        ),
        (["stepsize", "faulty_models:wells", "--steps", "2000000000"], "2,000,000,000 steps of GD"),
    ],
)
def test_sizes_too_large_to_hold_are_refused_with_the_estimate(models, run_cli, tmp_path, monkeypatch, argv, message):
    monkeypatch.delenv("POPDYN_MEMORY_CHECK", raising=False)
    line = refused(run_cli, tmp_path, *argv)
    assert message in line and "GB of memory" in line and "POPDYN_MEMORY_CHECK=off" in line


# ---- sweeps that sweep -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_sweep_over_the_init_scale_draws_each_points_own_starts(models, run_cli, tmp_path):
    """The wells at x = ±1 split at x = 0; starts N(0.3, scale²): at scale 0.05 all go right, at scale 2 about
    half. Each point's share is that of its own draws (same keys, that point's init)."""
    import json

    import faulty_models

    out = tmp_path / "out"
    code, _, err = run_cli("sweep", "faulty_models:wells", "--vary", "scale=0.05:2:2", "--n-init", "32", "--out", out)
    assert code == 0, err
    points = json.loads((out / "summary.json").read_text())["results"]["points"]
    keys = jax.random.split(jax.random.PRNGKey(0), 32)
    for point in points:
        x0 = np.asarray(jax.vmap(faulty_models.wells(scale=point["values"]["scale"]).init)(keys)["x"])
        assert point["fractions"]["right"] == pytest.approx(np.mean(x0 > 0), abs=0)
    assert points[0]["fractions"]["right"] == 1.0 and points[1]["fractions"]["right"] < 0.9


def test_a_swept_keyword_that_changes_nothing_is_refused(models, run_cli, tmp_path):
    with no_compilation("the sweep ran before its keyword was found to change nothing"):
        line = refused(run_cli, tmp_path, "sweep", "faulty_models:ignores", "--vary", "unused=0:1:2")
    assert "vary 'unused' changes nothing the sweep computes: unused=1 builds the problem of unused=0" in line


def test_every_point_of_a_sweep_is_built_before_the_first_runs(models, run_cli, tmp_path):
    with no_compilation("a sweep point ran before the factory refused a later value"):
        line = refused(run_cli, tmp_path, "sweep", "faulty_models:sized", "--vary", "n=1:3:3", "--n-init", "2")
    assert "factory='faulty_models:sized' (called with {'n': 3.0}) raised ValueError: n=3.0 is too large" in line


# ---- labels and draws ------------------------------------------------------------------------------------------
@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
def test_an_end_point_within_tol_of_two_attractors_is_announced():
    prob = popdyn.Problem.from_loss(
        lambda u: jnp.sum(u**2),
        init=jnp.zeros(2),
        attractors={"origin": lambda u: jnp.linalg.norm(u), "also origin": lambda u: jnp.max(jnp.abs(u))},
    )
    with pytest.warns(UserWarning, match=r"2 end point\(s\) lie within tol=0.001 of two attractors \('origin' and"):
        bf = popdyn.basin_fractions(prob, np.array([[1.0, 0.5], [-0.3, 0.2]]), t1=100.0)
    assert bf.fractions["also origin"] == 1.0  # the smaller residual, max |u| <= ‖u‖


def test_an_init_that_ignores_its_key_is_announced(models):
    import faulty_models

    from popdyn.jobs._model import draw_inits

    with pytest.warns(UserWarning, match="gives the same θ for every key: its 3 draws are 3 copies of one start"):
        draw_inits(faulty_models.wells(scale=0.0), "faulty_models:wells", 3, 0)


# ---- the teacher's sizes ---------------------------------------------------------------------------------------
def test_the_small_teachers_sizes_are_those_their_help_states():
    """``--D`` alone takes K of the small instance (and ``--K`` alone its D), as the options' help says."""
    from popdyn.jobs._registry import REGISTRY
    from popdyn.jobs.teacher.commands import SMALL_SIZES, _sizes

    for command in ("basins", "stepsize"):
        helps = {o.flag: o.help for o in REGISTRY[(command, "teacher")].options}
        for teacher, (D, K) in SMALL_SIZES.items():
            assert f"{teacher} {D}" in helps["--D"] and f"{teacher} {K or 1}" in helps["--K"], (command, teacher)
            assert _sizes(teacher, 12, None) == (12, K) and _sizes(teacher, None, 1) == (D, 1)
