"""Teacher command-line jobs (docs/models/teacher.md §4–§7; docs/jobs.md): ``popdyn converge teacher``,
``popdyn basins teacher`` and ``popdyn stepsize teacher``."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from popdyn import _validate
from popdyn.analysis import (
    BasinFractions,
    BasinMap,
    BlockScales,
    FirstOf,
    Grid,
    LossBelow,
    Reached,
    Rest,
    StepSizeAudit,
    basin_fractions,
    step_size_audit,
)
from popdyn.dynamics import STATUS_NAMES, GradientDescent, gradient_descent
from popdyn.dynamics._status import count
from popdyn.io import Result
from popdyn.jobs._registry import DECLARED, registered
from popdyn.jobs.teacher.rates import NO_STOP, RatesRun, audit_summary, rates
from popdyn.plot import plot_basin_map, plot_step_size_audit
from popdyn.problem import Theta
from popdyn.tasks.teacher._model import BilinearTeacher
from popdyn.tasks.teacher.builders import TEACHERS, build


def plot_rates(r: RatesRun, title: str) -> Figure:
    """Excess loss and parameter errors against ηT (log-log) with §5.2's asymptotes, K·p with T*, the
    step-size audit and the OOD excess."""
    fig = Figure(figsize=(12, 7.5), layout="constrained")
    (ax_l, ax_e), (ax_a, ax_o) = fig.subplots(2, 2)
    c, lr = r.curves, r.lr
    t = lr * c["steps"]
    ok = t > 0
    ax_l.loglog(t[ok], c["excess"][ok], label="L − L_opt (exact)")
    ax_l.loglog(t[ok], r.late_constant_predicted / t[ok], "k--", lw=1, label="KD(D−K)/(4ηT)")
    ax_l.axvline(r.late_onset, color="0.6", ls=":", label="late onset")
    ax_l.set(xlabel="ηT", title=f"excess loss: late slope {r.slopes['excess']:.3f}")
    for key, label in (("w_error", "‖W − V*‖"), ("s_error", "‖S − S*‖")):
        ax_e.loglog(t[ok], c[key][ok], label=f"{label}: slope {r.slopes[key]:.3f}")
    ax_e.set(xlabel="ηT", title="parameter errors (poster: slope −1/2)")
    ax_a.semilogx(c["steps"][ok], 1.0 - c["eps"][ok], label="K·p")
    ax_a.axhline(0.5, color="k", lw=0.6)
    ax_a.axvline(r.T_star, color="C3", ls="--", label="T* = KD²/(η‖V*‖²)")
    if r.half_step is not None:
        ax_a.axvline(r.half_step, color="C2", ls=":", label=f"K·p = 1/2 at {r.half_over_T_star:.2f} T*")
    ax_a.set(xlabel="GD step", title="attention on the support")
    a = r.audit
    ax_a2 = ax_a.twinx()
    ax_a2.semilogx(a.steps, a.lambda_max, "m.-", label="λ_max(θ_t)")
    ax_a2.axhline(a.row.one_over_lr, color="m", ls="--", lw=1, label="1/η")
    ax_a2.set(ylabel="λ_max")
    ax_a2.legend(fontsize=7, loc="center right")
    o = r.ood
    ax_o.errorbar(
        lr * o.steps,
        o.excess,
        yerr=2 * o.se,
        fmt=".-",
        label=("exact, mean-1 variance-1 inputs" if o.exact else "Monte Carlo, Exp(1) inputs"),
    )
    ax_o.set(
        xscale="log",
        yscale="log",
        xlabel="ηT",
        title="excess OOD loss" + ("" if o.slope is None else f": late slope {o.slope:.3f}"),
    )
    for ax in (ax_l, ax_e, ax_a, ax_o):
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig


@registered
def converge_teacher(
    teacher: str = DECLARED,
    D: int | None = DECLARED,
    K: int | None = DECLARED,
    activation: str = DECLARED,
    alpha: float | None = DECLARED,
    d: int = DECLARED,
    M: int | None = DECLARED,
    seed: int = DECLARED,
    lr: float | None = DECLARED,
    steps: int | None = DECLARED,
) -> Result:
    """Zero-initialisation GD to the late regime with ``rates``: the late constant, slopes, T*, the step-size
    audit and the OOD excess next to the poster's forms (which the exact dynamics do not follow in D; §5.3)."""
    lr = None if lr is None else _validate.positive("lr", lr)  # checked again by rates(), but before any building
    steps = None if steps is None else _validate.int_at_least("steps", steps, 10)
    prob = build(teacher, D, K, activation, alpha, d, M, seed)
    r = rates(prob, lr=lr, steps=steps, seed=seed)
    inputs = {
        "task": "teacher",
        "teacher": teacher,
        "D": prob.D,
        "K": prob.K,
        "M": prob.M,
        "d": prob.d,
        "activation": activation,
        "alpha": float(prob.alpha),
        "v": float(prob.v),
        "seed": seed,
        "lr": r.lr,
        "steps": r.steps,
        "init": "W = 0, A = 0 (zero_init='limit')",
    }
    results = r.json()
    results["late_constant_ratio"] = r.late_constant / r.late_constant_predicted
    arrays = {
        "rates": r.curves,
        "audit": {"steps": r.audit.steps, "lambda_max": r.audit.lambda_max},
        "ood": {"steps": np.asarray(r.ood.steps), "excess": np.asarray(r.ood.excess), "se": np.asarray(r.ood.se)},
    }
    title = (
        f"teacher {teacher} (D={prob.D}, K={prob.K}, {activation}, ‖V*‖² = {float(prob.v):.3g}): "
        f"GD from zero at η = {r.lr:.4g}"
    )
    fm, a, o = r.full_model, r.audit, r.ood
    lines = [
        f"converge teacher  {title}, {r.steps:,} steps (ηT = {r.horizon_over_onset:.0f} × late onset "
        f"{r.late_onset:.4g})",
        f"  late constant ηT·(L − L_opt) = {r.late_constant:.6g} vs KD(D−K)/4 = "
        f"{r.late_constant_predicted:.6g} (ratio {results['late_constant_ratio']:.4f})",
        "  late slopes: " + ", ".join(f"{k} {v:.3f} (poster {r.slopes_poster[k]:g})" for k, v in r.slopes.items()),
        "  vs §5.2 constants (measured / derived): "
        + ", ".join(f"{k} {v:.4f}" for k, v in r.constants_vs_derived.items()),
        f"  poster's forms: loss {r.poster['excess']}, ‖W−V*‖ {r.poster['w_error']}, ‖S−S*‖ "
        f"{r.poster['s_error']}: the exact constants are smaller by ~D² (loss), D (W), D‖V*‖² (S)",
        f"  K·p = 1/2 at step {r.half_step:.6g} = {r.half_over_T_star:.3f} × T* (T* = KD²/(η‖V*‖²) = {r.T_star:.6g})"
        if r.half_step is not None
        else "  K·p did not reach 1/2 within 30 T*",
        f"  step size: max λ_max along the run {a.row.max_lambda:.5g} vs 1/η = {a.row.one_over_lr:.5g} "
        f"(λ_max at the teacher {r.lambda_max_teacher:.5g}): "
        + ("η ≤ 1/λ_max held" if a.row.monotone_safe else "η > 1/λ_max somewhere")
        + ("" if a.stable else ", PAST 2/η"),
        f"  OOD excess ({'exact' if o.exact else 'Monte Carlo, Exp(1)'}): {o.excess[-1]:.4g} at the end, "
        f"late slope {o.slope:.3f} (the exact expectation decays like 1/T, not T^(-1/2), §7)"
        if o.slope is not None
        else "  OOD excess: too few late points for a slope",
        f"  full model over {fm.steps} steps vs the reduced map: |ΔC1| ≤ {fm.max_abs_C1:.2g}, "
        f"|ΔΔ| ≤ {fm.max_abs_Delta:.2g}, off-manifold ≤ {fm.max_off_manifold:.2g}",
    ]
    return Result(inputs, results, arrays, {"rates": plot_rates(r, title)}, lines)


