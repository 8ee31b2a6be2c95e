"""The miscompile of XLA on CPU that the command line guards against (popdyn/_xla.py): from jaxlib 0.10.2 on, a
reduction fused with a dot into a YNNPACK fusion can return a wrong sum. Three triggers are run against references
in new interpreters, started as the command line starts (``guard_xla`` first) and as a Python user starts (XLA's
flags untouched): guarded they must be right; unguarded they tell whether the installed jaxlib is affected, and an
affected jaxlib must be one that ``popdyn._xla.affected`` guards.

jaxlib 0.9.2, 0.10.0 and 0.10.1 give the triggers right without the guard; 0.10.2 gives −1.98 for the first sum
(exact −46.25), the second's last row 37 % off and the Markov transformer's loss 0.7767 for 0.6384, and all three
right with the guard. The test run itself is unguarded, as Python users are (conftest.py)."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import _xla
from popdyn.exact import Chain
from popdyn.problem import check_problem
from popdyn.tasks.markov import Transformer, rank_one_weights

REPO = Path(__file__).resolve().parents[1]


def splat_dot_sum() -> float:
    """Relative error of jit(Σ x @ C) against NumPy, C the all-equal 4 × 4 matrix, x of shape (1024, 4): 4096
    outputs, the smallest size at which jaxlib 0.10.2 fuses the broadcast scalar into a YNNPACK reduction."""
    x = np.random.default_rng(0).normal(size=(1024, 4))
    C = np.full((4, 4), 0.175)
    got = float(jax.jit(lambda x: jnp.sum(x @ jnp.asarray(C)))(x))
    exact = float(np.sum(x @ C))
    return abs(got - exact) / float(np.sum(np.abs(x @ C)))


def long_batch_sum() -> float:
    """Largest relative error of jit(vmap(r ↦ Σ (M r)²)) against NumPy over 16 385 rows r of length 3
    (jax-ml/jax#39103 upstream: on jaxlib 0.10.2 the row past 16 384 is wrong)."""
    rng = np.random.default_rng(1)
    x, M = rng.normal(size=(16_385, 3)), rng.normal(size=(3, 3))
    got = np.asarray(jax.jit(lambda x, M: jax.vmap(lambda r: jnp.sum((M @ r) ** 2))(x))(x, M))
    exact = np.sum((x @ M.T) ** 2, axis=1)
    return float(np.max(np.abs(got - exact) / exact))


def transformer_at_rank_one_weights() -> float:
    """popdyn's own trigger: relative difference of the full Markov transformer's exact loss at the rank-one weights
    of the default direction α = 1/√d (W_1 and W_2 have equal entries) held as constants by a jitted function, and
    the same loss with the weights as arguments (N = 8, d = 4: 256 sequences)."""
    full = Transformer(Chain.binary(0.5, 0.8), N=8, d=4)
    weights = rank_one_weights(1.0, -1.0, 0.0, N=8, d=4)
    as_constants = float(jax.jit(lambda: full.loss(weights))())
    as_arguments = float(jax.jit(lambda w: full.loss(w))(weights))
    return abs(as_constants - as_arguments) / as_arguments


TRIGGERS = (splat_dot_sum, long_batch_sum, transformer_at_rank_one_weights)

PROBE = """
import json, os
{start}
import jax
jax.config.update("jax_enable_x64", True)
import test_xla_canary as t
print(json.dumps({{"XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), "errors": [f() for f in t.TRIGGERS]}}))
"""


def _fresh_interpreter(guard: bool) -> dict:
    """A new interpreter with no ``XLA_FLAGS``, started as the command line starts (``guard_xla`` before JAX) when
    ``guard``: its ``XLA_FLAGS`` after the start and the triggers' errors."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", _xla.SWITCH)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JAX_PLATFORMS"] = "cpu"
    start = "from popdyn._xla import guard_xla; guard_xla()" if guard else ""
    code = PROBE.format(start=start)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_affected_jaxlib_is_guarded_and_the_guard_is_right():
    """Unguarded, the triggers tell whether the installed jaxlib is affected; if it is, ``affected()`` must say so
    (else the command line would run it unguarded). Guarded, as the command line starts, ``XLA_FLAGS`` holds the
    flag and every trigger is right (the jaxlib knows the flag too: XLA stops at start on a flag it does not
    know)."""
    version = ".".join(map(str, _xla.jaxlib_version()))
    unguarded = _fresh_interpreter(guard=False)
    assert unguarded["XLA_FLAGS"] == ""
    if max(unguarded["errors"]) > 1e-13:
        assert _xla.affected(), f"jaxlib {version} gives errors {unguarded['errors']} and popdyn does not guard it"
    if _xla.affected():
        guarded = _fresh_interpreter(guard=True)
        assert guarded["XLA_FLAGS"] == _xla.FLAG
        assert max(guarded["errors"]) < 1e-13, f"jaxlib {version} under the guard: errors {guarded['errors']}"


def test_the_command_line_calls_the_guard_first(run_cli, monkeypatch):
    """``popdyn`` calls ``guard_xla`` before its job (here a bad --p: refused after the call, before computing)."""
    calls = []
    monkeypatch.setattr(_xla, "guard_xla", lambda: calls.append(1) or True)
    proc = run_cli("basins", "markov", "--p", "2")
    assert proc.returncode == 2 and calls == [1]


def test_guarded_adds_the_flag_once_and_keeps_a_users_own_choice():
    assert _xla.guarded("") == _xla.FLAG
    assert _xla.guarded("--xla_force_host_platform_device_count=4") == (
        f"--xla_force_host_platform_device_count=4 {_xla.FLAG}"
    )
    assert _xla.guarded(_xla.guarded("")) == _xla.FLAG
    own = "--xla_cpu_experimental_ynn_fusion_type="  # every YNNPACK fusion off: the user's choice stays
    assert _xla.guarded(own) == own


def test_affected_releases():
    assert not _xla.affected((0, 10, 1)) and not _xla.affected((0, 9, 2))
    assert _xla.affected((0, 10, 2)) and _xla.affected((0, 11))


def test_a_started_backend_without_the_flag_is_left_alone_with_a_warning(monkeypatch):
    """After JAX has started, XLA has read its flags: on an affected jaxlib ``guard_xla`` changes nothing (a change
    would only alter the compilation cache's keys) and warns; with POPDYN_XLA_GUARD=off it is silent."""
    monkeypatch.delenv(_xla.SWITCH, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    monkeypatch.setattr(_xla, "affected", lambda version=None: True)
    jax.devices()  # the backend has started
    with pytest.warns(UserWarning, match="started in this process without the guard"):
        assert not _xla.guard_xla()
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1"
    monkeypatch.setenv(_xla.SWITCH, "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _xla.guard_xla()


def test_python_use_without_the_guard_warns_once(monkeypatch):
    """A problem entering the engine on an affected jaxlib's CPU without the flag warns once per process (Python users
    learn of the miscompile; popdyn leaves their XLA flags alone); silent with the flag, with POPDYN_XLA_GUARD=off,
    and after the first warning."""
    monkeypatch.setenv(_xla.SWITCH, "off")
    prob = popdyn.Problem.from_loss(lambda th: jnp.sum(th**2), init=jnp.zeros(2))  # itself checked, silently
    monkeypatch.delenv(_xla.SWITCH)
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr(_xla, "affected", lambda version=None: True)
    monkeypatch.setattr(_xla, "_warned", False)
    for env in ({"XLA_FLAGS": _xla.FLAG}, {_xla.SWITCH: "off"}):
        with monkeypatch.context() as m, warnings.catch_warnings():
            for k, v in env.items():
                m.setenv(k, v)
            warnings.simplefilter("error")
            check_problem(prob)
    with pytest.warns(UserWarning, match="without the guard: start it with XLA_FLAGS"):
        check_problem(prob)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_problem(prob)
