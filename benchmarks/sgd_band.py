"""Benchmark: the band of uncertain starts of SGD's basin map as probabilities (``popdyn.basin_probabilities``),
its width measured over a grid of step sizes η and batch sizes B against the predicted √(η/B) law.

What it measures
----------------
The model is the double well with a noisy tilt of tests/test_sgd_basins.py, written with
``Problem.from_examples``: ℓ(θ, x) = (u² − 1)²/4 + v²/2 + x·u, x = ±1 with equal weights, so L = (u² − 1)²/4 + v²/2
has the minima (±1, 0), the saddle (0, 0) with unstable rate μ = 1, and the flow's separatrix u = 0; the minibatch
noise lies along u, with per-example variance σ² = 1. Near the saddle SGD ends at u > 0 with probability Φ(u0/s),
s² = ησ²/(Bμ(2 + ημ)) (the module docstring of popdyn/analysis/_basin_probabilities.py), so the band of starts
with 0.1 < p < 0.9 has the width W = 2·z₀.₉·s, z₀.₉ = Φ⁻¹(0.9) = 1.2816, which scales as √(η/B). This model is chosen
over one with a curved separatrix because there μ and σ are the same at every point of the separatrix: the band is a
straight strip of the same width at every v, the prediction holds with no fitted constant, and the u-dynamics do not
depend on v, so the grid's rows are independent repeats of one measurement.

For every (η, B) of η ∈ {0.005, 0.01, 0.02, 0.05} (a decade) × B ∈ {1, 2, 4} (with replacement):

1. ``basin_probabilities`` over a grid of 24 values of u0 in ±3s (s the predicted one: it places the starts, it is
   not used by the fit) × 4 rows of v0 in [−0.5, 0.5], S = 128 seeds each, SGD run for 1000 steps (η·steps ≥ 5 time
   units: long enough to leave the saddle, where noise can no longer bring a run back; the settling flow does the
   rest); the same grid's ``basin_map`` under the gradient flow gives the separatrix.
2. The counts of runs ending at u > 0, pooled over the rows (512 runs at each u0), are fitted by a probit
   p(u0) = Φ((u0 − m)/ŝ) (maximum likelihood); the measured width is W = 2·z₀.₉·ŝ, its standard error from the
   binomial likelihood's Fisher information. The deviance of the fit against its χ² law checks the probit shape.
3. ln W is fitted against ln(η/B) by weighted least squares: the exponent α (expected 0.5) with its standard error.
   The prediction is not an exact power of η/B (the factor 1/(2 + η)), so α is compared with the exponent the same
   fit gives to the predicted widths.

Checks: every width within 4 SE of 2·z₀.₉·s; α within 4 SE of the predicted exponent; every band centre m within
4 SE (plus half a grid step) of the flow's separatrix; every start where SGD's outcome is certain (p̂ = 0 or 1)
has the flow's label; no run unresolved.

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.sgd_band            # ~2.5 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.sgd_band --quick    # 2 η × 2 B, 64 seeds; writes nothing unless --results
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from scipy.special import log_ndtr, xlogy
from scipy.stats import chi2, norm

import popdyn
from benchmarks._common import finish_section, make_headline, publish, quick_or_full, run_header
from popdyn.dynamics import SGD, GradientFlow
from popdyn.exact import WeightedTable

SCRIPT = "sgd_band"
HEADING = "## SGD's band of uncertain starts: width against √(η/B)"
Z90 = float(norm.ppf(0.9))
"""z₀.₉ = Φ⁻¹(0.9): the band 0.1 < p < 0.9 of p = Φ(u0/s) is 2·z₀.₉·s wide."""
SIGMA, MU = 1.0, 1.0
"""The tilt's amplitude (x = ±σ: per-example gradient variance σ² along u) and the saddle's unstable rate μ."""
LRS, BATCHES = (0.005, 0.01, 0.02, 0.05), (1, 2, 4)
STEPS = 1000
COLUMNS, ROWS, SEEDS, SPAN = 24, 4, 128, 3.0
"""The grid: COLUMNS values of u0 in ±SPAN·s × ROWS values of v0, SEEDS runs from each start."""
SE_LIMIT = 4.0


def wells() -> popdyn.Problem:
    """The double well with a noisy tilt: ℓ(θ, x) = (u² − 1)²/4 + v²/2 + x·u, x = ±σ equally weighted; attractors
    "u>0" and "u<0" named by their distance to (±1, 0)."""

    def example_loss(th, x):
        return (th["u"] ** 2 - 1) ** 2 / 4 + th["v"] ** 2 / 2 + x["x"] * th["u"]

    attractors = {
        "u>0": lambda th, d: jnp.abs(th["u"] - 1) + jnp.abs(th["v"]),
        "u<0": lambda th, d: jnp.abs(th["u"] + 1) + jnp.abs(th["v"]),
    }
    table = WeightedTable.uniform({"x": np.array([-SIGMA, SIGMA])})
    return popdyn.Problem.from_examples(example_loss, {"u": 0.0, "v": 0.0}, data=table, attractors=attractors)


def predicted_scale(lr: float, batch: int) -> float:
    """s = σ √(η/(Bμ(2 + ημ))): the standard deviation of the noise that decides the side SGD ends on."""
    return SIGMA * math.sqrt(lr / (batch * MU * (2 + lr * MU)))


class ProbitFit(NamedTuple):
    """The maximum-likelihood probit p(u) = Φ((u − centre)/scale) of binomial counts, with standard errors from the
    Fisher information; ``width`` = 2·z₀.₉·scale; ``deviance`` against χ²(``dof``)."""

    centre: float
    centre_se: float
    scale: float
    scale_se: float
    width: float
    width_se: float
    deviance: float
    dof: int

    @property
    def p_value(self) -> float:
        """P(χ²(dof) ≥ deviance): the probit's goodness of fit."""
        return float(chi2.sf(self.deviance, self.dof))


