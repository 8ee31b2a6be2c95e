"""Scan and Snap figures from exact population dynamics (docs/models/scan_snap.md §5–§6).

* Fig. 4: attention c_n of Syn-Small over training, exact population heavy-ball GD (momentum 0.9, the
  authors' SGD without its sampling noise), T → ∞.
* Fig. 6: the Syn-Medium entropy grid over (K, η_Z, η_Y/η_Z), same dynamics from PyTorch's default
  initialisation, next to the paper's table.
* Fig. 9: B_n(t) of Eq. (129) at fixed ν = η_Y/η_Z with the transition times t_0 marked.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.dynamics import Status, gradient_descent
from popdyn.io import Result
from popdyn.tasks.scan_snap import (
    B_n,
    ScanSnap,
    distinct_entropy,
    syn_medium,
    syn_small,
    transition_time,
)

MOMENTUM = 0.9
FIG4_PANELS = ((1.0, 1.0), (10.0, 1.0))  # (η_Y, η_Z): left and right panels
FIG4_SNAPSHOTS = (0, 2, 4, 6, 8, 10)
FIG4_LOGGED = {0: 3.5264, 4: 0.733, 10: 0.0130, 98: 2e-5}  # the authors' figure_4.log (SGD, batch 128, T = 128)

FIG6_QUERIES = (1, 3, 5, 10)
FIG6_ETA_Z = (0.5, 1.0, 2.0, 3.0)
FIG6_RATIOS = (1.0, 2.0, 5.0, 10.0)
# figure_6_data.pkl means over seeds 1–10: rows (K, η_Z), columns η_Y/η_Z = 1, 2, 5, 10 (§6)
FIG6_PAPER = np.array(
    [
        [
            [1.971, 2.007, 2.066, 2.092],
            [1.871, 1.937, 2.022, 2.053],
            [1.699, 1.810, 1.934, 1.900],
            [1.551, 1.708, 1.786, 1.825],
        ],
        [
            [2.019, 1.988, 2.031, 2.063],
            [1.963, 1.920, 1.982, 2.024],
            [1.842, 1.809, 1.899, 1.955],
            [1.737, 1.715, 1.821, 1.839],
        ],
        [
            [2.026, 1.994, 2.020, 2.055],
            [1.995, 1.931, 1.971, 2.014],
            [1.906, 1.816, 1.884, 1.926],
            [1.817, 1.718, 1.802, 1.831],
        ],
        [
            [2.033, 2.012, 2.018, 2.051],
            [2.027, 1.975, 1.976, 2.015],
            [1.990, 1.888, 1.899, 1.947],
            [1.940, 1.805, 1.829, 1.875],
        ],
    ]
)

FIG9_PANELS = (  # (label, M, [(η_Z, η_Y)], t_max), §5 Fig. 9
    ("ν = 10, M = 100", 100, [(0.5, 5.0), (1.0, 10.0), (2.0, 20.0), (4.0, 40.0), (8.0, 80.0)], 5.0),
    ("ν = 1, M = 10000", 10_000, [(0.5, 0.5), (1.0, 1.0), (2.0, 2.0), (4.0, 4.0), (8.0, 8.0)], 50.0),
)
FIG9_K, FIG9_C0 = 1, 1.0  # [our choice]: unknown in the paper; these put every t_0 and B's range on its axes


def _fig4_tag(eta_y: float, eta_z: float) -> str:
    """The key of one panel of Fig. 4 in the summary and the arrays' names."""
    return f"eta_y={eta_y:g}_eta_z={eta_z:g}"


class _Fig4Run(NamedTuple):
    """One panel's run of Fig. 4 (``_fig4_run``).

    **Fields:** ``steps`` the recorded steps; ``attention`` c_n per record, shape (steps + 1, K, M); ``loss`` the
    exact loss per record; ``entropy`` the distinct-token entropy per record (``distinct_entropy``); ``status`` the
    run's end status (name → count)."""

    steps: np.ndarray
    attention: np.ndarray
    loss: np.ndarray
    entropy: np.ndarray
    status: dict[str, int]


