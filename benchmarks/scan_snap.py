"""Benchmark: Scan and Snap (docs/models/scan_snap.md) — popdyn's exact population loss and gradient against Monte
Carlo at equal precision, and the authors' sampled-SGD training loop (written in NumPy) against popdyn's exact GD, in
one run.

What it measures (float64 throughout, default JAX backend = the CPU here)
------------------------------------------------------------------------
The problem is ``ScanSnap(syn_small(), T=T)`` (Syn-Small of Fig. 4: K = 2 classes, M = 34 tokens, 20 tokens in each
class's support; ``--medium N`` uses ``syn_medium(N)`` instead). At finite T the exact loss is the expectation over
the count vectors of the T−1 contextual tokens, C(s+T−2, T−1) multisets per class of support size s (§1,
[derived]); it is the only version of the loss that a Monte-Carlo average of sampled sequences estimates without
bias, so the exact-vs-MC part runs at a small T (default 6: 42,504 count vectors per class; --quick 4: 1,540).

1. Exact loss + gradient: ``jax.jit(jax.value_and_grad(prob.loss))``, AOT compile (``jit(...).lower(θ).compile()``)
   timed apart, warm time = median of --repeats calls (each ``block_until_ready``). For reference the T → ∞ loss
   (``T=None``, the closed form popdyn's Fig. 4/6 dynamics use) is timed the same way.

2. Monte Carlo at equal precision (the baseline): sequences drawn by the package's own sampler
   (``ScanSnap.sample``: classes ~ π, contextual tokens i.i.d. P(·|n)), the literal per-sequence loss
   ``ScanSnap.sequence_loss`` (attention over positions, ℓ2-normalised mixture, cross-entropy over all M tokens),
   ``jit(value_and_grad)`` of the batch mean. Time per sequence = warm median at batch --time-batch ÷ the batch, on
   pre-drawn device-resident sequences (sampling excluded, which favours MC; the sampler's own cost is reported).
   A pilot of --pilot single-sequence gradients (``vmap(value_and_grad)``, chunks of 2048) gives Σ_i Var_i, hence
   B(ε) = Σ_i Var_i/(ε‖∇L‖)² and the MC time B(ε) × time per sequence for each ε in --eps; ratio = MC ÷ exact.
   Two points: PyTorch's default initialisation U(−1/√M, 1/√M) of Fig. 6 (``init_uniform``), and the exact GD run of
   part 3 (a) after 10 steps (Fig. 4's left panel, loss already ~100× lower).

3. The paper's training loop as the baseline for whole runs: the authors train with SGD on freshly sampled batches
   (batch 128, momentum 0.9, η_Y = η_Z = 1, Y(0) = Z(0) = 0, 100 iterations for Fig. 4, §6–§7). The script has
   that loop in plain NumPy — sampling, forward pass and a hand-written backward pass of the Y/Z model (checked
   against JAX autodiff on one batch) — and times it against ``popdyn.gradient_descent`` (exact heavy-ball GD, same
   lr, momentum and time scales; cold = first call with compilation, warm = an identical second call) for the same
   number of steps. The SGD run's deviation from the exact trajectory, ‖θ_SGD − θ_GD‖/‖θ_GD‖ and the exact loss at
   both, is reported every 10 steps, for --sgd-seeds seeds, next to a control: exact GD from Y, Z = 1e-3·N(0, 1)
   against exact GD from 0, i.e. how much the dynamics themselves amplify a small difference of θ:

   (a) the same loss: SGD on sequences of length T against exact GD at the same T (the deviation is sampling noise
       only);
   (b) the paper's setting: SGD on sequences of length --seq-T (128) against exact GD on the T → ∞ loss (the
       deviation is sampling noise plus the finite-T difference).

4. Check: the exact loss and gradient against the pilot's Monte-Carlo means (within 4 standard errors, PASS/FAIL).

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.scan_snap                 # ~1.5 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.scan_snap --quick         # T = 4, small pilot, 2 SGD seeds; < 1 min; writes nothing
    python -m benchmarks.scan_snap --quick --results /tmp/r.md
Options: --medium N, --T, --pilot, --time-batch, --repeats, --eps, --steps, --batch, --lr, --eta-y, --eta-z,
--momentum, --seq-T, --sgd-seeds, --seed, --results PATH. The section written is "## Scan and Snap: exact loss and
gradient vs Monte Carlo, exact GD vs the authors' SGD" (other sections of the file are kept); the headline figures go
to ``benchmarks/results/scan_snap.json``.
"""