def fit_probit(u: np.ndarray, k: np.ndarray, n: np.ndarray, iterations: int = 100) -> ProbitFit:
    """Fit p(u) = Φ(a·u + b) to ``k`` successes of ``n`` trials at ``u`` by Fisher scoring; scale 1/a, centre −b/a.

    Log-likelihood Σ k ln Φ(z) + (n − k) ln Φ(−z), z = a·u + b; score Σ [k φ/Φ(z) − (n − k) φ/Φ(−z)]·(u, 1), Fisher
    information Σ n φ²/(Φ(z)Φ(−z))·(u, 1)(u, 1)ᵀ (computed from log Φ, stable in the tails). Standard errors by the
    delta method from its inverse at the maximum.

    **Arguments:**

    - ``u``, ``k``, ``n``: positions, counts and trials, 1-D of one length, 0 ≤ k ≤ n.
    - ``iterations``: the most Fisher-scoring steps (ValueError if the estimate has not settled by then).
    """
    u, k, n = (np.asarray(a, dtype=float) for a in (u, k, n))
    if u.ndim != 1 or not u.shape == k.shape == n.shape or np.any((k < 0) | (k > n)):
        raise ValueError(f"u, k, n have shapes {u.shape}, {k.shape}, {n.shape}: must be 1-D of one length, 0 ≤ k ≤ n")
    inside = (k > 0) & (k < n)
    if inside.sum() < 2:
        raise ValueError(f"k has {int(inside.sum())} counts strictly between 0 and n: a probit needs at least 2")
    X = np.stack([u, np.ones_like(u)], axis=1)
    q = norm.ppf(k[inside] / n[inside])  # the start: least squares of Φ⁻¹(p̂) on u
    beta = np.linalg.lstsq(X[inside], q, rcond=None)[0]
    for _ in range(iterations):
        z = X @ beta
        log_phi = norm.logpdf(z)
        up, down = np.exp(log_phi - log_ndtr(z)), np.exp(log_phi - log_ndtr(-z))  # φ/Φ(z), φ/Φ(−z)
        score = X.T @ (k * up - (n - k) * down)
        fisher = (X * (n * up * down)[:, None]).T @ X
        step = np.linalg.solve(fisher, score)
        beta = beta + step
        if np.all(np.abs(step) <= 1e-12 * (1 + np.abs(beta))):
            break
    else:
        raise ValueError(f"the probit fit did not settle in iterations={iterations} Fisher-scoring steps")
    (a, b), cov = beta, np.linalg.inv(fisher)
    if a <= 0:
        raise ValueError(f"the fitted probit falls with u (slope {a:.3g}): the counts do not rise across a band")
    p = norm.cdf(X @ beta)
    deviance = 2 * float(np.sum(xlogy(k, k / (n * p)) + xlogy(n - k, (n - k) / (n * (1 - p)))))
    grad_m = np.array([b / a**2, -1 / a])  # ∂(−b/a)/∂(a, b)
    scale, scale_se = 1 / a, math.sqrt(cov[0, 0]) / a**2
    return ProbitFit(
        centre=-b / a,
        centre_se=math.sqrt(grad_m @ cov @ grad_m),
        scale=scale,
        scale_se=scale_se,
        width=2 * Z90 * scale,
        width_se=2 * Z90 * scale_se,
        deviance=deviance,
        dof=len(u) - 2,
    )


