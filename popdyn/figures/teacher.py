"""Bilinear-teacher figures from exact population dynamics (docs/models/teacher.md §5, §7, §8).

* teacher-rates: the poster's log-log plots for its six synthetic settings — excess loss with the exact 1/T
  constant, parameter errors, attention K·p against T*, excess OOD loss — and the cosine similarity of W_V with
  V*, exact (identically 1 from zero initialisation, §8) next to the paper's online SGD.
* teacher-heatmaps: the learned attention S at the end of each run next to S*.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from popdyn.dynamics import gradient_descent
from popdyn.io import Result
from popdyn.jobs.teacher.rates import RatesRun, default_steps, rates, reduced_records
from popdyn.tasks.teacher._model import BilinearTeacher
from popdyn.tasks.teacher._online import OnlineGradient, cosine
from popdyn.tasks.teacher._reduced import TeacherReduced, embed
from popdyn.tasks.teacher.builders import PAPER_SIZES, build

# the six synthetic settings (§8): CNN and GCN with ReLU and leaky ReLU; STS and GSLP are linear maps (§1.1)
SETTINGS = (("cnn", "relu"), ("cnn", "leaky"), ("gcn", "relu"), ("gcn", "leaky"), ("sts", "linear"), ("gslp", "linear"))
ONLINE_BATCH, ONLINE_STEPS = 64, 4000  # [our choice]: the paper's batch size and step count are unknown


def _label(name: str, activation: str) -> str:
    return f"{name.upper()} {activation}"


def _run_all(
    settings, sizes: dict | None, horizon: float, ood_samples: int
) -> dict[tuple[str, str], tuple[BilinearTeacher, RatesRun]]:
    out = {}
    for name, activation in settings:
        D, K = (sizes or PAPER_SIZES)[name]
        prob = build(name, D, K, activation)
        out[(name, activation)] = (prob, rates(prob, horizon=horizon, ood_samples=ood_samples, audit_points=4))
    return out


def _online_cosine(prob, lr: float, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """cos(W_t, V*) along online SGD from zero (fresh batch of ``ONLINE_BATCH`` every step)."""
    traj = gradient_descent(
        prob,
        prob.init(None),
        lr=lr,
        steps=steps,
        record_every=max(1, steps // 200),
        gradient=OnlineGradient(prob, ONLINE_BATCH),
        metrics=lambda th: {"cos": cosine(prob, th)},
        seed=seed,
    )
    assert traj.metrics is not None  # metrics= was given
    return np.asarray(traj.ts), np.asarray(traj.metrics["cos"])


def _draw_setting(axes, label: str, r: RatesRun, colour: str) -> None:
    """One setting's curves on the first five panels of ``teacher_rates``: L − L_opt with KD(D−K)/(4ηT) dotted,
    ηT(L − L_opt) over KD(D−K)/4, ‖W − V*‖ and ‖S − S*‖ (dashed), K·p against step/T*, and the excess OOD loss.

    **Arguments:**

    - ``axes``: the figure's 2 × 3 panels; ``label``: the setting's name in the legends; ``colour``: its colour.
    - ``r``: the setting's run (``rates``).
    """
    (ax_l, ax_c, ax_e), (ax_p, ax_o, _) = axes
    c = r.curves
    t = r.lr * c["steps"]
    ok = t > 0
    ax_l.loglog(t[ok], c["excess"][ok], color=colour, label=label)
    ax_l.loglog(t[ok], r.late_constant_predicted / t[ok], ":", color=colour, lw=0.8)
    ax_c.semilogx(t[ok], t[ok] * c["excess"][ok] / r.late_constant_predicted, color=colour, label=label)
    ax_e.loglog(t[ok], c["w_error"][ok], color=colour, label=f"{label}: ‖W−V*‖")
    ax_e.loglog(t[ok], c["s_error"][ok], "--", color=colour)
    ax_p.semilogx(c["steps"][ok] / r.T_star, 1.0 - c["eps"][ok], color=colour, label=label)
    ax_o.loglog(r.lr * r.ood.steps, r.ood.excess, ".-", color=colour, label=label)


def _setting_results(prob: BilinearTeacher, r: RatesRun) -> dict[str, Any]:
    """One setting's row of ``teacher_rates``' summary: sizes, ‖V*‖², η, steps, the late constant against
    KD(D−K)/4 and their ratio, the slopes, the half time over T*, the OOD slope and whether it is exact, and max
    λ_max along the run times η."""
    return {
        "D": prob.D,
        "K": prob.K,
        "v": float(prob.v),
        "lr": r.lr,
        "steps": r.steps,
        "late_constant": r.late_constant,
        "late_constant_predicted": r.late_constant_predicted,
        "late_constant_ratio": r.late_constant / r.late_constant_predicted,
        "slopes": r.slopes,
        "half_over_T_star": r.half_over_T_star,
        "ood_slope": r.ood.slope,
        "ood_exact": r.ood.exact,
        "max_lambda_over_one_over_lr": r.audit.row.max_lambda * r.lr,
    }


def _draw_cosine(ax, ts: np.ndarray, cos: np.ndarray) -> None:
    """The cosine panel of ``teacher_rates``: cos(W_t, V*) along online SGD (``ts``, ``cos``) next to exact
    population GD's cos = 1."""
    ax.semilogx(ts[1:], cos[1:], label=f"online SGD, batch {ONLINE_BATCH} (the paper's procedure)")
    ax.axhline(1.0, color="k", ls="--", lw=1, label="exact population GD: cos = 1 for t > 0")
    ax.set(
        xlabel="step",
        ylim=(min(0.9, float(cos[1:].min()) - 0.02), 1.005),
        title=f"cos(W_V, V*), {_label('cnn', 'relu')}",
    )