from __future__ import annotations

import time
from math import comb
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
    exact_timing,
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
from popdyn.tasks.scan_snap import Classes, ScanSnap, syn_medium, syn_small

from ._sgd_baselines import NumpyScanSnap, scan_snap_grad_check, scan_snap_sgd

SECTION = "## Scan and Snap: exact loss and gradient vs Monte Carlo, exact GD vs the authors' SGD"
RECORD_EVERY = 10
FIG4_POINT_STEP = 10  # MC point 2: the exact GD run of part 3 (a) after this many steps


# ---------------------------------------------------------------------------------------------------------------
# Parts 1, 2, 4: exact loss + gradient against Monte Carlo
# ---------------------------------------------------------------------------------------------------------------
def mc_point(label: str, prob: ScanSnap, theta, args, key) -> dict:
    """``equal_precision`` at θ: sequences from ``ScanSnap.sample``, per-sequence loss ``ScanSnap.sequence_loss``."""

    def batch_loss(th, cls, ctx):
        return jnp.mean(jax.vmap(prob.sequence_loss, in_axes=(None, 0, 0))(th, cls, ctx))

    per_sequence = jax.jit(jax.vmap(jax.value_and_grad(prob.sequence_loss), in_axes=(None, 0, 0)))
    draw = jax.jit(lambda k, b: prob.sample(k, b), static_argnums=1)
    return equal_precision(
        label,
        prob.loss,
        theta,
        batch_loss,
        per_sequence,
        draw,
        key,
        time_batch=args.time_batch,
        pilot=args.pilot,
        repeats=args.repeats,
        eps=args.eps,
        unit="sequence",
    )


# ---------------------------------------------------------------------------------------------------------------
# Part 3: exact GD against the NumPy SGD loop
# ---------------------------------------------------------------------------------------------------------------
PERTURBATION = 1e-3  # control run: exact GD from θ0 + PERTURBATION·N(0, 1)


def run_gd(prob: ScanSnap, theta0, args):
    """popdyn's exact heavy-ball GD with the SGD loop's settings, θ recorded every RECORD_EVERY steps."""
    traj = popdyn.gradient_descent(
        prob,
        theta0,
        lr=args.lr,
        steps=args.steps,
        momentum=args.momentum,
        record_every=RECORD_EVERY,
        save_params=True,
        time_scales={"Y": args.eta_y, "Z": args.eta_z},
    )
    return jax.block_until_ready(traj)


def timed_gd(prob: ScanSnap, args) -> tuple[object, float, float]:
    """``run_gd`` from Y = Z = 0: (trajectory, cold seconds, warm seconds)."""
    return cold_warm(lambda: run_gd(prob, prob.init(None), args))


def deviation(loss, gd_params: dict, sgd_params: dict) -> dict:
    """Per record: ‖θ_SGD − θ_GD‖/‖θ_GD‖ (θ = (Y, Z) flattened; absolute at step 0, where θ_GD = 0) and the exact
    loss at both (``loss``: the problem's loss, vmapped over records)."""
    diff = np.sqrt(sum(np.sum((np.asarray(gd_params[k]) - sgd_params[k]) ** 2, axis=(1, 2)) for k in ("Y", "Z")))
    size = np.sqrt(sum(np.sum(np.asarray(gd_params[k]) ** 2, axis=(1, 2)) for k in ("Y", "Z")))
    sgd = {k: jnp.asarray(v) for k, v in sgd_params.items()}
    return {
        "rel": diff / np.where(size > 0, size, 1.0),
        "loss_gd": np.asarray(loss(gd_params)),
        "loss_sgd": np.asarray(loss(sgd)),
    }


