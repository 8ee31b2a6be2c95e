"""The package's layers import one way (docs/jobs.md, "Layers"): core → tasks | dynamics → analysis → plot →
jobs → cli. A module imports only from lower layers or its own; tasks and dynamics do not import each other."""

import ast
import subprocess
import sys
from pathlib import Path

import popdyn

ROOT = Path(popdyn.__file__).parent
RANK = {"core": 0, "tasks": 1, "dynamics": 1, "analysis": 2, "plot": 3, "jobs": 4, "cli": 5}
GROUP = {
    "_validate": "core",
    "io": "core",
    "problem": "core",
    "exact": "core",
    "curvature": "core",
    "_batching": "core",
    "_checkpoint": "core",
    "_identity": "core",
    "_sharding": "core",
    "_xla": "core",
    "distributed": "core",
    "tasks": "tasks",
    "dynamics": "dynamics",
    "analysis": "analysis",
    "plot": "plot",
    "jobs": "jobs",
    "figures": "jobs",
    "_cli": "cli",
}


def _group(module: str) -> str:
    """The layer of ``popdyn.<first>...``."""
    return GROUP[module.split(".")[1]]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("popdyn."):
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.module == "popdyn":
            found.update(f"popdyn.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("popdyn."))
    return found


def _allowed(here: str, there: str) -> bool:
    if here == there:
        return True
    if {here, there} == {"tasks", "dynamics"}:
        return False
    return RANK[there] < RANK[here]


def test_every_module_imports_only_lower_layers():
    offenders = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = rel.parts
        if parts == ("popdyn", "__init__") or parts[1] == "__main__":
            continue  # the package root re-exports the public API of every layer
        here = _group(".".join(parts))
        bad = sorted(m for m in _imports(path) if not _allowed(here, _group(m)))
        if bad:
            offenders[".".join(parts)] = bad
    assert offenders == {}


def test_every_module_belongs_to_a_layer():
    names = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert names - {"__init__", "__main__"} <= set(GROUP)


def test_importing_the_dynamics_loads_no_analysis():
    code = (
        "import sys, popdyn.dynamics; "
        "print(sorted(m for m in sys.modules if m.startswith(('popdyn.analysis', 'popdyn.tasks', 'popdyn.jobs'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
