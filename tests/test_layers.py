"""The engine's layers import one way (docs/dynamics.md): nothing in popdyn.dynamics imports a higher layer."""

import re
from pathlib import Path

import popdyn

HIGHER = re.compile(r"^\s*(?:from|import)\s+popdyn\.(?:analysis|tasks|io|plot|cli|commands|figures)\b", re.M)


def test_dynamics_imports_no_higher_layer():
    root = Path(popdyn.__file__).parent / "dynamics"
    offenders = {p.name: HIGHER.findall(p.read_text()) for p in root.glob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}
