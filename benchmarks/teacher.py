"""Benchmark: bilinear teachers (docs/models/teacher.md) — popdyn's exact Gaussian population loss and gradient
against Monte Carlo at equal precision, and the paper's online SGD (written in NumPy) against popdyn's exact GD, in one
run.

What it measures (float64 throughout, default JAX backend = the CPU here)
------------------------------------------------------------------------
The problem is ``popdyn.tasks.teacher.builders.build(--teacher, activation=--activation)``: by default the CNN +
average-pooling teacher at the paper's synthetic size (D = 36 positions, K = 4, d = 4 features, M = 4 channels,
V* with N(0, 1) entries from PRNGKey(0)) with ReLU, σ_x = 1, σ_ε = 0. The loss ½E‖Y − σ(WXS)‖²_F over Gaussian X
is exact in closed form (arc-cosine kernels, §3).

1. Exact loss + gradient: ``jax.jit(jax.value_and_grad(prob.loss))``, AOT compile timed apart, warm = median of
   --repeats calls (each ``block_until_ready``).

2. Monte Carlo at equal precision (the baseline): draws (X, Y) from the package's sampler (``BilinearTeacher.sample``),
   the per-draw loss ½‖Y − σ(WXS)‖²_F, ``jit(value_and_grad)`` of the batch mean. Time per draw = warm median at
   batch --time-batch ÷ the batch, on pre-drawn device-resident draws (sampling excluded, which favours MC; the
   sampler's cost is reported). A pilot of --pilot per-draw gradients (``vmap(value_and_grad)``) gives Σ_i Var_i,
   hence B(ε) = Σ_i Var_i/(ε‖∇L‖)² and the MC time for each ε in --eps; ratio = MC ÷ exact. Two points: a random
   point (W, A with N(0, 1) entries, PRNGKey(--seed)) and the end of the exact GD run of part 3 (near the teacher,
   where the gradient is small).

3. The paper's training procedure as the baseline for whole runs: online GD with a fresh Gaussian batch every step
   (§8; batch --batch = 64 and --steps = 4000 as in popdyn's teacher-rates figure, the paper's are unknown),
   written in plain NumPy — sampling, forward pass and a hand-written backward pass through the column softmax
   (checked against JAX autodiff on one batch) — timed against ``popdyn.gradient_descent`` on the exact loss (cold =
   first call with compilation, warm = an identical second call) for the same steps and step size η (default
   1/λ_max at the teacher, ``lambda_max_at_teacher``). Both start from W = 0.01·V*, A = 0 [our choice]: at W = 0
   exactly the first step depends on the convention for σ'(0) (§3.6; with ReLU and σ'(0) = 0 SGD never moves),
   and popdyn's default convention is the δ → 0+ limit of W = δV*. For information, popdyn's in-JAX version of the
   same SGD (``gradient_descent(gradient=OnlineGradient(prob, batch))``) is timed as well. The deviation of the
   NumPy runs (--sgd-seeds seeds) from the exact trajectory: ‖θ_SGD − θ_GD‖/‖θ_GD‖ (θ = (W, A)), the exact excess
   loss L − L_opt at both, and cos(W, V*) (exactly 1 along exact GD from W ∥ V*, §8).

4. Check: the exact loss and gradient against the pilot's Monte-Carlo means (within 4 standard errors, PASS/FAIL).

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.teacher                 # ~1 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.teacher --quick         # 1000 steps, small pilot, 2 SGD seeds; < 1 min; writes nothing
    python -m benchmarks.teacher --quick --results /tmp/r.md
Options: --teacher, --activation, --pilot, --time-batch, --repeats, --eps, --steps, --batch, --lr, --start, --sgd-seeds,
--seed, --results PATH. The section written is "## Bilinear teacher: exact loss and gradient vs Monte Carlo, exact GD
vs online SGD" (other sections of the file are kept); the headline figures go to ``benchmarks/results/teacher.json``.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import popdyn
from benchmarks._common import (
    MC_DEFINITION,
    REPO,
    check_text,
    cold_warm,
    equal_precision,
    finish_section,
    fmt_ratio,
    fmt_time,
    grad_check_line,
    headline_row,
    make_headline,
    mc_headline_rows,
    mc_table,
    parser,
    peak_rss_gb,
    publish,
    run_header,
    sampled_task_checks,
)
from popdyn.tasks.teacher import TEACHERS, BilinearTeacher
from popdyn.tasks.teacher._online import OnlineGradient
from popdyn.tasks.teacher.builders import build

from ._sgd_baselines import NumpyTeacher, teacher_grad_check, teacher_sgd

SECTION = "## Bilinear teacher: exact loss and gradient vs Monte Carlo, exact GD vs online SGD"
RECORDS = 20  # deviation records along a run


# ---------------------------------------------------------------------------------------------------------------
# Parts 1, 2, 4: exact loss + gradient against Monte Carlo
# ---------------------------------------------------------------------------------------------------------------
def mc_point(label: str, prob: BilinearTeacher, theta, args, key) -> dict:
    """``equal_precision`` at θ: draws from ``BilinearTeacher.sample``, per-draw loss ½‖Y − σ(WXS)‖²_F."""

    def draw_loss(th, X, Y):
        return 0.5 * jnp.sum((Y - prob.student_output(th, X)) ** 2)

    def batch_loss(th, X, Y):
        return jnp.mean(jax.vmap(draw_loss, in_axes=(None, 0, 0))(th, X, Y))

    per_draw = jax.jit(jax.vmap(jax.value_and_grad(draw_loss), in_axes=(None, 0, 0)))
    draw = jax.jit(lambda k, b: prob.sample(k, b), static_argnums=1)
    return equal_precision(
        label,
        prob.loss,
        theta,
        batch_loss,
        per_draw,
        draw,
        key,
        time_batch=args.time_batch,
        pilot=args.pilot,
        repeats=args.repeats,
        eps=args.eps,
        unit="draw",
    )


# ---------------------------------------------------------------------------------------------------------------
# Part 3: exact GD against online SGD
# ---------------------------------------------------------------------------------------------------------------
def cosine(W: np.ndarray, V: np.ndarray) -> float:
    return float(np.sum(W * V) / (np.linalg.norm(W) * np.linalg.norm(V)))


def sgd_vs_gd(prob: BilinearTeacher, theta0: dict, args) -> dict:
    """popdyn's exact GD and in-JAX online SGD, and the NumPy online SGD, from θ0 for --steps steps at η."""
    every = args.steps // RECORDS
    traj, gd_cold, gd_warm = cold_warm(
        lambda: popdyn.gradient_descent(
            prob, theta0, lr=args.lr, steps=args.steps, record_every=every, save_params=True
        )
    )
    _, jx_cold, jx_warm = cold_warm(
        lambda: (
            popdyn.gradient_descent(
                prob,
                theta0,
                lr=args.lr,
                steps=args.steps,
                record_every=every,
                gradient=OnlineGradient(prob, args.batch),
                seed=args.seed,
            ).final
        )
    )
    model = NumpyTeacher(prob)
    runs = [
        teacher_sgd(model, theta0, args.steps, args.batch, args.lr, args.seed + s, RECORDS)
        for s in range(args.sgd_seeds)
    ]
    loss = jax.jit(jax.vmap(prob.loss))
    gd = {k: np.asarray(v) for k, v in traj.params.items()}
    size = np.sqrt(sum(np.sum(gd[k] ** 2, axis=(1, 2)) for k in gd))
    L_opt = float(prob.L_opt)
    devs = []
    for rec, _ in runs:
        diff = np.sqrt(sum(np.sum((gd[k] - rec[k]) ** 2, axis=(1, 2)) for k in gd))
        devs.append(
            {
                "rel": diff / size,
                "excess_sgd": np.asarray(loss({k: jnp.asarray(v) for k, v in rec.items()})) - L_opt,
                "cos": cosine(rec["W"][-1], np.asarray(prob.V_star)),
            }
        )
    r = {
        "steps_rec": np.asarray(traj.ts),
        "gd_cold": gd_cold,
        "gd_warm": gd_warm,
        "jax_cold": jx_cold,
        "jax_warm": jx_warm,
        "sgd_s": float(np.median([w for _, w in runs])),
        "devs": devs,
        "excess_gd": np.asarray(traj.loss) - L_opt,
        "cos_gd": cosine(gd["W"][-1], np.asarray(prob.V_star)),
        "final": traj.final,
    }
    print(
        f"\n--- {args.steps} steps at η = {args.lr:.4g}: exact GD cold {fmt_time(gd_cold)}, warm {fmt_time(gd_warm)}; "
        f"in-JAX online SGD cold {fmt_time(jx_cold)}, warm {fmt_time(jx_warm)}; NumPy online SGD (batch "
        f"{args.batch}) {fmt_time(r['sgd_s'])} (median of {args.sgd_seeds} seeds); final ‖θ_SGD − θ_GD‖/‖θ_GD‖ "
        + ", ".join(f"{d['rel'][-1]:.3g}" for d in devs)
        + f"; excess loss GD {r['excess_gd'][-1]:.4g} vs SGD "
        + ", ".join(f"{d['excess_sgd'][-1]:.4g}" for d in devs)
        + " ---",
        flush=True,
    )
    return r


