"""SCB: SGD's distance to the population process along stage 2, predicted to first order (``popdyn.sgd_spread``) and
measured over an ensemble of SGD runs, against the signal (docs/models/scb.md, "SGD's distance to the population
process"; ``popdyn.jobs.scb._spread``)."""

from __future__ import annotations

import dataclasses

import numpy as np
from matplotlib.figure import Figure

from popdyn.io import Result
from popdyn.jobs.scb._spread import SpreadComparison, SpreadCurve, SpreadSetup, spread_comparison


def _figure(comp: SpreadComparison) -> Figure:
    """Left: the signal ‖θ̄_t − θ_0‖_μ, and per minibatch size the predicted √tr C_t (line) and the measured
    √(mean ‖Δ_t‖²_μ) with its ±1 standard-error band (dots, shaded); a dotted line where the prediction crosses the
    signal. Right: measured / predicted E‖Δ_t‖²_μ with its ±3 standard-error band."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, ax_r = fig.subplots(1, 2)
    ts = comp.ts[1:]
    ax.plot(comp.ts, comp.signal, color="k", lw=2, label="signal ‖θ̄_t − θ_0‖_μ")
    for c, colour in zip(comp.curves, ("C0", "C1", "C2", "C3", "C4"), strict=False):
        pred, mean, se = c.predicted_sq[1:], c.measured_sq[1:], c.measured_stderr[1:]
        ax.semilogy(ts, np.sqrt(pred), color=colour, label=f"B={c.batch}: predicted √tr C_t")
        ax.semilogy(ts, np.sqrt(mean), ".", color=colour, ms=4, label=f"B={c.batch}: measured ({comp.seeds} runs)")
        ax.fill_between(ts, np.sqrt(np.clip(mean - se, 0, None)), np.sqrt(mean + se), color=colour, alpha=0.25)
        if c.crossing_step is not None:
            ax.axvline(c.crossing_step, color=colour, ls=":", lw=1)
        ax_r.plot(ts, mean / pred, color=colour, label=f"B={c.batch}")
        ax_r.fill_between(ts, (mean - 3 * se) / pred, (mean + 3 * se) / pred, color=colour, alpha=0.2)
    ax_r.axhline(1.0, color="k", lw=0.8)
    ax.set(xlabel="stage-2 step t", ylabel="μ-norm distance", title="‖θ_SGD,t − θ̄_t‖_μ against the signal")
    ax_r.set(xlabel="stage-2 step t", title="measured / predicted E‖θ_SGD,t − θ̄_t‖²_μ (±3 SE)")
    ax.legend(fontsize=7)
    ax_r.legend(fontsize=7)
    fig.suptitle(
        f"SCB: SGD's distance to the population process, N={comp.N}, T={comp.T}, Q={comp.Q}, η={comp.lr}, "
        f"after stage 1 ({comp.stage1_steps} exact steps)"
    )
    return fig


def _curve_lines(c: SpreadCurve) -> list[str]:
    """A curve's summary lines: where the noise crosses the signal, and predicted against measured."""

    def span(first, back):
        return "never" if first is None else f"from t={first}" + ("" if back is None else f" to t={back}")

    left = "stays within 3 SE" if c.departs_at is None else f"leaves 3 SE at t={c.departs_at}"
    lines = [
        f"  B={c.batch:<4d}: noise > signal {span(c.crossing_step, c.recrossing_step)} (predicted), "
        f"{span(c.measured_crossing_step, c.measured_recrossing_step)} (measured); largest predicted noise/signal "
        f"{c.max_noise_to_signal:.3f}; first order {left}"
    ]
    for t, p, m, r, e in zip(c.report_steps, c.predicted, c.measured, c.ratio, c.ratio_stderr, strict=True):
        lines.append(f"    t={t:<5d} predicted {p:.4f}, measured {m:.4f}, measured/predicted E‖Δ‖² {r:.3f} ± {e:.3f}")
    return lines


def scb_spread(setup: SpreadSetup | None = None, progress: bool = True) -> Result:
    """SGD's distance to the population process along stage 2 of Algorithm 1 (Figs. 1 and 3's plain SGD, exact
    minibatches): the first-order prediction √tr C_t of √E‖θ_SGD,t − θ̄_t‖²_μ (``popdyn.sgd_spread`` in the whitened
    coordinates, where ‖·‖ is the μ-norm ‖ΔV‖_μ² + ‖ΔA‖_μ²), the same measured over ``setup.seeds`` SGD runs, and
    the signal ‖θ̄_t − θ_0‖_μ, at each minibatch size (``spread_comparison``). Runs at a tiny instance (N = 3,
    T = 4), not the paper's N = 10, T = 50: the exact per-example data are all N^{T+2} draws.

    **Arguments:** ``setup``: the instance, step, minibatch sizes, steps and runs (``SpreadSetup``; default the
    figure's); ``progress``: progress bars for the SGD runs.
    """
    setup = SpreadSetup() if setup is None else setup
    comp = spread_comparison(setup, progress)
    inputs = {
        "figure": "scb-spread",
        **dataclasses.asdict(setup),
        "stage1": "exact population preconditioned projected GD, η_1 = 0.5, to max(α) >= 2/(QN)",
        "stage2": "plain preconditioned projected SGD, exact minibatches of the N^(T+2) draws, with replacement",
    }
    lines = [
        f"scb-spread: N={setup.N}, T={setup.T}, Q={setup.Q}, seed {setup.seed} ({comp.examples} draws, "
        f"d = {comp.params}), stage 1 = {comp.stage1_steps} exact steps, η = {setup.lr}, {setup.steps} SGD steps, "
        f"{setup.seeds} runs per batch; μ-norm",
        f"  signal ‖θ̄_t − θ_0‖_μ: {comp.signal_start:.4f} at t=0, {comp.signal_end:.4f} at t={setup.steps}",
    ]
    for c in comp.curves:
        lines += _curve_lines(c)
    arrays = {
        "scb_spread": {"steps": comp.ts, "signal": comp.signal}
        | {f"{k}_{c.batch}": getattr(c, f"{k}_sq") for c in comp.curves for k in ("predicted", "measured")}
        | {f"stderr_{c.batch}": c.measured_stderr for c in comp.curves}
    }
    return Result(inputs, comp.summary(), arrays, {"scb-spread": _figure(comp)}, lines)