def sgd_case(name: str, prob: ScanSnap, seq_T: int, classes: Classes, args) -> dict:
    """popdyn's exact GD on ``prob`` against the NumPy SGD loop on sequences of length ``seq_T``, and the control:
    exact GD from a perturbed start, to show how much the dynamics themselves amplify a small difference."""
    traj, cold, warm = timed_gd(prob, args)
    model = NumpyScanSnap(classes, seq_T)
    runs = [
        scan_snap_sgd(
            model,
            args.steps,
            args.batch,
            args.lr,
            {"Y": args.eta_y, "Z": args.eta_z},
            args.momentum,
            args.seed + s,
            RECORD_EVERY,
        )
        for s in range(args.sgd_seeds)
    ]
    loss = jax.jit(jax.vmap(prob.loss))
    devs = [deviation(loss, traj.params, rec) for rec, _ in runs]
    keys = jax.random.split(jax.random.PRNGKey(args.seed), 2)
    start = {
        k: v + PERTURBATION * jax.random.normal(kk, v.shape)
        for (k, v), kk in zip(prob.init(None).items(), keys, strict=False)
    }
    control = deviation(loss, traj.params, {k: np.asarray(v) for k, v in run_gd(prob, start, args).params.items()})
    r = {
        "name": name,
        "T": prob.T,
        "seq_T": seq_T,
        "gd_cold": cold,
        "gd_warm": warm,
        "sgd_s": float(np.median([w for _, w in runs])),
        "steps_rec": np.asarray(traj.ts),
        "devs": devs,
        "control": control,
        "gd_params": traj.params,
    }
    exact_T = "T → ∞" if prob.T is None else f"T = {prob.T}"
    print(
        f"\n--- {name}: exact GD ({exact_T}) {args.steps} steps: cold {fmt_time(cold)}, warm {fmt_time(warm)}; "
        f"NumPy SGD (sequences of length {seq_T}, batch {args.batch}) "
        f"{fmt_time(r['sgd_s'])} (median of {args.sgd_seeds} seeds); final ‖θ_SGD − θ_GD‖/‖θ_GD‖ "
        + ", ".join(f"{d['rel'][-1]:.3g}" for d in devs)
        + f"; exact loss GD {devs[0]['loss_gd'][-1]:.4g} vs SGD "
        + ", ".join(f"{d['loss_sgd'][-1]:.4g}" for d in devs)
        + f"; control (exact GD from θ0 + {PERTURBATION:g}·N(0, "
        f"1)): deviation {control['rel'][-1]:.3g}, loss {control['loss_sgd'][-1]:.4g} ---",
        flush=True,
    )
    return r


# ---------------------------------------------------------------------------------------------------------------
# RESULTS.md
# ---------------------------------------------------------------------------------------------------------------
def describe(classes: Classes, args) -> str:
    supp = sorted({int(s) for s in (classes.probs > 0).sum(1)})
    name = "syn_small()" if args.medium is None else f"syn_medium({args.medium})"
    return f"`{name}` (K = {classes.K} classes, M = {classes.M} tokens, supports of {'/'.join(map(str, supp))} tokens)"