def _fig4_run(prob: ScanSnap, eta_y: float, eta_z: float, steps: int, progress: bool) -> _Fig4Run:
    """Exact heavy-ball GD (μ = ``MOMENTUM``, lr 1) from θ = 0 at block rates (η_Y, η_Z), every step recorded.

    **Arguments:** ``prob`` Syn-Small; ``eta_y``, ``eta_z`` the rates; ``steps`` the steps run; ``progress`` show
    a progress bar."""
    traj = gradient_descent(
        prob,
        prob.init(None),
        lr=1.0,
        steps=steps,
        momentum=MOMENTUM,
        save_params=True,
        time_scales={"Y": eta_y, "Z": eta_z},
        progress=progress,
    )
    attn = np.asarray(jax.vmap(prob.attention)(traj.params))  # (steps + 1, K, M)
    entropy = np.asarray(distinct_entropy(prob, traj.params))
    return _Fig4Run(np.asarray(traj.ts), attn, np.asarray(traj.loss), entropy, traj.status_counts())


def _draw_fig4_row(axes, run: _Fig4Run, snaps: tuple[int, ...], eta_y: float, eta_z: float, logged: bool) -> None:
    """One row of Fig. 4: class 1's attention over its first 20 tokens at each step of ``snaps`` (common tokens
    grey, distinct blue), then the loss (with the authors' logged SGD losses when ``logged``).

    **Arguments:** ``axes`` the row's len(snaps) + 1 axes; ``run`` its run; ``snaps`` the steps shown;
    ``eta_y``, ``eta_z`` its rates; ``logged`` whether to mark the authors' log."""
    tokens = np.arange(20)
    colours = np.where(tokens < 10, "#999999", "#377eb8")
    attn = run.attention
    for col, s in enumerate(snaps):
        ax = axes[col]
        ax.bar(tokens, attn[s, 0, :20], color=colours)
        ax.set(title=f"step {s}", ylim=(0, max(0.35, attn[:, 0, :20].max() * 1.05)), xticks=[0, 10, 19])
        ax.title.set_fontsize(9)
        if col == 0:
            ax.set_ylabel(f"η_Y = {eta_y:g}, η_Z = {eta_z:g}\nc_l|1")
    ax = axes[-1]
    ax.semilogy(run.steps, run.loss, label="exact population (T → ∞)")
    if logged:
        ax.semilogy(list(FIG4_LOGGED), list(FIG4_LOGGED.values()), "o", label="authors' log (SGD)")
    ax.set(xlabel="step", title="loss")
    ax.legend(fontsize=7)


def _fig4_panel_summary(run: _Fig4Run, eta_y: float, eta_z: float, snaps: tuple[int, ...]) -> dict[str, Any]:
    """One panel's summary: its rates and status, the loss at steps 0, 4, 10, 98 and the last, the
    distinct-token entropy at each of ``snaps`` (the last is the final step), and class 1's final attention on
    its top distinct token and on the common tokens in all.

    **Arguments:** ``run`` the panel's run; ``eta_y``, ``eta_z`` its rates; ``snaps`` the steps shown."""
    steps, loss, attn = snaps[-1], run.loss, run.attention
    return {
        "eta_y": eta_y,
        "eta_z": eta_z,
        "status": run.status,
        "loss_at": {str(s): float(loss[s]) for s in (0, 4, 10, min(98, steps), steps)},
        "distinct_entropy": {str(s): float(run.entropy[s]) for s in snaps},
        "top_distinct_attention": float(attn[-1, 0, 19]),
        "common_attention_total": float(attn[-1, 0, :10].sum()),
    }


def _fig4_lines(results: dict[str, Any], steps: int) -> list[str]:
    """The printed summary of Fig. 4: per panel its loss and entropy over the run, then the authors' log and the
    paper's two claims.

    **Arguments:** ``results`` the summary's results (the panels by ``_fig4_tag`` and "claims"); ``steps`` the
    last step."""
    lines = [f"scan-snap-fig4: Syn-Small, exact heavy-ball GD (μ = {MOMENTUM}), {steps} steps, T → ∞"]
    for a, b in FIG4_PANELS:
        r = results[_fig4_tag(a, b)]
        la = r["loss_at"]
        lines.append(
            f"  η_Y = {a:g}, η_Z = {b:g}: loss {la['0']:.4f} → {la['4']:.3g} (step 4) → {la['10']:.3g} (step 10) → "
            f"{la[str(steps)]:.3g}; distinct-token entropy {r['distinct_entropy']['0']:.4f} → "
            f"{r['distinct_entropy'][str(steps)]:.4f}"
        )
    lines.append(
        f"  authors' SGD log (left panel): 3.5264, 0.733 (step 4), 0.0130 (step 10), ~2e-5 (step 98); "
        f"right panel faster: {results['claims']['right_converges_faster']}, less sparse: "
        f"{results['claims']['right_final_attention_less_sparse']}"
    )
    return lines


