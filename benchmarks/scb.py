"""Benchmark: sparse contextual bigrams (docs/models/scb.md §3, §5, §7: Fig. 5's sizes) — one exact population step
against the sampled minibatch step a researcher would otherwise run, in the same process.

What it measures (float64, default JAX backend = the CPU here)
-------------------------------------------------------------
For each (N, T) in --sizes (default 100×10⁵ and 500×10⁵, Fig. 5's scales; Q = 2, ``random_instance(key 0)``),
at θ = ½(μ1ᵀ, 11ᵀ/T) + ½(P, Qm) (half-way between the start and the truth, a generic point):

* exact: ``jit(value_and_grad(prob.loss))`` and one whole preconditioned, projected population step
  θ − η·Π D^{-1}∇L (Algorithm 1's stage-1 update) — compile time and the warm median of --repeats calls;
* baseline: one minibatch step as in the paper's experiments — B = --batch exact draws of the generative model
  (``prob.sample``, inside the jitted step) and the autodiff gradient of the batch-mean squared error,
  preconditioned the same way; warm median of --repeats;
* Monte-Carlo cost for the same precision: the per-entry variance of the preconditioned per-sample gradient
  (``gradient_variance`` from --pilot draws; no per-sample gradient is stored) gives the batch
  B_ε = (var_V·N² + var_A·TN) / (ε‖∇̃L‖)² whose gradient has relative RMSE ε; its time is B_ε/B batch steps.
  Ratio = that time ÷ one exact step;
* peak resident memory of the process after each size's timings (``ru_maxrss``);
* check of the exact values against Monte Carlo: over the pilot's number of fresh draws (in chunks), the mean
  per-sample loss and the mean per-sample directional derivatives (``jax.jvp``) along u₁ = ∇L/‖∇L‖ and a random
  Gaussian direction u₂ must lie within 4 standard errors of the exact L and ⟨∇L, u⟩ (PASS/FAIL).

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.scb              # ~3 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.scb --quick      # N = 100, T = 10⁴ only; writes nothing
Options: --sizes N,T ..., --batch, --pilot, --eps, --repeats, --results PATH. The section written is
"## Sparse contextual bigrams: one exact step at Fig. 5 scale" (other sections of the file are kept); the headline
figures for ``benchmarks.run_all``'s summary go to ``benchmarks/results/scb.json``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._common import (
    REPO,
    SUMMARY_EPS,
    Moments,
    at_eps,
    exactness_check,
    finish_section,
    headline_row,
    make_headline,
    parser,
    peak_rss_gb,
    publish,
    run_header,
)
from popdyn.jobs.scb import gradient_variance
from popdyn.tasks.scb import SparseBigram, per_sample_loss, random_instance

HEADING = "## Sparse contextual bigrams: one exact step at Fig. 5 scale"
ETA = 0.5


def warm_median(fn, *args, repeats: int) -> tuple[float, float]:
    """(first call incl. compile, median of ``repeats`` warm calls), seconds, each ``block_until_ready``."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times))


