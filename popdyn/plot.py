"""Figures (matplotlib, no pyplot state): basin maps (also as SGD's probabilities), step-size audits, SGD's
threshold against the batch size, SGD's spread around the GD path, convergence to the limit and hitting times."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import StrMethodFormatter

from popdyn.analysis._basin_probabilities import BasinProbabilities
from popdyn.analysis._basins import UNRESOLVED, BasinMap
from popdyn.analysis._sgd_curve import ThresholdCurve
from popdyn.analysis._spread_measured import MeasuredSpread
from popdyn.analysis._stepsize import StepSizeAudit
from popdyn.analysis._unresolved import UnresolvedGroups
from popdyn.problem import Problem

_COLOURS = ["#4daf4a", "#e41a1c", "#ff7f00", "#377eb8", "#984ea3", "#a65628", "#f781bf", "#999999"]
_GREY = "#d9d9d9"


def draw_overlays(ax, prob: Problem | None, x: str, y: str, x_range: tuple[float, float]) -> None:
    """Draw what the problem knows about the (x, y) slice: critical sets, separatrices, saddles."""
    if prob is None:
        return
    for ov in prob.overlays(x, y, x_range):
        if ov.kind == "line":
            ax.plot(ov.x, ov.y, label=ov.label or None, **ov.style)
        else:
            ax.scatter(ov.x, ov.y, label=ov.label or None, zorder=5, **ov.style)


def plot_basin_map(
    bm: BasinMap, prob: Problem | None = None, title: str = "", unresolved: UnresolvedGroups | None = None
) -> Figure:
    """Two panels: the attractor reached from each initialisation (with the problem's known critical
    sets overlaid) and log10 of the time to reach it; the legend lists the groups of ``unresolved`` runs under
    "unresolved" (``popdyn.analysis.group_unresolved``)."""
    fig = Figure(figsize=(12, 5), layout="constrained")
    ax, ax_t = fig.subplots(1, 2)
    g = bm.grid
    if g is None:
        raise ValueError("bm.grid is None: plot_basin_map draws a BasinMap over a grid (from basin_map)")
    extent = (*g.x_range, *g.y_range)
    k = len(bm.attractors)
    cmap = ListedColormap([_GREY] + [_COLOURS[i % len(_COLOURS)] for i in range(k)])
    norm = BoundaryNorm(np.arange(-1.5, k), cmap.N)
    ax.imshow(bm.labels, origin="lower", extent=extent, aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    if g.axes_are_coordinates:  # overlays are drawn in θ's coordinates
        draw_overlays(ax, prob, g.x, g.y, g.x_range)
    fr = bm.fractions
    handles = [Patch(color=cmap(i + 1), label=f"{n} ({100 * fr[n]:.1f}%)") for i, n in enumerate(bm.attractors)]
    handles.append(Patch(color=_GREY, label=f"{UNRESOLVED} ({100 * fr[UNRESOLVED]:.1f}%)"))
    if unresolved is not None:
        shares = unresolved.fractions.items()
        handles += [Patch(color="none", label=f"  {name} ({100 * f:.1f}%)") for name, f in shares]
    line_handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + line_handles, loc="upper left", fontsize=7, framealpha=0.85)
    ax.set(xlim=g.x_range, ylim=g.y_range, xlabel=g.x, ylabel=g.y, title=title or f"basins ({bm.method})")
    with np.errstate(divide="ignore", invalid="ignore"):
        lt = np.log10(bm.times)
    im = ax_t.imshow(
        np.where(np.isfinite(lt), lt, np.nan),
        origin="lower",
        extent=extent,
        aspect="auto",
        cmap="viridis",
        interpolation="nearest",
    )
    fig.colorbar(im, ax=ax_t, label="log10 " + ("time" if bm.method == "flow" else "steps") + " to steady state")
    ax_t.set(xlabel=g.x, ylabel=g.y, title="convergence time")
    if not np.isfinite(lt).any():  # an empty panel would look like a drawing error
        ax_t.text(0.5, 0.5, "no start reached a steady state", transform=ax_t.transAxes, ha="center", va="center")
    return fig


def plot_basin_probabilities(
    bp: BasinProbabilities, name: str | None = None, separatrix: BasinMap | None = None, prob: Problem | None = None
) -> Figure:
    """SGD's basin map as probabilities: the probability of attractor ``name`` (default: the first) from every start
    of the grid, 0 to 1, its p = 1/2 contour, and, with ``separatrix`` (the same grid's map under GD or the flow,
    ``basin_map``), the boundary of that attractor's GD basin as a dashed line; without it, that of the dynamics run
    beside SGD (``bp.beside_labels``), if any; the problem's overlays as in ``plot_basin_map``. The title gives the
    share of starts whose outcome is uncertain (no outcome above 0.9)."""
    name = bp.attractors[0] if name is None and bp.attractors else name
    if name is None:
        raise ValueError("bp has no attractor: no run reached one, so there is no probability to draw")
    p, g = bp.probability(name), bp.grid
    fig = Figure(figsize=(6.5, 5), layout="constrained")
    ax = fig.subplots()
    extent = (*g.x_range, *g.y_range)
    im = ax.imshow(p, origin="lower", extent=extent, aspect="auto", cmap="RdBu_r", vmin=0.0, vmax=1.0)
    fig.colorbar(im, ax=ax, label=f"P({name}) over {bp.seeds} runs per start")
    xs, ys = g.xs, g.ys
    handles = []
    if p.min() < 0.5 < p.max():
        ax.contour(xs, ys, p, levels=[0.5], colors="k", linewidths=1.0)
        handles.append(Line2D([], [], color="k", lw=1.0, label="P = 1/2"))
    method: str | None
    if separatrix is not None:
        known = name in separatrix.attractors
        inside = separatrix.labels == (separatrix.attractors.index(name) if known else -2)
        method = separatrix.method
    else:
        index = bp.attractors.index(name) if name in bp.attractors else -1
        inside = None if bp.beside_labels is None else bp.beside_labels == index
        method = bp.beside_method
    if inside is not None and 0.0 < inside.mean() < 1.0:
        ax.contour(xs, ys, inside.astype(float), levels=[0.5], colors="k", linestyles="--", linewidths=1.0)
        handles.append(Line2D([], [], color="k", ls="--", lw=1.0, label=f"{method} separatrix"))
    if g.axes_are_coordinates:
        draw_overlays(ax, prob, g.x, g.y, g.x_range)
    line_handles, _ = ax.get_legend_handles_labels()
    if handles or line_handles:
        ax.legend(handles=handles + line_handles, loc="upper left", fontsize=7, framealpha=0.85)
    share = 100 * float(np.mean(bp.uncertain()))
    ax.set(
        xlim=g.x_range,
        ylim=g.y_range,
        xlabel=g.x,
        ylabel=g.y,
        title=f"basins as probabilities ({share:.1f}% uncertain)",
    )
    return fig


def plot_step_size_audit(
    audits: list[StepSizeAudit],
    losses: list[np.ndarray],
    labels: list[str],
    curves: Sequence[ThresholdCurve] | None = None,
) -> Figure:
    """λ_max(θ_t) against 1/η and 2/η (top; with momentum μ, (1 − √μ)²/η and 2(1 + μ)/η) and the loss (bottom),
    one colour per (unbatched) audited run. The runs are named once, in the loss panel's legend; the top legend
    explains the three line styles, so the figure stays readable with many learning rates. With ``curves`` (an audit
    with a minibatch size: ``ThresholdCurve``s whose ``runs`` index ``audits``), a panel on the right draws SGD's
    η*(B) against B beside GD's 2/λ_max at the runs' minima (``plot_sgd_thresholds``), in the runs' colours."""
    if curves is None:
        fig = Figure(figsize=(7, 6), layout="constrained")
        ax, ax_l = fig.subplots(2, 1, sharex=True)
    else:
        fig = Figure(figsize=(13, 6), layout="constrained")
        grid = fig.add_gridspec(2, 2, width_ratios=(7, 6))
        ax = fig.add_subplot(grid[0, 0])
        ax_l = fig.add_subplot(grid[1, 0], sharex=ax)
        draw_sgd_thresholds(fig.add_subplot(grid[:, 1]), curves)
    for audit, loss, name in zip(audits, losses, labels, strict=False):
        (line,) = ax.plot(audit.ts, audit.lambda_max)
        c = line.get_color()
        ax.axhline(audit.stability_threshold, color=c, ls="--", lw=1)
        ax.axhline(audit.monotone_threshold, color=c, ls=":", lw=1)
        ax_l.plot(audit.ts, loss, color=c, label=name)
    lam = np.concatenate([np.ravel(a.lambda_max) for a in audits])
    finite = lam[np.isfinite(lam)]
    low = min(float(finite.min()), 0.0) if finite.size else 0.0
    ax.set_yscale("symlog", linthresh=1e-2)
    ax.set(ylabel="λ_max (symlog)", ylim=(low - 1e-2 if low < 0 else 0.0, None), title="step-size audit")
    low_name, edge_name = audits[0].threshold_names if audits else ("1/η", "2/η")
    styles = [("-", "λ_max(θ_t)"), ("--", f"{edge_name} (stability edge)"), (":", f"{low_name} (no oscillation)")]
    ax.legend(handles=[Line2D([], [], color="k", ls=ls, lw=1, label=text) for ls, text in styles], fontsize=7)
    ax_l.set(xlabel="step", ylabel="loss (log)", yscale="log")
    ax_l.legend(fontsize=7, ncol=1 + len(audits) // 8)
    return fig


def _run_colour(curve: ThresholdCurve, k: int, j: int) -> str:
    """The colour of learning rate ``j`` of curve ``k``: its run's (matplotlib's cycle, as ``plot_step_size_audit``
    colours its runs), or the curve's where the curve names no runs."""
    return f"C{(curve.runs[j] if curve.runs else k) % 10}"


def draw_sgd_thresholds(ax, curves: Sequence[ThresholdCurve]) -> None:
    """Draw SGD's η*(B) against B (log₂ axis; solid, one colour per minimum) with GD's 2/λ_max there (dashed), the
    chosen B (a dotted vertical line and a ring on each curve) and the learning rates set against it (× at the
    chosen B, in their runs' colours): a rate under a curve is mean-square stable for SGD at that minimum, one
    between a curve and its dashed line stable for GD alone (``popdyn.analysis.threshold_curve``). On a valley of
    minima, where η*(B) = 0, the curve is η*_⊥(B) (squares), the threshold across the valley
    (``ThresholdCurve.drawn``)."""
    for k, curve in enumerate(curves):
        c = _run_colour(curve, k, 0)
        ax.plot(curve.batches, curve.drawn, "-o" if not curve.flat_curved else "-s", color=c, ms=3)
        ax.axhline(curve.gd_threshold, color=c, ls="--", lw=1)
        ax.plot([curve.batch], [curve.drawn[curve.batches == curve.batch][0]], "o", ms=9, mfc="none", color=c)
        for j, lr in enumerate(curve.lrs):
            ax.plot([curve.batch], [lr], "x", ms=8, mew=2, color=_run_colour(curve, k, j))
    if not curves:
        ax.text(0.5, 0.5, "no run ended at a minimum", transform=ax.transAxes, ha="center", va="center")
    else:
        ax.axvline(curves[0].batch, color="k", ls=":", lw=1)
    top = 1.08 * max([max([c.gd_threshold, *c.lrs]) for c in curves], default=1.0)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))  # B = 1, 2, 4, …, not 2⁰, 2¹, 2², …
    ax.set(xlabel="minibatch size B", ylabel="step size η", ylim=(-0.03 * top, top))  # η* = 0 stays in view
    how = {True: "drawn with replacement", False: "drawn without replacement", None: "of online draws"}
    sampling = f"minibatches {how[curves[0].replace]}, n = {curves[0].n}" if curves else ""
    name = "η*_⊥(B) across the valley" if any(c.flat_curved for c in curves) else "η*(B)"
    ax.set_title(f"SGD's threshold {name} at the minima\n{sampling}", fontsize=10)
    styles = [
        Line2D([], [], color="k", marker="o", ms=3, label="η*(B): SGD mean-square stable below"),
        Line2D([], [], color="k", ls="--", lw=1, label="2/λ_max: GD stable below"),
        Line2D([], [], color="k", ls=":", lw=1, label="the chosen B"),
        Line2D([], [], color="k", ls="", marker="x", mew=2, label="η of the runs"),
    ]
    if any(c.flat_curved for c in curves):
        styles.append(Line2D([], [], color="k", marker="s", ms=3, label="η*_⊥(B): stable across the valley below"))
        styles.append(Line2D([], [], ls="", label="(η*(B) = 0 on a valley: SGD diffuses along it)"))
    ax.legend(handles=styles, fontsize=7, loc="best")


