"""Property tests of the ``popdyn`` command line: for every command and every option it takes, an
invalid value makes ``cli.main`` return 2 with exactly one stderr line ``popdyn: error: …`` naming the option,
nothing on stdout, no ``--out`` folder and no JAX compilation (validation comes before any work).

Values of the wrong type (``--p abc``, ``--grid 2.5``) fail in argparse; the CLI reports those on the same one
line (``popdyn: error: argument --p: invalid float value: 'abc'``) and returns 2 as well.
"""

import contextlib
import io
import math
import re
import tempfile
from pathlib import Path

import pytest
from _props import examples, names, no_compilation
from hypothesis import given, settings
from hypothesis import strategies as st

import popdyn.jobs.markov._commands  # noqa: F401  (imported up front: the first example must not pay for imports)
from popdyn import _cli as cli
from popdyn.figures import FIGURES
from popdyn.jobs._registry import TASKS

# ---- bad option values, as argv strings -----------------------------------------------------------------
JUNK = st.sampled_from(["abc", "", "1,5", "0x1p3", "one", "[1]", "--", "-x", "1 2"])
"""Strings that are no number of any kind (and a few that argparse takes for options)."""


def _float_strings(bad: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(bad.map(repr), st.sampled_from(["nan", "inf", "-inf", "1e999"]), JUNK)


def bad_float(lo: float = -math.inf, hi: float = math.inf, *, open_lo=True, open_hi=True) -> st.SearchStrategy:
    """argv strings of floats outside the interval (lo, hi) (ends excluded or not), non-finite, or no number."""
    parts = []
    if math.isfinite(lo):
        parts.append(st.floats(max_value=lo, allow_nan=False, allow_infinity=False, exclude_max=not open_lo))
    if math.isfinite(hi):
        parts.append(st.floats(min_value=hi, allow_nan=False, allow_infinity=False, exclude_min=not open_hi))
    return _float_strings(st.one_of(parts) if parts else st.nothing())


def bad_int(minimum: int, maximum: int | None = None) -> st.SearchStrategy:
    """argv strings of integers below ``minimum`` (or above ``maximum``), non-integral numbers, or no number."""
    ints = st.integers(max_value=minimum - 1)
    if maximum is not None:
        ints = st.one_of(ints, st.integers(min_value=maximum + 1))
    return st.one_of(ints.map(str), st.sampled_from(["2.5", "1e3", "nan", "inf"]), JUNK)


def bad_word(allowed) -> st.SearchStrategy:
    """Words that are none of ``allowed`` (including a different case)."""
    text = st.text(alphabet="abcdefgilmnoprstuvwxyz-_0123456789", max_size=12)
    return st.one_of(text, st.sampled_from([a.upper() for a in allowed])).filter(lambda w: w not in allowed)


POSITIVE = bad_float(0.0)  # a finite number > 0
UNIT = bad_float(0.0, 1.0, open_lo=False, open_hi=False)  # inside (0, 1)
FINITE = _float_strings(st.nothing())
SEED = st.one_of(st.integers(max_value=-1).map(str), st.integers(min_value=2**32).map(str), bad_int(0))
RANGE = st.one_of(
    st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6))
    .filter(lambda r: r[0] >= r[1])
    .map(lambda r: [repr(r[0]), repr(r[1])]),
    st.tuples(st.sampled_from(["nan", "inf", "1e999", "abc"]), st.sampled_from(["1", "nan", "-2"])).map(list),
)