def bench_size(N: int, T: int, batch: int, pilot: int, eps: list[float], repeats: int) -> dict:
    prob = SparseBigram(*random_instance(jax.random.PRNGKey(0), N, T, 2))
    start = prob.init(None)
    theta = {"V": 0.5 * (start["V"] + prob.P), "A": 0.5 * (start["A"] + prob.Qm)}

    value_and_grad = jax.jit(jax.value_and_grad(prob.loss))

    @jax.jit
    def exact_step(th):
        g = prob.precondition(jax.grad(prob.loss)(th), project=True)
        return jax.tree_util.tree_map(lambda x, d: x - ETA * d, th, g)

    @jax.jit
    def sampled_step(th, key):
        data = prob.sample(key, batch)
        g = jax.grad(lambda t: jnp.mean(per_sample_loss(prob, t, data)))(th)
        g = prob.precondition(g, project=True)
        return jax.tree_util.tree_map(lambda x, d: x - ETA * d, th, g)

    vg_first, vg_warm = warm_median(value_and_grad, theta, repeats=repeats)
    st_first, st_warm = warm_median(exact_step, theta, repeats=repeats)
    sa_first, sa_warm = warm_median(sampled_step, theta, jax.random.PRNGKey(1), repeats=repeats)
    t0 = time.perf_counter()
    var = gradient_variance(prob, theta, jax.random.PRNGKey(2), samples=pilot)
    pilot_s = time.perf_counter() - t0
    g = prob.precondition(jax.grad(prob.loss)(theta), project=True)
    g_sq = float(sum(jnp.sum(x**2) for x in g.values()))
    peak = peak_rss_gb()
    total_var = var["V"] * N * N + var["A"] * T * N
    mc = []
    for e in eps:
        B = total_var / (e * e * g_sq)
        mc.append({"eps": e, "batch_needed": B, "seconds": B / batch * sa_warm, "ratio": B / batch * sa_warm / st_warm})
    return {
        "N": N,
        "T": T,
        "params": N * N + T * N,
        "vg_first": vg_first,
        "vg_warm": vg_warm,
        "step_first": st_first,
        "step_warm": st_warm,
        "sampled_first": sa_first,
        "sampled_warm": sa_warm,
        "pilot_s": pilot_s,
        "var": var,
        "grad_norm": g_sq**0.5,
        "mc": mc,
        "peak_rss_gb": peak,
        "check": exactness(prob, theta, jax.random.PRNGKey(3), pilot, batch),
    }


