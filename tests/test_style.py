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
def test_mypy(tmp_path):
    """No type error in the package; and a type checker sees the public API's real signatures (the package's
    ``TYPE_CHECKING`` re-exports and ``py.typed``): a wrongly typed call to ``popdyn.gradient_flow`` is an error,
    where names loaded on first use alone would be ``Any`` to it."""
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    user = tmp_path / "user_code.py"
    user.write_text('import popdyn\n\npopdyn.gradient_flow(1, 2, t1="x")\nreveal_type(popdyn.basin_map)\n')
    proc = subprocess.run([sys.executable, "-m", "mypy", str(user)], cwd=REPO, capture_output=True, text=True)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert 'Argument 1 to "gradient_flow" has incompatible type "int"; expected "Problem"' in out, out
    assert 'Argument "t1" to "gradient_flow" has incompatible type "str"; expected "float"' in out, out
    assert "def (prob: popdyn.problem.Problem" in out, out


def test_the_type_checkers_names_are_the_run_time_names():
    """popdyn/__init__.py's ``TYPE_CHECKING`` re-exports name exactly what ``__getattr__`` loads, from the same
    modules."""
    import ast

    import popdyn

    tree = ast.parse((REPO / "popdyn" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            assert alias.asname == alias.name  # an explicit re-export
            seen[alias.name] = node.module if node.module != "popdyn" else f"popdyn.{alias.name}"
    expected = dict(popdyn._HOME) | {name: f"popdyn.{name}" for name in popdyn._SUBPACKAGES}
    assert seen == expected
