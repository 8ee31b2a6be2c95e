"""Benchmark: SGD's exact gradient noise Σ(θ) and step-size condition η*(B) against the Monte Carlo a researcher would
otherwise run, in the same run, for a user table model and the linear bilinear teacher.

What it measures
----------------
Two models that declare their examples (docs/sgd.md):

* **user table**: a least-squares regression ``Problem.from_examples`` on n = 16,384 equally weighted points in
  R^16 (a ``WeightedTable``; --quick: 4,096 in R^8), SGD drawing B examples with replacement;
* **teacher**: the linear ``BilinearTeacher`` (cnn pooling, D = 4, K = 2, M = d = 1), whose examples are the
  3^8 = 6,561 Gauss–Hermite nodes of one Gaussian draw (X, E); SGD draws B fresh Gaussian draws per step (online).

1. **tr Σ(θ)** at a generic θ: ``popdyn.gradient_noise(prob, θ).trace`` (one pass over the examples), cold (first
   call, compilation included) and warm. Monte Carlo: per-example gradients of S sampled examples (table rows drawn
   by their weights; the teacher's Gaussian draws from ``BilinearTeacher.sample``), q_s = ‖g_s − ḡ_S‖², whose mean
   estimates tr Σ with relative standard error sd(q)/(√S tr Σ). From a measured run of S₀ samples (which must put
   the exact trace within 4 SE), S(ε) = Var(q)/(ε tr Σ)² samples reach relative SE ε, at the measured warm seconds
   per sample (the per-example gradients of a pre-drawn chunk, sampling excluded). The exact value is accurate to
   float64 rounding, so equal precision means ε → 1e-16: the table reports ε = 1e-3 and 1e-6 (extrapolated by 1/√S).
2. **The top k = 4 eigenpairs of Σ(θ)**: ``GradientNoise.top(4)`` (block Krylov, a few passes). Monte Carlo: the top
   eigenvalues of the sample covariance, whose variance to leading order is Var((u_jᵀ(g − ḡ))²)/S (u_j the exact
   eigenvector): S(ε) = max_j Var(z_j)/(ε λ_j)², with each λ_j within 4 SE of the mean of z_j = (u_jᵀ(g − ḡ))².
3. **η*(B)** at a minimum θ* (the table: the least-squares solution; the teacher: its ``teacher_params``,
   S = S* to rounding): ``popdyn.mean_square_stability(prob, θ*, B)`` cold and warm, and the whole curve
   ``threshold_curve`` (B = 1, 2, 4, …, 16B). Monte Carlo: what a researcher would otherwise do to locate the
   threshold, bisection on η over [0, 2/λ_max] (λ_max given), each probe S seeds of SGD run T steps from θ* (a
   jitted vmapped loop, compiled once), the probe "unstable" when the seeds' mean ‖θ_T − θ*‖² exceeds twice that at
   T/2 or is not finite. Timed at small S₀, T₀ and P₀ probes, compilation excluded; the located η̂ is reported against
   the exact η*(B). **Extrapolation** to relative precision ε (a lower bound): P(ε) = ⌈log₂(2/(λ_max η* ε))⌉ probes;
   at η = (1 + ε)η* the mean square grows per step by ρ(T_η) ≈ 1 + aεη* with a = ⟨C*, (HC* + C*H)⟩ ≤ 2λ_max for the
   unit top eigenvector C* of the second-moment map (docs/sgd.md), so a probe needs at least
   T(ε) = ln 2/(2λ_max η* ε) steps to see it double; and S₀ seeds (fewer than heavy tails need near η*,
   notebooks/sgd.ipynb). MC time ≥ P(ε)·S₀·T(ε)·(measured seconds per run-step).

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.sgd_noise            # ~1 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.sgd_noise --quick    # smaller table, fewer samples; writes nothing unless --results
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import popdyn
from benchmarks._common import (
    COVERAGE_SE,
    cold_warm,
    finish_section,
    fmt_n,
    fmt_ratio,
    fmt_time,
    headline_row,
    make_headline,
    publish,
    quick_or_full,
    run_header,
    warm_times,
)
from popdyn.analysis import threshold_curve
from popdyn.exact import WeightedTable
from popdyn.tasks.teacher import BilinearTeacher, cnn_pooling, random_V

SCRIPT = "sgd_noise"
HEADING = "## SGD's gradient noise and step-size condition: exact against Monte Carlo"
EPS = (1e-3, 1e-6)
TOP = 4  # eigenpairs of Σ
BATCH = 8  # SGD's minibatch size B for η*(B)
CHUNK = 4096  # Monte-Carlo samples per compiled call


@dataclass(frozen=True)
class Case:
    """One model: the problem, a generic θ for Σ, a minimum θ* for η*(B), the sampling of its SGD (``replace`` as
    ``gradient_noise``), and ``sample(key, S)``: S examples drawn from its measure, as a batch of example pytrees."""

    name: str
    prob: popdyn.Problem
    theta: object
    theta_star: object
    replace: bool | None
    sample: object


def table_case(n: int, d: int) -> Case:
    """The user table: a least-squares regression ℓ(θ, x) = ½(x·θ − y)², x ~ N(0, I_d), y = w·x + N(0, 0.5²), whose
    minimum is the least-squares solution; its loss is quadratic, so SGD's linearisation at θ* is exact."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    Y = X @ rng.normal(size=d) + 0.5 * rng.normal(size=n)

    def example_loss(th, ex):
        return 0.5 * (ex["x"] @ th - ex["y"]) ** 2

    prob = popdyn.Problem.from_examples(example_loss, np.zeros(d), data=WeightedTable.uniform({"x": X, "y": Y}))
    Xj, Yj = jnp.asarray(X), jnp.asarray(Y)

    def sample(key, size):
        i = jax.random.randint(key, (size,), 0, n)
        return {"x": Xj[i], "y": Yj[i]}

    theta_star = jnp.asarray(np.linalg.lstsq(X, Y, rcond=None)[0])
    return Case(f"user table (n = {n:,}, d = {d})", prob, jnp.asarray(rng.normal(size=d)), theta_star, True, sample)