def exactness(prob: SparseBigram, theta, key, samples: int, chunk: int) -> dict:
    """``exactness_check`` of the exact L and directional derivatives ⟨∇L, u⟩, u ∈ {∇L/‖∇L‖, a random unit Gaussian
    direction}, against the means of the per-sample losses and their ``jax.jvp`` along u over ``samples`` draws."""
    g = jax.grad(prob.loss)(theta)
    gn = jnp.sqrt(sum(jnp.sum(x**2) for x in g.values()))
    ku, key = jax.random.split(key)
    r = {
        k: jax.random.normal(kk, x.shape)
        for (k, x), kk in zip(theta.items(), jax.random.split(ku, len(theta)), strict=False)
    }
    rn = jnp.sqrt(sum(jnp.sum(x**2) for x in r.values()))
    dirs = [{k: x / gn for k, x in g.items()}, {k: x / rn for k, x in r.items()}]
    exact_d = np.array([float(sum(jnp.sum(g[k] * u[k]) for k in g)) for u in dirs])
    mom = Moments(len(dirs))
    for kc in jax.random.split(key, -(-samples // chunk)):
        data = prob.sample(kc, chunk)
        outs = [jax.jvp(lambda th, data=data: per_sample_loss(prob, th, data), (theta,), (u,)) for u in dirs]
        mom.add(outs[0][0], np.stack([np.asarray(d) for _, d in outs], axis=1))
    return exactness_check(float(prob.loss(theta)), exact_d, mom)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--sizes", nargs="+", default=["100,100000", "500,100000"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--pilot", type=int, default=2000)
    ap.add_argument("--eps", type=float, nargs="+", default=[0.1, 0.01, SUMMARY_EPS])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--results", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats = ["100,10000"], 3
    results = args.results if args.results is not None else (None if args.quick else REPO / "benchmarks/RESULTS.md")
    command, date, info = run_header("scb", argv)
    t_start = time.perf_counter()
    rows = []
    for size in args.sizes:
        N, T = (int(v) for v in size.split(","))
        r = bench_size(N, T, args.batch, args.pilot, args.eps, args.repeats)
        rows.append(r)
        print(
            f"N={N}, T={T}: exact step {r['step_warm']:.3f} s, sampled step {r['sampled_warm']:.3f} s, "
            f"peak RSS {r['peak_rss_gb']:.2f} GB; check {'PASS' if r['check']['ok'] else 'FAIL'}"
        )
    lines = [
        HEADING,
        "",
        f"`{command}` — {date}",
        "",
        f"One exact population step (loss, gradient and the preconditioned projected update, η = {ETA}) against "
        f"one minibatch step of B = {args.batch} exact draws (sampling included), at θ half-way between the "
        f"start and (P, Qm); Q = 2. Warm times are medians of {args.repeats} calls; first calls include "
        f"compilation. The Monte-Carlo columns are the batch whose preconditioned gradient has relative RMSE "
        f"ε (variances from {args.pilot} exact per-sample gradients) and its time in batch-{args.batch} steps.",
        "",
        "| N | T | parameters | exact loss+grad (warm / first) | exact step (warm / first) | "
        f"sampled B={args.batch} step (warm / first) | peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['N']} | {r['T']:,} | {r['params']:,} | {r['vg_warm']:.3f} s / {r['vg_first']:.2f} s | "
            f"{r['step_warm']:.3f} s / {r['step_first']:.2f} s | {r['sampled_warm']:.3f} s / "
            f"{r['sampled_first']:.2f} s | {r['peak_rss_gb']:.2f} GB |"
        )
    lines += [
        "",
        "| N | T | ε | batch for relative RMSE ε | Monte-Carlo time | ratio MC / exact step |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for m in r["mc"]:
            lines.append(
                f"| {r['N']} | {r['T']:,} | {m['eps']:g} | {m['batch_needed']:.3g} | {m['seconds']:.3g} s | "
                f"{m['ratio']:.3g}× |"
            )
    lines += [
        "",
        "Per-entry variances of the preconditioned per-sample gradient: "
        + "; ".join(
            f"N={r['N']}, T={r['T']:,}: var_V {r['var']['V']:.3g}, var_A {r['var']['A']:.3g}, ‖∇̃L‖ {r['grad_norm']:.3g}"
            for r in rows
        )
        + ".",
    ]
    lines += [
        "",
        "Checks (exact L and ⟨∇L, u⟩ against the Monte-Carlo means of the per-sample loss and its directional "
        f"derivatives over {args.pilot} fresh draws, u₁ = ∇L/‖∇L‖ and u₂ a random unit direction; pass: all "
        "within 4 standard errors):",
        "",
    ]
    lines += [
        f"- N={r['N']}, T={r['T']:,}: {'PASS' if r['check']['ok'] else '**FAIL**'} — loss |z| = "
        f"{r['check']['loss_z']:.2f}, directional derivatives max |z| = {r['check']['zmax']:.2f}"
        for r in rows
    ]
    total = time.perf_counter() - t_start
    publish(finish_section(lines, info), HEADING, results, headline(rows, args, command, date, info, total))
    return 0 if all(r["check"]["ok"] for r in rows) else 1


def headline(rows: list[dict], args, command: str, date: str, info: dict, total: float) -> dict:
    """Headline figures for run_all's summary: per size, one exact step against the Monte-Carlo batch of relative
    RMSE 1e-3 (the largest size is the task's row) and against one sampled minibatch step."""
    out = []
    for r in rows:
        m = at_eps(r["mc"])
        tag = f"N = {r['N']}, T = {r['T']:,}"
        out.append(
            headline_row(
                "scb",
                f"exact preconditioned step vs Monte Carlo at gradient RMSE ε‖∇̃L‖, ε = {m['eps']:g}; {tag}",
                "one exact population step",
                r["step_warm"],
                f"MC, {m['batch_needed']:.3g} draws in batch-{args.batch} steps",
                m["seconds"],
                primary=r is rows[-1],
            )
        )
        out.append(
            headline_row(
                "scb",
                f"one step, {tag}",
                "one exact population step",
                r["step_warm"],
                f"one sampled batch-{args.batch} step",
                r["sampled_warm"],
            )
        )
    checks = [
        (
            f"N = {r['N']}, T = {r['T']:,}: exact loss and directional derivatives within 4 SE of Monte Carlo",
            r["check"]["ok"],
        )
        for r in rows
    ]
    return make_headline("scb", HEADING, command, date, info, args.quick, total, out, checks)


if __name__ == "__main__":
    raise SystemExit(main())
