"""The (e, w, a) attention-scalar model (docs/models/markov.md §2.4, [our choice]): its 3-D dynamics and 2-D
slices of initialisations at fixed a₀, from exact population gradient descent.

Where each initialisation ends is read off its final loss, normalised between the two attractor values,
r = (L_T − H_rate) / (H_uni − H_rate): r ≈ 0 is the global minimum set, r ≈ 1 the unigram plateau e = 0.
GD is used rather than the adaptive flow because the trained-bias model has a slow manifold next to
directions with λ_max ≈ 4–14, where adaptive solvers need thousands of steps per point and a vmapped
batch waits for its slowest member; fixed-step GD costs the same for every point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.analysis import Grid
from popdyn.dynamics import gradient_descent
from popdyn.io import Result
from popdyn.tasks.markov import AttentionScalar

EWA_REGIMES = ((0.1, 0.1), (0.9, 0.9))
EWA_SLICES = (-1.0, 0.0, 1.0)
CLASSES = ("global", "unigram", "between")
CLASS_COLOURS = ("#4daf4a", "#e41a1c", "#ffbf00")
R_TOL = 1e-2  # r < R_TOL: global; r > 1 − R_TOL: unigram plateau


def loss_classes(r: np.ndarray) -> np.ndarray:
    """0 = global (r < R_TOL), 1 = unigram plateau (r > 1 − R_TOL), 2 = neither at the horizon."""
    return np.where(r < R_TOL, 0, np.where(r > 1 - R_TOL, 1, 2))


def _normalised_gap(prob: AttentionScalar, loss) -> np.ndarray:
    h_rate, h_uni = prob.entropy_rate(), prob.unigram_loss()
    return (np.asarray(loss) - h_rate) / (h_uni - h_rate)


def _record_interval(steps: int) -> int:
    """The largest divisor of ``steps`` at most max(1, steps // 100): ~100 records of a trajectory, the last at the
    end."""
    record = max(1, steps // 100)
    while steps % record:
        record -= 1
    return record


def _slice(
    prob: AttentionScalar, a0: float, n: int, lr: float, steps: int, progress: bool
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Exact GD from the n × n slice over (w, e) ∈ [−3, 3]² at a = ``a0``, b = 0: (its summary — the share of each
    ``CLASSES`` end, the status counts, the median |a| at the end — and its arrays: the grid, the normalised gap r,
    the class, status and final a of each start).

    **Arguments:**

    - ``prob``: the (e, w, a) model; ``a0``: the slice's a.
    - ``n``: starts per side; ``lr``, ``steps``: GD's step and steps; ``progress``: the engine's progress bar.
    """
    grid = Grid.square("w", "e", -3.0, 3.0, n, base={"a": a0, "b": 0.0})
    traj = gradient_descent(prob, grid.points(prob), lr=lr, steps=steps, record_every=steps, progress=progress)
    r = _normalised_gap(prob, traj.final_loss).reshape(grid.shape)
    cls = loss_classes(r)
    summary = {
        "fractions": {c: float(np.mean(cls == k)) for k, c in enumerate(CLASSES)},
        "status": traj.status_counts(),
        "median_abs_final_a": float(np.median(np.abs(np.asarray(traj.final["a"])))),
    }
    arrays = {
        "w": grid.xs,
        "e": grid.ys,
        "r": r,
        "class": cls,
        "status": np.asarray(traj.status).reshape(grid.shape),
        "final_a": np.asarray(traj.final["a"]).reshape(grid.shape),
    }
    return summary, arrays


def _draw_slice(ax, cls: np.ndarray, title: str) -> None:
    """One slice's classes (``loss_classes``) over (w₀, e₀) ∈ [−3, 3]², titled ``title``."""
    ax.imshow(
        cls,
        origin="lower",
        extent=(-3, 3, -3, 3),
        aspect="auto",
        interpolation="nearest",
        cmap=ListedColormap(CLASS_COLOURS),
        vmin=-0.5,
        vmax=2.5,
    )
    ax.set(xlabel="w₀", ylabel="e₀", title=title, xlim=(-3, 3), ylim=(-3, 3))
    ax.title.set_fontsize(8)


def _trajectories(
    prob: AttentionScalar, key, n_traj: int, lr: float, steps: int
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Exact GD from ``n_traj`` uniform (e, w, a) ∈ [−2, 2]³ (b = 0, drawn from ``key``), ~100 records each: (the
    record steps, θ at the records by coordinate, the ``CLASSES`` index of each end)."""
    z = jax.random.uniform(key, (n_traj, 3), minval=-2.0, maxval=2.0)
    theta0 = {"e": z[:, 0], "w": z[:, 1], "a": z[:, 2], "b": jnp.zeros(n_traj)}
    traj = gradient_descent(prob, theta0, lr=lr, steps=steps, record_every=_record_interval(steps), save_params=True)
    assert traj.params is not None  # save_params=True records θ
    path = {k: np.asarray(v) for k, v in traj.params.items()}
    return np.asarray(traj.ts[0]), path, loss_classes(_normalised_gap(prob, traj.final_loss))


def _draw_trajectories(ax3, path: dict[str, np.ndarray], cls: np.ndarray, title: str) -> None:
    """The trajectories (``path``) in (w, a, e), coloured by their end's class, • at each start."""
    for i in range(len(cls)):
        ax3.plot(path["w"][i], path["a"][i], path["e"][i], color=CLASS_COLOURS[cls[i]], lw=1)
        ax3.scatter(path["w"][i, 0], path["a"][i, 0], path["e"][i, 0], color="k", s=6)
    ax3.set(xlabel="w", ylabel="a", zlabel="e", title=title)
    ax3.title.set_fontsize(8)


@dataclass(frozen=True)
class _Settings:
    """What every row of ``markov_ewa`` shares (the arguments of ``markov_ewa``, checked)."""

    N: int
    n: int
    lr: float
    steps: int
    n_traj: int
    seed: int
    progress: bool


def _regime(
    fig: Figure, row: int, p: float, q: float, s: _Settings
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Row ``row`` of ``markov_ewa`` for p = ``p``, q = ``q``: the ``EWA_SLICES`` slices and the 3-D trajectories
    (from ``PRNGKey(s.seed + row)``), drawn into ``fig``; returns (the row's summary, its arrays by file name)."""
    prob = AttentionScalar(p, q, N=s.N)
    tag = "pq_lt_1" if p + q < 1 else "pq_gt_1"
    res: dict[str, Any] = {"p": p, "q": q, "slices": {}}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for col, a0 in enumerate(EWA_SLICES):
        summary, arrays[f"ewa_{tag}_a{col}"] = _slice(prob, a0, s.n, s.lr, s.steps, s.progress)
        res["slices"][f"a0={a0:g}"] = summary
        f = summary["fractions"]
        title = f"p = q = {p}, a₀ = {a0:g}: global {100 * f['global']:.0f}%, unigram {100 * f['unigram']:.0f}%"
        _draw_slice(fig.add_subplot(2, 4, 4 * row + col + 1), arrays[f"ewa_{tag}_a{col}"]["class"], title)
    ts, path, cls = _trajectories(prob, jax.random.PRNGKey(s.seed + row), s.n_traj, s.lr, s.steps)
    ax3 = fig.add_subplot(2, 4, 4 * row + 4, projection="3d")
    _draw_trajectories(ax3, path, cls, f"p = q = {p}: {s.n_traj} trajectories (• start)")
    res["trajectories"] = {c: int(np.sum(cls == k)) for k, c in enumerate(CLASSES)}
    arrays[f"ewa_{tag}_trajectories"] = {"steps": ts, **path, "class": cls}
    return res, arrays


def _class_legend(fig: Figure) -> None:
    """The legend of the three end classes below the panels."""
    fig.legend(
        handles=[
            fig.axes[0].scatter([], [], color=c, marker="s", label=name)
            for c, name in zip(
                CLASS_COLOURS,
                ("→ global minimum (r < 1e-2)", "→ unigram plateau (r > 0.99)", "neither at the horizon"),
                strict=False,
            )
        ],
        loc="outside lower center",
        ncol=3,
        fontsize=8,
    )


def markov_ewa(
    N: int = 4, n: int = 24, steps: int = 6000, lr: float = 0.05, n_traj: int = 12, seed: int = 0, progress: bool = True
) -> Result:
    """(e, w, a) model for p = q = 0.1 and p = q = 0.9: n × n slices over (w, e) ∈ [−3, 3]² at
    a₀ ∈ {−1, 0, 1} (b₀ = 0), coloured by where exact GD (η = lr, ``steps`` steps) ends; and n_traj 3-D
    trajectories from uniform (e, w, a) ∈ [−2, 2]³.

    **Arguments:**

    - ``N``: the model's sequence length; ``n``: starts per side of a slice.
    - ``steps``, ``lr``: exact GD's steps and step η.
    - ``n_traj``, ``seed``: the number of 3-D trajectories per regime and their seed.
    - ``progress``: the engine's progress bar.
    """
    N = _validate.int_at_least("N", N, 1)
    n = _validate.int_at_least("n", n, 2)
    steps = _validate.int_at_least("steps", steps, 1)
    n_traj = _validate.int_at_least("n_traj", n_traj, 1)
    lr = _validate.positive("lr", lr)
    fig = Figure(figsize=(16, 8), layout="constrained")
    results: dict[str, dict] = {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    settings = _Settings(N, n, lr, steps, n_traj, seed, progress)
    for row, (p, q) in enumerate(EWA_REGIMES):
        res, regime_arrays = _regime(fig, row, p, q, settings)
        results["pq_lt_1" if p + q < 1 else "pq_gt_1"] = res
        arrays |= regime_arrays
    _class_legend(fig)
    lines = [
        f"markov-ewa: (e, w, a) attention-scalar model ([our choice], §2.4), N = {N}, exact GD η = {lr:g}, "
        f"{steps} steps"
    ]
    for res in results.values():
        for name, s in res["slices"].items():
            f = s["fractions"]
            lines.append(
                f"  p = q = {res['p']}, {name}: global {100 * f['global']:.1f}%, unigram "
                f"{100 * f['unigram']:.1f}%, neither {100 * f['between']:.1f}%"
            )
    inputs = {
        "figure": "markov-ewa",
        "N": N,
        "n": n,
        "steps": steps,
        "lr": lr,
        "n_traj": n_traj,
        "seed": seed,
        "slices_a0": list(EWA_SLICES),
        "r_tol": R_TOL,
    }
    return Result(inputs, results, arrays, {"markov-ewa": fig}, lines)
