"""Regenerate the figures of docs/sgd.md with popdyn: the figures ``popdyn stepsize ... --batch B`` draws.

    python docs/img/make_figures.py              # both
    python docs/img/make_figures.py lsq          # one (or several) by name

Each figure is the one the command named in its caption writes to ``stepsize.png``, made by the same job function
in float64 and saved here as ``sgd_<name>.png`` by the model pages' ``save`` (docs/models/img/make_figures.py: at
most 150 kB). ``lsq`` runs on the module ``lsq.py`` that docs/sgd.md shows in "In the step-size audit and on the
command line", read from the page. Each takes a few seconds on two CPU cores; the library never imports this file.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent / "sgd.md"
SECTION = "## In the step-size audit and on the command line"


def _model_pages_script():
    """docs/models/img/make_figures.py as a module: its ``save`` writes the PNGs here too."""
    spec = importlib.util.spec_from_file_location("make_figures", HERE.parent / "models" / "img" / "make_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page_module(name: str) -> None:
    """Save the first Python block of the page's section as ``name.py`` in a temporary folder on sys.path, as a
    user saves it to run the section's commands."""
    section = PAGE.read_text(encoding="utf-8").split(SECTION, 1)[1]
    code = re.search(r"^```python\n(.*?)^```", section, flags=re.M | re.S)
    if code is None:
        raise ValueError(f"{PAGE.name}: the section {SECTION!r} shows no Python block")
    folder = Path(tempfile.mkdtemp(prefix="popdyn-docs-"))
    (folder / f"{name}.py").write_text(code.group(1), encoding="utf-8")
    sys.path.insert(0, str(folder))


def _lsq():
    """popdyn stepsize lsq:regression --lr 1.5 1.9 2.2 --batch 2 --sampling without-replacement"""
    from popdyn.jobs._model import stepsize_model

    _page_module("lsq")
    return stepsize_model("lsq:regression", lr=[1.5, 1.9, 2.2], batch=2, sampling="without-replacement")


def _markov():
    """popdyn stepsize markov --lr 0.5 0.9 --batch 2"""
    from popdyn.jobs.markov._commands import stepsize_markov

    return stepsize_markov(lrs=[0.5, 0.9], batch=2)


FIGURES: dict[str, Callable] = {"lsq": _lsq, "markov": _markov}
"""Figure name → the job call (its docstring: the command) whose ``Result`` holds the figure ``stepsize``."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"figures, of {', '.join(FIGURES)} (default: all)")
    names = parser.parse_args(argv).names or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure {unknown[0]!r}: must be one of {', '.join(FIGURES)}")
    jax.config.update("jax_enable_x64", True)
    save = _model_pages_script().save
    for name in names:
        t0 = time.perf_counter()
        result = FIGURES[name]()
        size, dpi = save(result.figures["stepsize"], HERE / f"sgd_{name}.png")
        print("\n".join(result.lines))
        print(f"sgd_{name}.png: {size / 1e3:.0f} kB at {dpi} dpi, {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
