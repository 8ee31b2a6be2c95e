"""SCB figures at small scale (docs/models/scb.md §5, §7): stage 1 on the exact population process, then stage 2
three ways — ℓ1-proximal SGD, SGD with the same large step η_2, SGD with a small step η_2' — and the
large-N Gaussian-surrogate simulation.

* Fig. 1: ‖V−P‖_μ and ‖A−Qm‖_μ over steps (the proximal end point after normalisation as a star).
* Fig. 3: the signals α_V, α_A and Δ_V, Δ_A, the distance to the noise-free population trajectory.
* Fig. 5: N = 100, T = 100000 with Gaussian noise of variance ∝ 1/batch: Δ for proximal vs SGD.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.dynamics import L1Prox, gradient_descent
from popdyn.io import Result
from popdyn.jobs.scb._training import (
    BATCH,
    ETA2,
    ETA2_SMALL,
    LAMBDA_A,
    RunMetrics,
    Stage1Run,
    gradient_variance,
    population_reference,
    stage1,
    stage2,
    stage2_start,
    surrogate_noise,
    trajectory_metrics,
)
from popdyn.tasks.scb import SparseBigram, WithReference, normalise, random_instance

RUNS = (("proximal", "proximal", ETA2), ("sgd", "SGD η_2", ETA2), ("sgd_small", "SGD η_2'", ETA2_SMALL))


class Stage2Run(NamedTuple):
    """One stage-2 run of ``stage2_comparison``: its step ``lr``, its ``metrics`` against the noise-free reference
    at that step (``trajectory_metrics``), (‖V − P‖_μ, ‖A − Qm‖_μ) of its end point after ``normalise``
    (``final_normalised``), and its count of runs per engine status (``status``)."""

    lr: float
    metrics: RunMetrics
    final_normalised: tuple[Any, Any]
    status: dict[str, int]


class Stage2Comparison(NamedTuple):
    """Stage 1 then the three stage-2 runs of Figs. 1 and 3 (``stage2_comparison``): the instance ``prob``, the
    exact ``stage1`` run, the per-block gradient ``variance`` at its end (``gradient_variance``), and the stage-2
    ``runs`` by ``RUNS`` key ("proximal", "sgd", "sgd_small")."""

    prob: SparseBigram
    stage1: Stage1Run
    variance: dict[str, float]
    runs: dict[str, Stage2Run]


def stage2_comparison(
    N: int = 10,
    T: int = 50,
    Q: int = 2,
    seed: int = 0,
    steps: int = 3000,
    batch: int = BATCH,
    noise: str = "gaussian",
    record_every: int = 10,
) -> Stage2Comparison:
    """Stage 1 (exact) then the three stage-2 runs of ``RUNS`` from the same point with the same noise seed; metrics
    of each against the noise-free reference trajectory at its own step size.

    **Arguments:**

    - ``N``, ``T``, ``Q``, ``seed``: the random instance (``random_instance`` from ``PRNGKey(seed)``).
    - ``steps``, ``batch``, ``noise``, ``record_every``: stage 2's steps, batch B, noise model and record interval
      (``stage2``).
    """
    prob, s1 = stage2_start(N, T, Q, seed)
    var = gradient_variance(prob, s1.theta, jax.random.PRNGKey(seed + 1))
    runs = {}
    for key, _, lr in RUNS:
        method = "proximal" if key == "proximal" else "sgd"
        traj = stage2(
            prob,
            s1.theta,
            method=method,
            noise=noise,
            lr=lr,
            steps=steps,
            batch=batch,
            variance=var,
            seed=seed,
            record_every=record_every,
        )
        ref = population_reference(prob, s1.theta, lr=lr, steps=steps, record_every=record_every)
        runs[key] = Stage2Run(
            lr=lr,
            metrics=trajectory_metrics(prob, traj, ref),
            final_normalised=prob.distances(normalise(traj.final)),
            status=traj.status_counts(),
        )
    return Stage2Comparison(prob=prob, stage1=s1, variance=var, runs=runs)


def _summary(comp: Stage2Comparison) -> dict[str, Any]:
    """summary.json's results of Figs. 1 and 3: stage 1's steps and threshold, the gradient variance, and per
    stage-2 run its final distances (raw and normalised), signals, largest ‖Δ‖_μ and status counts."""
    out: dict[str, Any] = {
        "stage1_steps": comp.stage1.step,
        "threshold": comp.stage1.threshold,
        "gradient_variance": comp.variance,
    }
    for key, r in comp.runs.items():
        m = r.metrics.state
        assert m.delta_A_mu is not None and m.delta_V_mu is not None  # measured against a reference run
        out[key] = {
            "lr": r.lr,
            "final_dist_V": float(m.dist_V[-1]),
            "final_dist_A": float(m.dist_A[-1]),
            "normalised_dist_V": float(r.final_normalised[0]),
            "normalised_dist_A": float(r.final_normalised[1]),
            "final_alpha_V": float(m.alpha_V[-1]),
            "final_alpha_A": float(m.alpha_A[-1]),
            "max_delta_A_mu": float(m.delta_A_mu.max()),
            "max_delta_V_mu": float(m.delta_V_mu.max()),
            "status": r.status,
        }
    return out


def _inputs(figure: str, N, T, Q, seed, steps, batch, noise) -> dict:
    return {
        "figure": figure,
        "N": N,
        "T": T,
        "Q": Q,
        "seed": seed,
        "steps": steps,
        "batch": batch,
        "noise": noise,
        "eta2": ETA2,
        "eta2_small": ETA2_SMALL,
        "lambda_A": LAMBDA_A,
        "lambda_V": 0.0,
        "stage1": "exact population preconditioned projected GD, η_1 = 0.5, to max(α) >= 2/(QN)",
    }


def scb_fig1(
    N: int = 10,
    T: int = 50,
    Q: int = 2,
    seed: int = 0,
    steps: int = 3000,
    batch: int = BATCH,
    noise: str = "gaussian",
    progress: bool = True,
) -> Result:
    """Fig. 1: distances to the truth ‖V − P‖_μ, ‖A − Qm‖_μ over stage 2 of Algorithm 1 for the ℓ1-proximal run,
    SGD at η_2 and SGD at the smaller η_2', all from the same exact stage-1 end point (``stage2_comparison``).

    **Arguments:**

    - ``N``, ``T``, ``Q``, ``seed``: the random instance (``random_instance`` from ``PRNGKey(seed)``).
    - ``steps``, ``batch``, ``noise``: stage 2's steps, batch B and noise model.
    - ``progress``: unused.
    """
    del progress
    comp = stage2_comparison(N, T, Q, seed, steps, batch, noise)
    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for key, label, _ in RUNS:
        m = comp.runs[key].metrics
        for ax, dist in zip(axes, (m.state.dist_V, m.state.dist_A), strict=False):
            ax.semilogy(m.steps, dist, label=label)
    star = comp.runs["proximal"].final_normalised
    for ax, b, v in zip(axes, ("V", "A"), star, strict=False):
        ax.semilogy([steps], [float(v)], "*", ms=14, color="k", label="proximal, normalised")
        ax.set(xlabel="stage-2 step", ylabel=f"‖{b} − {'P' if b == 'V' else 'Qm'}‖_μ", title=f"distance of {b}")
        ax.legend(fontsize=7)
    fig.suptitle(
        f"SCB Fig. 1: N={N}, T={T}, Q={Q}, batch {batch}, {noise} noise, after stage 1 ({comp.stage1.step} exact steps)"
    )
    results = _summary(comp)
    lines = [
        f"scb-fig1: N={N}, T={T}, Q={Q}, seed {seed}, stage 1 = {results['stage1_steps']} steps, "
        f"stage 2 = {steps} steps, batch {batch}, {noise} noise"
    ]
    for key, label, _ in RUNS:
        r = results[key]
        lines.append(
            f"  {label:<9s}: ‖V−P‖_μ {r['final_dist_V']:.4f}, ‖A−Qm‖_μ {r['final_dist_A']:.4f}; normalised "
            f"{r['normalised_dist_V']:.4f}, {r['normalised_dist_A']:.4f}"
        )
    arrays = {f"fig1_{k}": comp.runs[k].metrics.arrays() for k, _, _ in RUNS}
    return Result(_inputs("scb-fig1", N, T, Q, seed, steps, batch, noise), results, arrays, {"scb-fig1": fig}, lines)


def scb_fig3(
    N: int = 10,
    T: int = 50,
    Q: int = 2,
    seed: int = 0,
    steps: int = 3000,
    batch: int = BATCH,
    noise: str = "gaussian",
    progress: bool = True,
) -> Result:
    """Fig. 3: signals α_V, α_A and the distances Δ_V, Δ_A (μ-norm and Frobenius) to the noise-free,
    unregularised population trajectory, for proximal and SGD η_2 (``stage2_comparison``).

    **Arguments:**

    - ``N``, ``T``, ``Q``, ``seed``: the random instance (``random_instance`` from ``PRNGKey(seed)``).
    - ``steps``, ``batch``, ``noise``: stage 2's steps, batch B and noise model.
    - ``progress``: unused.
    """
    del progress
    comp = stage2_comparison(N, T, Q, seed, steps, batch, noise)
    fig = Figure(figsize=(11, 7.5), layout="constrained")
    axes = fig.subplots(2, 2)
    for (key, label, _), colour in zip(RUNS[:2], ("C0", "C1"), strict=False):
        m = comp.runs[key].metrics
        named = m.state.named()
        axes[0, 0].plot(m.steps, m.state.alpha_V, color=colour, label=label)
        axes[0, 1].plot(m.steps, m.state.alpha_A, color=colour, label=label)
        for ax, b in zip(
            axes[1], ("V", "A"), strict=False
        ):  # Δ = 0 at the shared start: drawn from the first record on
            ax.semilogy(m.steps[1:], named[f"delta_{b}_mu"][1:], color=colour, label=f"{label} (μ-norm)")
            ax.semilogy(m.steps[1:], named[f"delta_{b}_fro"][1:], ":", color=colour, label=f"{label} (Frobenius)")
    for ax, title in zip(axes.ravel(), ("α_V", "α_A", "‖Δ_V‖", "‖Δ_A‖"), strict=False):
        ax.set(xlabel="stage-2 step", title=title)
        ax.legend(fontsize=7)
    fig.suptitle(f"SCB Fig. 3: signals and distance to the population process (N={N}, T={T}, Q={Q}, {noise} noise)")
    results = _summary(comp)
    lines = [f"scb-fig3: N={N}, T={T}, Q={Q}, seed {seed}, {steps} stage-2 steps, {noise} noise"]
    for key, label, _ in RUNS[:2]:
        r = results[key]
        lines.append(
            f"  {label:<9s}: α = ({r['final_alpha_V']:.3f}, {r['final_alpha_A']:.3f}), max ‖Δ_A‖_μ "
            f"{r['max_delta_A_mu']:.4f}, max ‖Δ_V‖_μ {r['max_delta_V_mu']:.4f}"
        )
    arrays = {f"fig3_{k}": comp.runs[k].metrics.arrays() for k, _, _ in RUNS[:2]}
    return Result(_inputs("scb-fig3", N, T, Q, seed, steps, batch, noise), results, arrays, {"scb-fig3": fig}, lines)


FIG5_SWITCH = 0.1  # stage 1 → 2 once min(α_V, α_A) ≥ 0.1, where the paper's small runs switch (§5)
FIG5_NOISE_SDS = 3.0  # λ_A = 3σ_A: the ℓ1 step ηλ_A removes the surrogate's per-step noise up to 3 SDs
FIG5_DRIVE_FRACTION = 0.2  # λ_A = 0.2 × the median population drive on the support of Qm at the switch


def fig5_batch(prob: SparseBigram, theta1, var_A: float) -> tuple[int, float]:
    """The batch B and λ_A of Fig. 5 [our choice; the paper's are unknown]: λ_A is a fraction of the median
    drive −(∇̃_A L)_{sk} over the support of Qm at θ1 (exact), so the prox keeps the signal, and B makes
    3σ_A = 3√(var_A/B) equal to λ_A, so the prox removes the surrogate noise off the support."""
    drive = -prob.precondition(jax.grad(prob.loss)(theta1), project=True)["A"]
    lam_A = FIG5_DRIVE_FRACTION * float(np.median(np.asarray(drive)[np.asarray(prob.Qm) > 0]))
    if not lam_A > 0:
        raise ValueError(
            f"the population drive on the support of Qm is {lam_A / FIG5_DRIVE_FRACTION:.3g} at the "
            "switch: stage 1 ended where A does not move toward Qm"
        )
    return int(np.ceil(var_A * (FIG5_NOISE_SDS / lam_A) ** 2)), lam_A


class Fig5Run(NamedTuple):
    """One stage-2 surrogate run of Fig. 5 (``_fig5_run``): ``metrics``, the engine's recorded ``state_metrics``
    against the noise-free reference by name, with the record ``steps``; its count of runs per engine ``status``;
    and the final A's support statistics: ``support_mass`` Σ_k μ_k Σ_s A_sk over the support of Qm,
    ``nonzero_off_support`` the share of non-zero entries off it, ``min_support_entry`` its smallest entry on it."""

    metrics: dict[str, np.ndarray]
    status: dict[str, int]
    support_mass: float
    nonzero_off_support: float
    min_support_entry: float


def _fig5_run(
    prob: SparseBigram, theta1, sigma: dict, lam_A: float | None, steps: int, seed: int, record_every: int
) -> Fig5Run:
    """One stage-2 surrogate run paired with the noise-free reference (``WithReference``): Δ and the signals
    as metrics, θ never stored; plus the final A's support statistics (is the signal still there?).

    **Arguments:**

    - ``prob``: the instance; ``theta1``: stage 1's end point.
    - ``sigma``: the surrogate noise per block (``surrogate_noise``); ``lam_A``: the ℓ1 weight on A, None: plain SGD.
    - ``steps``, ``seed``, ``record_every``: stage 2's steps, noise seed and record interval.
    """
    pair = WithReference(prob)
    traj = gradient_descent(
        pair,
        pair.pair(theta1),
        lr=ETA2,
        steps=steps,
        precondition=pair.precondition,
        noise=sigma,
        prox=None if lam_A is None else L1Prox({"A": lam_A}),
        metrics=pair.metrics,
        record_every=record_every,
        seed=seed,
    )
    A = traj.final["A"]
    support = prob.Qm > 0
    assert traj.metrics is not None  # metrics= was given
    return Fig5Run(
        metrics={k: np.asarray(v) for k, v in traj.metrics.items()} | {"steps": np.asarray(traj.ts)},
        status=traj.status_counts(),
        support_mass=float(prob.mu @ (A * support).sum(axis=0)),
        nonzero_off_support=float(((A != 0) & ~support).mean()),
        min_support_entry=float(np.asarray(A)[np.asarray(support)].min()),
    )


FIG5_LABELS = (("proximal", "ℓ1-proximal"), ("sgd", "SGD, same batch"))
"""The two runs of Fig. 5 and their names in the figure."""


def _fig5_figure(runs: dict[str, Fig5Run], title: str) -> Figure:
    """Fig. 5's panels: ‖Δ_A‖_F and ‖Δ_V‖_F (dotted) over the stage-2 steps, and the signals α_A, α_V (dotted).

    **Arguments:**

    - ``runs``: the two runs by ``FIG5_LABELS`` key; ``title``: the figure's title.
    """
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax_d, ax_a = fig.subplots(1, 2)
    for (key, label), colour in zip(FIG5_LABELS, ("C0", "C1"), strict=False):
        m = runs[key].metrics
        for b, ls in (("A", "-"), ("V", ":")):
            ax_d.semilogy(m["steps"][1:], m[f"delta_{b}_fro"][1:], ls, color=colour, label=f"{label}: ‖Δ_{b}‖_F")
        ax_a.plot(m["steps"], m["alpha_A"], color=colour, label=f"{label}: α_A")
        ax_a.plot(m["steps"], m["alpha_V"], ":", color=colour, label=f"{label}: α_V")
    ax_d.set(xlabel="stage-2 step", title="distance to the noise-free population trajectory")
    ax_a.set(xlabel="stage-2 step", title="signals")
    for ax in (ax_d, ax_a):
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig


def _fig5_run_results(r: Fig5Run) -> dict[str, Any]:
    """One run's row of Fig. 5's summary: final Δ and signals, the final A's support statistics, status counts."""
    m = r.metrics
    return {
        "final_delta_A_fro": float(m["delta_A_fro"][-1]),
        "final_delta_V_fro": float(m["delta_V_fro"][-1]),
        "final_delta_A_mu": float(m["delta_A_mu"][-1]),
        "final_alpha_V": float(m["alpha_V"][-1]),
        "final_alpha_A": float(m["alpha_A"][-1]),
        "support_mass": r.support_mass,
        "nonzero_off_support": r.nonzero_off_support,
        "min_support_entry": r.min_support_entry,
        "status": r.status,
    }


def _fig5_lines(head: str, results: dict[str, Any]) -> list[str]:
    """Fig. 5's printed lines: ``head``, then per run its final Δ, signals and the final A's support statistics
    (``results``: the summary, with ``_fig5_run_results``' rows)."""
    lines = [head]
    for key, label in (("proximal", "ℓ1-proximal"), ("sgd", "SGD")):
        r = results[key]
        lines.append(
            f"  {label:<11s}: ‖Δ_A‖_F {r['final_delta_A_fro']:.4f}, ‖Δ_V‖_F {r['final_delta_V_fro']:.4f}; "
            f"α = ({r['final_alpha_V']:.3f}, {r['final_alpha_A']:.3f}); A's mass on the support of Qm "
            f"{r['support_mass']:.3f}, off-support entries non-zero {100 * r['nonzero_off_support']:.1f}%"
        )
    return lines


def _fig5_switch(prob: SparseBigram, Q: int, switch: float, seed: int, samples: int) -> tuple[Stage1Run, dict]:
    """Stage 1 of Fig. 5, exact until both signals reach ``switch``, and the per-block gradient variance there from
    ``samples`` exact per-sample gradients (``gradient_variance``, key ``seed`` + 1)."""
    s1 = stage1(prob, Q, threshold=switch, both=True, chunk=50)
    if s1.step is None:
        raise ValueError(f"switch={switch}: stage 1 did not bring both signals to it within its step budget")
    return s1, gradient_variance(prob, s1.theta, jax.random.PRNGKey(seed + 1), samples=samples)


def scb_fig5(
    N: int = 100,
    T: int = 100_000,
    Q: int = 2,
    seed: int = 0,
    steps: int = 200,
    batch: int | None = None,
    switch: float = FIG5_SWITCH,
    samples: int = 4000,
    record_every: int = 5,
    progress: bool = True,
) -> Result:
    """Fig. 5 at the paper's N = 100, T = 10⁵: stage 1 exact until both signals reach ``switch``, then the
    exact preconditioned population step plus Gaussian noise N(0, σ_b²), σ_b² = var_b/B calibrated from
    ``samples`` exact per-sample gradients at the switch (§5), with and without the ℓ1 prox (λ_A = 3σ_A);
    ‖Δ‖, the distance to the noise-free unregularised population trajectory, over the stage-2 steps.

    **Arguments:**

    - ``N``, ``T``, ``Q``, ``seed``: the random instance (``random_instance`` from ``PRNGKey(seed)``).
    - ``steps``, ``record_every``: stage 2's steps and record interval.
    - ``batch``: the surrogate's batch B; default ``fig5_batch``'s.
    - ``switch``, ``samples``: as above; ``progress``: unused.
    """
    del progress
    seed = _validate.int_at_least("seed", seed, 0)
    switch = _validate.positive("switch", switch)
    steps = _validate.int_at_least("steps", steps, 1)
    prob = SparseBigram(*random_instance(seed, N, T, Q))
    s1, var = _fig5_switch(prob, Q, switch, seed, samples)
    if batch is None:
        batch, _ = fig5_batch(prob, s1.theta, var["A"])
    sigma = surrogate_noise(var, batch)
    lam_A = FIG5_NOISE_SDS * sigma["A"]
    runs = {
        "proximal": _fig5_run(prob, s1.theta, sigma, lam_A, steps, seed, record_every),
        "sgd": _fig5_run(prob, s1.theta, sigma, None, steps, seed, record_every),
    }
    title = (
        f"SCB Fig. 5: N={N}, T={T}, Q={Q}, Gaussian surrogate of batch {batch} "
        f"(σ_V={sigma['V']:.2g}, σ_A={sigma['A']:.2g}), λ_A = {lam_A:.2g}"
    )
    results: dict[str, Any] = {
        "stage1_steps": s1.step,
        "switch": switch,
        "stage1_alphas": [float(a) for a in s1.alphas[-1]],
        "gradient_variance": var,
        "sigma": sigma,
        "lambda_A": lam_A,
    }
    results |= {key: _fig5_run_results(r) for key, r in runs.items()}
    head = (
        f"scb-fig5: N={N}, T={T}, Q={Q}, seed {seed}: stage 1 exact for {s1.step} steps (to min(α) ≥ "
        f"{switch:g}), then {steps} surrogate steps at η_2 = {ETA2}, batch {batch}, λ_A = {lam_A:.3g}"
    )
    inputs = {
        "figure": "scb-fig5",
        "N": N,
        "T": T,
        "Q": Q,
        "seed": seed,
        "steps": steps,
        "batch": batch,
        "switch": switch,
        "samples": samples,
        "eta2": ETA2,
        "lambda_A": f"{FIG5_NOISE_SDS:g}·σ_A",
        "stage1": "exact population preconditioned projected GD, η_1 = 0.5, to min(α_V, α_A) >= switch",
    }
    arrays = {f"fig5_{k}": r.metrics for k, r in runs.items()}
    return Result(inputs, results, arrays, {"scb-fig5": _fig5_figure(runs, title)}, _fig5_lines(head, results))