# ---- basins and step sizes off the paper's sizes ------------------------------------------------------
SMALL_SIZES = {"cnn": (8, 2), "gcn": (9, 3), "sts": (8, 2), "gslp": (8, None)}
"""Default (D, K) of ``basins_teacher`` and ``stepsize_teacher`` [our choice], each used where that size is not
given: these jobs run the full (W, A) model, whose cost grows like D², so they default to a small instance of each
teacher (gslp: K = 1)."""


def _sizes(teacher: str, D: int | None, K: int | None) -> tuple[int | None, int | None]:
    """(D, K) as given, each one not given from ``SMALL_SIZES[teacher]`` (``--D 12`` alone: K of the small instance,
    as the options' help says)."""
    _validate.choice("teacher", teacher, TEACHERS)
    small_D, small_K = SMALL_SIZES[teacher]
    return (small_D if D is None else D), (small_K if K is None else K)


def _teacher_inputs(prob: BilinearTeacher, teacher: str, activation: str, seed: int) -> dict:
    return {
        "task": "teacher",
        "teacher": teacher,
        "D": prob.D,
        "K": prob.K,
        "M": prob.M,
        "d": prob.d,
        "activation": activation,
        "alpha": float(prob.alpha),
        "v": float(prob.v),
        "seed": seed,
    }


