"""SCB figures at small scale (spec scb.md §5, §7): stage 1 on the exact population process, then stage 2
three ways — ℓ1-proximal SGD, SGD with the same large step η_2, SGD with a small step η_2' — and the
large-N Gaussian-surrogate simulation.

* Fig. 1: ‖V−P‖_μ and ‖A−Qm‖_μ over steps (the proximal end point after normalisation as a star).
* Fig. 3: the signals α_V, α_A and Δ_V, Δ_A, the distance to the noise-free population trajectory.
* Fig. 5: N = 100, T = 100000 with Gaussian noise of variance ∝ 1/batch: Δ for proximal vs SGD.
"""

from __future__ import annotations

import jax
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.io import Result
from popdyn.tasks.scb import SparseBigram, random_instance
from popdyn.tasks.scb.training import (
    BATCH, ETA2, ETA2_SMALL, LAMBDA_A, gradient_variance, normalise, population_reference, stage1, stage2,
    trajectory_metrics,
)

RUNS = (("proximal", "proximal", ETA2), ("sgd", "SGD η_2", ETA2), ("sgd_small", "SGD η_2'", ETA2_SMALL))


def stage2_comparison(N: int = 10, T: int = 50, Q: int = 2, seed: int = 0, steps: int = 3000,
                      batch: int = BATCH, noise: str = "gaussian", record_every: int = 10) -> dict:
    """Stage 1 (exact) then the three stage-2 runs from the same point with the same noise seed; metrics of
    each against the noise-free reference trajectory at its own step size."""
    prob = SparseBigram(*random_instance(jax.random.PRNGKey(_validate.int_at_least("seed", seed, 0)), N, T, Q))
    s1 = stage1(prob, Q)
    if s1["step"] is None:
        raise ValueError(f"Q={Q}: stage 1 did not reach max(α) >= {s1['threshold']:.3g} within its step budget")
    var = gradient_variance(prob, s1["theta"], jax.random.PRNGKey(seed + 1))
    runs = {}
    for key, _, lr in RUNS:
        method = "proximal" if key == "proximal" else "sgd"
        traj = stage2(prob, s1["theta"], method=method, noise=noise, lr=lr, steps=steps, batch=batch,
                      variance=var, seed=seed, record_every=record_every)
        ref = population_reference(prob, s1["theta"], lr=lr, steps=steps, record_every=record_every)
        m = trajectory_metrics(prob, traj, ref)
        runs[key] = {"lr": lr, "metrics": m, "final_normalised": prob.distances(normalise(traj.final)),
                     "status": traj.status_counts()}
    return {"prob": prob, "stage1": s1, "variance": var, "runs": runs}


def _summary(comp: dict) -> dict:
    out = {"stage1_steps": comp["stage1"]["step"], "threshold": comp["stage1"]["threshold"],
           "gradient_variance": comp["variance"]}
    for key, r in comp["runs"].items():
        m = r["metrics"]
        out[key] = {"lr": r["lr"], "final_dist_V": float(m["dist_V"][-1]), "final_dist_A": float(m["dist_A"][-1]),
                    "normalised_dist_V": float(r["final_normalised"][0]),
                    "normalised_dist_A": float(r["final_normalised"][1]),
                    "final_alpha_V": float(m["alpha_V"][-1]), "final_alpha_A": float(m["alpha_A"][-1]),
                    "max_delta_A_mu": float(m["delta_A_mu"].max()), "max_delta_V_mu": float(m["delta_V_mu"].max()),
                    "status": r["status"]}
    return out


def _inputs(figure: str, N, T, Q, seed, steps, batch, noise) -> dict:
    return {"figure": figure, "N": N, "T": T, "Q": Q, "seed": seed, "steps": steps, "batch": batch, "noise": noise,
            "eta2": ETA2, "eta2_small": ETA2_SMALL, "lambda_A": LAMBDA_A, "lambda_V": 0.0,
            "stage1": "exact population preconditioned projected GD, η_1 = 0.5, to max(α) >= 2/(QN)"}