# ---------------------------------------------------------------------------------------------------------------
# RESULTS.md
# ---------------------------------------------------------------------------------------------------------------
def render(prob, points, run, grad_check, args, info, command, date, total) -> str:
    out = [
        SECTION,
        "",
        f"Written by `python -m benchmarks.teacher` on {date} (total run {total:.0f} s).  ",
        f"Command: `{command}`",
        "",
        f'Teacher: `build("{args.teacher}", activation="{args.activation}")` — D = {prob.D}, K = {prob.K}, '
        f"d = {prob.d}, M = {prob.M}, ‖V*‖² = {float(prob.v):.4g}, α = {float(prob.alpha):g}, σ_x = "
        f"{float(prob.sigma_x):g}, σ_ε = {float(prob.sigma_eps):g}; {prob.n_params():,} parameters (W, A). Exact "
        "loss: the closed-form Gaussian expectation, `jit(value_and_grad(prob.loss))`; compile (AOT) apart, warm "
        f"= median of {args.repeats} calls. Monte Carlo: `BilinearTeacher.sample` + the per-draw loss "
        "½‖Y − σ(WXS)‖²_F, `jit(value_and_grad)` of the batch mean; µs/draw = warm median at batch "
        f"{args.time_batch} ÷ {args.time_batch}, sampling excluded (which favours MC); Var_i from a pilot of "
        f"{points[0]['check']['n']:,} per-draw gradients. float64, CPU. Peak resident memory of the run: "
        f"{peak_rss_gb():.2f} GB.",
        "",
        MC_DEFINITION,
        "",
    ]
    out += mc_table(points, "draw")
    out += [
        "",
        "Compile and sampling: "
        + "; ".join(
            f"{p['label']}: exact compile {fmt_time(p['exact_compile'])}, MC batch compile "
            f"{fmt_time(p['mc_compile'])}, sampling {p['t_draw'] * 1e6:.3f} µs/draw (not counted)"
            for p in points
        )
        + ".",
        "",
    ]
    fin = [d["rel"][-1] for d in run["devs"]]
    out += [
        f"Exact GD against the paper's online SGD: {args.steps} steps at η = {args.lr:.6g}"
        + (" (= 1/λ_max at the teacher)" if args.lr_default else "")
        + f", from W = {args.start:g}·V*, A = 0. "
        "popdyn: `gradient_descent(prob, θ0, lr, steps, save_params=True)` on the exact loss, and for "
        f"information the same call with `gradient=OnlineGradient(prob, {args.batch})` (popdyn's in-JAX online "
        "SGD); cold = first call (compilation included), warm = identical second call. Baseline: the NumPy loop "
        f"(fresh Gaussian batch of {args.batch} per step, hand-written backward pass; it equals JAX autodiff to "
        f"{grad_check:.1e} relative on a test batch), wall of the whole loop, median over {args.sgd_seeds} seeds.",
        "",
        "| popdyn exact GD cold | popdyn exact GD warm | popdyn in-JAX online SGD cold / warm | NumPy online "
        "SGD | NumPy SGD ÷ exact GD warm | final ‖θ_SGD − θ_GD‖/‖θ_GD‖ (per seed) | excess loss L − L_opt: GD → "
        "SGD (per seed) | cos(W, V*): GD → SGD (per seed) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {fmt_time(run['gd_cold'])} | {fmt_time(run['gd_warm'])} | {fmt_time(run['jax_cold'])} / "
        f"{fmt_time(run['jax_warm'])} | {fmt_time(run['sgd_s'])} | {fmt_ratio(run['sgd_s'] / run['gd_warm'])} | "
        + ", ".join(f"{x:.3g}" for x in fin)
        + f" | {run['excess_gd'][-1]:.4g} → "
        + ", ".join(f"{d['excess_sgd'][-1]:.4g}" for d in run["devs"])
        + f" | {run['cos_gd']:.12f} → "
        + ", ".join(f"{d['cos']:.6f}" for d in run["devs"])
        + " |",
        "",
        "Along the run (seed 0), at steps " + ", ".join(str(int(s)) for s in run["steps_rec"][1:]) + ":",
        "",
        "- ‖θ_SGD − θ_GD‖/‖θ_GD‖: " + ", ".join(f"{x:.3g}" for x in run["devs"][0]["rel"][1:]),
        "- excess loss, exact GD: " + ", ".join(f"{x:.3g}" for x in run["excess_gd"][1:]),
        "- excess loss, NumPy SGD: " + ", ".join(f"{x:.3g}" for x in run["devs"][0]["excess_sgd"][1:]),
        "",
        "Checks (exact values against the pilot's Monte-Carlo means; pass: ≥ 99% of the live gradient "
        "coordinates and the loss within 4 standard errors, every zero-variance coordinate equal):",
        "",
    ]
    out += [f"- {p['label']}: {check_text(p['check'])}." for p in points]
    out.append(grad_check_line(grad_check))
    return finish_section(out, info)