def _title_panels(fig: Figure, axes) -> None:
    """The titles, axis labels and legends of ``teacher_rates``' first five panels, and its legends and suptitle."""
    (ax_l, ax_c, ax_e), (ax_p, ax_o, _) = axes
    ax_l.set(xlabel="ηT", title="L − L_opt (dotted: KD(D−K)/(4ηT))")
    ax_c.set(xlabel="ηT", title="ηT·(L − L_opt) / (KD(D−K)/4) → 1")
    ax_e.set(xlabel="ηT", title="‖W − V*‖ (solid), ‖S − S*‖ (dashed): slope −1/2")
    ax_p.set(xlabel="step / T*,  T* = KD²/(η‖V*‖²)", title="K·p: attention on the support")
    ax_o.set(xlabel="ηT", title="excess OOD loss (Exp(1) inputs)")
    for ax in axes.ravel():
        ax.legend(fontsize=6)
    fig.suptitle("Bilinear teachers from zero initialisation: exact population GD at η = 1/λ_max(teacher)")


def _rates_lines(horizon: float, settings: dict[str, dict[str, Any]], final_cosine: float) -> list[str]:
    """The printed lines of ``teacher_rates``: per setting (``_setting_results``' rows by name) the constant ratio,
    slopes, K·p = 1/2 time and OOD slope, then online SGD's ``final_cosine``."""
    lines = [
        "teacher-rates: six settings, exact GD from zero to ηT = "
        f"{horizon:g} × late onset; late constant ηT(L − L_opt) vs KD(D−K)/4, slopes, OOD"
    ]
    for name, row in settings.items():
        lines.append(
            f"  {name:<12s} D={row['D']:<3d} K={row['K']}: constant ratio {row['late_constant_ratio']:.4f}, "
            f"slopes loss {row['slopes']['excess']:.3f}, W {row['slopes']['w_error']:.3f}, "
            f"S {row['slopes']['s_error']:.3f}; K·p = 1/2 at {row['half_over_T_star']:.2f} T*; OOD slope "
            f"{row['ood_slope']:.3f}"
        )
    lines.append(f"  cosine(W, V*): exact = 1 for t > 0; online SGD (batch {ONLINE_BATCH}) ends at {final_cosine:.4f}")
    return lines