@dataclass(frozen=True)
class Band:
    """One (η, B): the map of probabilities, the flow's map of the same grid, the probit fit of the pooled counts,
    the predicted width 2·z₀.₉·s, the flow separatrix's bracket along u (mean over rows) and the seconds taken."""

    lr: float
    batch: int
    probabilities: popdyn.analysis.BasinProbabilities
    flow: popdyn.analysis.BasinMap
    fit: ProbitFit
    predicted: float
    separatrix: tuple[float, float]
    seconds: float

    @property
    def ratio(self) -> float:
        """η/B."""
        return self.lr / self.batch

    @property
    def z(self) -> float:
        """(measured − predicted width) in standard errors."""
        return (self.fit.width - self.predicted) / self.fit.width_se

    @property
    def certain_agree(self) -> bool:
        """Whether every start where all of SGD's runs end in one attractor has the flow's label there."""
        p = self.probabilities.probability("u>0")
        up = self.flow.labels == self.flow.attractors.index("u>0")
        return bool(np.all(up[p == 1.0]) and not np.any(up[p == 0.0]))

    @property
    def centre_ok(self) -> bool:
        """Whether the band's centre lies in the flow separatrix's bracket, within SE_LIMIT standard errors."""
        lo, hi = self.separatrix
        return lo - SE_LIMIT * self.fit.centre_se <= self.fit.centre <= hi + SE_LIMIT * self.fit.centre_se


def band_fit(bp: popdyn.analysis.BasinProbabilities) -> ProbitFit:
    """The probit fit of ``bp``'s runs ending at u > 0, counted at every u0 (the grid's x axis) over all rows and
    seeds: the rows are independent repeats, since the u-dynamics do not depend on v."""
    up = bp.labels == bp.attractors.index("u>0")  # (rows, columns, seeds)
    k = up.sum(axis=(0, 2))
    return fit_probit(np.asarray(bp.grid.xs), k, np.full(k.shape, up.shape[0] * up.shape[2]))


def band_grid(lr: float, batch: int, shape: tuple[int, int] = (ROWS, COLUMNS)) -> popdyn.Grid:
    """The grid of starts at (``lr``, ``batch``): ``shape`` = (rows of v0 in [−0.5, 0.5], columns of u0 in ±SPAN·s),
    s the predicted scale (it places the starts; the fit does not use it)."""
    s = predicted_scale(lr, batch)
    return popdyn.Grid("u", "v", (-SPAN * s, SPAN * s), (-0.5, 0.5), shape)