def random_directions(prob: BilinearTeacher, seed: int) -> Theta:
    """The random initialisation of ``basins_teacher``: W_dir with iid N(0, 1) entries rescaled to ‖W_dir‖_F = ‖V*‖_F
    and A_dir = √D·Z, Z with iid N(0, 1) entries (so A_dir/√D has unit-variance logits), drawn from
    ``fold_in(PRNGKey(seed), 1)`` (V* itself comes from PRNGKey(seed))."""
    kw, ka = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(_validate.seed("seed", seed)), 1))
    W = jax.random.normal(kw, (prob.M, prob.d))
    return {
        "W": W * (jnp.sqrt(prob.v) / jnp.linalg.norm(W)),
        "A": jax.random.normal(ka, (prob.D, prob.D)) * prob.D**0.5,
    }


def _over(stat, values: np.ndarray, labels: np.ndarray, k: int) -> float | None:
    """``stat`` of ``values`` over the starts labelled ``k``; None when there are none."""
    sel = labels == k
    return float(stat(values[sel])) if sel.any() else None


def _both_or_neither(x: str | None, y: str | None) -> None:
    if (x is None) != (y is None):
        raise ValueError(
            f"x={x!r}, y={y!r} are invalid: give both coordinates of the slice, or neither for the scales of W and A"
        )


def teacher_slice(prob: BilinearTeacher, seed: int, x: str | None, y: str | None, lo: float, hi: float, n: int):
    """The slice of ``basins_teacher``: ``BlockScales`` of W and A along ``random_directions`` (axes "W_scale",
    "A_scale"), or the coordinates ``x`` and ``y`` of θ with every other coordinate from those directions."""
    _both_or_neither(x, y)
    dirs = random_directions(prob, seed)
    if x is None or y is None:
        return BlockScales("W", "A", dirs, (lo, hi), (lo, hi), (n, n), x="W_scale", y="A_scale")
    return Grid(x, y, (lo, hi), (lo, hi), (n, n), base=dirs)


