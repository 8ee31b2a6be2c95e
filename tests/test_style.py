"""The code style CI enforces (README, "Contributing"): ruff's lint rules and formatting, configured in
pyproject.toml, hold on the package, the tests and the benchmarks; mypy, configured there too, finds no type
error in the package."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATHS = ["popdyn", "tests", "benchmarks"]


def _skip_without(module: str):
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} is not installed (pip install -e '.[dev]')"
    )


@_skip_without("ruff")
@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(check):
    proc = subprocess.run([sys.executable, "-m", "ruff", *check, *PATHS], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # ~10 s from a cold cache (.mypy_cache), under 1 s once warm
@_skip_without("mypy")
def test_mypy():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
