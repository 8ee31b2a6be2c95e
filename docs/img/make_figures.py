"""Regenerate the figures of docs/sgd.md with popdyn: the figures ``popdyn stepsize ... --batch B`` draws, and the
band of uncertain starts of SGD's basin map as probabilities.

    python docs/img/make_figures.py              # all three
    python docs/img/make_figures.py lsq          # one (or several) by name
    python docs/img/make_figures.py band         # "Basin maps as probabilities" (~3 min)

Each step-size figure (``FIGURES``) is the one the command named in its caption writes to ``stepsize.png``, made by
the same job function in float64 and saved here as ``sgd_<name>.png`` by the model pages' ``save``
(docs/models/img/make_figures.py: at most 150 kB). ``lsq`` runs on the module ``lsq.py`` that docs/sgd.md shows in
"In the step-size audit and on the command line", read from the page. Each takes a few seconds on two CPU cores.
``band`` (``sgd_band.png``) runs the measurement of ``python -m benchmarks.sgd_band`` (same seeds, same numbers) and
draws one of its maps beside the measured widths against η/B. Every figure runs under popdyn's XLA guard, as the
command line does; the library never imports this file.
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
import numpy as np

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

BAND = "band"
"""The figure of "Basin maps as probabilities": ``_band``."""
BAND_MAP = (0.05, 1)
"""The (η, B) whose map the band figure draws: the widest band of the benchmark."""


def _band():
    """(the figure ``sgd_band.png``, its lines): ``benchmarks.sgd_band``'s bands at every (η, B); left, the map of
    probabilities at ``BAND_MAP`` with the flow's separatrix; right, the measured widths W ± 1 SE against η/B on
    log-log axes, the prediction 2·z₀.₉·s at each point and the line 2·z₀.₉·√(η/(2B)) (η → 0)."""
    sys.path.insert(0, str(HERE.parent.parent))  # the repository root, for the benchmarks package
    from benchmarks.sgd_band import Z90, fits, measure_all, table
    from popdyn.plot import plot_basin_probabilities

    bands = measure_all()
    measured, predicted = fits(bands)
    shown = next(b for b in bands if (b.lr, b.batch) == BAND_MAP)
    fig = plot_basin_probabilities(shown.probabilities, "u>0", separatrix=shown.flow)
    fig.set_size_inches(12.5, 4.8)
    left = fig.axes[0]
    grid = fig.add_gridspec(1, 2, width_ratios=(6.5, 6))
    left.set_subplotspec(grid[0])
    left.set_title(f"P(u>0), η = {shown.lr:g}, B = {shown.batch}: {left.get_title()}")
    ax = fig.add_subplot(grid[1])
    ratios = np.array([b.ratio for b in bands])
    line = np.geomspace(ratios.min() / 1.5, ratios.max() * 1.5, 50)
    ax.plot(line, 2 * Z90 * np.sqrt(line / 2), "k-", lw=1.0, label="2·z₀.₉·√(η/(2B))  (slope 1/2)")
    for batch, marker in zip(sorted({b.batch for b in bands}), "osd^v", strict=False):
        mine = [b for b in bands if b.batch == batch]
        x = [b.ratio for b in mine]
        ax.errorbar(
            x,
            [b.fit.width for b in mine],
            [b.fit.width_se for b in mine],
            fmt=marker,
            ms=5,
            capsize=2,
            label=f"measured, B = {batch}",
        )
        ax.plot(x, [b.predicted for b in mine], marker, mfc="none", mec="k", ms=9, lw=0)
    ax.plot([], [], "o", mfc="none", mec="k", ms=9, label="predicted 2·z₀.₉·s")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="η/B",
        ylabel="band width W (0.1 < p < 0.9, along u)",
        title=f"fitted exponent α = {measured.exponent:.3f} ± {measured.exponent_se:.3f} "
        f"(predicted {predicted.exponent:.3f})",
    )
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    return fig, table(bands)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    known = [*FIGURES, BAND]
    parser.add_argument("names", nargs="*", help=f"figures, of {', '.join(known)} (default: all)")
    names = parser.parse_args(argv).names or known
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown figure {unknown[0]!r}: must be one of {', '.join(known)}")
    from popdyn._xla import guard_xla

    guard_xla()  # before JAX's backend starts, as the command line does
    jax.config.update("jax_enable_x64", True)
    save = _model_pages_script().save
    for name in names:
        t0 = time.perf_counter()
        if name == BAND:
            fig, lines = _band()
        else:
            result = FIGURES[name]()
            fig, lines = result.figures["stepsize"], result.lines
        size, dpi = save(fig, HERE / f"sgd_{name}.png")
        print("\n".join(lines))
        print(f"sgd_{name}.png: {size / 1e3:.0f} kB at {dpi} dpi, {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