def teacher_case() -> Case:
    """The linear teacher at W = V*/2, A = logits(1) for Σ, and at its teacher parameters for η*(B)."""
    prob = BilinearTeacher(cnn_pooling(4, 2), random_V(0, 1, 1), activation="linear", sigma_x=1.0, sigma_eps=0.5)
    theta = {"W": 0.5 * prob.V_star, "A": prob.logits(1.0)}

    def sample(key, size):
        X, Y = prob.sample(key, size)
        return {"X": X, "E": Y - prob.teacher_output(X)}

    name = f"teacher (linear, cnn D = 4, K = 2; n = {prob.examples().n:,} nodes)"
    return Case(name, prob, theta, prob.teacher_params(), None, sample)


def per_example_gradients(case: Case):
    """jit((θ, key, S) ↦ flat per-example gradients of S sampled examples, (S, p)); S static."""

    def grads(theta, key, size):
        x = case.sample(key, size)
        g = jax.vmap(jax.grad(case.prob.example_loss), in_axes=(None, 0))(theta, x)
        return jax.vmap(lambda t: ravel_pytree(t)[0])(g)

    return jax.jit(grads, static_argnums=2)


def sample_gradients(case: Case, theta, n_samples: int) -> tuple[np.ndarray, float]:
    """(S₀ per-example gradients of sampled examples, warm seconds per sample, sampling included but compile not)."""
    fn = per_example_gradients(case)
    key = jax.random.PRNGKey(1)
    t_chunk = float(np.median(warm_times(fn, theta, key, CHUNK, repeats=5)))
    rows = [np.asarray(fn(theta, jax.random.fold_in(key, k), CHUNK)) for k in range(-(-n_samples // CHUNK))]
    return np.concatenate(rows), t_chunk / CHUNK


def noise_part(case: Case, n_samples: int) -> dict:
    """Part 1 and 2: the exact tr Σ and top eigenpairs (cold, warm) and their Monte-Carlo costs at each ε."""
    noise, trace_cold, trace_warm = cold_warm(lambda: popdyn.gradient_noise(case.prob, case.theta))
    top, top_cold, top_warm = cold_warm(lambda: popdyn.gradient_noise(case.prob, case.theta).top(TOP))
    G, t_sample = sample_gradients(case, case.theta, n_samples)
    centred = G - G.mean(axis=0)
    q = np.sum(centred**2, axis=1) * len(G) / (len(G) - 1)
    z = (centred @ top.vectors) ** 2
    trace_z = abs(q.mean() - noise.trace) / (q.std(ddof=1) / math.sqrt(len(q)))
    top_z = np.abs(z.mean(axis=0) - top.values) / (z.std(axis=0, ddof=1) / math.sqrt(len(z)))
    trace_var = q.var(ddof=1) / noise.trace**2  # relative variance of one sample
    top_var = float(np.max(z.var(axis=0, ddof=1) / top.values**2))
    return {
        "trace": noise.trace,
        "top": top.values,
        "top_converged": bool(top.converged),
        "trace_s": (trace_cold, trace_warm),
        "top_s": (top_cold, top_warm),
        "samples": len(G),
        "t_sample": t_sample,
        "trace_z": float(trace_z),
        "top_z": float(np.max(top_z)),
        "mc": {
            what: [{"eps": e, "S": math.ceil(rel / e**2), "T": math.ceil(rel / e**2) * t_sample} for e in EPS]
            for what, rel in (("trace", trace_var), ("top", top_var))
        },
    }


def sgd_probe(case: Case, seeds: int, steps: int):
    """jit((η, key) ↦ the seeds' mean ‖θ_t − θ*‖² at T/2 and T): S runs of minibatch SGD from θ*, B examples a step."""
    star, unravel = ravel_pytree(case.theta_star)

    def loss(flat, x):
        return jnp.mean(jax.vmap(case.prob.example_loss, in_axes=(None, 0))(unravel(flat), x))

    def run(eta, key):
        def step(v, k):
            v = v - eta * jax.grad(loss)(v, case.sample(k, BATCH))
            return v, jnp.sum((v - star) ** 2)

        return jax.lax.scan(step, star, jax.random.split(key, steps))[1]

    def probe(eta, key):
        sq = jax.vmap(run, in_axes=(None, 0))(eta, jax.random.split(key, seeds))
        return jnp.mean(sq[:, steps // 2 - 1]), jnp.mean(sq[:, -1])

    return jax.jit(probe)


def bisection(case: Case, top: float, seeds: int, steps: int, probes: int) -> dict:
    """The Monte-Carlo search for η*(B) over [0, ``top``]: ``probes`` probes of ``sgd_probe``; its seconds without
    compilation, the located η̂ and the final bracket."""
    probe = sgd_probe(case, seeds, steps)
    jax.block_until_ready(probe(0.5 * top, jax.random.PRNGKey(0)))  # compile once (η is an argument)
    lo, hi = 0.0, top
    t0 = time.perf_counter()
    for k in range(probes):
        mid = (lo + hi) / 2
        half, end = (float(v) for v in probe(mid, jax.random.PRNGKey(100 + k)))
        stable = math.isfinite(end) and end <= 2 * half
        lo, hi = (mid, hi) if stable else (lo, mid)
    seconds = time.perf_counter() - t0
    return {"eta": (lo + hi) / 2, "bracket": (lo, hi), "seconds": seconds, "unit": seconds / (probes * seeds * steps)}


def threshold_part(case: Case, seeds: int, steps: int, probes: int) -> dict:
    """Part 3: the exact η*(B) (cold, warm) and curve, the bisection's η̂ and time, and its extrapolation to ε."""

    def exact():
        return popdyn.mean_square_stability(case.prob, case.theta_star, BATCH, case.replace)

    found, cold, warm = cold_warm(exact)
    curve, curve_cold, curve_warm = cold_warm(lambda: threshold_curve(case.prob, case.theta_star, BATCH, case.replace))
    eta, lam = float(found.thresholds[0]), found.sharpness
    mc = bisection(case, 2.0 / lam, seeds, steps, probes)
    extrapolated = []
    for e in EPS:
        P = math.ceil(math.log2(2.0 / (lam * eta * e)))
        T = math.ceil(math.log(2.0) / (2.0 * lam * eta * e))
        extrapolated.append({"eps": e, "P": P, "T": T, "seconds": P * seeds * T * mc["unit"]})
    return {
        "eta": eta,
        "gd": found.gd_threshold,
        "s": (cold, warm),
        "curve": curve,
        "curve_s": (curve_cold, curve_warm),
        "mc": mc,
        "seeds": seeds,
        "steps": steps,
        "probes": probes,
        "extrapolated": extrapolated,
    }


def noise_lines(case: Case, r: dict) -> list[str]:
    """The Σ table of one model: exact cold and warm, the MC pilot, and S(ε) with its time per ε."""
    out = [
        f"**{case.name}**, Σ at a generic θ: tr Σ = {r['trace']:.6g}; top {TOP} eigenvalues "
        f"{', '.join(f'{v:.4g}' for v in r['top'])} (converged: {r['top_converged']}). Monte-Carlo pilot: "
        f"{r['samples']:,} sampled examples, {1e6 * r['t_sample']:.3f} µs per example's gradient (warm, sampling "
        f"included); exact tr Σ at {r['trace_z']:.2f} SE of the pilot's estimate, the top eigenvalues at ≤ "
        f"{r['top_z']:.2f} SE.",
        "",
        "| quantity | exact cold | exact warm | ε | MC samples S(ε) | MC time | MC ÷ exact warm |",
        "|---|---|---|---|---|---|---|",
    ]
    for what, label, (cold, warm) in (("trace", "tr Σ", r["trace_s"]), ("top", f"top {TOP} eigenvalues", r["top_s"])):
        for row in r["mc"][what]:
            out.append(
                f"| {label} | {fmt_time(cold)} | {fmt_time(warm)} | {row['eps']:g} | {fmt_n(row['S'])} | "
                f"{fmt_time(row['T'])} | {fmt_ratio(row['T'] / warm)} |"
            )
    return [*out, ""]


def threshold_lines(case: Case, r: dict) -> list[str]:
    """The η*(B) table of one model: exact, the curve, the measured bisection and its extrapolation."""
    mc, curve = r["mc"], r["curve"]
    lo, hi = mc["bracket"]
    out = [
        f"**{case.name}**, η*(B) at the minimum, B = {BATCH} "
        f"({'with replacement' if case.replace else 'online draws'}): exact η*(B) = {r['eta']:.6g}, 2/λ_max = "
        f"{r['gd']:.6g}; `mean_square_stability` {fmt_time(r['s'][0])} cold, {fmt_time(r['s'][1])} warm; the "
        f"curve of {len(curve.batches)} batch sizes (`threshold_curve`) {fmt_time(r['curve_s'][0])} cold, "
        f"{fmt_time(r['curve_s'][1])} warm. Measured bisection: {r['probes']} probes × {r['seeds']} seeds × "
        f"{r['steps']} steps in {fmt_time(mc['seconds'])} ({1e6 * mc['unit']:.2f} µs per run-step), η̂ = "
        f"{mc['eta']:.4g} (bracket [{lo:.4g}, {hi:.4g}]), {100 * (mc['eta'] / r['eta'] - 1):+.1f}% from η*(B).",
        "",
        "| ε | probes P(ε) | steps T(ε) ≥ | seeds | MC time ≥ | ÷ exact warm |",
        "|---|---|---|---|---|---|",
    ]
    for row in r["extrapolated"]:
        out.append(
            f"| {row['eps']:g} | {row['P']} | {fmt_n(row['T'])} | {r['seeds']} | {fmt_time(row['seconds'])} | "
            f"{fmt_ratio(row['seconds'] / r['s'][1])} |"
        )
    return [*out, ""]


def headline_rows(case: Case, noise: dict, stab: dict) -> list[dict]:
    """The run_all rows of one model at ε = 1e-3: tr Σ, and η*(B) against the bisection's extrapolation."""
    trace, thr = noise["mc"]["trace"][0], stab["extrapolated"][0]
    return [
        headline_row(
            "sgd-noise",
            f"tr Σ(θ) at relative SE ε = {trace['eps']:g}; {case.name}",
            "`gradient_noise(prob, θ).trace`",
            noise["trace_s"][1],
            f"MC, {fmt_n(trace['S'])} sampled gradients",
            trace["T"],
            primary=case.replace is True,
        ),
        headline_row(
            "sgd-noise",
            f"η*(B = {BATCH}) to relative ε = {thr['eps']:g}; {case.name}",
            "`mean_square_stability`",
            stab["s"][1],
            f"bisection, {thr['P']} probes × {stab['seeds']} seeds × {fmt_n(thr['T'])} SGD steps",
            thr["seconds"],
            note="baseline extrapolated from a measured run (a lower bound)",
        ),
    ]


def main(argv=None) -> int:
    args = quick_or_full(__doc__, "n = 4,096 and d = 8, 40,000 samples, 16 seeds × 100 steps × 6 probes", argv)
    command, date, info = run_header(SCRIPT, argv)
    t_start = time.perf_counter()
    n, d, samples = (4096, 8, 40_000) if args.quick else (16_384, 16, 400_000)
    seeds, steps, probes = (16, 100, 6) if args.quick else (64, 400, 10)
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` ({date}) in one run: the exact Σ(θ) and η*(B) of popdyn against the Monte Carlo of "
        "equal precision (module docstring: S(ε) from the measured variance of a pilot, extrapolated by 1/√S; the "
        "bisection of SGD ensembles extrapolated as a lower bound). Exact values are accurate to float64 rounding.",
        "",
    ]
    rows, checks = [], []
    for case in (table_case(n, d), teacher_case()):
        noise = noise_part(case, samples)
        stab = threshold_part(case, seeds, steps, probes)
        print(f"{case.name}: tr Σ {noise['trace']:.6g}, η*(B) {stab['eta']:.6g}, bisection {stab['mc']['eta']:.4g}")
        lines += noise_lines(case, noise) + threshold_lines(case, stab)
        rows += headline_rows(case, noise, stab)
        curve = stab["curve"].thresholds
        checks += [
            (f"{case.name}: exact tr Σ within {COVERAGE_SE:g} SE of the MC pilot", noise["trace_z"] <= COVERAGE_SE),
            (f"{case.name}: exact top eigenvalues within {COVERAGE_SE:g} SE", noise["top_z"] <= COVERAGE_SE),
            (
                f"{case.name}: η*(B) non-decreasing in B and ≤ 2/λ_max",
                bool(np.all(np.diff(curve) >= 0) and np.all(curve <= stab["gd"])),
            ),
        ]
    lines += [
        "The bisection's η̂ rests on a few runs per probe: near η*(B) the mean square of an ensemble is carried by rare "
        "runs (notebooks/sgd.ipynb), so its error above comes from its decisions, not from its bracket, and its "
        "extrapolated cost is a lower bound (seeds held at S₀, the fastest possible growth per step).",
        "",
        f"Load average at the start of the run: {info.get('load_avg', 'unknown')} on {info['cpu_count']} cores (a "
        "shared machine: absolute times are inflated; both sides of a row ran under the same load).",
        "",
        "Checks: " + "; ".join(f"{name}: {'PASS' if ok else '**FAIL**'}" for name, ok in checks) + ".",
    ]
    wall = time.perf_counter() - t_start
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, wall, rows, checks)
    publish(finish_section(lines, info), HEADING, args.results, head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
