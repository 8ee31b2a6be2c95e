"""The built site: ``mkdocs build --strict`` passes (every warning an error, API reference included), every notebook
has its page, every model page its figure, and the documentation's formulas render. pymdownx.arithmatex (generic
mode) turns ``$…$`` and ``$$…$$`` in docs/*.md into ``<span class="arithmatex">\\(…\\)</span>`` and
``<div class="arithmatex">\\[…\\]</div>``, which MathJax, configured by ``docs/javascripts/mathjax.js``, typesets in
the browser (mkdocs.yml, ``markdown_extensions`` and ``extra_javascript``).

One build (about 25 s) serves every test here: the model pages carry inline and display maths, every page loads the
MathJax configuration before MathJax itself, and no page shows TeX outside arithmatex's markup (a ``$`` pair or
``\\frac`` that arithmatex did not catch, for example a formula that a Markdown table or emphasis broke apart).
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the site's build, about 25 s

REPO = Path(__file__).resolve().parents[1]
MODEL_PAGES = ("markov", "decision_lists", "scan_snap", "scb", "teacher")

MATHS = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
CODE = re.compile(r"<(code|pre|script|style)\b.*?</\1>|<div class=\"clipboard-copy-txt\"[^>]*>.*?</div>", re.S)
# A notebook's markdown cell, whose $…$ and $$…$$ MathJax typesets in the browser (javascripts/mathjax.js processes
# the class jp-RenderedMarkdown); its formulas are dropped before the check, the rest of the page is checked as is.
NOTEBOOK_CELL = re.compile(r'<div class="[^"]*\bjp-RenderedMarkdown\b[^"]*"[^>]*>.*?</div>', re.S)
CELL_MATHS = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
# TeX that should have been typeset: a command, a braced sub- or superscript, MathJax's delimiters, a $ pair.
RAW_TEX = re.compile(
    r"\\(?:frac|sqrt|mathrm|mathcal|mathbb|text|lVert|lvert|sum|lambda)\b|[_^]\{|\\[()[\]]|\$[^$<>\n]+\$"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built once with ``mkdocs build --strict``: its folder."""
    for module in ("mkdocs", "mkdocstrings", "material", "mkdocs_jupyter"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")
    out_dir = tmp_path_factory.mktemp("docs") / "site"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out_dir


def test_the_site_shows_every_notebook_and_every_model_figure(site):
    """The build passed (the fixture); each notebook has a page that shows its title and its longest line of code,
    with no link left to ../docs/ (docs/hooks/notebook_links.py), and each model page has its figure."""
    assert (site / "models" / "markov" / "index.html").is_file()
    for notebook in sorted((REPO / "notebooks").glob("*.ipynb")):
        page = site / "notebooks" / notebook.stem / "index.html"
        assert page.is_file(), f"no page for notebooks/{notebook.name}"
        text = page.read_text(encoding="utf-8")
        shown = html.unescape(re.sub(r"<[^>]+>", "", text))
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        title = "".join(cells[0]["source"]).splitlines()[0].lstrip("# ")
        code = max("".join(next(c for c in cells if c["cell_type"] == "code")["source"]).splitlines(), key=len)
        assert title in shown and code in shown, f"{page} does not show notebooks/{notebook.name}"
        assert 'href="../docs/' not in text, f"{page} keeps a link to ../docs/ (docs/hooks/notebook_links.py)"
    for page in MODEL_PAGES:
        assert (site / "models" / "img" / f"{page}.png").is_file(), page


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def _pages(site: Path) -> list[Path]:
    """Every HTML page but the API reference, whose text is the package's docstrings: plain text written for
    ``help()`` and the terminal, not TeX."""
    return [p for p in sorted(site.rglob("*.html")) if p.relative_to(site).parts[0] != "api"]


@pytest.mark.parametrize("page", MODEL_PAGES)
def test_the_model_pages_typeset_inline_and_display_maths(site, page):
    html = _page(site, f"models/{page}")
    assert '<span class="arithmatex">\\(' in html, page
    assert '<div class="arithmatex">\\[' in html, page
    for tag, body in MATHS.findall(html):
        opening, closing = ("\\(", "\\)") if tag == "span" else ("\\[", "\\]")
        assert body.startswith(opening) and body.endswith(closing), (page, body[:80])
        assert "<" not in body, f"Markdown formatted the inside of a formula on {page}: {body[:120]}"


def test_the_markov_page_carries_its_formulas(site):
    """A few formulas of docs/models/markov.md, exactly as MathJax receives them."""
    html = _page(site, "models/markov")
    for tex in (
        r"\(x_{n+1}\)",
        r"\(A^* = \ln \frac{(1 - p)(1 - q)}{pq}\)",
        r"\(E_{\text{sad}} = -(1 + \ln 2)/2 \approx -0.8465736\)",
        r"\(\lambda_{\max}\)",  # in a table cell
    ):
        assert tex in html, tex


def test_every_page_loads_the_mathjax_configuration_before_mathjax(site):
    for path in [*_pages(site), site / "api" / "index.html"]:
        html = path.read_text(encoding="utf-8")
        scripts = re.findall(r'<script src="([^"]+)"', html)
        config = [i for i, src in enumerate(scripts) if src.endswith("javascripts/mathjax.js")]
        mathjax = [i for i, src in enumerate(scripts) if re.search(r"mathjax@3/es5/tex-\w+(?:-\w+)*\.js$", src)]
        assert config and mathjax and config[0] < mathjax[0], (path.relative_to(site), scripts)
    config = (site / "javascripts" / "mathjax.js").read_text(encoding="utf-8")
    for setting in (
        'processHtmlClass: "arithmatex|jp-RenderedMarkdown"',
        'ignoreHtmlClass: ".*|"',
        "document$.subscribe",
        "typesetPromise",
    ):
        assert setting in config, setting


def test_no_page_shows_tex_outside_the_formulas(site):
    leftovers = []
    for path in _pages(site):
        html = NOTEBOOK_CELL.sub(lambda m: CELL_MATHS.sub("", m.group(0)), path.read_text(encoding="utf-8"))
        text = CODE.sub("", MATHS.sub("", html))
        leftovers += [
            f"{path.relative_to(site)}: …{text[max(m.start() - 60, 0) : m.end() + 20]!r}…"
            for m in RAW_TEX.finditer(text)
        ]
    assert not leftovers, "TeX that is not typeset (write it as $…$ or $$…$$):\n" + "\n".join(leftovers[:20])
