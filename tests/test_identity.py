"""A run's identity is what it computes (popdyn._identity, docs/architecture.md "Run identity"): the traced program
with its constants and data, the starts, the chunk size and the versions. It binds a checkpoint's chunks, so a
resumed run whose inputs changed in any way (a number in the loss, a helper's body, a module global, a method, a
data leaf, an option) is refused, and one whose inputs did not change loads its chunks bit for bit."""

from __future__ import annotations

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import _identity as identity
from popdyn import _sharding as sharding

REFUSED = r"holds chunks for different inputs"

SOURCE = """
import jax.numpy as jnp
import popdyn

SHIFT = {shift!r}


def helper(a, b):
    return a * b - SHIFT


def loss(th, data):
    return {half!r} * helper(th["a"], th["b"]) ** 2 + 0.01 * th["a"] ** 4 + data["c"] * th["b"] ** 2


def make(c=0.0):
    return popdyn.Problem.from_loss(loss, init={{"a": 0.0, "b": 0.0}}, data={{"c": c}})
"""


def _module(half: float = 0.5, shift: float = 1.0) -> types.ModuleType:
    """A user's model module ``user_model`` built from source, as its file on disk would be after an edit: ``half``
    is a literal in the loss, ``shift`` a module global read by a helper."""
    mod = types.ModuleType("user_model")
    exec(compile(SOURCE.format(half=half, shift=shift), "user_model.py", "exec"), mod.__dict__)
    return mod


START = {"a": np.linspace(-1.5, 1.5, 8), "b": np.linspace(1.0, -0.8, 8)}
GD = {"lr": 0.1, "steps": 60, "chunk_size": 4}


def _gd(prob, theta=START, **options):
    return popdyn.gradient_descent(prob, theta, **(GD | options))


def _same(a, b) -> None:
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def _perturbed(name: str):
    """(problem, options) of the base run with one input changed; ``name`` says which."""
    if name == "literal in the loss":  # same bytecode, another constant: 0.5 → 0.25
        return _module(half=0.25).make(), {}
    if name == "module global":
        return _module(shift=1.5).make(), {}
    if name == "helper's body":
        mod = _module()
        mod.helper = lambda a, b: a * b - mod.SHIFT + 1e-3 * a
        return mod.make(), {}
    if name == "data leaf":
        return _module().make(c=0.1), {}
    if name == "literal by one ulp":
        return _module(half=float(np.nextafter(0.5, 1.0))).make(), {}
    if name == "global by one ulp":
        return _module(shift=float(np.nextafter(1.0, 2.0))).make(), {}
    if name == "data leaf by one ulp":
        return _module().make(c=float(np.nextafter(0.0, 1.0))), {}
    options = {
        "learning rate": {"lr": 0.1 + 1e-9},
        "steps": {"steps": 61},
        "chunk size": {"chunk_size": 2},
        "momentum": {"momentum": 0.5},
        "gradient noise": {"noise": 1e-3},
        "rtol": {"rtol": 1e-6},
        "gtol": {"gtol": 1e-9},
        "a start": {"theta": START | {"a": START["a"] + np.eye(8)[3] * 1e-12}},
    }[name]
    return _module().make(), options


PERTURBATIONS = [
    "literal in the loss",
    "module global",
    "helper's body",
    "data leaf",
    "literal by one ulp",
    "global by one ulp",
    "data leaf by one ulp",
    "learning rate",
    "steps",
    "chunk size",
    "momentum",
    "gradient noise",
    "rtol",
    "gtol",
    "a start",
]


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """A finished checkpointed run of the base problem, and its result."""
    ck = tmp_path_factory.mktemp("identity") / "ck"
    return ck, _gd(_module().make(), checkpoint=ck)


@pytest.mark.slow
def test_the_same_run_resumes_bit_for_bit_and_computes_nothing(done, monkeypatch):
    ck, reference = done
    placed = []
    monkeypatch.setattr(sharding, "place", lambda tree: placed.append(1) or tree)
    _same(_gd(_module().make(), checkpoint=ck), reference)  # a fresh module of the same source
    assert placed == []


@pytest.mark.parametrize("name", PERTURBATIONS)
def test_any_changed_input_is_refused(done, name):
    """One input changed at a time, down to one ulp of one constant: each reaches the chunked program or its inputs,
    so the checkpoint's chunks are refused and left as they were; never the old chunks under new inputs."""
    ck, _ = done
    prob, options = _perturbed(name)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in ck.iterdir())
    with pytest.raises(ValueError, match=REFUSED):
        _gd(prob, checkpoint=ck, **options)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in ck.iterdir()) == before


@pytest.mark.parametrize(
    "change",
    [
        ("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=-reduce"),  # the command line's guard
        ("host_cpu", "x86_64+avx512f+avx2+fma+avx+sse4_2"),  # a host with AVX-512
    ],
    ids=["xla-flags", "host-cpu"],
)
def test_another_platform_is_refused(done, monkeypatch, change):
    """XLA's flags and the host's vector extensions decide how a program rounds: chunks computed under others are
    refused (a checkpoint written without the command line's XLA guard is not resumed with it), while XLA's dump
    settings, which change nothing computed, are not part of the identity."""
    ck, reference = done
    name, value = change
    if name == "XLA_FLAGS":
        monkeypatch.setenv(name, f"{value} --xla_dump_to=/tmp/nowhere")
    else:
        monkeypatch.setattr(identity, name, lambda: value)
    with pytest.raises(ValueError, match=REFUSED):
        _gd(_module().make(), checkpoint=ck)
    monkeypatch.undo()
    monkeypatch.setenv("XLA_FLAGS", f"{identity.platform()['xla_flags']} --xla_dump_to=/tmp/nowhere")
    _same(_gd(_module().make(), checkpoint=ck), reference)