def headline(points, run, grad_check, args, command, date, info, total) -> dict:
    """Headline figures for run_all's summary: exact vs MC at ε = 1e-3 per point (the first is the task's row) and
    the NumPy online SGD against exact GD (warm)."""
    rows = mc_headline_rows(
        "teacher", points, f"{args.teacher} {args.activation}", "`value_and_grad(prob.loss)` (closed form)", "draw"
    )
    rows.append(
        headline_row(
            "teacher",
            f"{args.steps} training steps, {args.teacher} {args.activation}",
            "exact GD (`gradient_descent`, warm)",
            run["gd_warm"],
            f"NumPy online SGD, batch {args.batch}",
            run["sgd_s"],
            note=f"final ‖θ_SGD − θ_GD‖/‖θ_GD‖ {np.median([d['rel'][-1] for d in run['devs']]):.3g} (median of "
            f"{args.sgd_seeds} seeds); popdyn in-JAX online SGD warm {fmt_time(run['jax_warm'])}",
        )
    )
    return make_headline(
        "teacher", SECTION, command, date, info, args.quick, total, rows, sampled_task_checks(points, grad_check)
    )


# ---------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--teacher", choices=TEACHERS, default="cnn", help="teacher (default cnn)")
    ap.add_argument("--activation", choices=("linear", "relu", "leaky"), default="relu", help="default relu")
    ap.add_argument("--pilot", type=int, default=None, help="pilot draws (default 16384; --quick 4096)")
    ap.add_argument("--time-batch", type=int, default=None, help="MC timing batch (default 8192; --quick 2048)")
    ap.add_argument("--repeats", type=int, default=None, help="warm timing repeats (default 11; --quick 5)")
    ap.add_argument("--eps", type=float, nargs="+", default=[1e-2, 1e-3], help="relative precisions (1e-2 1e-3)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default 4000; --quick 1000)")
    ap.add_argument("--batch", type=int, default=64, help="online SGD batch (default 64)")
    ap.add_argument("--lr", type=float, default=None, help="step size (default 1/λ_max at the teacher)")
    ap.add_argument("--start", type=float, default=0.01, help="start at W = START·V*, A = 0 (default 0.01)")
    ap.add_argument("--sgd-seeds", type=int, default=None, help="NumPy SGD runs (default 3; --quick 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random point, MC keys and SGD runs")
    ap.add_argument(
        "--quick", action="store_true", help="1000 steps, pilot 4096, 2 SGD seeds; writes no results unless --results"
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file to update (default benchmarks/RESULTS.md; with --quick: none)",
    )
    args = ap.parse_args(argv)
    for name, full, small in (
        ("pilot", 16384, 4096),
        ("time_batch", 8192, 2048),
        ("repeats", 11, 5),
        ("steps", 4000, 1000),
        ("sgd_seeds", 3, 2),
    ):
        if getattr(args, name) is None:
            setattr(args, name, small if args.quick else full)
    if args.results is None and not args.quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    if args.steps % RECORDS or args.steps < RECORDS:
        ap.error(f"--steps must be a positive multiple of {RECORDS}")
    if min(args.pilot, args.time_batch, args.repeats, args.sgd_seeds, args.batch) < 1 or min(args.eps) <= 0:
        ap.error("--pilot, --time-batch, --repeats, --sgd-seeds, --batch must be ≥ 1 and --eps > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header("teacher", argv)
    t_start = time.perf_counter()
    prob = build(args.teacher, activation=args.activation)
    args.lr_default = args.lr is None
    args.lr = 1.0 / prob.lambda_max_at_teacher() if args.lr is None else args.lr
    kw, ka = jax.random.split(jax.random.PRNGKey(args.seed))
    random_point = {"W": jax.random.normal(kw, (prob.M, prob.d)), "A": jax.random.normal(ka, (prob.D, prob.D))}
    grad_check = teacher_grad_check(prob, NumpyTeacher(prob), random_point, args.batch, args.seed)
    print(f"NumPy backward pass vs JAX autodiff on one batch: max relative difference {grad_check:.1e}", flush=True)
    theta0 = {"W": args.start * prob.V_star, "A": jnp.zeros((prob.D, prob.D))}
    run = sgd_vs_gd(prob, theta0, args)
    key = jax.random.PRNGKey(args.seed + 1)
    points = [
        mc_point("random point N(0, 1)", prob, random_point, args, jax.random.fold_in(key, 0)),
        mc_point(f"end of exact GD ({args.steps} steps)", prob, run["final"], args, jax.random.fold_in(key, 1)),
    ]
    total = time.perf_counter() - t_start
    section = render(prob, points, run, grad_check, args, info, command, date, total)
    publish(section, SECTION, args.results, headline(points, run, grad_check, args, command, date, info, total))
    return 0 if all(ok for _, ok in sampled_task_checks(points, grad_check)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
