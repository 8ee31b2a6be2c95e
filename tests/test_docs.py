"""The documentation site (``mkdocs.yml``, ``docs/``) and every reference to it.

* Every ``docs/<path>.md`` named in the package, the tests, the notebooks and README.md exists, and every section
  number ``§N.M`` cited there is a heading of the model page it refers to: the page named just before it
  (``docs/models/markov.md §4.4``), else the one the file names nearest before it (a module names its page once,
  in its docstring, and then cites bare ``§4.4``). No reference points outside the repository.
* ``mkdocs build --strict`` passes (broken links, anchors and API references fail it), when mkdocs is installed,
  and builds a page for every notebook of notebooks/.
* Every name in the ``__all__`` of a public subpackage has a ``::: module.Name`` entry in the docs, at its defining
  module.
* The CLI reference (docs/cli.md) is what ``popdyn.jobs.reference`` generates from the job registry
  (``python -m popdyn.jobs.reference`` rewrites it): every job with exactly its options, as ``--help`` shows
  them, and the figures of ``popdyn reproduce``; a help text citing a missing model-page section fails it.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SOURCES = (
    sorted((REPO / "popdyn").rglob("*.py"))
    + sorted((REPO / "tests").rglob("*.py"))
    + sorted((REPO / "notebooks").glob("*.ipynb"))
    + [REPO / "README.md"]
)

DOC_REF = re.compile(r"docs/[\w./-]+?\.md")
PAGE_REF = re.compile(r"docs/models/(\w+)\.md")
SECTION = r"§(\d+(?:\.\d+)*)(?: ([A-D])\b)?"
SECTION_REF = re.compile(SECTION)
HEADING = re.compile(r"^#{1,6} " + SECTION, re.M)
STALE = re.compile(r"spec [`']?\w+\.md|DESIGN\.md|shared/specs|\.\./shared|/work/shared")
MODEL_PAGES = ("markov", "decision_lists", "scan_snap", "scb", "teacher")
PUBLIC = (
    "popdyn",
    "popdyn.analysis",
    "popdyn.dynamics",
    "popdyn.exact",
    "popdyn.tasks",
    "popdyn.tasks.markov",
    "popdyn.tasks.decision_list",
    "popdyn.tasks.scan_snap",
    "popdyn.tasks.scb",
    "popdyn.tasks.teacher",
    "popdyn.figures",
)
"""The public subpackages: every name of their ``__all__`` has an API entry."""
API_ENTRY = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _headings(page: str) -> set[str]:
    """The section numbers of a model page's headings: "4.4", "3 C", …"""
    text = _text(DOCS / "models" / f"{page}.md")
    return {num + (f" {letter}" if letter else "") for num, letter in HEADING.findall(text)}


def _section_refs(text: str) -> list[tuple[int, str]]:
    """(offset, "4.4" or "3 C") for every § reference, ranges "§4–§5" included."""
    return [(m.start(), m.group(1) + (f" {m.group(2)}" if m.group(2) else "")) for m in SECTION_REF.finditer(text)]


def test_every_docs_reference_names_an_existing_page():
    missing = []
    for path in SOURCES:
        for ref in sorted(set(DOC_REF.findall(_text(path)))):
            if not (REPO / ref).is_file():
                missing.append(f"{_rel(path)}: {ref}")
    assert not missing, "references to pages that do not exist:\n" + "\n".join(missing)


def test_no_reference_points_outside_the_repository():
    stale = []
    for path in [*SOURCES, *sorted(DOCS.rglob("*.md"))]:
        if path == Path(__file__).resolve():
            continue
        for i, line in enumerate(_text(path).splitlines(), 1):
            if STALE.search(line):
                stale.append(f"{_rel(path)}:{i}: {line.strip()[:100]}")
    assert not stale, "references to documents users do not have (use docs/models/*.md, docs/architecture.md):\n" + (
        "\n".join(stale)
    )