@registered
def basins_teacher(
    teacher: str = DECLARED,
    D: int | None = DECLARED,
    K: int | None = DECLARED,
    activation: str = DECLARED,
    alpha: float | None = DECLARED,
    d: int = DECLARED,
    M: int | None = DECLARED,
    seed: int = DECLARED,
    x: str | None = DECLARED,
    y: str | None = DECLARED,
    grid: int = DECLARED,
    lo: float = DECLARED,
    hi: float = DECLARED,
    lr: float | None = DECLARED,
    steps: int = DECLARED,
    tol: float = DECLARED,
    chunk: int = DECLARED,
    progress: bool = True,
    checkpoint: str | None = None,
) -> Result:
    """Basin map of full-matrix GD from a ``grid`` × ``grid`` slice of random initialisations (docs/jobs.md).

    A start is labelled "teacher" when GD at ``lr`` reaches the teacher's loss level L ≤ L_opt + tol·(L(0) − L_opt)
    within ``steps`` steps (L(0): the loss at the paper's W = 0, A = 0), "other" when it became steady (converged
    or at a saddle, ``docs/basins.md``) above that level, and unresolved otherwise (still moving at the end of the
    budget, diverged or NaN): ``basin_fractions`` with ``GradientDescent(target=LossBelow(level))`` and the labeller
    ``FirstOf(Reached("teacher"), Rest("other"))``. [our choice: the paper analyses no random initialisation (§4.2,
    [unknown]), and the teacher has no finite minimiser (S* needs Δ → ∞, §4.1), so its basin is judged by the loss
    level it reaches, at the exact first step at the level.]

    The slice (``teacher_slice``): by default the scale x of W (‖W‖/‖V*‖) and the logit scale y of A along one random
    direction each (``random_directions``, from ``seed``), both over [``lo``, ``hi``]; or the coordinates ``x`` and
    ``y`` of θ (e.g. "W[0,1]", "A[2,3]"; both or neither) over [``lo``, ``hi``], every other coordinate from the
    random point W_dir, A_dir. ``D``, ``K``: from ``SMALL_SIZES`` where not given. ``lr``: default 1/λ_max at
    the teacher (§6). ``chunk``, ``progress``, ``checkpoint`` go to the engine, as in ``basin_map``. The attractor
    residual ‖W − V*‖_F + ‖S − S*‖_F of ``BilinearTeacher.attractors`` is reported at every end point."""
    D, K = _sizes(teacher, D, K)
    grid = _validate.int_at_least("grid", grid, 2)
    lo, hi = _validate.interval("range", (lo, hi))
    lr = None if lr is None else _validate.positive("lr", lr)
    steps = _validate.int_at_least("steps", steps, 1)
    tol = _validate.open_unit("tol", tol)
    chunk = _validate.int_at_least("chunk", chunk, 1)
    _both_or_neither(x, y)
    prob = build(teacher, D, K, activation, alpha, d, M, seed)
    g = teacher_slice(prob, seed, x, y, lo, hi, grid)
    starts = g.points(prob)  # checks the coordinate names before anything runs
    lr = 1.0 / prob.lambda_max_at_teacher() if lr is None else lr
    L_opt = float(prob.L_opt)
    zero_excess = float(prob.loss(prob.init(None))) - L_opt
    level = L_opt + tol * zero_excess
    zero = jax.tree_util.tree_map(lambda s, z: jnp.concatenate([s, z[None]]), starts, prob.init(None))
    bf = basin_fractions(
        prob,
        zero,
        GradientDescent(lr=lr, steps=steps, target=LossBelow(prob, level)),
        labeller=FirstOf(Reached("teacher"), Rest("other")),
        chunk_size=chunk,
        progress=progress,
        checkpoint=checkpoint,
    )
    bm = _teacher_map(bf, g)
    t_zero = float(bf.times[-1]) if bf.labels[-1] == 0 else None
    end = _end_points(prob, bf, g.shape, L_opt, zero_excess)
    results = _basins_results(prob, bm, end, t_zero, lr=lr, steps=steps, tol=tol, level=level, zero_excess=zero_excess)
    slice_name = "scales of W and A along random directions" if x is None else f"{x} and {y}"
    inputs = _teacher_inputs(prob, teacher, activation, seed) | {"x": g.x, "y": g.y, "slice": slice_name}
    inputs |= {"grid": grid, "range": [lo, hi], "lr": lr, "steps": steps, "tol": tol, "chunk": chunk}
    inputs["checkpoint"] = None if checkpoint is None else str(checkpoint)
    title = (
        f"teacher {teacher} (D={prob.D}, K={prob.K}, {activation}): GD at η = {lr:.4g}, {steps} steps; "
        f"teacher ⇔ L − L_opt ≤ {tol:g}·(L(0) − L_opt)"
    )
    arrays = {"basins": {"labels": bm.labels, "x": g.xs, "y": g.ys, "steps_to_level": bm.times, "status": bm.status}}
    arrays["basins"] |= end | {"attractors": np.array(bm.attractors)}
    res = Result(inputs, results, arrays, {"basins": _basins_figure(bm, prob, title, x is None, lo, hi)})
    res.lines += _basins_lines(bm, results, end, title, slice_name, seed, (x, lo, hi, grid, tol), t_zero)
    return res