def scan_snap_fig4(steps: int = 100, progress: bool = True) -> Result:
    """Syn-Small (M = 34, K = 2), Y(0) = Z(0) = 0, exact heavy-ball GD (μ = 0.9) for ``steps`` steps at
    (η_Y, η_Z) = (1, 1) and (10, 1): c_n of class 1 at steps 0, 2, …, 10 and the last step.

    **Arguments:** ``steps`` GD steps (> 10); ``progress`` show progress bars."""
    steps = _validate.int_at_least("steps", steps, max(FIG4_SNAPSHOTS) + 1)
    prob = ScanSnap(syn_small())
    snaps = (*FIG4_SNAPSHOTS, steps)
    fig = Figure(figsize=(18, 6), layout="constrained")
    axes = fig.subplots(2, len(snaps) + 1)
    results: dict[str, Any] = {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for row, (eta_y, eta_z) in enumerate(FIG4_PANELS):
        run = _fig4_run(prob, eta_y, eta_z, steps, progress)
        _draw_fig4_row(axes[row], run, snaps, eta_y, eta_z, logged=row == 0)
        results[_fig4_tag(eta_y, eta_z)] = _fig4_panel_summary(run, eta_y, eta_z, snaps)
        arrays[f"fig4_{_fig4_tag(eta_y, eta_z)}"] = {
            "steps": run.steps,
            "attention": run.attention,
            "loss": run.loss,
            "entropy": run.entropy,
        }
    fig.suptitle("Scan and Snap Fig. 4: Syn-Small attention c_l|1 (grey: common tokens 0–9, blue: distinct 10–19)")
    left, right = (results[_fig4_tag(a, b)] for a, b in FIG4_PANELS)
    results["claims"] = {
        "right_converges_faster": left["loss_at"]["10"] > right["loss_at"]["10"],
        "right_final_attention_less_sparse": right["distinct_entropy"][str(steps)]
        > left["distinct_entropy"][str(steps)],
        "authors_logged_loss": {str(k): v for k, v in FIG4_LOGGED.items()},
    }
    inputs = {
        "figure": "scan-snap-fig4",
        "steps": steps,
        "momentum": MOMENTUM,
        "panels": [list(p) for p in FIG4_PANELS],
        "init": "zero",
        "T": None,
    }
    return Result(inputs, results, arrays, {"scan-snap-fig4": fig}, _fig4_lines(results, steps))


def fig6_grid(n_query: int, seeds: int, steps: int) -> np.ndarray:
    """Final distinct-token entropies, shape (η_Z, η_Y/η_Z, seed), for Syn-Medium with ``n_query`` queries:
    one compiled heavy-ball run per ratio over every (η_Z, seed) as per-point learning rates."""
    prob = ScanSnap(syn_medium(n_query))
    keys = jax.random.split(jax.random.PRNGKey(n_query), seeds)
    inits = jax.vmap(prob.init_uniform)(keys)
    batch = jax.tree_util.tree_map(lambda x: jnp.tile(x, (len(FIG6_ETA_Z),) + (1,) * (x.ndim - 1)), inits)
    lrs = np.repeat(FIG6_ETA_Z, seeds)
    out = np.empty((len(FIG6_ETA_Z), len(FIG6_RATIOS), seeds))
    for j, ratio in enumerate(FIG6_RATIOS):
        traj = gradient_descent(
            prob, batch, lr=lrs, steps=steps, record_every=steps, momentum=MOMENTUM, time_scales={"Y": ratio}
        )
        failed = (Status.DIVERGED, Status.NAN, Status.SOLVER_FAILED)  # these stay visible as NaN
        ok = ~np.isin(np.asarray(traj.status), failed)  # every run that ended somewhere, a degenerate point too
        ent = np.where(ok, np.asarray(distinct_entropy(prob, traj.final)), np.nan)
        out[:, j, :] = ent.reshape(len(FIG6_ETA_Z), seeds)
    return out


def _check_fig6(queries: tuple[int, ...], seeds: int, steps: int) -> tuple[tuple[int, ...], int, int]:
    """``scan_snap_fig6``'s settings validated: every query count one of the paper's grid, seeds and steps ≥ 1."""
    queries = tuple(_validate.int_at_least("queries", q, 1) for q in queries)
    bad = [q for q in queries if q not in FIG6_QUERIES]
    if bad:
        raise ValueError(f"queries={bad} is invalid: the paper's grid has n_query in {FIG6_QUERIES}")
    return queries, _validate.int_at_least("seeds", seeds, 1), _validate.int_at_least("steps", steps, 1)


class _Fig6Size(NamedTuple):
    """One Syn-Medium size of Fig. 6 against the paper's table (``_fig6_size``; ``summary`` is its summary form).

    **Fields:** ``n_query`` queries (K = 2·n_query); ``mean``, ``std`` the final distinct-token entropy over the
    seeds, shape (η_Z, η_Y/η_Z); ``paper`` the paper's means; ``falls`` per ratio, whether the entropy falls as η_Z
    grows; ``argmin`` per η_Z, the ratio of lowest entropy; ``n_unfinished`` runs that failed (NaN)."""

    n_query: int
    mean: np.ndarray
    std: np.ndarray
    paper: np.ndarray
    falls: np.ndarray
    argmin: list[float]
    n_unfinished: int

    @property
    def K(self) -> int:
        """Classes: two per query."""
        return 2 * self.n_query

    def summary(self) -> dict[str, Any]:
        """The size as summary.json holds it (arrays as nested lists, with M and the difference to the paper)."""
        return {
            "n_query": self.n_query,
            "M": int(syn_medium(self.n_query).M),
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "paper": self.paper.tolist(),
            "diff": (self.mean - self.paper).tolist(),
            "falls_with_eta_z": self.falls.tolist(),
            "argmin_ratio_per_eta_z": self.argmin,
            "n_unfinished": self.n_unfinished,
        }


def _fig6_size(n_query: int, entropy: np.ndarray) -> _Fig6Size:
    """The statistics of one size's entropy grid (``fig6_grid``: shape (η_Z, η_Y/η_Z, seed), NaN where a run
    failed) beside the paper's table (``_Fig6Size``)."""
    mean = np.nanmean(entropy, axis=-1)
    return _Fig6Size(
        n_query=n_query,
        mean=mean,
        std=np.nanstd(entropy, axis=-1),
        paper=FIG6_PAPER[FIG6_QUERIES.index(n_query)],
        falls=np.all(np.diff(mean, axis=0) < 0, axis=0),  # per ratio: entropy falls as η_Z grows
        argmin=[FIG6_RATIOS[i] for i in np.argmin(mean, axis=1)],
        n_unfinished=int(np.isnan(entropy).sum()),
    )


def _fig6_figure(sizes: list[_Fig6Size], seeds: int, steps: int) -> Figure:
    """Fig. 6: per size a column, the exact entropies above and the paper's below, against η_Y/η_Z, one line per
    η_Z.

    **Arguments:** ``sizes`` the sizes, one column each; ``seeds``, ``steps`` the run's settings, for the title."""
    fig = Figure(figsize=(4.2 * len(sizes), 7.5), layout="constrained")
    axes = fig.subplots(2, len(sizes), squeeze=False)
    for col, size in enumerate(sizes):
        for row, (data, title) in enumerate(((size.mean, "exact"), (size.paper, "paper"))):
            ax = axes[row, col]
            for i, ez in enumerate(FIG6_ETA_Z):
                ax.plot(FIG6_RATIOS, data[i], "o-", label=f"η_Z = {ez:g}")
            ax.set(
                xscale="log",
                xticks=FIG6_RATIOS,
                xticklabels=[f"{r:g}" for r in FIG6_RATIOS],
                xlabel="η_Y/η_Z",
                ylabel="entropy on distinct tokens",
                title=f"K = {size.K} ({title})",
            )
            ax.legend(fontsize=7)
    fig.suptitle(
        "Scan and Snap Fig. 6: Syn-Medium attention entropy on distinct tokens, exact heavy-ball GD "
        f"(μ = {MOMENTUM}, {steps} steps, {seeds} seeds) vs the paper's SGD"
    )
    return fig


def _fig6_comparison(sizes: list[_Fig6Size]) -> dict[str, float]:
    """The exact means against the paper's table over every size: mean and largest |difference|, mean
    difference and the correlation of the two tables."""
    d = np.array([s.mean - s.paper for s in sizes])
    return {
        "mean_abs_diff": float(np.nanmean(np.abs(d))),
        "max_abs_diff": float(np.nanmax(np.abs(d))),
        "mean_diff": float(np.nanmean(d)),
        "corr": float(np.corrcoef(np.ravel([s.mean for s in sizes]), np.ravel([s.paper for s in sizes]))[0, 1]),
    }


def _not_falling(sizes: list[_Fig6Size]) -> list[tuple[int, float]]:
    """The (K, η_Y/η_Z) columns where the entropy does not fall as η_Z grows."""
    return [(s.K, r) for s in sizes for r, f in zip(FIG6_RATIOS, s.falls, strict=False) if not f]


def _fig6_trends(sizes: list[_Fig6Size]) -> dict[str, Any]:
    """The paper's two trends: the share of (K, η_Y/η_Z) columns where the entropy falls as η_Z grows (and those
    where it does not), and for K ≥ 6 the share of (K, η_Z) rows lowest at η_Y/η_Z = 2 (None: no such K)."""
    not_falling = _not_falling(sizes)
    n_cols = len(sizes) * len(FIG6_RATIOS)
    argmins = [s.argmin for s in sizes if s.K >= 6]
    return {
        "entropy_falls_with_eta_z": (n_cols - len(not_falling)) / n_cols,
        "not_falling_K_ratio": [list(f) for f in not_falling],
        "lowest_near_ratio_2_for_K_ge_6": float(np.mean([r == 2.0 for a in argmins for r in a])) if argmins else None,
    }


def _fig6_lines(sizes: list[_Fig6Size], results: dict[str, Any], seeds: int, steps: int) -> list[str]:
    """The printed summary of Fig. 6: the run, the two trends and the comparison with the paper's table.

    **Arguments:** ``sizes`` the sizes; ``results`` the summary's results ("trends", "comparison"); ``seeds``,
    ``steps`` the run's settings."""
    not_falling = _not_falling(sizes)
    n_cols = len(sizes) * len(FIG6_RATIOS)
    lowest = results["trends"]["lowest_near_ratio_2_for_K_ge_6"]
    c = results["comparison"]
    return [
        f"scan-snap-fig6: Syn-Medium, K ∈ {[s.K for s in sizes]}, {seeds} seeds, {steps} exact heavy-ball steps",
        f"  entropy falls as η_Z grows in {n_cols - len(not_falling)}/{n_cols} (K, η_Y/η_Z) columns"
        + (f" (not in {', '.join(f'K = {k}, ratio {r:g}' for k, r in not_falling)})" if not_falling else ""),
        f"  K ≥ 6: lowest at η_Y/η_Z = 2 for {lowest} of the (K, η_Z) rows"
        if lowest is not None
        else "  K ≥ 6: not in this run",
        f"  vs the paper's table: mean |diff| {c['mean_abs_diff']:.3f}, max {c['max_abs_diff']:.3f}, "
        f"mean diff {c['mean_diff']:+.3f}, correlation {c['corr']:.3f}",
    ]


def scan_snap_fig6(
    queries: tuple[int, ...] = FIG6_QUERIES, seeds: int = 10, steps: int = 100, progress: bool = True
) -> Result:
    """Syn-Medium entropy grid (Fig. 6): K = 2·n_query, η_Z ∈ {0.5, 1, 2, 3}, η_Y/η_Z ∈ {1, 2, 5, 10},
    ``seeds`` U(−1/√M, 1/√M) initialisations, ``steps`` exact heavy-ball steps (μ = 0.9), next to the paper.

    **Arguments:** ``queries`` the sizes n_query (each in ``FIG6_QUERIES``); ``seeds`` initialisations per grid
    point; ``steps`` GD steps; ``progress`` show a progress bar over the sizes."""
    queries, seeds, steps = _check_fig6(queries, seeds, steps)
    from tqdm import tqdm

    ent = {q: fig6_grid(q, seeds, steps) for q in tqdm(queries, desc="Syn-Medium sizes", disable=not progress)}
    sizes = [_fig6_size(q, ent[q]) for q in queries]
    results = {
        "per_K": {str(s.K): s.summary() for s in sizes},
        "comparison": _fig6_comparison(sizes),
        "trends": _fig6_trends(sizes),
    }
    arrays = {
        "fig6": {
            "entropy": np.stack([ent[q] for q in queries]),
            "queries": np.array(queries),
            "eta_z": np.array(FIG6_ETA_Z),
            "ratios": np.array(FIG6_RATIOS),
        }
    }
    inputs = {
        "figure": "scan-snap-fig6",
        "queries": list(queries),
        "seeds": seeds,
        "steps": steps,
        "momentum": MOMENTUM,
        "init": "uniform(-1/sqrt(M), 1/sqrt(M))",
        "T": None,
        "metric": "mean over classes of the entropy of c_n restricted to its distinct tokens, renormalised",
    }
    figure = _fig6_figure(sizes, seeds, steps)
    return Result(inputs, results, arrays, {"scan-snap-fig6": figure}, _fig6_lines(sizes, results, seeds, steps))


def scan_snap_fig9(n_times: int = 400, progress: bool = True) -> Result:
    """B_n(t) = ¼ ln(C_0 + 2(η_Z/η_Y) K (M−1)² h(t/K)²) (Eq. 129) for the two panels of Fig. 9, with
    t_0 = 2K ln M/η_Y (and the sharp 2K x*/η_Y) marked; K = 1, C_0 = 1 [our choice]. Closed forms only: no run.

    **Arguments:**

    - ``n_times``: time points per curve (≥ 2).
    - ``progress``: unused (nothing to wait for).
    """
    del progress
    n_times = _validate.int_at_least("n_times", n_times, 2)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    results: dict[str, Any] = {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for ax, (label, M, rates, t_max) in zip(axes, FIG9_PANELS, strict=False):
        t = np.linspace(0.0, t_max, n_times)
        panel = {}
        for eta_z, eta_y in rates:
            B = np.asarray(B_n(t, FIG9_K, M, eta_y, eta_z, FIG9_C0))
            t0, t0s = float(transition_time(FIG9_K, M, eta_y)), float(transition_time(FIG9_K, M, eta_y, sharp=True))
            B0 = float(B_n(t0, FIG9_K, M, eta_y, eta_z, FIG9_C0))
            (line,) = ax.plot(t, B, label=f"η_Z = {eta_z:g}, η_Y = {eta_y:g}")
            ax.plot([t0], [B0], "o", color=line.get_color())
            if t0s <= t_max:
                ax.plot([t0s], [float(B_n(t0s, FIG9_K, M, eta_y, eta_z, FIG9_C0))], "x", color=line.get_color())
            panel[f"eta_z={eta_z:g}_eta_y={eta_y:g}"] = {
                "t0": t0,
                "t0_sharp": t0s,
                "B_at_t0": B0,
                "B_at_t_max": float(B[-1]),
            }
            arrays.setdefault(f"fig9_M{M}", {"t": t})[f"B_eta_z={eta_z:g}"] = B
        ax.set(xlabel="t", ylabel="B_n(t)", title=f"{label} (• t_0 = 2K ln M/η_Y, × sharp)")
        ax.legend(fontsize=7)
        results[label] = panel
    fig.suptitle(f"Scan and Snap Fig. 9: B_n(t), Eq. (129), K = {FIG9_K}, C_0 = {FIG9_C0:g} ([our choice])")
    lines = ["scan-snap-fig9: B_n(t) of Eq. (129) at fixed ν, K = 1, C_0 = 1 ([our choice])"]
    for label, panel in results.items():
        b0 = [p["B_at_t0"] for p in panel.values()]
        t0_text = ", ".join(f"{p['t0']:.3g}" for p in panel.values())
        lines.append(f"  {label}: t_0 = {t0_text}; B(t_0) = {min(b0):.4f} … {max(b0):.4f}")
    inputs = {"figure": "scan-snap-fig9", "K": FIG9_K, "C0": FIG9_C0, "n_times": n_times}
    return Result(inputs, results, arrays, {"scan-snap-fig9": fig}, lines)
