"""Figures of *Local to Global* (docs/models/markov.md §5) from exact population dynamics."""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.analysis import Grid, basin_map
from popdyn.dynamics import gradient_descent
from popdyn.exact import Chain
from popdyn.io import Result
from popdyn.plot import draw_overlays
from popdyn.tasks.markov import Canonical, Transformer, rank_one_weights
from popdyn.tasks.markov._canonical import E_SADDLE

FIG1_REGIMES = ((0.1, 0.1), (0.9, 0.9))
FIG1_ENERGY_LEVELS = (*range(-9, 0), E_SADDLE, *range(0, 12))
FIG1_LABELS = {  # §5.1: (w, e) positions of the region labels
    True: {"I_min": (-2.5, 0.6), "I_*": (-1.1, 1.5)},
    False: {"I_min": (1.2, 1.2), "I_*": (-1.9, 2.1)},
}


def markov_fig1(n_basin: int = 128, progress: bool = True) -> Result:
    """Fig 1 (§5.1): for p=q=0.1 and p=q=0.9 on [−3, 3]², left the loss with the normalised negative
    gradient (0.2 grid) and the critical sets, right the energy levels with the basins I_* (green) and
    I_min (red) as reached by the exact gradient flow from an n_basin² grid, and the separatrix; the basins are
    checked against the closed form of §4.4.

    **Arguments:**

    - ``n_basin``: points per axis of the basin grid (≥ 2; the runs cost n_basin² flows per panel).
    - ``progress``: show the engine's progress bars.
    """
    n_basin = _validate.int_at_least("n_basin", n_basin, 2)
    fig = Figure(figsize=(12, 10.5), layout="constrained")
    axes = fig.subplots(2, 2)
    fine = np.arange(-3.0, 3.0 + 1e-9, 0.01)
    W, Ef = np.meshgrid(fine, fine)
    coarse = np.arange(-3.0, 3.0 + 1e-9, 0.2)
    Wc, Ec = np.meshgrid(coarse, coarse)
    results: dict[str, Any] = {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for row, (p, q) in enumerate(FIG1_REGIMES):
        prob = Canonical(p, q)
        tag = "pq_lt_1" if p + q < 1 else "pq_gt_1"
        flat = {"e": jnp.asarray(Ef.ravel()), "w": jnp.asarray(W.ravel())}
        loss = np.asarray(jax.jit(jax.vmap(prob.loss))(flat)).reshape(W.shape)
        energy = np.asarray(jax.vmap(prob.energy)(flat)).reshape(W.shape)
        g = jax.jit(jax.vmap(jax.grad(prob.loss)))({"e": jnp.asarray(Ec.ravel()), "w": jnp.asarray(Wc.ravel())})
        ge, gw = -np.asarray(g["e"]).reshape(Ec.shape), -np.asarray(g["w"]).reshape(Ec.shape)
        norm = np.hypot(ge, gw)
        norm = np.where(norm > 0, norm, 1.0)
        grid = Grid.square("w", "e", -3.0, 3.0, n_basin)
        bm = basin_map(prob, grid, "flow", progress=progress)
        predicted = np.asarray(jax.vmap(prob.predicted_basin)(grid.points(prob))).reshape(grid.shape)
        agree = float(np.mean(predicted == bm.labels))
        title = f"p = q = {p} (p+q {'<' if p + q < 1 else '>'} 1)"
        ax_l, ax_e = axes[row]
        cs = ax_l.contourf(W, Ef, np.log10(loss), levels=30, cmap="viridis")
        fig.colorbar(cs, ax=ax_l, label="log10 L(e, w)")
        ax_l.quiver(Wc, Ec, gw / norm, ge / norm, color="w", alpha=0.8, scale=40, width=0.002)
        draw_overlays(ax_l, prob, "w", "e", (-3.0, 3.0))
        ax_l.set(xlim=(-3, 3), ylim=(-3, 3), xlabel="w", ylabel="e", title=f"{title}: loss and −∇L")
        shade = np.where(bm.labels == 0, 1.0, np.where(bm.labels == 1, 0.0, np.nan))
        ax_e.imshow(
            shade,
            origin="lower",
            extent=(-3, 3, -3, 3),
            aspect="auto",
            alpha=0.35,
            cmap=ListedColormap(["#e41a1c", "#4daf4a"]),
            interpolation="nearest",
        )
        ce = ax_e.contour(W, Ef, energy, levels=sorted(FIG1_ENERGY_LEVELS), colors="k", linewidths=0.6)
        ax_e.clabel(ce, fontsize=6, fmt="%.2g")
        draw_overlays(ax_e, prob, "w", "e", (-3.0, 3.0))
        for name, (x, y) in FIG1_LABELS[p + q < 1].items():
            ax_e.text(x, y, name, fontsize=13, weight="bold")
        ax_e.set(
            xlim=(-3, 3),
            ylim=(-3, 3),
            xlabel="w",
            ylabel="e",
            title=f"{title}: energy, basins from the exact flow ({100 * agree:.2f}% = §4.4)",
        )
        if row == 0:
            ax_l.legend(fontsize=7, loc="lower left")
        results[tag] = {"p": p, "q": q, "fractions": bm.fractions, "agreement_with_theory": agree}
        arrays[f"fig1_{tag}"] = {
            "w": fine,
            "e": fine,
            "loss": loss,
            "energy": energy,
            "basin_w": grid.xs,
            "basin_e": grid.ys,
            "labels": bm.labels,
        }
    lines = ["markov-fig1: (e, w) loss, flows, energy and basins (docs/models/markov.md §5.1)"]
    lines += [
        f"  {r['p']}, {r['q']}: I_* {100 * r['fractions']['global']:.2f}%, I_min "
        f"{100 * r['fractions']['local']:.2f}%, flow = closed form on {100 * r['agreement_with_theory']:.2f}%"
        for r in results.values()
    ]
    return Result({"figure": "markov-fig1", "n_basin": n_basin}, results, arrays, {"markov-fig1": fig}, lines)


def fig4_inits(model: Transformer, key, e: float = 1.0, w: float = -1.0) -> tuple[dict, dict]:
    """(standard, rank-one) initialisations of §5.4: GPT-2 N(0, 0.02²) for everything, and the same with
    e, p_n, W_1, W_2, b replaced by the rank-one weights of (e, w, b = 0) — w < −1/√2, inside I_* for
    p+q > 1 — while attention keeps its standard initialisation."""
    std = model.init(key)
    r1 = rank_one_weights(e, w, 0.0, N=model.N, d=model.d)
    return std, dict(std, **{k: r1[k] for k in ("e", "pos", "W_1", "W_2", "b")})


def _loss_and_grad_seconds(model: Transformer, first: dict, second: dict) -> tuple[float, float]:
    """(seconds of one jitted exact loss and gradient, seconds to compile it): compiled and run at ``first``, then
    timed at ``second``."""
    loss_and_grad = jax.jit(jax.value_and_grad(model.loss))
    t0 = time.perf_counter()
    jax.block_until_ready(loss_and_grad(first))  # compile
    t1 = time.perf_counter()
    jax.block_until_ready(loss_and_grad(second))
    return time.perf_counter() - t1, t1 - t0


def _first_below(ts: np.ndarray, losses: np.ndarray, level: float) -> list[float | None]:
    """Per loss curve (rows of ``losses`` at steps ``ts``), the first record step with loss below ``level``; None if
    never."""
    return [float(ts[np.argmax(curve < level)]) if (curve < level).any() else None for curve in losses]


def _fig4_results(
    model: Transformer, gd, adam_loss: np.ndarray, escape: list[float | None], h_uni: float, h_rate: float
) -> dict[str, Any]:
    """Fig 4's summary but for its timings: per initialisation GD's final loss and status, Adam's final loss and
    first step below the unigram plateau (``escape``), the two entropies and the model's size.

    **Arguments:**

    - ``model``: the transformer; ``gd``: the GD run; ``adam_loss``: Adam's losses, one row per initialisation.
    - ``h_uni``, ``h_rate``: the unigram loss H_uni and the entropy rate H_rate.
    """
    names = ("standard", "rank_one")
    return {
        "final_loss": dict(zip(names, map(float, np.asarray(gd.loss)[:, -1]), strict=False)),
        "status": {n: gd.status_names[int(s)] for n, s in zip(names, np.asarray(gd.status), strict=False)},
        "unigram_loss": h_uni,
        "entropy_rate": h_rate,
        "adam": {
            "final_loss": dict(zip(names, map(float, adam_loss[:, -1]), strict=False)),
            "first_step_below_unigram": dict(zip(names, escape, strict=False)),
        },
        "n_params": model.n_params(),
        "N": model.N,
        "d": model.d,
        "sequences_per_loss": model.n_sequences,
    }


def _fig4_figure(runs: tuple[tuple, tuple], h_uni: float, h_rate: float) -> Figure:
    """Fig 4's two panels, exact GD and exact Adam: the standard and rank-one initialisations' losses against the
    unigram and bigram entropies.

    **Arguments:**

    - ``runs``: per panel (record steps, losses with one row per initialisation, title).
    - ``h_uni``, ``h_rate``: the unigram loss H_uni and the entropy rate H_rate.
    """
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    for ax, (ts, losses, label) in zip(fig.subplots(1, 2), runs, strict=False):
        for name, curve in zip(("standard initialisation", "rank-one initialisation"), losses, strict=False):
            ax.plot(ts, curve, label=name)
        ax.axhline(h_uni, color="k", ls="--", lw=1, label=f"unigram H_uni = {h_uni:.4f}")
        ax.axhline(h_rate, color="k", ls=":", lw=1, label=f"bigram H_rate = {h_rate:.4f}")
        ax.set(ylim=(0.60, 0.90), xlabel="step", ylabel="exact population loss", title=label)
        ax.legend(fontsize=7)
    return fig


def markov_fig4(
    N: int = 8,
    d: int = 8,
    steps: int = 2000,
    lr: float = 0.1,
    adam_steps: int = 1000,
    adam_lr: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
) -> Result:
    """Fig 4 (§5.4): p = 0.5, q = 0.8, full model with tied weights; exact population GD from the
    standard and the rank-one initialisation (main panel), and exact Adam for comparison.

    **Arguments:**

    - ``N``, ``d``: the model's sequence length and width.
    - ``steps``, ``lr``: exact GD's steps and step η; ``adam_steps``, ``adam_lr``: exact Adam's.
    - ``seed``: the standard initialisation's key; ``progress``: the engine's progress bar for GD.
    """
    p, q = 0.5, 0.8
    model = Transformer(Chain.binary(p, q), N=N, d=d)
    std, r1 = fig4_inits(model, jax.random.PRNGKey(seed))
    batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), std, r1)
    cost, compile_seconds = _loss_and_grad_seconds(model, std, r1)
    gd = gradient_descent(model, batch, lr=lr, steps=steps, record_every=10, progress=progress)
    adam = gradient_descent(model, batch, lr=adam_lr, steps=adam_steps, optimizer=optax.adam, record_every=10)
    canon = Canonical(p, q)
    h_uni, h_rate = canon.unigram_loss(), canon.entropy_rate()
    gd_loss, adam_loss = np.asarray(gd.loss), np.asarray(adam.loss)
    escape = _first_below(np.asarray(adam.ts[0]), adam_loss, h_uni - 1e-3)
    results = _fig4_results(model, gd, adam_loss, escape, h_uni, h_rate) | {
        "seconds_per_loss_and_grad": cost,
        "compile_seconds": compile_seconds,
    }
    fig = _fig4_figure(
        (
            (np.asarray(gd.ts[0]), gd_loss, f"exact GD, η = {lr:g}"),
            (np.asarray(adam.ts[0]), adam_loss, f"exact Adam, lr = {adam_lr:g}"),
        ),
        h_uni,
        h_rate,
    )
    inputs = {
        "figure": "markov-fig4",
        "p": p,
        "q": q,
        "N": N,
        "d": d,
        "steps": steps,
        "lr": lr,
        "adam_steps": adam_steps,
        "adam_lr": adam_lr,
        "seed": seed,
        "rank_one": {"e": 1.0, "w": -1.0, "b": 0.0},
    }
    lines = [
        f"markov-fig4: p = {p}, q = {q}; full model, {model.n_params()} parameters, N = {N}, d = {d}",
        f"  one exact loss + gradient: {model.n_sequences} sequences, {1e3 * cost:.2f} ms (compile "
        f"{compile_seconds:.1f} s)",
        f"  exact GD (η = {lr:g}, {steps} steps): standard → {gd_loss[0, -1]:.6f} (H_uni {h_uni:.6f}), "
        f"rank-one → {gd_loss[1, -1]:.6f} (H_rate {h_rate:.6f})",
        f"  exact Adam (lr = {adam_lr:g}, {adam_steps} steps): standard → {adam_loss[0, -1]:.6f}, rank-one → "
        f"{adam_loss[1, -1]:.6f}; standard leaves the unigram plateau at step {escape[0]}",
    ]
    arrays = {
        "steps_gd": np.asarray(gd.ts[0]),
        "loss_gd": gd_loss,
        "steps_adam": np.asarray(adam.ts[0]),
        "loss_adam": adam_loss,
    }
    return Result(inputs, results, {"fig4": arrays}, {"markov-fig4": fig}, lines)