def plot_sgd_thresholds(curves: Sequence[ThresholdCurve]) -> Figure:
    """SGD's step-size threshold η*(B) against the minibatch size B at one or several minima, beside GD's 2/λ_max
    and the learning rates each curve carries (``draw_sgd_thresholds``; ``popdyn.analysis.threshold_curve``;
    docs/sgd.md, "η*(B) against the batch size").

    **Arguments:**

    - ``curves``: one ``ThresholdCurve`` per minimum, all with the same chosen B and sampling.
    """
    if len({(c.batch, c.replace, c.n) for c in curves}) > 1:
        raise ValueError("curves is invalid: its curves must share the chosen B, the sampling and n")
    fig = Figure(figsize=(6, 4.5), layout="constrained")
    draw_sgd_thresholds(fig.subplots(), curves)
    return fig


def plot_convergence(ts: np.ndarray, dist: np.ndarray, rates: np.ndarray, eps: float, labels: list[str]) -> Figure:
    """Distance to the limit against time (log scale), with the predicted local rate exp(−λt) as
    black dashed lines anchored at the end of each run (they lie on the curves when theory holds)."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    for i in range(ts.shape[0]):
        ok = np.isfinite(ts[i]) & np.isfinite(dist[i]) & (dist[i] > 0)
        if not ok.any():
            continue
        (line,) = ax.plot(ts[i][ok], dist[i][ok], label=labels[i])
        if np.isfinite(rates[i]):
            t_end, d_end = ts[i][ok][-1], dist[i][ok][-1]
            tt = np.linspace(max(0.0, t_end - 12.0 / rates[i]), t_end, 50)
            ax.plot(
                tt,
                d_end * np.exp(-rates[i] * (tt - t_end)),
                ls="--",
                color="k",
                lw=0.9,
                label="predicted rate exp(−λt)" if i == 0 else None,
            )
    ax.axhline(eps, color="k", lw=0.8, ls=":", label=f"ε = {eps:g}")
    ax.set(
        yscale="log", xlabel="t", ylabel="‖θ_t − θ∞‖", title="convergence to the limit (dashed: predicted local rate)"
    )
    ax.legend(fontsize=7)
    return fig


def plot_times(times: np.ndarray, title: str) -> Figure:
    """Hitting times of a batch of runs, sorted (log scale); runs that never reached the target are counted in
    the title, not drawn."""
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    t = np.sort(np.asarray(times, dtype=float)[np.isfinite(times)])
    ax.plot(np.arange(1, t.size + 1), t, "o", ms=3)
    missed = int(np.size(times) - t.size)
    ax.set(
        xlabel="run (sorted by time)",
        ylabel="time",
        yscale="log" if t.size and t.min() > 0 else "linear",
        title=title + (f" ({missed} never reached)" if missed else ""),
    )
    return fig


def plot_times_over_seeds(times: np.ndarray, title: str) -> Figure:
    """Hitting times of S runs from each of n starts (``times`` of shape (n, S), NaN for a run that never reached
    the target): per start, the share of its runs that reached the target by time t (a step curve, log time), so
    the spread over the seeds is read off each curve's rise; the first 12 starts are drawn."""
    times = np.asarray(times, dtype=float)
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    positive = times[np.isfinite(times) & (times > 0)]
    for j, row in enumerate(times[:12]):
        t = np.sort(row[np.isfinite(row)])
        if t.size:
            ax.step(t, np.arange(1, t.size + 1) / row.size, where="post", lw=1.2, label=f"start {j}")
    missed = int(np.sum(~np.isfinite(times)))
    ax.set(
        xlabel="time to the target",
        ylabel=f"share of the {times.shape[1]} runs reached",
        xscale="log" if positive.size == np.isfinite(times).sum() and positive.size else "linear",
        ylim=(0.0, 1.02),
        title=title + (f" ({missed} runs never reached)" if missed else ""),
    )
    if np.isfinite(times).any():
        ax.legend(fontsize=7, ncol=2, loc="lower right")
    return fig