def measure(
    prob: popdyn.Problem,
    lr: float,
    batch: int,
    *,
    steps: int = STEPS,
    seeds: int = SEEDS,
    shape: tuple[int, int] = (ROWS, COLUMNS),
    seed: int = 0,
) -> Band:
    """The band at (``lr``, ``batch``): ``basin_probabilities`` over ``band_grid``, ``seeds`` SGD runs of ``steps``
    steps from each start; the flow's ``basin_map`` of the grid; ``band_fit``."""
    grid = band_grid(lr, batch, shape)
    t0 = time.perf_counter()
    bp = popdyn.basin_probabilities(prob, grid, SGD(lr=lr, batch=batch, steps=steps, seeds=seeds, seed=seed))
    seconds = time.perf_counter() - t0
    flow = popdyn.basin_map(prob, grid, GradientFlow())
    above = flow.labels == flow.attractors.index("u>0")
    first = np.argmax(above, axis=1)  # the first column of each row in the flow's basin of u > 0
    if np.any(first == 0) or not np.all(above[np.arange(len(first)), first]):
        raise ValueError(f"the flow's map of the grid at lr={lr}, batch={batch} has a row with one basin only")
    xs = np.asarray(grid.xs)
    bracket = (float(np.mean(xs[first - 1])), float(np.mean(xs[first])))
    predicted = 2 * Z90 * predicted_scale(lr, batch)
    return Band(lr, batch, bp, flow, band_fit(bp), predicted, bracket, seconds)


class PowerLaw(NamedTuple):
    """ln W = ln c + α ln(η/B) by weighted least squares: α, its standard error, and the fit's χ² on ``dof``."""

    exponent: float
    exponent_se: float
    chi2: float
    dof: int


def power_law(ratios: np.ndarray, widths: np.ndarray, widths_se: np.ndarray) -> PowerLaw:
    """Fit ln W against ln(η/B), each point weighted by 1/(SE(W)/W)².

    **Arguments:** ``ratios`` η/B, ``widths`` W and ``widths_se`` their standard errors, 1-D of one length ≥ 3."""
    x, y, sd = np.log(ratios), np.log(widths), np.asarray(widths_se) / np.asarray(widths)
    if not x.shape == y.shape == sd.shape or x.size < 3:
        raise ValueError(f"ratios has {x.size} points: a power law with its χ² needs ≥ 3, one width and SE each")
    X = np.stack([x, np.ones_like(x)], axis=1) / sd[:, None]
    cov = np.linalg.inv(X.T @ X)
    beta = cov @ X.T @ (y / sd)
    resid = (y - np.stack([x, np.ones_like(x)], axis=1) @ beta) / sd
    return PowerLaw(float(beta[0]), float(math.sqrt(cov[0, 0])), float(resid @ resid), x.size - 2)


def measure_all(lrs=LRS, batches=BATCHES, seeds: int = SEEDS, verbose: bool = True) -> list[Band]:
    """``measure`` at every (η, B) of ``lrs`` × ``batches``, on one problem (each B compiles SGD once)."""
    prob, bands = wells(), []
    for batch in batches:
        for lr in lrs:
            band = measure(prob, lr, batch, seeds=seeds)
            bands.append(band)
            if verbose:
                f = band.fit
                print(
                    f"η = {lr:g}, B = {batch}: W = {f.width:.4f} ± {f.width_se:.4f} (predicted {band.predicted:.4f}, "
                    f"{band.z:+.2f} SE), centre {f.centre:+.4f} ± {f.centre_se:.4f}, {band.seconds:.1f} s",
                    flush=True,
                )
    return bands


def fits(bands: list[Band]) -> tuple[PowerLaw, PowerLaw]:
    """(the power law of the measured widths, the same fit of the predicted widths with the same weights)."""
    ratios = np.array([b.ratio for b in bands])
    se = np.array([b.fit.width_se for b in bands])
    measured = power_law(ratios, np.array([b.fit.width for b in bands]), se)
    predicted_w = np.array([b.predicted for b in bands])
    predicted = power_law(ratios, predicted_w, se * predicted_w / np.array([b.fit.width for b in bands]))
    return measured, predicted


