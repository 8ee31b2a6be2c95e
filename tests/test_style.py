"""The code style CI enforces (README, "Contributing"): ruff's lint rules and formatting, configured in
pyproject.toml, hold on the package, the tests and the benchmarks."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATHS = ["popdyn", "tests", "benchmarks"]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e '.[dev]')"
)


@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(check):
    proc = subprocess.run([sys.executable, "-m", "ruff", *check, *PATHS], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