def test_every_cited_section_is_a_heading_of_its_model_page():
    problems = []
    for path in SOURCES:
        text = _text(path)
        refs = _section_refs(text)
        if not refs:
            continue
        pages = [(m.start(), m.end(), m.group(1)) for m in PAGE_REF.finditer(text)]
        if not pages:
            problems.append(f"{_rel(path)} cites § numbers but names no page docs/models/<model>.md")
            continue
        for at, number in refs:
            before = [p for p in pages if p[0] < at]
            page = before[-1][2] if before else pages[0][2]
            if number not in _headings(page):
                line = text.count("\n", 0, at) + 1
                problems.append(f"{_rel(path)}:{line}: §{number} is not a heading of docs/models/{page}.md")
    assert not problems, "\n".join(problems)


def test_the_model_pages_number_their_sections():
    for page in MODEL_PAGES:
        assert {"1", "2", "3"} <= _headings(page), page


def _api_entries() -> set[str]:
    """The dotted paths of every ``::: path`` entry of the docs."""
    return {path for page in sorted(DOCS.rglob("*.md")) for path in API_ENTRY.findall(_text(page))}


def _resolve(path: str):
    """The object a dotted path names: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is None or not name.startswith(err.name):
                raise
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


def _home(obj) -> str | None:
    """The module that defines a class or function (None for constants and wrapped callables)."""
    return obj.__module__ if inspect.isclass(obj) or inspect.isfunction(obj) else None


def test_every_exported_name_has_an_api_entry():
    """Each name of a public subpackage's ``__all__`` has a ``::: module.Name`` entry somewhere under docs/ that
    names that very object, a class or function at its defining module; an exported subpackage is covered by its
    own walk, or by entries under it."""
    entries = _api_entries()
    by_name: dict[str, list[str]] = {}
    for path in entries:
        by_name.setdefault(path.rsplit(".", 1)[-1], []).append(path)
    missing = []
    for package in PUBLIC:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                if obj.__name__ not in PUBLIC and not any(e.startswith(obj.__name__ + ".") for e in entries):
                    missing.append(f"{package}.{name} (no entry under {obj.__name__})")
                continue
            home = _home(obj)
            found = [p for p in by_name.get(name, []) if _resolve(p) is obj]
            if not found or (home is not None and f"{home}.{name}" not in found):
                want = f"::: {home}.{name}" if home else f"::: <defining module>.{name}"
                missing.append(f"{package}.{name} (want `{want}`, found {found or 'none'})")
    assert not missing, "exported names without an API entry in docs/:\n" + "\n".join(missing)


def test_every_api_entry_names_an_existing_object():
    """No ``:::`` entry points at a name that does not exist (mkdocs would fail too, but later and slower)."""
    broken = []
    for path in sorted(_api_entries()):
        try:
            _resolve(path)
        except (ImportError, AttributeError) as err:
            broken.append(f"{path}: {err}")
    assert not broken, "\n".join(broken)


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (pip install -e '.[docs]')"
)
def test_mkdocs_build_strict(tmp_path):
    """The whole site, API reference included, with every warning an error (about 5 s)."""
    if any(importlib.util.find_spec(m) is None for m in ("mkdocstrings", "material", "mkdocs_jupyter")):
        pytest.skip("mkdocs-material, mkdocstrings or mkdocs-jupyter is not installed (pip install -e '.[docs]')")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "models" / "markov" / "index.html").is_file()
    for notebook in sorted((REPO / "notebooks").glob("*.ipynb")):
        page = site / "notebooks" / notebook.stem / "index.html"
        assert page.is_file(), f"no page for notebooks/{notebook.name}"
        shown = html.unescape(re.sub(r"<[^>]+>", "", _text(page)))
        cells = json.loads(_text(notebook))["cells"]
        title = "".join(cells[0]["source"]).splitlines()[0].lstrip("# ")
        code = max("".join(next(c for c in cells if c["cell_type"] == "code")["source"]).splitlines(), key=len)
        assert title in shown and code in shown, f"{page} does not show notebooks/{notebook.name}"
        assert 'href="../docs/' not in _text(page), f"{page} keeps a link to ../docs/ (docs/hooks/notebook_links.py)"


def _cli_sections(text: str) -> dict[str, str]:
    """Heading text → section body of a CLI reference page, for the headings that name a ``popdyn`` command."""
    parts = re.split(r"^(#{2,3} `popdyn [^`]+`)\s*$", text, flags=re.M)
    return {parts[i].split("`")[1]: parts[i + 1] for i in range(1, len(parts), 2)}


def _flags(body: str) -> list[str]:
    """The flags of a section's option table, in order."""
    return re.findall(r"^\| `(-[-\w]+)", body, flags=re.M)


