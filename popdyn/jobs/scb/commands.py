"""SCB command-line jobs (docs/models/scb.md §4, §10): ``popdyn converge scb``, ``popdyn basins scb`` and
``popdyn stepsize scb``.

All three start from a random instance (``random_instance(seed, N, T, Q)``) and use the exact
preconditioned, column-sum-projected population dynamics; from the uninformative start these stay on 𝓜,
where the full matrices equal the 2-D recursion (tested to 1e-12).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.analysis import Grid, basin_map, lambda_max, step_size_audit
from popdyn.dynamics import gradient_descent
from popdyn.dynamics._status import count
from popdyn.io import Result
from popdyn.jobs._registry import DECLARED, registered
from popdyn.jobs.scb._training import stage1
from popdyn.plot import plot_basin_map, plot_step_size_audit
from popdyn.tasks.scb._instance import random_instance
from popdyn.tasks.scb._model import SparseBigram
from popdyn.tasks.scb._reduced import Reduced2D
from popdyn.tasks.scb._stepsize import Whitened


def _instance(N: int, T: int, Q: int, seed: int) -> tuple[SparseBigram, Reduced2D, dict]:
    seed = _validate.seed("seed", seed)
    prob = SparseBigram(*random_instance(seed, N, T, Q))
    red = Reduced2D.from_instance(prob)
    info = {
        "c": float(prob.c),
        "qbar": float(prob.qbar),
        "L_star": float(prob.L_star),
        "saddle": [float(v) for v in red.saddle()],
    }
    return prob, red, info


@registered
def converge_scb(
    N: int = DECLARED,
    T: int = DECLARED,
    Q: int = DECLARED,
    seed: int = DECLARED,
    lr: float = DECLARED,
    eps: float = DECLARED,
    threshold: float | None = DECLARED,
    max_steps: int = DECLARED,
) -> Result:
    """Stage-1 duration (first step with max(α_V, α_A) ≥ threshold, default 2/(QN)) on the full matrices, and
    the total steps to max(‖V−P‖_μ, ‖A−Qm‖_μ) ≤ ε on 𝓜, for exact preconditioned projected GD at ``lr``;
    next to the local theory: λ_fast, λ_slow (stability η < 2/λ_fast, contraction 1 − ηλ_slow) and the
    growth rate λ₊ of the linearisation at (0, 0)."""
    lr = _validate.positive("lr", lr)
    eps = _validate.positive("eps", eps)
    max_steps = _validate.int_at_least("max_steps", max_steps, 1)
    prob, red, info = _instance(N, T, Q, seed)
    s1 = stage1(prob, Q, lr=lr, max_steps=min(max_steps, 5000), threshold=threshold)
    traj = gradient_descent(
        red, red.init(None), lr=lr, steps=max_steps, precondition=red.precondition, save_params=True
    )
    aV, aA = (np.asarray(traj.params[k]) for k in ("alpha_V", "alpha_A"))  # type: ignore[index]  # save_params=True: traj.params holds θ
    dist = np.maximum(np.abs(1 - aV) * np.sqrt(info["c"]), np.abs(1 - aA) * np.sqrt(info["qbar"] - 1 / T))
    hit = np.flatnonzero(dist <= eps)
    total = int(hit[0]) if hit.size else None
    red_hit = np.flatnonzero(np.maximum(aV, aA) >= s1.threshold)
    lam_slow, lam_fast = (float(v) for v in red.eigenvalues_at_minimum())
    lam_plus = (-1 / T + np.sqrt(1 / T**2 + 4 * info["c"] * (info["qbar"] - 1 / T))) / 2
    results = {
        **info,
        "threshold": s1.threshold,
        "stage1_steps": s1.step,
        "stage1_alphas": None if s1.step is None else [float(v) for v in s1.alphas[s1.step]],
        "stage1_steps_reduced": int(red_hit[0]) if red_hit.size else None,
        "total_steps": total,
        "eps": eps,
        "final_distance": float(dist[-1]),
        "lambda_fast": lam_fast,
        "lambda_slow": lam_slow,
        "stable": lr < 2 / lam_fast,
        "monotone": lr <= 1 / lam_fast,
        "contraction_predicted": 1 - lr * lam_slow,
        "lambda_plus": float(lam_plus),
        "stage1_steps_early_time": s1.threshold * T / lr,  # α_V ≈ t/T at early times (§4)
    }
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    steps = np.asarray(traj.ts)
    ax1.plot(steps, aV, label="α_V")
    ax1.plot(steps, aA, label="α_A")
    ax1.axhline(s1.threshold, color="k", ls=":", label=f"threshold {s1.threshold:.3g}")
    if s1.step is not None:
        ax1.axvline(s1.step, color="grey", ls="--", label=f"stage 1 ends: step {s1.step}")
    ax1.set(xscale="symlog", xlabel="step", ylabel="signal", title=f"signals (N={N}, T={T}, Q={Q}, η={lr:g})")
    ax1.legend(fontsize=7)
    ax2.semilogy(steps, np.maximum(dist, 1e-300))
    ax2.axhline(eps, color="k", ls=":")
    ax2.set(xscale="symlog", xlabel="step", ylabel="max(‖V−P‖_μ, ‖A−Qm‖_μ)", title="distance to the truth")
    lines = [
        f"converge scb: N={N}, T={T}, Q={Q}, seed {seed}, exact preconditioned projected GD η={lr:g}",
        f"  stage 1 (max α ≥ {s1.threshold:.3g}): step {s1.step} (full matrices), "
        f"{results['stage1_steps_reduced']} (2-D recursion); early-time α_V ≈ t/T gives θT/η = "
        f"{results['stage1_steps_early_time']:.1f}",
        f"  to ε = {eps:g}: {total if total is not None else f'not within {max_steps}'} steps; "
        f"λ_fast {lam_fast:.4g} (stable: {results['stable']}), λ_slow {lam_slow:.4g}",
    ]
    inputs = {
        "task": "scb",
        "N": N,
        "T": T,
        "Q": Q,
        "seed": seed,
        "lr": lr,
        "eps": eps,
        "threshold": s1.threshold,
        "max_steps": max_steps,
    }
    arrays = {"converge": {"steps": steps, "alpha_V": aV, "alpha_A": aA, "distance": dist, "stage1_alphas": s1.alphas}}
    return Result(inputs, results, arrays, {"converge": fig}, lines)


@registered
def basins_scb(
    N: int = DECLARED,
    T: int = DECLARED,
    Q: int = DECLARED,
    seed: int = DECLARED,
    n: int = DECLARED,
    lo: float = DECLARED,
    hi: float = DECLARED,
    t1: float = DECLARED,
    progress: bool = True,
    chunk: int = DECLARED,
    checkpoint: str | None = None,
) -> Result:
    """Basin map of the projected preconditioned flow α̇ = g(α) over (α_V, α_A) ∈ [lo, hi]² with the
    saddle (0, −1/(Tq̄ − 1)) and the hyperbola α_Vα_A = 1 marked (§4). Points that never converge creep
    toward (0⁻, −∞): they are the "unresolved" fraction, separated from the minimum's basin by the saddle's
    stable manifold. ``chunk`` points run at a time; ``checkpoint``: a directory to save finished chunks in
    and resume from (``basin_map``)."""
    n = _validate.int_at_least("grid", n, 2)
    _validate.int_at_least("chunk", chunk, 1)
    lo, hi = _validate.interval("range", (lo, hi))
    t1 = _validate.positive("t1", t1)
    prob, red, info = _instance(N, T, Q, seed)
    grid = Grid.square("alpha_V", "alpha_A", lo, hi, n)
    bm = basin_map(
        red,
        grid,
        "flow",
        t1=t1,
        precondition=red.precondition,
        progress=progress,
        chunk_size=chunk,
        checkpoint=checkpoint,
    )
    escaped = (bm.labels < 0) & (bm.final["alpha_A"] < info["saddle"][1])
    results = {
        **info,
        "fractions": bm.fractions,
        "attractors": list(bm.attractors),
        "escape_fraction": float(np.mean(escaped)),
        "status_counts": count(bm.status),
    }
    title = f"SCB (α_V, α_A), N={N}, T={T}, Q={Q}: projected preconditioned flow"
    lines = [f"basins scb: N={N}, T={T}, Q={Q}, seed {seed}, grid {n}² over [{lo}, {hi}]², t1 = {t1:g}"]
    lines += [f"  {name:>10s}: {100 * f:6.2f}%" for name, f in bm.fractions.items()]
    lines.append(
        f"  escaping toward (0⁻, −∞): {100 * results['escape_fraction']:.2f}%; saddle at "
        f"({info['saddle'][0]:.3g}, {info['saddle'][1]:.4g})"
    )
    inputs = {"task": "scb", "N": N, "T": T, "Q": Q, "seed": seed, "grid": n, "range": [lo, hi], "t1": t1}
    arrays = {
        "basins": {
            "labels": bm.labels,
            "alpha_V": grid.xs,
            "alpha_A": grid.ys,
            "times": bm.times,
            "status": bm.status,
            "final_alpha_A": bm.final["alpha_A"],
        }
    }
    return Result(inputs, results, arrays, {"basins": plot_basin_map(bm, red, title)}, lines)


@registered
def stepsize_scb(
    N: int = DECLARED,
    T: int = DECLARED,
    Q: int = DECLARED,
    seed: int = DECLARED,
    lrs: tuple[float, ...] | list[float] | None = DECLARED,
    steps: int = DECLARED,
    record_every: int = DECLARED,
) -> Result:
    """Exact preconditioned projected GD from the uninformative start at each η, audited against the
    whitened curvature λ_max(θ_t); by default η = 0.5 (Algorithm 1's η_1 here) and 0.9 and 1.1 times the
    stability edge 2/λ* at the minimum (P, Qm)."""
    seed = _validate.seed("seed", seed)
    steps = _validate.int_at_least("steps", steps, 1)
    record_every = _validate.int_at_least("record_every", record_every, 1)
    if lrs is not None:
        lrs = [_validate.positive("lr", lr) for lr in lrs]
    prob = SparseBigram(*random_instance(seed, N, T, Q))
    white = Whitened(prob)
    lam_star = float(lambda_max(white, white.at({"V": prob.P, "A": prob.Qm}), method="exact"))
    lam_raw = float(lambda_max(prob, {"V": prob.P, "A": prob.Qm}, method="exact"))
    if lrs is None:
        lrs = [0.5, 0.9 * 2 / lam_star, 1.1 * 2 / lam_star]
    audits, losses, rows = [], [], []
    for lr in lrs:
        traj = gradient_descent(
            white, white.init(None), lr=lr, steps=steps, record_every=record_every, save_params=True
        )
        audit = step_size_audit(white, traj, lr, method="exact")
        audits.append(audit)
        losses.append(np.asarray(traj.loss) - float(prob.L_star))
        final = white.theta(traj.final)
        rows.append(
            audit.row().json()
            | {
                "status": traj.status_names[int(traj.status)],
                "final_excess_loss": float(traj.loss[-1] - prob.L_star),
                "final_distances": [float(d) for d in prob.distances(final)],
            }
        )
    inputs = {
        "task": "scb",
        "N": N,
        "T": T,
        "Q": Q,
        "seed": seed,
        "lr": lrs,
        "steps": steps,
        "dynamics": "exact preconditioned, Π_T-projected population GD from (μ1ᵀ, 11ᵀ/T)",
    }
    results = {"lambda_star_whitened": lam_star, "lambda_star_raw": lam_raw, "runs": rows}
    fig = plot_step_size_audit(audits, [np.maximum(lo, 1e-300) for lo in losses], [f"η = {lr:.3g}" for lr in lrs])
    fig.axes[1].set(ylabel="L − L* (log)")
    res = Result(
        inputs,
        results,
        arrays={
            "stepsize": {
                "steps": np.stack([a.ts for a in audits]),
                "lambda_max": np.stack([a.lambda_max for a in audits]),
                "excess_loss": np.stack(losses),
                "lr": np.array(lrs),
            }
        },
        figures={"stepsize": fig},
    )
    res.lines.append(
        f"stepsize scb  N={N}, T={T}, Q={Q}, seed {seed}: λ_max at (P, Qm) = {lam_star:.5g} in the "
        f"preconditioned geometry ({lam_raw:.5g} raw), stability edge 2/λ* = {2 / lam_star:.4g}"
    )
    for r, audit in zip(rows, audits, strict=False):
        res.lines.append(
            f"  η = {r['lr']:<7.4g} {audit.verdict()}; L − L* = {r['final_excess_loss']:.3g}, {r['status']}"
        )
    return res