MARKOV = {"--p": UNIT, "--q": UNIT}
DECISION_LIST = {
    "--L": bad_int(2),
    "--n": bad_int(1, 10),
    "--c": POSITIVE,
    "--distribution": bad_word(("distinct", "iid")),
}
SCB = {"--N": bad_int(2), "--T": bad_int(1), "--Q": bad_int(1, 50), "--seed": SEED}
BASINS = {"--grid": bad_int(2), "--range": RANGE, "--t1": POSITIVE, "--chunk": bad_int(1)}
# (argv prefix, {option: bad values}) for every command, task and option the task uses
CASES = [
    (["basins", "markov"], MARKOV | BASINS | {"--method": bad_word(("flow", "gd"))}),
    (["basins", "markov", "--method", "gd"], {"--lr": POSITIVE, "--steps": bad_int(1)}),
    (["basins", "decision-list"], DECISION_LIST | BASINS),
    (["basins", "scb"], SCB | BASINS),
    (
        ["converge", "markov"],
        MARKOV | {"--n-init": bad_int(1), "--std": POSITIVE, "--seed": SEED, "--eps": POSITIVE, "--t1": POSITIVE},
    ),
    (
        ["converge", "decision-list"],
        DECISION_LIST | {"--M": bad_int(1, 10), "--delta": POSITIVE, "--gamma": POSITIVE, "--t1": POSITIVE},
    ),
    (["converge", "scb"], SCB | {"--lr": POSITIVE, "--eps": POSITIVE}),
    (
        ["converge", "teacher"],
        {
            "--teacher": bad_word(("cnn", "gcn", "sts", "gslp")),
            "--D": bad_int(2),
            "--K": st.one_of(bad_int(1, 35), st.sampled_from(["5", "7", "8"])),  # K | D = 36
            "--activation": bad_word(("relu", "leaky", "linear")),
            "--alpha": FINITE,
            "--d": bad_int(1),
            "--M": bad_int(1),
            "--seed": SEED,
            "--lr": POSITIVE,
            "--steps": bad_int(10),
        },
    ),
    (["converge", "teacher", "--activation", "leaky"], {"--alpha": bad_float(0.0, 1.0, open_lo=False)}),
    (["stepsize", "markov"], MARKOV | {"--e0": FINITE, "--w0": FINITE, "--steps": bad_int(1)}),
    (
        ["stepsize", "decision-list"],
        {k: DECISION_LIST[k] for k in ("--L", "--n")} | {"--M": bad_int(1, 10), "--seed": SEED, "--steps": bad_int(1)},
    ),
    (["stepsize", "scb"], {k: SCB[k] for k in ("--N", "--T", "--Q", "--seed")} | {"--steps": bad_int(1)}),
    (["demo"], {"--grid": bad_int(2)}),
]
LR_LISTS = {  # --lr takes one or more values: one bad value among good ones
    ("stepsize", "markov"): 0,
    ("stepsize", "scb"): 0,
    ("stepsize", "decision-list"): 1,
}


