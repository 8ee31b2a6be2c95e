"""Regenerate the figures of the model pages (docs/models/*.md) with popdyn, at small settings.

    python docs/models/img/make_figures.py            # all five
    python docs/models/img/make_figures.py markov     # one (or several) by page name

Each figure is one popdyn call (a paper figure of ``popdyn.figures`` or a command-line job's function), run in
float64 as the command line runs it, and saved here as ``<page>.png`` at 100 dpi; a file larger than ``MAX_BYTES``
is reduced to a 256-colour palette, then to 10 dpi less at a time until it fits (the site shows figures about 800
pixels wide). The pages' captions name the same calls. Each takes under a minute on two CPU cores; the library never
imports this file.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
from PIL import Image

HERE = Path(__file__).resolve().parent
DPI = 100
MAX_BYTES = 150_000


def _markov():
    from popdyn.figures import markov_fig1

    return markov_fig1(n_basin=40, progress=False)


def _decision_lists():
    from popdyn.jobs.decision_list.commands import converge_decision_list

    return converge_decision_list(L=8, n=3, M=3)


def _scan_snap():
    from popdyn.figures import scan_snap_fig4

    return scan_snap_fig4(steps=40, progress=False)


def _scb():
    from popdyn.figures import scb_fig1

    return scb_fig1(steps=1000, progress=False)


def _teacher():
    from popdyn.figures import teacher_heatmaps

    return teacher_heatmaps(horizon=30.0, progress=False)


FIGURES: dict[str, Callable] = {
    "markov": _markov,
    "decision_lists": _decision_lists,
    "scan_snap": _scan_snap,
    "scb": _scb,
    "teacher": _teacher,
}
"""Model page → the popdyn call whose ``Result`` holds its figure (the first of ``Result.figures``)."""


def _png(fig, dpi: int, palette: bool) -> bytes:
    """``fig`` as PNG bytes at ``dpi``, in full colour or reduced to a 256-colour palette."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pil_kwargs={"optimize": True})
    if not palette:
        return buf.getvalue()
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(colors=256)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def save(fig, path: Path) -> tuple[int, int]:
    """Write ``fig`` to ``path`` as the first PNG of at most ``MAX_BYTES``: full colour at ``DPI``, then a palette at
    ``DPI``, ``DPI`` − 10, …, 50 dpi (ValueError if none fits); return (bytes, dpi)."""
    for dpi, palette in [(DPI, False), *((d, True) for d in range(DPI, 49, -10))]:
        data = _png(fig, dpi, palette)
        if len(data) <= MAX_BYTES:
            path.write_bytes(data)
            return len(data), dpi
    raise ValueError(f"{path.name} exceeds {MAX_BYTES} bytes even at 50 dpi: simplify the figure")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", help=f"model pages, of {', '.join(FIGURES)} (default: all)")
    pages = parser.parse_args(argv).pages or list(FIGURES)
    unknown = [p for p in pages if p not in FIGURES]
    if unknown:
        parser.error(f"unknown page {unknown[0]!r}: must be one of {', '.join(FIGURES)}")
    jax.config.update("jax_enable_x64", True)
    for page in pages:
        t0, cpu0 = time.perf_counter(), time.process_time()
        result = FIGURES[page]()
        fig = next(iter(result.figures.values()))
        size, dpi = save(fig, HERE / f"{page}.png")
        print("\n".join(result.lines))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        print(f"{page}.png: {size / 1e3:.0f} kB at {dpi} dpi, {wall:.1f} s ({cpu:.1f} CPU-seconds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
