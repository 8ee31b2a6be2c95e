"""Results recorded on small instances of every task (``tests/data/golden.npz``, written by
``tests/data/record_golden.py``) are reproduced bit for bit: a refactor of the engine keeps every result.

With other versions of JAX, NumPy or the solvers than those recorded, the last bits may legitimately move, so the
comparison is then to 1e-9 relative (still far below any result's meaning) and says so.

The cases run in one process of their own with the XLA flags the tests started with (conftest.py compiles the rest
of the suite at XLA's optimisation level 0, whose results differ in the last bits): bit for bit the code users run.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"


def _recorder():
    spec = importlib.util.spec_from_file_location("record_golden", DATA / "record_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDER = _recorder()
GOLDEN = np.load(DATA / "golden.npz")
SAME_VERSIONS = sorted(GOLDEN["__versions__"].tolist()) == sorted(f"{k}={v}" for k, v in RECORDER.versions().items())


QUICK = ("markov/gd",)
"""The case the quick tier (-m "not slow") runs; every case runs in the full suite."""


@pytest.fixture(scope="module")
def computed(request, tmp_path_factory) -> dict[str, np.ndarray]:
    """Every selected case's arrays, computed in one subprocess under the user's XLA flags (``USER_XLA_FLAGS``)."""
    names = sorted({item.callspec.params["case"] for item in request.session.items if item.path == Path(__file__)})
    out = tmp_path_factory.mktemp("golden") / "computed.npz"
    env = dict(os.environ, XLA_FLAGS=os.environ.get("POPDYN_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", "")))
    proc = subprocess.run(
        [sys.executable, str(DATA / "record_golden.py"), "--out", str(out), *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize(
    "case", [c if c in QUICK else pytest.param(c, marks=pytest.mark.slow) for c in sorted(RECORDER.cases())]
)
def test_recorded_results_are_reproduced(case, computed):
    arrays = {k.removeprefix(f"{case}/"): v for k, v in computed.items() if k.startswith(f"{case}/")}
    recorded = sorted(k.removeprefix(f"{case}/") for k in GOLDEN.files if k.startswith(f"{case}/"))
    assert sorted(arrays) == recorded
    for key, value in arrays.items():
        expected = GOLDEN[f"{case}/{key}"]
        if SAME_VERSIONS:
            np.testing.assert_array_equal(value, expected, err_msg=f"{case}/{key}", strict=True)
        else:
            np.testing.assert_allclose(value, expected, rtol=1e-9, atol=0, err_msg=f"{case}/{key} (other versions)")