def render(points, ref_inf, sgd, grad_check, classes, args, info, command, date, total) -> str:
    n_hist = sum(comb(int(s) + args.T - 2, args.T - 1) for s in (classes.probs > 0).sum(1))
    out = [
        SECTION,
        "",
        f"Written by `python -m benchmarks.scan_snap` on {date} (total run {total:.0f} s).  ",
        f"Command: `{command}`",
        "",
        f"Classes: {describe(classes, args)}. Exact loss at T = {args.T} (T − 1 = {args.T - 1} contextual tokens): "
        f"the expectation over {n_hist:,} count vectors in all, `jit(value_and_grad(prob.loss))`; compile (AOT) "
        f"apart, warm = median of {args.repeats} calls. Monte Carlo: `ScanSnap.sample` + the literal "
        "`ScanSnap.sequence_loss`, `jit(value_and_grad)` of the batch mean; µs/sequence = warm median at batch "
        f"{args.time_batch} ÷ {args.time_batch}, sampling excluded (which favours MC); Var_i from a pilot of "
        f"{points[0]['check']['n']:,} single-sequence gradients. float64, CPU. Peak resident memory of the run: "
        f"{peak_rss_gb():.2f} GB.",
        "",
        MC_DEFINITION,
        "",
    ]
    out += mc_table(points, "sequence")
    out += [
        "",
        "Compile and sampling: "
        + "; ".join(
            f"{p['label']}: exact compile {fmt_time(p['exact_compile'])}, MC batch compile "
            f"{fmt_time(p['mc_compile'])}, sampling {p['t_draw'] * 1e6:.3f} µs/sequence (not counted)"
            for p in points
        )
        + f". For reference, the T → ∞ loss+gradient (`ScanSnap(..., T=None)`, what popdyn's Fig. 4/6 dynamics "
        f"integrate; no sampler can estimate it without bias): compile {fmt_time(ref_inf['compile'])}, warm "
        f"{fmt_time(ref_inf['warm'])}.",
        "",
    ]
    out += [
        f"Exact GD against the authors' training loop: {args.steps} steps, lr {args.lr:g}, (η_Y, η_Z) = "
        f"({args.eta_y:g}, {args.eta_z:g}), momentum {args.momentum:g} (PyTorch's heavy ball, both sides), "
        "Y(0) = Z(0) = 0. popdyn: `gradient_descent(prob, θ0, momentum=…, time_scales=…, save_params=True)`, cold "
        "= first call (compilation included), warm = identical second call. Baseline: the loop in NumPy (fresh "
        f"batch of {args.batch} sampled sequences per step, hand-written backward pass; it equals JAX autodiff "
        f"to {grad_check:.1e} relative on a test batch), wall of the whole loop, median over {args.sgd_seeds} "
        "seeds. Deviation: ‖θ_SGD − θ_GD‖/‖θ_GD‖ at the last step (each seed) and its maximum over the records "
        f"every {RECORD_EVERY} steps; exact loss of the GD problem at the last step of both. *Control*: exact GD "
        f"from Y, Z = {PERTURBATION:g}·N(0, 1) instead of 0, compared with the run from 0: how much the "
        "dynamics themselves amplify a small difference of θ (SGD differs from exact GD by sampling noise at "
        "every step, amplified the same way).",
        "",
        "| case | exact GD loss | SGD sequences | popdyn cold | popdyn warm | NumPy SGD | SGD ÷ popdyn warm | "
        "final deviation (per seed) | max deviation | exact loss: GD → SGD (per seed) | control: deviation, loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sgd:
        exact_T = "T → ∞" if r["T"] is None else f"T = {r['T']}"
        out.append(
            f"| {r['name']} | {exact_T} | T = {r['seq_T']}, batch "
            f"{args.batch} | {fmt_time(r['gd_cold'])} | {fmt_time(r['gd_warm'])} | {fmt_time(r['sgd_s'])} | "
            f"{fmt_ratio(r['sgd_s'] / r['gd_warm'])} | "
            + ", ".join(f"{d['rel'][-1]:.3g}" for d in r["devs"])
            + f" | {max(float(d['rel'][1:].max()) for d in r['devs']):.3g} | {r['devs'][0]['loss_gd'][-1]:.4g} → "
            + ", ".join(f"{d['loss_sgd'][-1]:.4g}" for d in r["devs"])
            + f" | {r['control']['rel'][-1]:.3g}, {r['control']['loss_sgd'][-1]:.4g} |"
        )
    out += [
        "",
        "Deviation along the run (seed 0), ‖θ_SGD − θ_GD‖/‖θ_GD‖ at steps "
        + ", ".join(str(int(s)) for s in sgd[0]["steps_rec"][1:])
        + ":",
        "",
    ]
    out += [
        f"- {r['name']}: "
        + ", ".join(f"{x:.3g}" for x in r["devs"][0]["rel"][1:])
        + "; control: "
        + ", ".join(f"{x:.3g}" for x in r["control"]["rel"][1:])
        for r in sgd
    ]
    out += [
        "",
        "Checks (exact values against the pilot's Monte-Carlo means; pass: ≥ 99% of the live gradient "
        "coordinates and the loss within 4 standard errors, every zero-variance coordinate equal):",
        "",
    ]
    out += [f"- {p['label']}: {check_text(p['check'])}." for p in points]
    out.append(grad_check_line(grad_check))
    return finish_section(out, info)


def headline(points, sgd, grad_check, args, command, date, info, total) -> dict:
    """Headline figures for run_all's summary: exact vs MC at ε = 1e-3 per point (the first is the task's row) and
    the SGD loop against exact GD (warm) for each case."""
    rows = mc_headline_rows(
        "scan-snap", points, f"T = {args.T}", "`value_and_grad(prob.loss)` (count vectors)", "sequence"
    )
    for r in sgd:
        rows.append(
            headline_row(
                "scan-snap",
                f"{args.steps} training steps, {r['name']}",
                "exact GD (`gradient_descent`, warm)",
                r["gd_warm"],
                f"NumPy SGD, batch {args.batch}, sequences of length {r['seq_T']}",
                r["sgd_s"],
                note=f"final ‖θ_SGD − θ_GD‖/‖θ_GD‖ {np.median([d['rel'][-1] for d in r['devs']]):.3g} (median of "
                f"{args.sgd_seeds} seeds); popdyn cold {fmt_time(r['gd_cold'])}",
            )
        )
    return make_headline(
        "scan_snap", SECTION, command, date, info, args.quick, total, rows, sampled_task_checks(points, grad_check)
    )


# ---------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--medium", type=int, default=None, help="use syn_medium(N) instead of syn_small()")
    ap.add_argument("--T", type=int, default=None, help="finite T of the exact-vs-MC part (default 6; --quick 4)")
    ap.add_argument("--pilot", type=int, default=None, help="pilot sequences (default 16384; --quick 4096)")
    ap.add_argument("--time-batch", type=int, default=None, help="MC timing batch (default 8192; --quick 2048)")
    ap.add_argument("--repeats", type=int, default=None, help="warm timing repeats (default 11; --quick 5)")
    ap.add_argument("--eps", type=float, nargs="+", default=[1e-2, 1e-3], help="relative precisions (1e-2 1e-3)")
    ap.add_argument("--steps", type=int, default=100, help="training steps (default 100, Fig. 4's niter)")
    ap.add_argument("--batch", type=int, default=128, help="SGD batch (default 128, the authors')")
    ap.add_argument("--lr", type=float, default=1.0, help="learning rate (default 1)")
    ap.add_argument("--eta-y", type=float, default=1.0, help="time scale of Y (default 1)")
    ap.add_argument("--eta-z", type=float, default=1.0, help="time scale of Z (default 1)")
    ap.add_argument("--momentum", type=float, default=0.9, help="heavy-ball momentum (default 0.9, the authors')")
    ap.add_argument("--seq-T", type=int, default=128, help="sequence length of the paper's setting (default 128)")
    ap.add_argument("--sgd-seeds", type=int, default=None, help="SGD runs per case (default 3; --quick 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initialisation, MC keys and SGD runs")
    ap.add_argument(
        "--quick", action="store_true", help="T = 4, pilot 4096, 2 SGD seeds; writes no results unless --results"
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file to update (default benchmarks/RESULTS.md; with --quick: none)",
    )
    args = ap.parse_args(argv)
    quick = args.quick
    for name, full, small in (
        ("T", 6, 4),
        ("pilot", 16384, 4096),
        ("time_batch", 8192, 2048),
        ("repeats", 11, 5),
        ("sgd_seeds", 3, 2),
    ):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    if args.results is None and not quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    if args.T < 2 or args.seq_T < 2 or args.steps < FIG4_POINT_STEP or args.steps % RECORD_EVERY:
        ap.error(f"need --T, --seq-T ≥ 2 and --steps a multiple of {RECORD_EVERY} that is ≥ {FIG4_POINT_STEP}")
    if min(args.pilot, args.time_batch, args.repeats, args.sgd_seeds, args.batch) < 1 or min(args.eps) <= 0:
        ap.error("--pilot, --time-batch, --repeats, --sgd-seeds, --batch must be ≥ 1 and --eps > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header("scan_snap", argv)
    t_start = time.perf_counter()
    classes = syn_small() if args.medium is None else syn_medium(args.medium)
    prob, prob_inf = ScanSnap(classes, T=args.T), ScanSnap(classes)
    model = NumpyScanSnap(classes, args.T)
    grad_check = scan_snap_grad_check(prob, model, args.batch, args.seed)
    print(f"NumPy backward pass vs JAX autodiff on one batch: max relative difference {grad_check:.1e}", flush=True)
    sgd = [
        sgd_case("(a) same loss", prob, args.T, classes, args),
        sgd_case("(b) the paper's setting", prob_inf, args.seq_T, classes, args),
    ]
    fig4 = {k: v[FIG4_POINT_STEP // RECORD_EVERY] for k, v in sgd[0]["gd_params"].items()}
    key = jax.random.PRNGKey(args.seed + 1)
    points = [
        mc_point(
            "PyTorch init U(±1/√M)",
            prob,
            prob.init_uniform(jax.random.PRNGKey(args.seed)),
            args,
            jax.random.fold_in(key, 0),
        ),
        mc_point(f"exact GD (a), step {FIG4_POINT_STEP}", prob, fig4, args, jax.random.fold_in(key, 1)),
    ]
    ref_inf = exact_timing(prob_inf.loss, prob_inf.init_uniform(jax.random.PRNGKey(args.seed)), args.repeats)
    total = time.perf_counter() - t_start
    section = render(points, ref_inf, sgd, grad_check, classes, args, info, command, date, total)
    publish(section, SECTION, args.results, headline(points, sgd, grad_check, args, command, date, info, total))
    return 0 if all(ok for _, ok in sampled_task_checks(points, grad_check)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