def _teacher_map(bf: BasinFractions, g) -> BasinMap:
    """The map of the slice ``g`` from the run of its starts and, last, the zero start: "teacher" times only."""
    shape = g.shape
    labels, times, status = (np.asarray(a)[:-1].reshape(shape) for a in (bf.labels, bf.times, bf.status))
    final = jax.tree_util.tree_map(lambda v: np.asarray(v)[:-1].reshape(shape + v.shape[1:]), bf.final)
    times = np.where(labels == 0, times, np.nan)
    return BasinMap(
        method="gd", labels=labels, attractors=bf.attractors, times=times, status=status, final=final, grid=g
    )


def _end_points(prob: BilinearTeacher, bf: BasinFractions, shape, L_opt: float, zero_excess: float) -> dict:
    """The end points' excess loss over that of the zero start, and their attractor residual, on the slice."""
    final = bf.final
    end_excess = (np.asarray(jax.vmap(prob.loss)(final)) - L_opt) / zero_excess
    residual = np.asarray(jax.vmap(prob.attractors()["teacher"])(final))
    return {"end_excess_over_zero_init": end_excess[:-1].reshape(shape), "residual": residual[:-1].reshape(shape)}


def _basins_results(prob: BilinearTeacher, bm: BasinMap, end: dict, t_zero, **settings) -> dict:
    """summary.json's results of ``basins_teacher``: ``settings`` (lr, steps, tol, level, zero_excess) and what
    the map found."""
    labels, times, status = bm.labels, bm.times, bm.status
    end_excess, residual = end["end_excess_over_zero_init"], end["residual"]
    scale = float(jnp.sqrt(prob.v)) + float(jnp.linalg.norm(prob.S_star))
    hit = labels == 0
    lr = settings["lr"]
    return {
        "lr": lr,
        "lr_times_lambda_max_teacher": lr * prob.lambda_max_at_teacher(),
        "steps": settings["steps"],
        "tol": settings["tol"],
        "level": settings["level"],
        "L_opt": float(prob.L_opt),
        "zero_init_excess": settings["zero_excess"],
        "fractions": bm.fractions,
        "attractors": list(bm.attractors),
        "status_counts": count(status),
        "steps_to_level": (
            {"min": float(np.min(times[hit])), "median": float(np.median(times[hit])), "max": float(np.max(times[hit]))}
            if hit.any()
            else None
        ),
        "steps_to_level_from_zero_init": t_zero,
        "end_excess_over_zero_init": {
            "teacher_max": _over(np.max, end_excess, labels, 0),
            "other_min": _over(np.min, end_excess, labels, 1),
            "unresolved_min": _over(np.min, end_excess, labels, -1),
        },
        "residual_median_over_scale": {
            name: _over(np.median, residual / scale, labels, k)
            for k, name in ((0, "teacher"), (1, "other"), (-1, "unresolved"))
        },
        "residual_scale": scale,
    }


def _basins_figure(bm: BasinMap, prob: BilinearTeacher, title: str, scales: bool, lo: float, hi: float) -> Figure:
    """The basin map of ``basins_teacher``, its axes named for the scale slice (``scales``), ★ at W = 0, A = 0."""
    fig = plot_basin_map(bm, prob, "teacher: the loss reached L_opt + tol·(L(0) − L_opt)")
    ax, ax_t = fig.axes[0], fig.axes[1]
    if scales:
        for a in (ax, ax_t):
            a.set(
                xlabel="scale of W: ‖W‖/‖V*‖ along a random direction",
                ylabel="scale of A: std of the logits A/√D (0: uniform S)",
            )
        if lo <= 0.0 <= hi:
            ax.plot([0.0], [0.0], "k*", ms=10, clip_on=False)  # the paper's W = 0, A = 0
    ax_t.set_title("GD steps to the teacher's loss level")
    fig.suptitle(title + ("  (★: W = 0, A = 0)" if scales and lo <= 0.0 <= hi else ""), fontsize=10)
    fig.axes[-1].set_ylabel("log10 steps to the teacher's loss level")
    return fig