def plot_spread(m: MeasuredSpread, title: str) -> Figure:
    """SGD's spread around GD's path: left, E‖θ_SGD,t − θ_GD,t‖² predicted to first order (a line) and measured over
    the runs (points with ±2 standard errors); right, the excess loss E L(θ_SGD,t) − L(θ_GD,t) the same way."""
    p = m.predicted
    fig = Figure(figsize=(10, 4), layout="constrained")
    panels = fig.subplots(1, 2)
    pairs = (
        (p.expected_sq_distance, m.sq_distance, m.sq_distance_stderr, "E‖θ_SGD − θ_GD‖²"),
        (p.expected_excess_loss, m.excess_loss, m.excess_loss_stderr, "E L(θ_SGD) − L(θ_GD)"),
    )
    for ax, (predicted, measured, se, label) in zip(panels, pairs, strict=True):
        ax.plot(m.ts, predicted, "k-", lw=1.5, label="predicted (first order)")
        ax.errorbar(m.ts, measured, yerr=2 * se, fmt="o", ms=3, capsize=2, color="#e41a1c",
                    label=f"measured, {m.runs} runs (±2 SE)")  # fmt: skip
        ax.set(xlabel="step t", ylabel=label)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}: SGD (η = {p.lr:g}, B = {p.batch}) around GD", fontsize=10)
    return fig
