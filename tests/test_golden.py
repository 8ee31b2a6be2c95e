"""Results recorded on small instances of every task (``tests/data/golden.npz``, written by
``tests/data/record_golden.py``) are reproduced bit for bit: a refactor of the engine keeps every result.

With other versions of JAX, NumPy or the solvers than those recorded, or on a CPU with other vector extensions
(XLA's code, hence the rounding, follows the host), the last bits may legitimately move: the comparison is then to
1e-9 relative (still far below any result's meaning), with a warning naming what differs."""

import importlib.util
import warnings
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


QUICK = ("markov/gd",)
"""The case the quick tier (-m "not slow") runs; every case runs in the full suite."""


@pytest.mark.parametrize(
    "case", [c if c in QUICK else pytest.param(c, marks=pytest.mark.slow) for c in sorted(RECORDER.cases())]
)
def test_recorded_results_are_reproduced(case):
    arrays = RECORDER.cases()[case]()
    recorded = sorted(k.removeprefix(f"{case}/") for k in GOLDEN.files if k.startswith(f"{case}/"))
    assert sorted(arrays) == recorded
    differ = sorted(set(RECORDER.versions_list()) ^ set(GOLDEN["__versions__"].tolist()))
    if differ:
        warnings.warn(f"{case}: compared to 1e-9 relative, not bit for bit: recorded with other {differ}", stacklevel=1)
    for key, value in arrays.items():
        expected = GOLDEN[f"{case}/{key}"]
        if not differ:
            np.testing.assert_array_equal(value, expected, err_msg=f"{case}/{key}", strict=True)
        else:
            np.testing.assert_allclose(value, expected, rtol=1e-9, atol=0, err_msg=f"{case}/{key} (other versions)")