def teacher_rates(
    sizes: dict | None = None,
    horizon: float = 300.0,
    ood_samples: int = 2000,
    online_steps: int = ONLINE_STEPS,
    seed: int = 0,
    settings=SETTINGS,
    progress: bool = True,
) -> Result:
    """The poster's rate plots for the six settings, exact: L − L_opt against ηT with the 1/T constant, the
    parameter errors, K·p against T*, the excess OOD loss, and cos(W_V, V*) of the paper's online SGD.

    **Arguments:**

    - ``sizes``: (D, K) per teacher; default the paper's (``PAPER_SIZES``).
    - ``horizon``: each exact run ends at ηT = ``horizon`` × late onset (``rates``).
    - ``ood_samples``: Monte Carlo draws per record of the OOD loss.
    - ``online_steps``, ``seed``: online SGD's steps and seed for the cosine panel.
    - ``settings``: (teacher, activation) pairs; must include CNN ReLU, whose online SGD run gives the cosine panel.
    - ``progress``: unused (the runs are short).
    """
    del progress
    runs = _run_all(settings, sizes, horizon, ood_samples)
    fig = Figure(figsize=(15, 8.5), layout="constrained")
    axes = fig.subplots(2, 3)
    results: dict[str, dict[str, Any]] = {}
    for (key, (prob, r)), colour in zip(runs.items(), [f"C{i}" for i in range(6)], strict=False):
        _draw_setting(axes, _label(*key), r, colour)
        results["_".join(key)] = _setting_results(prob, r)
    prob, r = runs[("cnn", "relu")]
    ts, cos = _online_cosine(prob, r.lr, online_steps, seed)
    _draw_cosine(axes[1, 2], ts, cos)
    _title_panels(fig, axes)
    lines = _rates_lines(horizon, results, float(cos[-1]))
    results["online_cosine"] = {
        "setting": "cnn_relu",
        "batch": ONLINE_BATCH,
        "steps": online_steps,
        "final": float(cos[-1]),
        "max": float(cos.max()),
    }
    inputs = {
        "figure": "teacher-rates",
        "settings": [list(s) for s in settings],
        "sizes": sizes or PAPER_SIZES,
        "horizon": horizon,
        "ood_samples": ood_samples,
        "online_steps": online_steps,
        "seed": seed,
        "d": 4,
        "M": "4 (cnn, gcn), d (sts), 1 (gslp)",
        "lr": "1/λ_max at the teacher",
    }
    arrays = {f"rates_{'_'.join(k)}": r.curves for k, (_, r) in runs.items()}
    arrays["online_cosine"] = {"steps": ts, "cos": cos}
    return Result(inputs, results, arrays, {"teacher-rates": fig}, lines)


def teacher_heatmaps(
    sizes: dict | None = None, horizon: float = 300.0, settings=SETTINGS, progress: bool = True
) -> Result:
    """The learned attention S = softmax(A/√D) at the end of the exact run from zero, next to S*, for the six
    settings (CNN block-diagonal, GCN cyclic tridiagonal, STS and GSLP bright rows). The runs are the exact reduced
    flow of §4.2 at η = 1/λ_max at the teacher, embedded back into the full model.

    **Arguments:**

    - ``sizes``: (D, K) per teacher; default the paper's (``PAPER_SIZES``).
    - ``horizon``: each run ends at ηT = ``horizon`` × late onset.
    - ``settings``: the (teacher, activation) pairs, one column each.
    - ``progress``: unused (the runs are short).
    """
    del progress
    fig = Figure(figsize=(15, 5.5), layout="constrained")
    axes = fig.subplots(2, len(settings), squeeze=False)
    results: dict[str, Any] = {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    for j, (name, activation) in enumerate(settings):
        D, K = (sizes or PAPER_SIZES)[name]
        prob = build(name, D, K, activation)
        red = TeacherReduced.from_teacher(prob)
        lr = 1.0 / prob.lambda_max_at_teacher()
        ts, _, params, _ = reduced_records(red, lr, default_steps(red, lr, horizon), 1000)
        final = {"C1": params["C1"][-1], "Delta": params["Delta"][-1]}
        S = np.asarray(prob.attention(embed(prob, final)))
        S_star = np.asarray(prob.S_star)
        for ax, M, title in ((axes[0, j], S, f"{_label(name, activation)}: learned S"), (axes[1, j], S_star, "S*")):
            im = ax.imshow(prob.K * M, cmap="viridis", vmin=0, vmax=1)
            ax.set(title=title, xticks=[], yticks=[])
        key = f"{name}_{activation}"
        results[key] = {
            "D": D,
            "K": prob.K,
            "steps": int(ts[-1]),
            "max_abs_S_minus_S_star": float(np.abs(S - S_star).max()),
            "support_value": float(S[S_star > 0].mean()),
            "off_support_value": float(S[S_star == 0].mean()) if (S_star == 0).any() else None,
        }
        arrays[f"S_{key}"] = {"S": S, "S_star": S_star}
    fig.colorbar(im, ax=axes, shrink=0.6, label="K × attention weight (1 on the support of S*)")
    fig.suptitle("Learned attention at the end of exact GD from zero (top) and the teacher's S* (bottom)")
    lines = ["teacher-heatmaps: S at the end of exact GD from zero, η = 1/λ_max(teacher)"]
    lines += [
        f"  {k:<12s} support {v['support_value']:.4f} (1/K = {1 / v['K']:.4f}), max |S − S*| "
        f"{v['max_abs_S_minus_S_star']:.2e}"
        for k, v in results.items()
    ]
    inputs = {
        "figure": "teacher-heatmaps",
        "settings": [list(s) for s in settings],
        "sizes": sizes or PAPER_SIZES,
        "horizon": horizon,
    }
    return Result(inputs, results, arrays, {"teacher-heatmaps": fig}, lines)