def _basins_lines(bm: BasinMap, results: dict, end: dict, title: str, slice_name: str, seed: int, axes, t_zero):
    """The printed lines of ``basins_teacher`` (``axes``: x, lo, hi, grid, tol)."""
    x, lo, hi, grid, tol = axes
    lines = [
        f"basins teacher  {title}",
        f"  slice: {slice_name} over [{lo:g}, {hi:g}]², {grid}x{grid} starts (other coordinates: a random "
        f"initialisation, seed {seed})"
        if x is not None
        else f"  slice: {slice_name}, {grid}x{grid} over [{lo:g}, {hi:g}]² (seed {seed})",
    ]
    lines += [f"  {name:>10s}: {100 * f:6.2f}%" for name, f in bm.fractions.items()]
    lines.append("  status: " + ", ".join(f"{k} {v}" for k, v in count(bm.status).items() if v))
    if (bm.labels == 0).any():
        s = results["steps_to_level"]
        lines.append(
            f"  steps to the teacher's level: min {s['min']:.0f}, median {s['median']:.0f}, max "
            f"{s['max']:.0f}; from W = 0, A = 0: " + ("not reached" if t_zero is None else f"{t_zero:.0f}")
        )
    miss = bm.labels != 0
    if miss.any():
        lines.append(
            f"  starts not at the level end at (L − L_opt)/(L(0) − L_opt) ≥ "
            f"{np.min(end['end_excess_over_zero_init'][miss]):.3g} (level {tol:g})"
        )
    return lines


def _learning_rates(lr: float | Sequence[float] | None) -> list[float] | None:
    """``stepsize_teacher``'s ``lr`` as a list of checked rates (one rate or several); None when not given.

    **Arguments:**

    - ``lr``: one rate η > 0, a non-empty sequence of them, or None.
    """
    if lr is None:
        return None
    lrs = [_validate.positive("lr", v) for v in ([lr] if np.ndim(lr) == 0 else list(lr))]  # type: ignore[arg-type]  # np.ndim(lr) > 0: a sequence
    if not lrs:
        raise ValueError(f"lr={lr!r} is invalid: give at least one learning rate")
    return lrs


def _stepsize_table(runs: list[StepSizeAudit], traj, lrs: list[float], lam_t: float, L_opt: float) -> list[dict]:
    """The rows of ``stepsize_teacher``'s summary.json, one per rate: the run's audit (``TeacherAudit.json`` without
    the record arrays), η·λ_max(teacher), λ_max at the end over λ_max(teacher), the run's status and L − L_opt at
    its end.

    **Arguments:**

    - ``runs``: the audit of each run (``StepSizeAudit.run``); ``traj``: the batched run.
    - ``lrs``: the rates; ``lam_t``: λ_max at the teacher; ``L_opt``: the optimal loss.
    """
    losses = np.asarray(traj.loss)
    return [
        {k: v for k, v in audit_summary(a).json().items() if k not in ("steps", "lambda_max")}
        | {
            "lr_times_lambda_max_teacher": lrs[i] * lam_t,
            "lambda_end_over_teacher": float(a.lambda_end) / lam_t,
            "status": STATUS_NAMES[int(traj.status[i])],
            "final_excess": float(losses[i, -1]) - L_opt,
        }
        for i, a in enumerate(runs)
    ]


def _stepsize_figure(
    runs: list[StepSizeAudit], losses: np.ndarray, lrs: list[float], lam_t: float, title: str
) -> Figure:
    """The audit figure of ``stepsize_teacher`` (``plot_step_size_audit``) with λ_max at the teacher drawn in.

    **Arguments:**

    - ``runs``: the audit of each run; ``losses``: their losses at the records, one row per rate.
    - ``lrs``: the rates; ``lam_t``: λ_max at the teacher; ``title``: the title of the λ_max panel.
    """
    fig = plot_step_size_audit(runs, list(losses), [f"η = {v:.4g}" for v in lrs])
    fig.axes[0].axhline(lam_t, color="k", lw=1.2, label=f"λ_max at the teacher = {lam_t:.4g}")
    fig.axes[0].legend(fontsize=7)
    fig.axes[0].set_title(title)
    return fig


def _stepsize_lines(head: str, table: list[dict], runs: list[StepSizeAudit]) -> list[str]:
    """The printed lines of ``stepsize_teacher``: ``head``, then per rate its verdict, λ_max at the end over λ_max at
    the teacher, the final L − L_opt and the run's status (``table``: ``_stepsize_table``'s rows)."""
    return [head] + [
        f"  η = {r['lr']:<8.4g} (η·λ_teacher = {r['lr_times_lambda_max_teacher']:.3g}) {a.verdict()}; "
        f"end λ_max/λ_teacher {r['lambda_end_over_teacher']:.3f}, L − L_opt = "
        f"{r['final_excess']:.4g}, {r['status']}"
        for r, a in zip(table, runs, strict=False)
    ]


