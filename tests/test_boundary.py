"""The package's public boundary, as static tools see it (docs/architecture.md, "Public and private
modules"): every module is private (``_name.py``) but the packages and the few modules users are documented to
import from directly, and the public API is what the packages re-export, explicitly, in their ``__all__``."""

import ast
import importlib
import re
from pathlib import Path

import popdyn

ROOT = Path(popdyn.__file__).parent
DOCS = ROOT.parent / "docs"
PUBLIC_MODULES = (
    "popdyn.curvature",
    "popdyn.distributed",
    "popdyn.figures.markov",
    "popdyn.figures.scan_snap",
    "popdyn.figures.scb",
    "popdyn.figures.teacher",
    "popdyn.io",
    "popdyn.jobs.decision_list.commands",
    "popdyn.jobs.reference",
    "popdyn.jobs.scb.commands",
    "popdyn.jobs.teacher.commands",
    "popdyn.jobs.teacher.rates",
    "popdyn.plot",
    "popdyn.problem",
    "popdyn.tasks.scb.sampling",
    "popdyn.tasks.teacher.builders",
    "popdyn.tasks.teacher.ood",
)
"""The modules users import from, run or call directly (README, docs, notebooks): the only public ones."""


def _modules() -> set[str]:
    return {
        ".".join(p.relative_to(ROOT.parent).with_suffix("").parts)
        for p in ROOT.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }


def _packages() -> list[str]:
    return sorted(".".join(p.parent.relative_to(ROOT.parent).parts) for p in ROOT.rglob("__init__.py"))


def test_every_module_is_private_but_the_documented_public_ones():
    public = {m for m in _modules() if not m.rsplit(".", 1)[1].startswith("_")}
    assert public == set(PUBLIC_MODULES), (
        f"public modules not documented as such (name them _x.py): {sorted(public - set(PUBLIC_MODULES))}; "
        f"listed but missing: {sorted(set(PUBLIC_MODULES) - public)}"
    )


def test_every_name_in_a_packages_all_is_importable_from_it():
    missing = []
    for name in _packages():
        package = importlib.import_module(name)
        for attr in getattr(package, "__all__", ()):
            try:
                exec(f"from {name} import {attr}", {})
            except ImportError as err:
                missing.append(f"{name}.{attr}: {err}")
    assert not missing, "\n".join(missing)


def test_every_name_in_a_packages_all_is_bound_where_static_tools_see_it():
    """Each name of an ``__all__`` is imported, defined or assigned in its ``__init__`` (under ``TYPE_CHECKING``
    for the ones loaded on first use), so a type checker and an IDE see the public API without running it."""
    unbound = []
    for name in _packages():
        init = ROOT.parent.joinpath(*name.split("."), "__init__.py")
        tree = ast.parse(init.read_text(encoding="utf-8"))
        bound = set()
        for node in [*tree.body, *(n for top in tree.body if isinstance(top, ast.If) for n in top.body)]:
            if isinstance(node, ast.ImportFrom | ast.Import):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                bound.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bound.update(t.id for t in targets if isinstance(t, ast.Name))
        package = importlib.import_module(name)
        unbound += [f"{name}.{a}" for a in getattr(package, "__all__", ()) if a not in bound]
    assert not unbound, unbound


def test_every_api_entry_in_a_private_module_is_exported_by_a_package():
    """A name the API reference documents at its private defining module (``::: popdyn.a._b.Name``) is importable
    from a package: a user never needs the private path."""
    exported = set()
    for name in _packages():
        package = importlib.import_module(name)
        exported |= {id(getattr(package, a)) for a in getattr(package, "__all__", ())}
    orphans = []
    for page in sorted(DOCS.rglob("*.md")):
        for path in re.findall(r"^::: ([\w.]+)\s*$", page.read_text(encoding="utf-8"), re.M):
            parts = path.split(".")
            private = [i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")]
            if not private or private[-1] + 1 >= len(parts):
                continue
            module = importlib.import_module(".".join(parts[: private[-1] + 1]))
            obj = getattr(module, parts[private[-1] + 1])
            if id(obj) not in exported:
                orphans.append(f"{page.relative_to(DOCS)}: {path}")
    assert not orphans, "documented names no package exports:\n" + "\n".join(orphans)