FIG3_PAPER = {  # §5.3: share of ‖·‖_F² in the top singular value, authors' saved weights
    "W_V": {1: 0.243, 100: 0.827, 200: 0.926},
    "W_1": {1: 0.245, 100: 0.939, 200: 0.987},
    "pos": {1: 0.141, 100: 0.900, 200: 0.938},
}


def top_singular_share(M: np.ndarray) -> float:
    """σ_1² / Σσ_i²: the fraction of the squared Frobenius norm in the top singular value."""
    s = np.linalg.svd(np.asarray(M), compute_uv=False)
    return float(s[0] ** 2 / np.sum(s**2))


def markov_fig3(
    N: int = 8, d: int = 8, steps: int = 400, lr: float = 2e-3, seed: int = 0, progress: bool = True
) -> Result:
    """Fig 3 (§5.3): rank-one emergence in W_V, W_1 and the positional vectors from the standard
    initialisation, under exact population AdamW with the authors' settings (lr 2e-3, β = (0.9, 0.95),
    weight decay 1e-3), p = 0.2, q = 0.3 (the nearby runs' chain; the figure's own (p, q) is unknown).
    N is small enough to enumerate, so the positional matrix has N rows instead of the paper's 1024.

    **Arguments:**

    - ``N``, ``d``: the model's sequence length and width.
    - ``steps``, ``lr``: AdamW's steps and learning rate.
    - ``seed``: the standard initialisation's key; ``progress``: the engine's progress bar.
    """
    p, q = 0.2, 0.3
    model = Transformer(Chain.binary(p, q), N=N, d=d)
    theta = model.init(jax.random.PRNGKey(seed))
    opt = optax.adamw(lr, b1=0.9, b2=0.95, weight_decay=1e-3)
    traj = gradient_descent(model, theta, lr=lr, steps=steps, optimizer=opt, save_params=True, progress=progress)
    ts = np.asarray(traj.ts)
    params = traj.params
    assert params is not None  # save_params=True records θ
    shares = {k: np.array([top_singular_share(M) for M in np.asarray(params[k])]) for k in FIG3_PAPER}
    at = {k: {it: float(v[it]) for it in (1, 100, 200) if it < len(v)} for k, v in shares.items()}
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, ax_l = fig.subplots(1, 2)
    for k, v in shares.items():
        (line,) = ax.plot(ts, v, label=f"{k} (exact AdamW)")
        its = [it for it in FIG3_PAPER[k] if it <= steps]
        ax.scatter(
            its,
            [FIG3_PAPER[k][it] for it in its],
            color=line.get_color(),
            marker="o",
            label=f"{k} (paper, saved weights)",
        )
    ax.set(xlabel="step", ylabel="σ₁² / ‖·‖_F²", ylim=(0, 1.02), title="rank-one emergence")
    ax.legend(fontsize=7)
    ax_l.plot(ts, np.asarray(traj.loss), color="k")
    h_rate = Canonical(p, q).entropy_rate()
    ax_l.axhline(h_rate, color="k", ls=":", lw=1, label=f"H_rate = {h_rate:.4f}")
    ax_l.set(xlabel="step", ylabel="exact population loss", title=f"p = {p}, q = {q}, N = {N}, d = {d}")
    ax_l.legend(fontsize=7)
    results = {"share": at, "paper_share": FIG3_PAPER, "final_loss": float(traj.loss[-1]), "entropy_rate": h_rate}
    lines = [f"markov-fig3: rank-one emergence under exact AdamW, p = {p}, q = {q}, N = {N}, d = {d}"]
    lines += [
        f"  {k:>4s}: "
        + ", ".join(f"step {it}: {at[k][it]:.3f} (paper {FIG3_PAPER[k][it]:.3f})" for it in sorted(at[k]))
        for k in at
    ]
    lines.append(f"  final loss {float(traj.loss[-1]):.6f} (H_rate {h_rate:.6f})")
    inputs = {
        "figure": "markov-fig3",
        "p": p,
        "q": q,
        "N": N,
        "d": d,
        "steps": steps,
        "lr": lr,
        "seed": seed,
        "optimizer": "adamw(b1=0.9, b2=0.95, weight_decay=1e-3)",
    }
    return Result(
        inputs,
        results,
        {"fig3": {"steps": ts, **{f"share_{k}": v for k, v in shares.items()}, "loss": np.asarray(traj.loss)}},
        {"markov-fig3": fig},
        lines,
    )