@registered
def stepsize_teacher(
    teacher: str = DECLARED,
    D: int | None = DECLARED,
    K: int | None = DECLARED,
    activation: str = DECLARED,
    alpha: float | None = DECLARED,
    d: int = DECLARED,
    M: int | None = DECLARED,
    seed: int = DECLARED,
    lr: float | Sequence[float] | None = DECLARED,
    steps: int = DECLARED,
    records: int = DECLARED,
    momentum: float = DECLARED,
) -> Result:
    """Full-matrix GD (heavy-ball ``momentum`` μ: thresholds (1 − √μ)²/η and 2(1 + μ)/η instead of 1/η and 2/η)
    from the paper's W = 0, A = 0 at one or more step sizes η (one batched run), with
    λ_max(∇²L(θ_t)) at ``records`` evenly spaced records against 1/η (monotone descent on a quadratic) and 2/η
    (stability), by ``step_size_audit``, next to λ_max at the teacher κσ_x² max(D/K, v/(K²D)) (§6; docs/jobs.md).

    Along the zero-initialisation run λ_max rises from ≈ κσ_x² (uniform S) towards its value at the teacher, so
    η ≤ 1/λ_max binds at the end (§6). ``lr``: one rate or several; default η = (1, 1.5, 2.5)/λ_max(teacher)
    [our choice: one run per verdict — held, between 1/λ and 2/λ, and past 2/η as the run approaches the
    teacher]. ``steps`` is rounded down to a multiple of the record interval ⌊steps/records⌋. ``D``, ``K``:
    from ``SMALL_SIZES`` where not given. Runs go to the full budget (no early stop)."""
    D, K = _sizes(teacher, D, K)
    given = _learning_rates(lr)
    steps = _validate.int_at_least("steps", steps, 1)
    records = _validate.int_at_least("records", records, 1)
    if records > steps:
        raise ValueError(f"records={records} is out of range: must be an integer in [1, steps={steps}]")
    prob = build(teacher, D, K, activation, alpha, d, M, seed)
    lam_t = prob.lambda_max_at_teacher()
    lrs = [f / lam_t for f in (1.0, 1.5, 2.5)] if given is None else given
    every = steps // records
    steps = every * records
    n = len(lrs)
    theta0 = jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v, (n, *v.shape)), prob.init(None))
    traj = gradient_descent(
        prob,
        theta0,
        lr=np.array(lrs),
        steps=steps,
        record_every=every,
        save_params=True,
        gtol=NO_STOP,
        momentum=momentum,
    )
    audit = step_size_audit(prob, traj, np.array(lrs), momentum=momentum)
    runs = [audit.run(i) for i in range(n)]
    L_opt, losses = float(prob.L_opt), np.asarray(traj.loss)
    table = _stepsize_table(runs, traj, lrs, lam_t, L_opt)
    name = f"{teacher} (D={prob.D}, K={prob.K}, {activation}"
    fig = _stepsize_figure(runs, losses, lrs, lam_t, f"step-size audit: teacher {name}), GD from W = 0, A = 0")
    inputs = _teacher_inputs(prob, teacher, activation, seed) | {
        "lr": lrs,
        "steps": steps,
        "records": records,
        "momentum": momentum,
        "init": "W = 0, A = 0 (zero_init='limit')",
    }
    results = {"lambda_max_teacher": lam_t, "L_opt": L_opt, "record_every": every, "runs": table}
    arrays = {
        "stepsize": {
            "steps": np.asarray(audit.ts),
            "lambda_max": np.asarray(audit.lambda_max),
            "loss": losses,
            "lr": np.array(lrs),
        }
    }
    head = (
        f"stepsize teacher  {name}, ‖V*‖² = {float(prob.v):.4g}): GD from W = 0, A = 0, {steps} steps, λ_max at the "
        f"teacher {lam_t:.5g} (§6)"
    )
    return Result(inputs, results, arrays, {"stepsize": fig}, _stepsize_lines(head, table, runs))