def test_an_option_acting_after_the_chunks_resumes_with_its_own_result(done):
    """The saddle test's tolerance classifies end points after the chunks: the same chunks are loaded and the
    result is that of a fresh run with the new tolerance, bit for bit."""
    ck, _ = done
    prob = _module().make()
    _same(_gd(prob, checkpoint=ck, saddle_tol=0.5), _gd(prob, saddle_tol=0.5))


CLASS = """
import jax
import jax.numpy as jnp
import popdyn


class Model(popdyn.Problem):
    k: jax.Array

    def loss(self, th):
        return {body}

    def init(self, key):
        return {{"a": jnp.zeros(()), "b": jnp.zeros(())}}
"""


def _class(body: str) -> type:
    """A Problem class ``user_model.Model`` whose ``loss`` method returns ``body``: the same class edited."""
    mod = types.ModuleType("user_model")
    exec(compile(CLASS.format(body=body), "user_model.py", "exec"), mod.__dict__)
    return mod.Model


@pytest.mark.slow
def test_a_method_edited_with_the_same_fields_is_refused(tmp_path):
    start = {"a": np.linspace(0.2, 1.0, 4), "b": np.linspace(1.0, 0.3, 4)}
    quadratic = "0.5 * self.k * (th['a'] * th['b'] - 1.0) ** 2"
    _gd(_class(quadratic)(jnp.asarray(1.0)), start, checkpoint=tmp_path / "ck")
    with pytest.raises(ValueError, match=REFUSED):
        _gd(_class(quadratic + " + 0.1 * th['a'] ** 2")(jnp.asarray(1.0)), start, checkpoint=tmp_path / "ck")


def _traced(inner) -> str:
    """The program identity of three scan steps of a jitted helper ``inner``: JAX keeps the helper's trace, and
    popdyn its structure, while the program around it is traced anew each time."""
    helper = jax.jit(inner)
    return identity.program(lambda x: jax.lax.scan(lambda c, _: (helper(c), None), x, None, length=3)[0], jnp.ones(4))


WEIGHTS = np.linspace(0.5, 2.0, 4)
HELPERS = {
    "base": lambda c: jnp.sin(c) * WEIGHTS - 1.0,
    "a literal by one ulp": lambda c: jnp.sin(c) * WEIGHTS - float(np.nextafter(1.0, 2.0)),
    "an array constant by one ulp": lambda c: jnp.sin(c) * np.nextafter(WEIGHTS, 3.0) - 1.0,
    "another primitive": lambda c: jnp.cos(c) * WEIGHTS - 1.0,
    "operands swapped": lambda c: 1.0 - jnp.sin(c) * WEIGHTS,
    "plus instead of minus": lambda c: jnp.sin(c) * WEIGHTS + 1.0,
    "another dtype": lambda c: jnp.sin(c).astype(jnp.float32) * WEIGHTS - 1.0,
}


def test_a_program_differing_in_one_constant_or_one_primitive_has_another_identity():
    """Programs that differ in one value, one primitive, one operand's place or one type, inside a jitted helper
    whose structure popdyn remembers, all have identities of their own; the same program traced again, or from
    another function object, has the same identity."""
    found = {name: _traced(helper) for name, helper in HELPERS.items()}
    assert len(set(found.values())) == len(HELPERS), found
    assert _traced(HELPERS["base"]) == found["base"]
    assert _traced(lambda c: jnp.sin(c) * WEIGHTS - 1.0) == found["base"]


ARGV = ["basins", "markov", "--grid", "4", "--method", "gd", "--steps", "40", "--chunk", "8", "--quiet"]


@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
def test_summary_names_the_identity_that_binds_the_checkpoint(run_cli, tmp_path):
    """summary.json's ``identity``: the runs behind the result (the one that binds the checkpoint's manifest among
    them), the same for the same command, another for another option."""
    summaries = {}
    for name, extra in (("a", ["--checkpoint", tmp_path / "ck"]), ("b", []), ("c", ["--p", "0.25"])):
        run = run_cli(*ARGV, "--out", tmp_path / name, *extra)
        assert run.returncode == 0, run.stderr
        summaries[name] = json.loads((tmp_path / name / "summary.json").read_text())["identity"]
    a, b, c = summaries["a"], summaries["b"], summaries["c"]
    assert a["runs"] and all(len(r) == 64 and int(r, 16) >= 0 for r in a["runs"])
    assert json.loads((tmp_path / "ck" / "manifest.json").read_text())["fingerprint"] in a["runs"]
    assert a == b  # where chunks are kept is not what is computed
    assert not set(c["runs"]) & set(a["runs"]) and c["digest"] != b["digest"]