def table(bands: list[Band]) -> list[str]:
    """The markdown table: one row per (η, B)."""
    out = [
        "| η | B | η/B | measured W | predicted 2·z₀.₉·s | measured ÷ predicted | (W − pred.)/SE | centre m | "
        "probit deviance (dof) | time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in bands:
        f = b.fit
        out.append(
            f"| {b.lr:g} | {b.batch} | {b.ratio:.5g} | {f.width:.4f} ± {f.width_se:.4f} | {b.predicted:.4f} | "
            f"{f.width / b.predicted:.3f} ± {f.width_se / b.predicted:.3f} | {b.z:+.2f} | "
            f"{f.centre:+.4f} ± {f.centre_se:.4f} | {f.deviance:.1f} ({f.dof}), p = {f.p_value:.2f} | "
            f"{b.seconds:.1f} s |"
        )
    return out


def checks(bands: list[Band], measured: PowerLaw, predicted: PowerLaw) -> list[tuple[str, bool]]:
    """The PASS/FAIL checks of the module docstring."""
    alpha_z = (measured.exponent - predicted.exponent) / measured.exponent_se
    return [
        (f"every width within {SE_LIMIT:g} SE of 2·z₀.₉·s", all(abs(b.z) <= SE_LIMIT for b in bands)),
        (f"the exponent within {SE_LIMIT:g} SE of the predicted one", abs(alpha_z) <= SE_LIMIT),
        (f"every band centre at the flow's separatrix (within {SE_LIMIT:g} SE)", all(b.centre_ok for b in bands)),
        ("every certain start (p̂ = 0 or 1) has the flow's label", all(b.certain_agree for b in bands)),
        (
            "no run unresolved",
            all(float(np.max(b.probabilities.probability("unresolved"))) == 0.0 for b in bands),
        ),
    ]


def main(argv=None) -> int:
    args = quick_or_full(__doc__, "η ∈ {0.01, 0.05} × B ∈ {1, 4}, 64 seeds", argv)
    command, date, info = run_header(SCRIPT, argv)
    t_start = time.perf_counter()
    lrs, batches, seeds = ((0.01, 0.05), (1, 4), 64) if args.quick else (LRS, BATCHES, SEEDS)
    bands = measure_all(lrs, batches, seeds)
    measured, predicted = fits(bands)
    checked = checks(bands, measured, predicted)
    wall = time.perf_counter() - t_start
    runs = ROWS * seeds
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` ({date}): `popdyn.basin_probabilities` on the double well with a noisy tilt "
        "ℓ(θ, x) = (u² − 1)²/4 + v²/2 + x·u, x = ±1 (μ = 1, σ² = 1; module docstring), SGD with replacement for "
        f"{STEPS} steps, {seeds} seeds from each of {ROWS} × {COLUMNS} starts (u0 in ±{SPAN:g}s, v0 in [−0.5, 0.5]), "
        f"the counts at u > 0 pooled over the rows ({runs} runs at each u0) and fitted by a probit Φ((u0 − m)/ŝ): "
        "the band 0.1 < p < 0.9 has the width W = 2·z₀.₉·ŝ (± one standard error from the binomial likelihood), "
        "against the predicted 2·z₀.₉·s, s = √(η/(B(2 + η))).",
        "",
        *table(bands),
        "",
        f"**Exponent** of W against η/B (weighted least squares of ln W on ln(η/B), {len(bands)} points over "
        f"η/B from {min(b.ratio for b in bands):g} to {max(b.ratio for b in bands):g}): "
        f"**α = {measured.exponent:.4f} ± {measured.exponent_se:.4f}** (χ² = {measured.chi2:.1f} on {measured.dof} "
        f"dof); the same fit of the predicted widths gives {predicted.exponent:.4f} (0.5 but for the factor "
        f"1/(2 + η)), {(measured.exponent - predicted.exponent) / measured.exponent_se:+.2f} SE away.",
        "",
        f"Wall time {wall:.0f} s; *time* is `basin_probabilities`' (SGD and the settling flow), the first η of each B "
        "with SGD's compilation, the first row also with the flow's. Load average at the start: "
        f"{info.get('load_avg', 'unknown')} on {info['cpu_count']} cores.",
        "",
        "Checks: " + "; ".join(f"{name}: {'PASS' if ok else '**FAIL**'}" for name, ok in checked) + ".",
    ]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, wall, [], checked)
    publish(finish_section(lines, info), HEADING, args.results, head)
    return 0 if all(ok for _, ok in checked) else 1


if __name__ == "__main__":
    sys.exit(main())
