"""The decision-list jobs behind ``popdyn converge|stepsize|basins decision-list`` (spec decision_lists.md
§5, §6, §3 C): each computes, and returns a ``Result`` (summary, arrays, figures, printed lines)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from popdyn.io import Result
from popdyn.tasks.decision_list.theorem1 import theorem1_run


def converge_decision_list(L: int, n: int, M: int, c: float | None = None, distribution: str = "distinct",
                           delta: float | None = None, gamma: float | None = None,
                           t1: float | None = None) -> Result:
    """Theorem 1: first time T* of perfect classification per list length against T₁ = 4M/(log L·γ)."""
    run = theorem1_run(L, n, M, c, distribution, delta, gamma, t1)
    traj, prob = run.pop("trajectory"), run.pop("problem")
    ts = np.asarray(traj.ts)
    fig = Figure(figsize=(4.2 * M, 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, M))
    arrays = {"ts": ts}
    for ax, m, col in zip(axes, prob.lengths, run["columns"]):
        x = np.asarray(traj.params[f"m{m}"])
        arrays[f"column_m{m}"] = x
        for i in range(m):
            ax.plot(ts[1:], x[1:, i], label=f"w_{i + 1} = W[a_{i + 1}, a]")
        if m < L:
            ax.plot(ts[1:], x[1:, m] / np.sqrt(L - m), "k--", label="ω (distractors)")
        if col["T_star"]:
            ax.axvline(col["T_star"], color="g", lw=1, label=f"T* = {col['T_star']:.4g}")
        if run["bound"] <= ts[-1]:
            ax.axvline(run["bound"], color="r", ls=":", lw=1, label=f"bound T₁ = {run['bound']:.4g}")
        ax.set(xscale="log", xlabel="flow time t", title=f"list length m = {m}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("W entries of a column")
    fig.suptitle(f"Theorem 1: L = {L}, n = {n}, c = {run['c']:.4g}; bound T₁ = {run['bound']:.4g} "
                 f"(γ = δ: {run['bound_gamma_eq_delta']:.4g})", fontsize=9)
    verdict = {True: "T* <= bound", False: "T* > bound: the bound FAILS", None: "PC not reached by t1"}
    lines = [f"converge decision-list  L={L}, n={n}, M={M}, {distribution} tokens: gradient flow on W, V = cP, W0 = 0",
             f"  δ = {run['delta']:.6g}, γ = {run['gamma']:.6g}, c = {run['c']:.6g}"
             + ("  (δ, γ: popdyn's definitions, spec §5)" if delta is None and gamma is None else "  (δ, γ given)"),
             f"  {'m':>3s} {'T*':>12s}"]
    lines += [f"  {col['m']:>3d} {col['T_star'] if col['T_star'] is not None else float('nan'):12.6g}"
              for col in run["columns"]]
    lines += [f"  bound T1 = 4M/(log L·γ) = {run['bound']:.6g}: {verdict[run['T_star_le_bound']]}",
              f"  with γ = δ: {run['bound_gamma_eq_delta']:.6g}: {verdict[run['T_star_le_bound_gamma_eq_delta']]}"]
    inputs = {"task": "decision-list", "L": L, "n": n, "M": M, "c": c, "distribution": distribution,
              "delta": delta, "gamma": gamma, "t1": run["t1"]}
    return Result(inputs, run, {"theorem1": arrays}, {"theorem1": fig}, lines)