def run_cli(argv: list[str]) -> tuple[int, list[str], str, bool]:
    """(exit code, stderr lines, stdout, whether --out exists) of ``popdyn ARGV --out TMP/out``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        err, std = io.StringIO(), io.StringIO()
        with no_compilation(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            code = cli.main([*argv, "--out", str(out)])
        return code, err.getvalue().splitlines(), std.getvalue(), out.exists() or any(Path(tmp).iterdir())


def assert_one_line_error(argv: list[str], option: str) -> None:
    """The CLI contract for bad input: code 2, one stderr line naming the option, no stdout, nothing written."""
    code, lines, stdout, written = run_cli(argv)
    assert code == 2, (argv, code, lines)
    assert len(lines) == 1 and lines[0].startswith("popdyn: error:"), (argv, lines)
    assert names(lines[0], option.lstrip("-")), (argv, lines[0])
    assert stdout == "" and not written, (argv, stdout)


@pytest.mark.slow
@settings(max_examples=examples(160))
@given(case=st.sampled_from([(i, opt) for i, (_, opts) in enumerate(CASES) for opt in sorted(opts)]), data=st.data())
def test_every_option_refuses_bad_values_on_one_line(case, data):
    """For every command, task and option: a bad value (out of range, non-finite, of the wrong type, an unknown
    word) exits with code 2 and one line naming the option, before any computation, writing nothing."""
    i, option = case
    prefix, options = CASES[i]
    value = data.draw(options[option], label=option)
    assert_one_line_error([*prefix, option, *(value if isinstance(value, list) else [value])], option)


NOT_A_FLAG = POSITIVE.filter(lambda v: not v.startswith("-") or re.fullmatch(r"-\d+|-\d*\.\d+", v))  # argparse's test


@settings(max_examples=examples(20))
@given(
    where=st.sampled_from(sorted(LR_LISTS)),
    bad=NOT_A_FLAG,
    good=st.lists(st.sampled_from(["0.1", "2"]), max_size=2),
    at=st.integers(0, 2),
)
def test_learning_rate_lists_refuse_any_bad_entry(where, bad, good, at):
    """``stepsize --lr`` takes one or more rates: one bad entry among good ones is refused, naming lr (decision-list
    takes exactly one rate: more are refused too). Inside a list, argparse reads words like ``-inf`` as options
    ("unrecognized arguments"), so those are left to the single-value test."""
    lrs = good[:at] + [bad] + good[at:]
    if LR_LISTS[where] and len(lrs) > 1:  # decision-list: two rates are an error in themselves
        lrs = [bad]
    assert_one_line_error([*where, "--lr", *lrs], "lr")


@settings(max_examples=examples(30))
@given(command=st.sampled_from(["basins", "converge", "stepsize", "reproduce"]), data=st.data())
def test_unknown_tasks_and_figures_are_refused(command, data):
    """An unknown task (or one without this job) and an unknown figure are refused on one line naming them."""
    if command == "reproduce":
        figure = data.draw(bad_word(tuple(FIGURES)).filter(lambda w: not w.startswith("-")), label="figure")
        assert_one_line_error(["reproduce", figure], "figure")
        return
    task = data.draw(bad_word((*TASKS, "model")).filter(lambda w: not w.startswith("-") and ":" not in w), label="task")
    assert_one_line_error([command, task], "task")


@settings(max_examples=examples(15))
@given(
    argv=st.sampled_from(
        [["basins", "markov"], ["converge", "scb"], ["stepsize", "markov"], ["demo"], ["reproduce", "markov-fig1"], []]
    ),
    extra=st.sampled_from([["--bogus"], ["--p"], ["-z", "1"], ["--grid", "3", "--grid"]]),
)
def test_usage_errors_are_one_line_too(argv, extra):
    """Unknown options, a missing value or a missing command are argparse usage errors: still code 2 and one line
    ``popdyn: error: …`` (no usage text), nothing written."""
    code, lines, stdout, written = run_cli([*argv, *extra])
    assert code == 2 and len(lines) == 1 and lines[0].startswith("popdyn: error:"), lines
    assert stdout == "" and not written


@settings(max_examples=examples(10))
@given(
    case=st.sampled_from(
        [
            (["basins", "markov", "--grid", "4"], "out"),
            (["demo", "--grid", "4"], "out"),
            (["converge", "teacher"], "out"),
            (["basins", "scb"], "checkpoint"),
            (["basins", "markov", "--grid", "4"], "checkpoint"),
        ]
    ),
    under=st.booleans(),
)
def test_an_out_or_checkpoint_path_that_is_a_file_is_refused(case, under):
    """--out (or --checkpoint) naming an existing file, or a path under one, is refused up front naming the option;
    the file is left as it was and nothing else is written."""
    argv, option = case
    with tempfile.TemporaryDirectory() as tmp:
        blocker = Path(tmp) / "file"
        blocker.write_text("keep")
        path = str(blocker / "sub" if under else blocker)
        full = [*argv, "--out", path] if option == "out" else [*argv, "--checkpoint", path, "--out", f"{tmp}/out"]
        err, std = io.StringIO(), io.StringIO()
        with no_compilation(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            code = cli.main(full)
        lines = err.getvalue().splitlines()
        assert code == 2 and len(lines) == 1 and names(lines[0], option) and std.getvalue() == "", lines
        assert blocker.read_text() == "keep" and [p.name for p in Path(tmp).iterdir()] == ["file"]