def scb_fig1(N: int = 10, T: int = 50, Q: int = 2, seed: int = 0, steps: int = 3000, batch: int = BATCH,
             noise: str = "gaussian", progress: bool = True) -> Result:
    """Fig. 1: distances to the truth over stage 2 for proximal, SGD η_2 and SGD η_2'."""
    del progress
    comp = stage2_comparison(N, T, Q, seed, steps, batch, noise)
    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for key, label, _ in RUNS:
        m = comp["runs"][key]["metrics"]
        for ax, b in zip(axes, ("V", "A")):
            ax.semilogy(m["steps"], m[f"dist_{b}"], label=label)
    star = comp["runs"]["proximal"]["final_normalised"]
    for ax, b, v in zip(axes, ("V", "A"), star):
        ax.semilogy([steps], [float(v)], "*", ms=14, color="k", label="proximal, normalised")
        ax.set(xlabel="stage-2 step", ylabel=f"‖{b} − {'P' if b == 'V' else 'Qm'}‖_μ", title=f"distance of {b}")
        ax.legend(fontsize=7)
    fig.suptitle(f"SCB Fig. 1: N={N}, T={T}, Q={Q}, batch {batch}, {noise} noise, after stage 1 "
                 f"({comp['stage1']['step']} exact steps)")
    results = _summary(comp)
    lines = [f"scb-fig1: N={N}, T={T}, Q={Q}, seed {seed}, stage 1 = {results['stage1_steps']} steps, "
             f"stage 2 = {steps} steps, batch {batch}, {noise} noise"]
    for key, label, _ in RUNS:
        r = results[key]
        lines.append(f"  {label:<9s}: ‖V−P‖_μ {r['final_dist_V']:.4f}, ‖A−Qm‖_μ {r['final_dist_A']:.4f}; normalised "
                     f"{r['normalised_dist_V']:.4f}, {r['normalised_dist_A']:.4f}")
    arrays = {f"fig1_{k}": comp["runs"][k]["metrics"] for k, _, _ in RUNS}
    return Result(_inputs("scb-fig1", N, T, Q, seed, steps, batch, noise), results, arrays, {"scb-fig1": fig}, lines)


def scb_fig3(N: int = 10, T: int = 50, Q: int = 2, seed: int = 0, steps: int = 3000, batch: int = BATCH,
             noise: str = "gaussian", progress: bool = True) -> Result:
    """Fig. 3: signals α_V, α_A and the distances Δ_V, Δ_A (μ-norm and Frobenius) to the noise-free,
    unregularised population trajectory, for proximal and SGD η_2."""
    del progress
    comp = stage2_comparison(N, T, Q, seed, steps, batch, noise)
    fig = Figure(figsize=(11, 7.5), layout="constrained")
    axes = fig.subplots(2, 2)
    for (key, label, _), colour in zip(RUNS[:2], ("C0", "C1")):
        m = comp["runs"][key]["metrics"]
        axes[0, 0].plot(m["steps"], m["alpha_V"], color=colour, label=label)
        axes[0, 1].plot(m["steps"], m["alpha_A"], color=colour, label=label)
        for ax, b in zip(axes[1], ("V", "A")):  # Δ = 0 at the shared start: drawn from the first record on
            ax.semilogy(m["steps"][1:], m[f"delta_{b}_mu"][1:], color=colour, label=f"{label} (μ-norm)")
            ax.semilogy(m["steps"][1:], m[f"delta_{b}_fro"][1:], ":", color=colour, label=f"{label} (Frobenius)")
    for ax, title in zip(axes.ravel(), ("α_V", "α_A", "‖Δ_V‖", "‖Δ_A‖")):
        ax.set(xlabel="stage-2 step", title=title)
        ax.legend(fontsize=7)
    fig.suptitle(f"SCB Fig. 3: signals and distance to the population process (N={N}, T={T}, Q={Q}, {noise} noise)")
    results = _summary(comp)
    lines = [f"scb-fig3: N={N}, T={T}, Q={Q}, seed {seed}, {steps} stage-2 steps, {noise} noise"]
    for key, label, _ in RUNS[:2]:
        r = results[key]
        lines.append(f"  {label:<9s}: α = ({r['final_alpha_V']:.3f}, {r['final_alpha_A']:.3f}), max ‖Δ_A‖_μ "
                     f"{r['max_delta_A_mu']:.4f}, max ‖Δ_V‖_μ {r['max_delta_V_mu']:.4f}")
    arrays = {f"fig3_{k}": comp["runs"][k]["metrics"] for k, _, _ in RUNS[:2]}
    return Result(_inputs("scb-fig3", N, T, Q, seed, steps, batch, noise), results, arrays, {"scb-fig3": fig}, lines)
