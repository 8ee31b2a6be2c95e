"""Benchmark: exact loss + gradient of the full Markov transformer against a Monte-Carlo estimate of the same gradient.

What it measures
----------------
The model is ``popdyn.tasks.markov.Transformer(Chain.binary(p, q), N, d)`` (default p = 0.2, q = 0.3, N = 12,
d = 8: one layer, one head, tied binary head). Its exact population loss L(θ) = (1/N) Σ_n E[CE(x_{n+1}, logits_n)]
is a sum over all 2^N sequences; ``jax.jit(jax.value_and_grad(model.loss))`` gives L and ∇L exactly (up to float64
rounding).

The baseline is what a researcher writes today: draw B sequences x_1..x_{N+1} from the chain
(``popdyn.exact.sample``), take the per-sequence loss ℓ(θ; x) = (1/N) Σ_{n=1..N} −log softmax(logits(θ, x_{1..N}))
[n, x_{n+1}], average over the batch and differentiate the batch mean with ``jax.jit(jax.value_and_grad(...))``
(compiled once per batch size). E[ℓ] = L, so the batch gradient ĝ_B is an unbiased estimate of ∇L.

"Equal standard error" — the definition used. Let Var_i be the variance of coordinate i of the single-sequence
gradient ∇ℓ(θ; x), x drawn from the chain. The mean squared error of ĝ_B is

    E‖ĝ_B − ∇L‖² = Σ_i Var_i / B,   RMSE(B) = sqrt(Σ_i Var_i / B).

The exact gradient's error is float64 rounding only, so "MC with the same standard error" is astronomically
expensive; instead, for each target relative precision ε (default 1e-2, 1e-3, 1e-4, 1e-6) the script reports the
batch size at which the Monte-Carlo gradient's RMSE equals ε‖∇L‖,

    B(ε) = Σ_i Var_i / (ε ‖∇L‖)²,

the Monte-Carlo time to compute that gradient, T_MC(ε) = B(ε) · t_seq (t_seq: the measured warm time per sequence
of the jitted batch gradient at a large batch, default 4096; sampling the sequences is timed separately and NOT
included, which favours Monte Carlo), and the cost ratio T_MC(ε) / T_exact. It also reports the break-even
precision ε* at which T_MC = T_exact (MC is cheaper only for ε > ε*).

Steps, for each of two parameter points — GPT-2 init (std 0.02, ``model.init(PRNGKey(seed))``) and a
"trained-like" random point (the same initialiser with std 0.5):

1. Exact L and ∇L: AOT compile time (``jit(...).lower(θ).compile()``, once) reported separately; warm time =
   median of --repeats (default 11) calls, each ``block_until_ready``.
2. MC time per sequence: compile for the timing batch size (once), then median of --repeats warm calls on
   device-resident data ÷ batch size.
3. Variance: K independent batches of b0 sequences (default K = 512, b0 = 256; fixed NumPy seed). Var_i is the
   sample variance of coordinate i over the K·b0 single-sequence gradients (``vmap(value_and_grad(ℓ))`` on each
   batch). Cross-check: Var_i ≈ b0 · s_i², s_i² the sample variance of the K batch-mean gradients (same sequences,
   only K − 1 degrees of freedom, so noisier); both sums Σ_i Var_i are printed and recorded, and, for N + 1 ≤ 16,
   so is the exact Σ_i Var_i = E‖∇ℓ‖² − ‖∇L‖², an expectation over all 2^(N+1) sequences (a check only).
4. Correctness check of both the exact gradient and the MC estimator: the mean of the K batch gradients must agree
   with the exact ∇L within 4 standard errors (s_i / √K) for ≥ 99% of the coordinates (and the MC loss mean with the
   exact loss within 4 SE). PASS/FAIL is printed and recorded.

Timings are on whatever JAX backend is the default (the CPU here), float64 throughout.

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.markov_full_mc                    # N = 12, d = 8; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.markov_full_mc --quick            # N = 8, K = 32 batches of 128; writes nothing
    python -m benchmarks.markov_full_mc --quick --results /tmp/r.md
Options: --N, --d, --p, --q, --batches K, --batch b0, --time-batch, --repeats, --eps E [E ...], --seed,
--results PATH. The section written is "## Markov full model: exact gradient vs Monte Carlo" (other sections of the
file are kept); the headline figures for ``benchmarks.run_all``'s summary go to
``benchmarks/results/markov_full_mc.json``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from benchmarks._common import (
    COVERAGE_MIN,
    COVERAGE_SE,
    REPO,
    aot,
    at_eps,
    finish_section,
    fmt_n,
    fmt_ratio,
    fmt_time,
    headline_row,
    make_headline,
    parser,
    publish,
    run_header,
    warm_times,
)
from popdyn.exact import Chain, sample
from popdyn.tasks.markov import Transformer

SECTION = "## Markov full model: exact gradient vs Monte Carlo"
EXACT_VAR_MAX_LEN = 16  # enumerate all 2^(N+1) sequences for the exact Σ_i Var_i check while N + 1 ≤ this
POINTS = (("GPT-2 init (std 0.02)", 0.02), ("trained-like (std 0.5)", 0.5))


# ---------------------------------------------------------------------------------------------------------------
# One parameter point
# ---------------------------------------------------------------------------------------------------------------
def bench_point(label: str, std: float, model: Transformer, fns: dict, args, rng: np.random.Generator) -> dict:
    N = model.N
    theta = Transformer(model.chain, N, model.d, init_std=std).init(jax.random.PRNGKey(args.seed))
    P = ravel_pytree(theta)[0].size
    print(f"\n=== {label}: θ = init(PRNGKey({args.seed})) with std {std:g}; {P} parameters ===", flush=True)

    # ---- exact ----------------------------------------------------------------------------------------------
    exact_c = fns["exact"]
    t_ex = warm_times(exact_c, theta, repeats=args.repeats)
    L, g = exact_c(theta)
    L = float(L)
    g = np.asarray(ravel_pytree(g)[0])
    gnorm = float(np.linalg.norm(g))
    exact_s = float(np.median(t_ex))
    print(
        f"exact: L = {L:.12f}, ‖∇L‖ = {gnorm:.6e}; warm median "
        f"{fmt_time(exact_s)} (min {fmt_time(t_ex.min())}, {args.repeats} runs, {model.n_sequences} sequences)",
        flush=True,
    )

    # ---- MC time per sequence ---------------------------------------------------------------------------------
    bt = args.time_batch
    t0 = time.perf_counter()
    Xt = sample(model.chain, bt, N + 1, rng)
    sample_s = time.perf_counter() - t0
    Xt_dev = jax.device_put(jnp.asarray(Xt))
    mc_c = fns["mc_time"]
    t_mc = warm_times(mc_c, theta, Xt_dev, repeats=args.repeats)
    mc_batch_s = float(np.median(t_mc))
    t_seq = mc_batch_s / bt
    print(
        f"MC gradient, batch {bt}: warm median {fmt_time(mc_batch_s)} "
        f"(min {fmt_time(t_mc.min())}) → {t_seq * 1e6:.3f} µs/sequence; sampling {bt} sequences with "
        f"popdyn.exact.sample: {fmt_time(sample_s)} ({sample_s / bt * 1e6:.3f} µs/sequence, not counted)",
        flush=True,
    )

    # ---- variance from K batches of b0 -----------------------------------------------------------------------
    K, b0 = args.batches, args.batch
    batch_c, perseq_c = fns["mc_batch"], fns["per_seq"]
    G = np.empty((K, P))
    Lb = np.empty(K)
    s1, s2 = np.zeros(P), np.zeros(P)  # per-sequence gradient sums
    l1 = l2 = 0.0  # per-sequence loss sums
    t0 = time.perf_counter()
    for k in range(K):
        X = jnp.asarray(sample(model.chain, b0, N + 1, rng))
        lk, gk = batch_c(theta, X)
        G[k] = np.asarray(ravel_pytree(gk)[0])
        Lb[k] = float(lk)
        ls, gs = perseq_c(theta, X)
        gs = np.concatenate([np.asarray(v).reshape(b0, -1) for v in jax.tree_util.tree_leaves(gs)], axis=1)
        ls = np.asarray(ls)
        s1 += gs.sum(0)
        s2 += (gs**2).sum(0)
        l1 += ls.sum()
        l2 += (ls**2).sum()
    var_wall = time.perf_counter() - t0
    n_tot = K * b0
    var_direct = (s2 - s1**2 / n_tot) / (n_tot - 1)  # per-sequence variance from the K·b0 single-sequence gradients
    var_batch = b0 * G.var(axis=0, ddof=1)  # the same from the spread of the K batch means (K − 1 dof: cross-check)
    sum_var = float(var_direct.sum())
    sum_var_batch = float(var_batch.sum())
    loss_var = (l2 - l1**2 / n_tot) / (n_tot - 1)

    # ---- correctness: MC mean vs exact -------------------------------------------------------------------------
    g_mean = G.mean(0)
    se = G.std(axis=0, ddof=1) / math.sqrt(K)
    z = np.abs(g_mean - g) / np.where(se > 0, se, np.inf)
    z = np.where((se == 0) & (g_mean != g), np.inf, z)
    frac = float(np.mean(z <= COVERAGE_SE))
    loss_se = float(Lb.std(ddof=1) / math.sqrt(K))
    loss_z = abs(float(Lb.mean()) - L) / loss_se
    ok = frac >= COVERAGE_MIN and loss_z <= COVERAGE_SE
    rel_err_mean = float(np.linalg.norm(g_mean - g) / gnorm)
    rel_err_pred = math.sqrt(sum_var / n_tot) / gnorm
    sum_var_exact = loss_var_exact = None
    if "exact_var" in fns:
        sum_var_exact, loss_var_exact = (float(v) for v in fns["exact_var"](theta))
    print(
        f"variance: {K} batches × {b0} sequences ({fmt_time(var_wall)}); Σ_i Var_i = {sum_var:.6e} (per-sequence "
        f"gradients), {sum_var_batch:.6e} (spread of the {K} batch gradients; ratio {sum_var_batch / sum_var:.3f}); "
        f"relative single-sequence RMSE sqrt(ΣVar)/‖∇L‖ = {math.sqrt(sum_var) / gnorm:.4g}"
        + (
            ""
            if sum_var_exact is None
            else f"; exact Σ_i Var_i by enumerating all {2 ** (N + 1)} sequences: "
            f"{sum_var_exact:.6e} (estimate/exact {sum_var / sum_var_exact:.4f}), exact Var ℓ {loss_var_exact:.4e} "
            f"(estimate/exact {loss_var / loss_var_exact:.4f})"
        ),
        flush=True,
    )
    print(
        f"check: MC mean of {n_tot} sequences vs exact ∇L: {frac * 100:.2f}% of {P} coordinates within "
        f"{COVERAGE_SE:g} SE (max |z| = {z.max():.2f}); ‖mean − ∇L‖/‖∇L‖ = {rel_err_mean:.3e} (expected "
        f"≈ {rel_err_pred:.3e}); loss: MC {Lb.mean():.6f} ± {loss_se:.1e} vs exact {L:.6f} (|z| = {loss_z:.2f}) "
        f"→ [{'PASS' if ok else 'FAIL'}]",
        flush=True,
    )

    # ---- cost table -----------------------------------------------------------------------------------------------
    rows = []
    for eps in args.eps:
        B = sum_var / (eps * gnorm) ** 2
        B_int = max(1, math.ceil(B))
        T = B_int * t_seq
        rows.append({"eps": eps, "B": B_int, "T": T, "ratio": T / exact_s})
        print(
            f"  ε = {eps:g}: B = {fmt_n(B_int)} sequences, MC {fmt_time(T)} vs exact {fmt_time(exact_s)} → "
            f"ratio MC/exact {fmt_ratio(T / exact_s)}",
            flush=True,
        )
    eps_star = math.sqrt(sum_var * t_seq / exact_s) / gnorm  # T_MC(ε*) = T_exact
    B_star = exact_s / t_seq
    # batch at which the MC loss's standard error equals float64 rounding of L (ulp-level relative precision)
    B_loss_fp64 = loss_var / (np.finfo(np.float64).eps * abs(L)) ** 2
    print(
        f"  break-even: ε* = {eps_star:.3g} (B = {B_star:,.0f} sequences take the exact time; MC is cheaper only "
        f"for relative RMSE > ε*); loss SE = float64 eps·L needs B ≈ {B_loss_fp64:.2g}",
        flush=True,
    )
    return {
        "label": label,
        "std": std,
        "P": P,
        "L": L,
        "gnorm": gnorm,
        "exact_s": exact_s,
        "exact_min": float(t_ex.min()),
        "t_seq": t_seq,
        "mc_batch_s": mc_batch_s,
        "sample_seq": sample_s / bt,
        "sum_var": sum_var,
        "sum_var_batch": sum_var_batch,
        "loss_var": loss_var,
        "frac": frac,
        "zmax": float(z.max()),
        "loss_z": loss_z,
        "ok": ok,
        "rel_err_mean": rel_err_mean,
        "rel_err_pred": rel_err_pred,
        "sum_var_exact": sum_var_exact,
        "rows": rows,
        "eps_star": eps_star,
        "B_star": B_star,
        "B_loss_fp64": float(B_loss_fp64),
        "var_wall": var_wall,
    }


# ---------------------------------------------------------------------------------------------------------------
# RESULTS.md
# ---------------------------------------------------------------------------------------------------------------
def render(results: list[dict], compile_s: dict, info: dict, args, command: str, date: str, total: float) -> str:
    N, d = args.N, args.d
    out = [SECTION, ""]
    out.append(f"Written by `python -m benchmarks.markov_full_mc` on {date} (total run {total:.0f} s).  ")
    out.append(f"Command: `{command}`")
    out.append("")
    out.append(
        f"Model: `Transformer(Chain.binary({args.p:g}, {args.q:g}), N={N}, d={d})` ({results[0]['P']} parameters); "
        f"exact loss = sum over all 2^{N} = {2**N:,} sequences, `jit(value_and_grad(model.loss))`. "
        f"Monte Carlo (baseline): B sequences of length N+1 from `popdyn.exact.sample`, per-sequence loss "
        f"(1/N) Σ_n −log softmax(logits(θ, x_1..N))[n, x_(n+1)], `jit(value_and_grad)` of the batch mean. "
        f"float64, default JAX backend (CPU). Exact time: median of {args.repeats} warm calls; compile (AOT "
        f"lower+compile) reported separately. MC µs/sequence: median of {args.repeats} warm calls at batch "
        f"{args.time_batch} ÷ {args.time_batch} (sampling the sequences excluded, which favours MC)."
    )
    out.append("")
    out.append(
        "*Equal standard error*: with Var_i the variance of coordinate i of one sequence's gradient, the batch "
        "gradient's mean squared error is E‖ĝ_B − ∇L‖² = Σ_i Var_i / B. For a target relative precision ε, "
        "**B(ε) = Σ_i Var_i / (ε‖∇L‖)²** is the batch whose RMSE equals ε‖∇L‖; MC time = B(ε) × µs/sequence "
        "(extrapolated linearly from the timing batch); ratio = MC time / exact time. Var_i is the sample "
        f"variance of {args.batches * args.batch:,} single-sequence gradients ({args.batches} independent batches "
        f"of {args.batch}; `vmap(value_and_grad)` of the per-sequence loss); the estimate b0·s_i² from the spread "
        f"of the {args.batches} batch-mean gradients is given as a cross-check below. "
        "ε* is the break-even precision (MC time = exact time at ε*; MC is cheaper only for coarser ε). The exact "
        "gradient itself is accurate to float64 rounding."
    )
    out.append("")
    out.append(
        f"Compile (AOT `jit(...).lower(θ).compile()`, once, shared by both points): exact loss+gradient "
        f"{fmt_time(compile_s['exact'])}; MC batch loss+gradient (batch {args.time_batch}) "
        f"{fmt_time(compile_s['mc'])}."
    )
    out.append("")
    out.append(
        "| point | L | ‖∇L‖ | exact warm (median / min) | MC µs/sequence | MC batch of "
        f"{args.time_batch} | Σ Var_i | sqrt(ΣVar)/‖∇L‖ | ε* (break-even) | B at break-even |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        out.append(
            f"| {r['label']} | {r['L']:.6f} | {r['gnorm']:.4e} | {r['exact_s'] * 1e3:.2f} / "
            f"{r['exact_min'] * 1e3:.2f} ms | {r['t_seq'] * 1e6:.3f} | {fmt_time(r['mc_batch_s'])} | "
            f"{r['sum_var']:.4e} | {math.sqrt(r['sum_var']) / r['gnorm']:.4g} | {r['eps_star']:.3g} | "
            f"{r['B_star']:,.0f} |"
        )
    out.append("")
    out.append("| point | ‖∇L‖ | exact ms | MC µs/sequence | ε | B(ε) | MC time | ratio MC/exact |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in results:
        for row in r["rows"]:
            out.append(
                f"| {r['label']} | {r['gnorm']:.4e} | {r['exact_s'] * 1e3:.2f} | {r['t_seq'] * 1e6:.3f} | "
                f"{row['eps']:g} | {fmt_n(row['B'])} | {fmt_time(row['T'])} | {fmt_ratio(row['ratio'])} |"
            )
    out.append("")
    out.append(
        f"Checks (MC mean of {args.batches}×{args.batch} sequences vs the exact values; pass: ≥ "
        f"{COVERAGE_MIN:.0%} of gradient coordinates and the loss within {COVERAGE_SE:g} standard errors):"
    )
    out.append("")
    for r in results:
        out.append(
            f"- {r['label']}: {'PASS' if r['ok'] else '**FAIL**'} — {r['frac'] * 100:.2f}% of {r['P']} coordinates "
            f"within {COVERAGE_SE:g} SE (max |z| {r['zmax']:.2f}); ‖mean − ∇L‖/‖∇L‖ = {r['rel_err_mean']:.2e} "
            f"(predicted from ΣVar: {r['rel_err_pred']:.2e}); loss |z| = {r['loss_z']:.2f}. Σ_i Var_i from the "
            f"batch spread {r['sum_var_batch']:.4e} vs per-sequence {r['sum_var']:.4e} (ratio "
            f"{r['sum_var_batch'] / r['sum_var']:.3f})"
            + (
                ""
                if r["sum_var_exact"] is None
                else f"; exact Σ_i Var_i = E‖∇ℓ‖² − ‖∇L‖² by enumerating all "
                f"2^{N + 1} sequences: {r['sum_var_exact']:.4e} (estimate/exact "
                f"{r['sum_var'] / r['sum_var_exact']:.4f})"
            )
            + f". Sampling costs a further {r['sample_seq'] * 1e6:.2f} "
            f"µs/sequence (not counted). MC loss standard error = float64 eps·L would need B ≈ "
            f"{r['B_loss_fp64']:.1g} sequences."
        )
    return finish_section(out, info)


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--N", type=int, default=None, help="sequence length (default 12; --quick: 8)")
    ap.add_argument("--d", type=int, default=8, help="model width (default 8)")
    ap.add_argument("--p", type=float, default=0.2)
    ap.add_argument("--q", type=float, default=0.3)
    ap.add_argument("--batches", type=int, default=None, help="K batches for the variance (default 512; --quick 32)")
    ap.add_argument("--batch", type=int, default=None, help="b0 sequences per batch (default 256; --quick 128)")
    ap.add_argument("--time-batch", type=int, default=None, help="MC timing batch (default 4096; --quick 1024)")
    ap.add_argument("--repeats", type=int, default=11, help="warm timing repeats (≥ 5; default 11)")
    ap.add_argument(
        "--eps",
        type=float,
        nargs="+",
        default=[1e-2, 1e-3, 1e-4, 1e-6],
        help="target relative RMSE levels (default 1e-2 1e-3 1e-4 1e-6)",
    )
    ap.add_argument("--seed", type=int, default=0, help="PRNGKey of θ and NumPy seed of the samples")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="N = 8, 32 batches of 128, timing batch 1024; writes no results unless --results",
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file to update (default benchmarks/RESULTS.md; with --quick: none)",
    )
    args = ap.parse_args(argv)
    if args.N is None:
        args.N = 8 if args.quick else 12
    if args.batches is None:
        args.batches = 32 if args.quick else 512
    if args.batch is None:
        args.batch = 128 if args.quick else 256
    if args.time_batch is None:
        args.time_batch = 1024 if args.quick else 4096
    if args.results is None and not args.quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    if args.repeats < 5 or args.batches < 2 or args.batch < 1 or args.time_batch < 1:
        ap.error("need --repeats ≥ 5, --batches ≥ 2, --batch ≥ 1, --time-batch ≥ 1")
    if any(e <= 0 for e in args.eps):
        ap.error("--eps values must be positive")
    return args


def exact_variance(model: Transformer, seq_loss):
    """θ ↦ (Σ_i Var_i, Var ℓ) of the single-sequence MC estimator, by enumerating all 2^(N+1) sequences x_1..x_{N+1}:
    Σ_i Var_i = E‖∇ℓ‖² − ‖E∇ℓ‖² (chunked scan; a check of the sampled estimate, not used for B(ε))."""
    N, V = model.N, model.chain.V
    total = V ** (N + 1)
    chunk = min(total, 1024)
    powers = V ** jnp.arange(N, -1, -1)
    one = jax.value_and_grad(seq_loss)

    def fn(theta):
        P = ravel_pytree(theta)[0].size

        def body(acc, c):
            X = ((c * chunk + jnp.arange(chunk))[:, None] // powers[None, :]) % V
            w = jnp.exp(jax.vmap(model.chain.log_weight)(X))
            ls, gs = jax.vmap(one, in_axes=(None, 0))(theta, X)
            G = jax.vmap(lambda t: ravel_pytree(t)[0])(gs)
            sg, sg2, sl, sl2 = acc
            return (sg + w @ G, sg2 + w @ jnp.sum(G**2, axis=1), sl + w @ ls, sl2 + w @ ls**2), None

        zero = jnp.zeros((), jnp.result_type(float))
        (sg, sg2, sl, sl2), _ = jax.lax.scan(body, (jnp.zeros(P), zero, zero, zero), jnp.arange(total // chunk))
        return sg2 - sg @ sg, sl2 - sl**2

    return fn


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header("markov_full_mc", argv)

    model = Transformer(Chain.binary(args.p, args.q), N=args.N, d=args.d)
    N = model.N

    def seq_loss(theta, x):  # x: (N+1,) sampled tokens; ℓ = (1/N) Σ_n −log softmax(logits_n)[x_{n+1}]
        lp = jax.nn.log_softmax(model.logits(theta, x[:N]), axis=-1)
        return -jnp.mean(lp[jnp.arange(N), x[1:]])

    def mc_loss(theta, X):
        return jnp.mean(jax.vmap(seq_loss, in_axes=(None, 0))(theta, X))

    # compile everything once (AOT, same shapes and dtypes for both parameter points)
    theta0 = model.init(jax.random.PRNGKey(args.seed))

    def Xspec(b):  # popdyn.exact.sample returns int64 arrays (kept int64 by x64)
        return jax.ShapeDtypeStruct((b, N + 1), jnp.int64)

    t0 = time.perf_counter()
    fns, compile_s = {}, {}
    fns["exact"], compile_s["exact"] = aot(jax.value_and_grad(model.loss), theta0)
    fns["mc_time"], compile_s["mc"] = aot(jax.value_and_grad(mc_loss), theta0, Xspec(args.time_batch))
    fns["mc_batch"], _ = aot(jax.value_and_grad(mc_loss), theta0, Xspec(args.batch))
    fns["per_seq"], _ = aot(jax.vmap(jax.value_and_grad(seq_loss), in_axes=(None, 0)), theta0, Xspec(args.batch))
    if N + 1 <= EXACT_VAR_MAX_LEN:
        fns["exact_var"], _ = aot(exact_variance(model, seq_loss), theta0)
    print(
        f"\ncompile (AOT lower + compile): exact loss+grad {fmt_time(compile_s['exact'])}; MC batch loss+grad "
        f"(batch {args.time_batch}) {fmt_time(compile_s['mc'])}",
        flush=True,
    )
    rng = np.random.default_rng(args.seed)
    results = [bench_point(label, std, model, fns, args, rng) for label, std in POINTS]
    total = time.perf_counter() - t0
    section = render(results, compile_s, info, args, command, date, total)
    publish(section, SECTION, args.results, headline(results, args, command, date, info, total))
    return 0 if all(r["ok"] for r in results) else 1


def headline(results: list[dict], args, command: str, date: str, info: dict, total: float) -> dict:
    """Headline figures for run_all's summary: exact vs MC at ε = 1e-3 (or the finest ε run) per point; the first
    point (GPT-2 init) is the task's row."""
    rows = []
    for i, r in enumerate(results):
        c = at_eps(r["rows"])
        rows.append(
            headline_row(
                "markov",
                f"exact loss+gradient vs Monte Carlo at gradient RMSE ε‖∇L‖, ε = {c['eps']:g}; {r['label']}, "
                f"N = {args.N}",
                f"`value_and_grad(model.loss)` over 2^{args.N} sequences",
                r["exact_s"],
                f"MC, B(ε) = {fmt_n(c['B'])} sequences",
                c["T"],
                primary=i == 0,
            )
        )
    checks = [(f"{r['label']}: exact loss and gradient within 4 SE of the MC mean", r["ok"]) for r in results]
    return make_headline("markov_full_mc", SECTION, command, date, info, args.quick, total, rows, checks)


if __name__ == "__main__":
    raise SystemExit(main())
