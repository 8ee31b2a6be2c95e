"""Teacher command-line job (spec teacher.md §4–§7): ``popdyn converge teacher``."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.io import Result
from popdyn.tasks.teacher.builders import DEFAULT_d, build
from popdyn.jobs.teacher.rates import rates

def plot_rates(r: dict, title: str) -> Figure:
    """Excess loss and parameter errors against ηT (log-log) with §5.2's asymptotes, K·p with T*, the
    step-size audit and the OOD excess."""
    fig = Figure(figsize=(12, 7.5), layout="constrained")
    (ax_l, ax_e), (ax_a, ax_o) = fig.subplots(2, 2)
    c, lr = r["curves"], r["lr"]
    t = lr * c["steps"]
    ok = t > 0
    ax_l.loglog(t[ok], c["excess"][ok], label="L − L_opt (exact)")
    ax_l.loglog(t[ok], r["late_constant_predicted"] / t[ok], "k--", lw=1, label="KD(D−K)/(4ηT)")
    ax_l.axvline(r["late_onset"], color="0.6", ls=":", label="late onset")
    ax_l.set(xlabel="ηT", title=f"excess loss: late slope {r['slopes']['excess']:.3f}")
    for key, label in (("w_error", "‖W − V*‖"), ("s_error", "‖S − S*‖")):
        ax_e.loglog(t[ok], c[key][ok], label=f"{label}: slope {r['slopes'][key]:.3f}")
    ax_e.set(xlabel="ηT", title="parameter errors (poster: slope −1/2)")
    ax_a.semilogx(c["steps"][ok], 1.0 - c["eps"][ok], label="K·p")
    ax_a.axhline(0.5, color="k", lw=0.6)
    ax_a.axvline(r["T_star"], color="C3", ls="--", label="T* = KD²/(η‖V*‖²)")
    if r["half_step"] is not None:
        ax_a.axvline(r["half_step"], color="C2", ls=":", label=f"K·p = 1/2 at {r['half_over_T_star']:.2f} T*")
    ax_a.set(xlabel="GD step", title="attention on the support")
    a = r["audit"]
    ax_a2 = ax_a.twinx()
    ax_a2.semilogx(a["steps"], a["lambda_max"], "m.-", label="λ_max(θ_t)")
    ax_a2.axhline(a["one_over_lr"], color="m", ls="--", lw=1, label="1/η")
    ax_a2.set(ylabel="λ_max")
    ax_a2.legend(fontsize=7, loc="center right")
    o = r["ood"]
    ax_o.errorbar(lr * o["steps"], o["excess"], yerr=2 * o["se"], fmt=".-",
                  label=("exact, mean-1 variance-1 inputs" if o["exact"] else "Monte Carlo, Exp(1) inputs"))
    ax_o.set(xscale="log", yscale="log", xlabel="ηT",
             title="excess OOD loss" + ("" if o["slope"] is None else f": late slope {o['slope']:.3f}"))
    for ax in (ax_l, ax_e, ax_a, ax_o):
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig


def converge_teacher(teacher: str = "cnn", D: int | None = None, K: int | None = None, activation: str = "relu",
                     alpha: float | None = None, d: int = DEFAULT_d, M: int | None = None, seed: int = 0,
                     lr: float | None = None, steps: int | None = None) -> Result:
    """Zero-initialisation GD to the late regime with ``rates``: the late constant, slopes, T*, the step-size
    audit and the OOD excess next to the poster's forms (which the exact dynamics do not follow in D; §5.3)."""
    lr = None if lr is None else _validate.positive("lr", lr)  # checked again by rates(), but before any building
    steps = None if steps is None else _validate.int_at_least("steps", steps, 10)
    prob = build(teacher, D, K, activation, alpha, d, M, seed)
    r = rates(prob, lr=lr, steps=steps, seed=seed)
    inputs = {"task": "teacher", "teacher": teacher, "D": prob.D, "K": prob.K, "M": prob.M, "d": prob.d,
              "activation": activation, "alpha": float(prob.alpha), "v": float(prob.v), "seed": seed,
              "lr": r["lr"], "steps": r["steps"], "init": "W = 0, A = 0 (zero_init='limit')"}
    results = {k: v for k, v in r.items() if k != "curves"}
    results["late_constant_ratio"] = r["late_constant"] / r["late_constant_predicted"]
    arrays = {"rates": r["curves"], "audit": {k: r["audit"][k] for k in ("steps", "lambda_max")},
              "ood": {k: np.asarray(r["ood"][k]) for k in ("steps", "excess", "se")}}
    title = (f"teacher {teacher} (D={prob.D}, K={prob.K}, {activation}, ‖V*‖² = {float(prob.v):.3g}): "
             f"GD from zero at η = {r['lr']:.4g}")
    fm, a, o = r["full_model"], r["audit"], r["ood"]
    lines = [f"converge teacher  {title}, {r['steps']:,} steps (ηT = {r['horizon_over_onset']:.0f} × late onset "
             f"{r['late_onset']:.4g})",
             f"  late constant ηT·(L − L_opt) = {r['late_constant']:.6g} vs KD(D−K)/4 = "
             f"{r['late_constant_predicted']:.6g} (ratio {results['late_constant_ratio']:.4f})",
             "  late slopes: " + ", ".join(f"{k} {v:.3f} (poster {r['slopes_poster'][k]:g})"
                                           for k, v in r["slopes"].items()),
             "  vs §5.2 constants (measured / derived): " + ", ".join(
                 f"{k} {v:.4f}" for k, v in r["constants_vs_derived"].items()),
             f"  poster's forms: loss {r['poster']['excess']}, ‖W−V*‖ {r['poster']['w_error']}, ‖S−S*‖ "
             f"{r['poster']['s_error']}: the exact constants are smaller by ~D² (loss), D (W), D‖V*‖² (S)",
             f"  K·p = 1/2 at step {r['half_step']:.6g} = {r['half_over_T_star']:.3f} × T* (T* = KD²/(η‖V*‖²) = "
             f"{r['T_star']:.6g})" if r["half_step"] is not None else "  K·p did not reach 1/2 within 30 T*",
             f"  step size: max λ_max along the run {a['max_lambda']:.5g} vs 1/η = {a['one_over_lr']:.5g} "
             f"(λ_max at the teacher {r['lambda_max_teacher']:.5g}): "
             + ("η ≤ 1/λ_max held" if a["monotone_safe"] else "η > 1/λ_max somewhere")
             + ("" if a["stable"] else ", PAST 2/η"),
             f"  OOD excess ({'exact' if o['exact'] else 'Monte Carlo, Exp(1)'}): {o['excess'][-1]:.4g} at the end, "
             f"late slope {o['slope']:.3f} (the exact expectation decays like 1/T, not T^(-1/2), §7)"
             if o["slope"] is not None else "  OOD excess: too few late points for a slope",
             f"  full model over {fm['steps']} steps vs the reduced map: |ΔC1| ≤ {fm['max_abs_C1']:.2g}, "
             f"|ΔΔ| ≤ {fm['max_abs_Delta']:.2g}, off-manifold ≤ {fm['max_off_manifold']:.2g}"]
    return Result(inputs, results, arrays, {"rates": plot_rates(r, title)}, lines)