def test_the_cli_reference_is_generated_from_the_registry():
    """docs/cli.md is exactly what ``popdyn.jobs.reference.render()`` makes of the registry."""
    import difflib

    from popdyn.jobs.reference import render

    page, generated = _text(DOCS / "cli.md"), render()
    diff = difflib.unified_diff(page.splitlines(), generated.splitlines(), "docs/cli.md", "render()", lineterm="")
    assert page == generated, (
        "docs/cli.md differs from what the registry generates; run `python -m popdyn.jobs.reference`:\n"
        + "\n".join(list(diff)[:60])
    )


def test_the_generated_reference_lists_every_job_with_its_options_and_every_figure():
    """The generated page has a section for every job of the registry and no other, with the job's options in
    order and the checkpoint line where it takes one, a section for every command, and every figure."""
    from popdyn.figures import FIGURES
    from popdyn.jobs.reference import render
    from popdyn.jobs.registry import COMMANDS, MODEL, REGISTRY

    sections = _cli_sections(render())
    jobs = {}
    for heading, body in sections.items():
        words = heading.split()
        if len(words) == 3 and words[1] in COMMANDS:
            task = MODEL if words[2] == "module.path:factory" else words[2]
            jobs[(words[1], task)] = body
    assert set(jobs) == set(REGISTRY), "the reference lists other jobs than the registry"
    for key, job in REGISTRY.items():
        listed = _flags(jobs[key])
        assert listed == [o.flag for o in job.options], key
        assert ("--checkpoint" in jobs[key]) == job.takes_checkpoint, key
    assert {f"popdyn {c}" for c in COMMANDS} | {"popdyn demo", "popdyn reproduce"} <= set(sections)
    body = sections["popdyn reproduce"]
    assert re.findall(r"^\| `([\w-]+)` \|", body, flags=re.M) == list(FIGURES)


def test_the_reference_shows_each_option_as_its_help_does(capsys, monkeypatch):
    """Every option's flag and values in the reference are those ``popdyn COMMAND TASK --help`` prints (where the
    help lists an option's choices, the reference names the value and lists the choices beside it)."""
    from popdyn.cli import main
    from popdyn.jobs.reference import metavar
    from popdyn.jobs.registry import REGISTRY

    monkeypatch.setenv("COLUMNS", "400")
    for (command, task), job in REGISTRY.items():
        assert main([command, task, "--help"]) == 0
        shown = capsys.readouterr().out
        for o in job.options:
            values = metavar(o).replace("…", "...")
            if o.choices is not None:
                values = values.replace(o.dest.upper(), "{" + ",".join(map(str, o.choices)) + "}")
            assert re.search(rf"^  {re.escape(f'{o.flag} {values}')}(  |$)", shown, re.M), (command, task, values)


def test_a_help_text_citing_a_missing_section_or_page_fails_the_reference(monkeypatch):
    """A citation ``docs/models/<model>.md §N`` becomes a link to that heading; one of a section or a page that
    does not exist, or a § number without its page, is a ValueError, and so is ``render()`` when an option's help
    has one."""
    import dataclasses

    from popdyn.jobs import reference, registry

    assert reference.linked("basins (docs/models/markov.md §4.4)") == (
        "basins ([§4.4](models/markov.md#44-basins-and-limits))"
    )
    assert reference.linked("docs/models/decision_lists.md §3 C").endswith("#3-c-structured-reduction)")
    sign = "\N{SECTION SIGN}"  # not written out: the citation checks above read this file too
    missing = [f"docs/models/markov.md {sign}4.9", f"docs/models/markov.md {sign}3 C", f"see {sign}4.4"]
    for text in [*missing, "docs/models/" + f"nope.md {sign}1", "docs/" + "nope.md"]:
        with pytest.raises(ValueError):
            reference.linked(text)
    job = registry.REGISTRY[("basins", "markov")]
    bad = dataclasses.replace(job.options[0], help=f"P(next=1 | current=0) ({missing[0]})")
    monkeypatch.setitem(registry.REGISTRY, ("basins", "markov"), dataclasses.replace(job, options=(bad,)))
    with pytest.raises(ValueError, match=r"markov\.md has no heading §4\.9"):
        reference.render()
