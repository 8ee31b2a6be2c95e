"""The width of SGD's band of uncertain starts (docs/sgd.md, "Basin maps as probabilities"), measured as
benchmarks/sgd_band.py measures it for the page's table and figure: a probit Φ((u0 − m)/ŝ) fitted to the runs of
``popdyn.basin_probabilities`` ending at u > 0 on the double well with a noisy tilt, W = 2·z₀.₉·ŝ.

tests/test_sgd_basins.py checks each start's count against Binomial(S, Φ(u0/s)) at two step sizes of one batch size.
Here: the estimator itself (exact on exact counts, standard errors that match the spread of repeated fits), and the
batch size's part in s² = ησ²/(Bμ(2 + ημ)): equal η/B gives an equal width, and a quarter of η/B half the width."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

import popdyn
from benchmarks.sgd_band import Z90, band_fit, band_grid, fit_probit, predicted_scale, wells
from popdyn.dynamics import SGD, GradientDescent

SE_LIMIT = 4.0
REPO = Path(__file__).resolve().parents[1]
SGD_MD = REPO / "docs" / "sgd.md"


def _section(path: Path, heading: str) -> str:
    text = path.read_text(encoding="utf-8")
    assert heading in text, f"{path.name} has no section {heading!r}"
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def _rows(section: str, cells: int) -> dict[tuple[str, str], list[str]]:
    """The table rows of ``section`` whose first cell is a number: (η, B) → their first ``cells`` cells."""
    rows = [ln.strip().strip("|").split("|") for ln in section.splitlines() if re.match(r"\| [0-9]", ln)]
    return {(r[0].strip(), r[1].strip()): [c.strip() for c in r[:cells]] for r in rows}


def test_the_page_shows_the_benchmarks_numbers_and_figure():
    """docs/sgd.md's "Basin maps as probabilities" shows the table, exponent and fit that ``python -m
    benchmarks.sgd_band`` wrote into benchmarks/RESULTS.md, cell for cell, and the figure
    ``python docs/img/make_figures.py band`` makes (a PNG of at most 150 kB, its caption naming the command)."""
    page = _section(SGD_MD, "## Basin maps as probabilities")
    results = _section(REPO / "benchmarks" / "RESULTS.md", "## SGD's band of uncertain starts")
    shown, written = _rows(page, 7), _rows(results, 7)
    assert len(shown) == 12 and shown == written
    alpha = re.search(r"\*\*α = ([0-9.]+ ± [0-9.]+)\*\* \(χ² = ([0-9.]+) on (\d+) d", results)
    assert alpha is not None
    prose = " ".join(page.split())  # the page's text with its line breaks as spaces
    assert f"**α = {alpha.group(1)}** (χ² = {alpha.group(2)} on {alpha.group(3)} degrees of freedom)" in prose
    predicted = re.search(r"predicted widths gives ([0-9.]+) .*?, \+?(-?[0-9.]+) SE away", results)
    assert predicted is not None
    assert f"widths gives {predicted.group(1)} " in prose and f"{predicted.group(2)} standard errors away" in prose
    png = SGD_MD.parent / "img" / "sgd_band.png"
    assert "](img/sgd_band.png)" in page and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png.read_bytes()) <= 150_000
    assert "`python docs/img/make_figures.py band`" in page.split("](img/sgd_band.png)", 1)[1]
    spec = importlib.util.spec_from_file_location("sgd_figures", SGD_MD.parent / "img" / "make_figures.py")
    assert spec is not None and spec.loader is not None
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    assert figures.BAND == "band"


def test_the_probit_fit_is_exact_on_exact_counts_and_its_errors_are_the_spread_of_repeated_fits():
    """On counts k = n·Φ((u − m)/s) the maximum-likelihood fit is (m, s) itself with zero deviance; on 400 binomial
    draws of the same design the z-scores (estimate − truth)/SE of the width and the centre have mean 0 and standard
    deviation 1, each within 4 of its own standard errors (1/√R and 1/√(2R))."""
    m, s, n = 0.01, 0.1, 128
    u = np.linspace(-3 * s, 3 * s, 16)
    p = norm.cdf((u - m) / s)
    exact = fit_probit(u, n * p, np.full(u.shape, n))
    np.testing.assert_allclose([exact.centre, exact.scale], [m, s], rtol=1e-10)
    assert exact.width == pytest.approx(2 * Z90 * s, rel=1e-10) and exact.deviance == pytest.approx(0.0, abs=1e-12)
    assert exact.dof == 14
    rng = np.random.default_rng(5)
    repeats = 400
    z_width, z_centre = [], []
    for k in rng.binomial(n, p, size=(repeats, u.size)):
        fit = fit_probit(u, k, np.full(u.shape, n))
        z_width.append((fit.width - 2 * Z90 * s) / fit.width_se)
        z_centre.append((fit.centre - m) / fit.centre_se)
    for z in (np.array(z_width), np.array(z_centre)):
        assert abs(z.mean()) <= SE_LIMIT / math.sqrt(repeats), z.mean()
        assert abs(z.std(ddof=1) - 1) <= SE_LIMIT / math.sqrt(2 * repeats), z.std(ddof=1)


@pytest.mark.validation
def test_counts_that_cannot_fix_a_band_are_refused():
    u, n = np.linspace(-1, 1, 6), np.full(6, 10)
    with pytest.raises(ValueError, match="k has 1 counts strictly between 0 and n"):
        fit_probit(u, np.array([0, 0, 0, 5, 10, 10]), n)
    with pytest.raises(ValueError, match="0 ≤ k ≤ n"):
        fit_probit(u, np.array([0, 0, 3, 5, 11, 10]), n)
    with pytest.raises(ValueError, match="falls with u"):
        fit_probit(u, np.array([10, 9, 7, 4, 1, 0]), n)


@pytest.mark.slow  # SGD compiled for two batch sizes and GD for the settling: ~25 s on two shared cores
def test_the_band_width_goes_as_the_square_root_of_eta_over_b():
    """``basin_probabilities`` at (η, B) = (0.005, 1), (0.02, 4) (the same η/B) and (0.02, 1) (four times it), 128
    runs from each of 2 × 16 starts, SGD for 1000 steps (η·steps ≥ 5), end points settled by GD: each width W within
    4 SE of 2·z₀.₉·s; W(0.02, 4)/W(0.005, 1) the predicted √(2.005/2.02) ≈ 0.996 (equal η/B, the factor 1/(2 + η)
    apart) and W(0.02, 1)/W(0.02, 4) = 2, each within 4 SE of the ratio. (Small steps: at η = 0.05 the benchmark
    finds widths 1–4 % above the linearised prediction.)"""
    prob = wells()
    settle = GradientDescent(lr=0.5, steps=200)  # contracts by ≤ 1/2 a step at both minima (Hessians 2 and 1)
    fits = {}
    for lr, batch in [(0.005, 1), (0.02, 1), (0.02, 4)]:
        sgd = SGD(lr=lr, batch=batch, steps=1000, seeds=128, seed=3)
        bp = popdyn.basin_probabilities(prob, band_grid(lr, batch, (2, 16)), sgd, settle=settle)
        assert np.all(bp.probability("unresolved") == 0.0)
        fits[lr, batch] = fit = band_fit(bp)
        predicted = 2 * Z90 * predicted_scale(lr, batch)
        assert abs(fit.width - predicted) <= SE_LIMIT * fit.width_se, (lr, batch, fit, predicted)

    def ratio(a, b):
        fa, fb = fits[a], fits[b]
        r = fa.width / fb.width
        return r, r * math.hypot(fa.width_se / fa.width, fb.width_se / fb.width)

    equal, equal_se = ratio((0.02, 4), (0.005, 1))
    assert abs(equal - math.sqrt(2.005 / 2.02)) <= SE_LIMIT * equal_se, (equal, equal_se)
    double, double_se = ratio((0.02, 1), (0.02, 4))
    assert abs(double - 2.0) <= SE_LIMIT * double_se, (double, double_se)
    assert double - SE_LIMIT * double_se > math.sqrt(2)  # B enters as 1/√B, not as 1/B^{1/4}
