"""The README tells the truth about the repository: its Layout names every module of the package, and CI runs
the Quickstart's install and test command."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## )", README, flags=re.M | re.S).group(1)


def test_layout_names_every_module_of_the_package():
    modules = {p.stem if p.is_file() else p.name for p in (REPO / "popdyn").iterdir()}
    modules = {m for m in modules if m not in ("__init__", "__pycache__", "py")}
    named = set(re.findall(r"`popdyn/(\w+)(?:\.py)?`", _section("Layout")))
    assert modules == named, (
        f"missing from the Layout: {sorted(modules - named)}; not in the package: {sorted(named - modules)}"
    )


def test_ci_runs_the_quickstart_install_and_test_command():
    install, tests = re.findall(r"^```bash\n(.*?)^```", _section("Quickstart"), flags=re.M | re.S)[0].splitlines()
    ci = (REPO / ".ci" / "run").read_text()
    pip = re.search(r'pip install -e "[^"]+"', install).group(0)
    assert pip.replace("pip install", "pip install -q") in ci
    assert re.search(rf"^{re.escape(tests)}$", ci, flags=re.M)
