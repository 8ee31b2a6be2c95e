"""Benchmark: decision lists (spec decision_lists.md §3, §5, §6) — popdyn's exact paths against the baselines a
researcher would otherwise write, in the same run.

What it measures (float64 throughout, default JAX backend = the CPU here)
------------------------------------------------------------------------
1. Exact loss + gradient.

   a. Path B (``DecisionList.loss``: enumeration of C(L, n) subsets or C(L+n−1, n) multisets, §3 B) against
      brute force over all L^n sequences (``brute_force_loss``: the model σ(V X σ(XᵀWX)) written literally,
      §3 A), both ``jit(value_and_grad)``, at (L, n) = (8, 4) for distinct tokens and for i.i.d. tokens, at a
      random point θ = (W, V) with i.i.d. N(0, 1) entries (lists ``random_lists(L, M)``, π ``random_perm(L)``).
      The two losses must agree to 1e-12 (asserted); the largest gradient difference is reported. Compile
      (AOT ``jit(...).lower(θ).compile()``) is reported separately from the warm time (median of --repeats
      calls, each ``block_until_ready``).

   b. Larger cases (default (L, n) = (20, 5), 15,504 subsets, and (30, 8), 5,852,925 subsets): path B's
      ``value_and_grad`` — run only if XLA's own estimate of its temporaries (``compiled.memory_analysis()``)
      fits in 80% of the available memory; reverse mode through the chunk ``lax.scan`` keeps every chunk's
      residuals, which at (30, 8) is ~33 GB. Whenever it does not fit, the script also times the same sum with
      the gradient taken chunk by chunk inside the scan (a script-side rewrite with the library's own table and
      per-histogram function; same value to rounding), and the loss alone. If the exact gradient's first call
      exceeds --exact-limit seconds (default 60) the case's warm repeats and Monte Carlo are skipped with a note.

      Baseline: a Monte-Carlo estimate of the same loss and gradient. Sequences are drawn from the law inside
      JAX (a uniform random ordered n-subset: argsort of L uniforms) and labelled (first list entry present,
      then π); the per-sequence loss (1/n) Σ_j −log softmax(V[:, s] A)[y_j, j], A = column-softmax(W[s, s]), is
      averaged and differentiated (``jit(value_and_grad)``, batch --mc-batch). From a pilot of --pilot
      single-sequence losses and gradients (``vmap(value_and_grad)``) it estimates Var ℓ and Σ_i Var_i, then
      for each ε in --eps the number of sequences needed for

      * *loss criterion*: the standard error of the loss estimate = ε·ℒ, B = Var ℓ / (εℒ)²;
      * *gradient criterion*: the RMSE of the gradient estimate = ε‖∇ℒ‖, B = Σ_i Var_i / (ε‖∇ℒ‖)².

      MC time = B × (warm time of one batch ÷ batch size), with the in-JAX sampling included (the
      sampling-excluded time, on pre-drawn device-resident sequences, is reported too); ratio = MC time ÷
      exact warm time. Whenever that time is at most --mc-cap seconds the MC estimate is actually run
      (⌈B/batch⌉ fresh batches) and its achieved errors against the exact values are reported. The pilot is also
      a check of the exact values where brute force is out of reach: the exact loss must lie within 4 standard
      errors of the pilot mean, and ≥ 99% of the gradient coordinates too.

2. Theorem 1's T* (§5): ``theorem1_run(L, n, M, c)`` (the reduced flow on (w, u = √(L−m)·ω), Tsit5
   rtol 1e-10, + ``first_passage`` on 4000 log-spaced records) against the spec's baseline: for each list length
   m the reduced ODE dw_i/dt = −∂ℒ_m/∂w_i, dω/dt = −(1/(L−m))·∂ℒ_m/∂ω with ℒ_m = ``column_loss`` (jitted JAX
   gradient as the right-hand side) integrated by ``scipy.integrate.solve_ivp(method="LSODA", rtol=1e-9,
   atol=1e-12, dense_output=True)`` over the same horizon t1, T* located by bisection (to relative 1e-12) on the
   PC condition w_1 > … > w_m > ω (exact for distinct tokens with n ≥ 3, L ≥ n+M−1, §4) through the dense
   output. A tighter reference (DOP853, rtol 1e-13, atol 1e-15, integrated to 1.5·T*) arbitrates the
   difference. Cases: (10, 3, 3, c = 10) and (20, 5, 3, c = 20) (spec reference values) and (30, 8, 3) at
   the theorem's c = 4n·log L/δ. Cold = first call in the process (compile included); warm = median of 5.

3. Theorem 2's λ_max(θ₀) over random draws (§6): for (L, n, m) = (32, 29, 2) and (23, 20, 1), θ₀ built exactly as
   ``theorem2_run`` does (``theorem2_instance``; ``DecisionList(L, n, random_lists(L, m, seed),
   random_perm(L, seed), c=c, init_eps=ε)``; ``prob.init(PRNGKey(seed))``: W₀ = 0, V₀ = cP + U(−ε/2, ε/2)) for
   seeds 0..--t2-seeds−1, λ_max by ``popdyn.lambda_max(prob, θ₀, iters=--lanczos-iters)`` (Lanczos on exact
   Hessian-vector products; 2L² > 512 parameters). Reports min/median/max, where the spec's value falls, and
   λ_max at V₀ = cP exactly (seed-0 lists). Each seed has its own lists, which are static in the compiled
   function, so every seed's time includes a compile; the V₀ = cP call reuses seed 0's and is warm.
   Baseline cross-check for seed 0: ``scipy.sparse.linalg.eigsh(k=1, which="LA", tol=1e-10)`` on a
   ``LinearOperator`` of the jitted exact Hessian-vector product.

How to run (from the repository root, on a quiet machine)
--------------------------------------------------------
    python -m benchmarks.decision_lists            # ~10 min on 2 cores; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.decision_lists --quick    # (20, 5) only for MC, 3 seeds, no (32,29,2) eigsh; writes nothing
    python -m benchmarks.decision_lists --quick --results /tmp/r.md
Options: --mc-cases, --eps, --pilot, --mc-batch, --mc-cap, --exact-limit, --repeats, --t2-seeds,
--lanczos-iters, --no-eigsh, --seed, --results PATH. The section written is
"## Decision lists: exact paths, Theorem 1 and Theorem 2" (other sections of the file are kept); the headline figures
for ``benchmarks.run_all``'s summary go to ``benchmarks/results/decision_lists.json``.
"""

from __future__ import annotations

import math
import os
import time
from math import comb
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import popdyn
from benchmarks._common import (
    REPO,
    SUMMARY_EPS,
    finish_section,
    fmt_n,
    fmt_time,
    headline_row,
    make_headline,
    parser,
    publish,
    run_header,
)
from benchmarks._common import fmt_ratio as _fmt_ratio
from popdyn.jobs.decision_list import theorem1_run
from popdyn.tasks.decision_list import (
    DecisionList,
    brute_force_loss,
    column_loss,
    random_lists,
    random_perm,
    theorem2_instance,
)

SECTION = "## Decision lists: exact paths, Theorem 1 and Theorem 2"
M_LISTS = 3  # longest list in part 1
BRUTE_CASES = ((8, 4, "distinct"), (8, 4, "iid"))
VALUE_TOL = 1e-12  # |ℒ_pathB − ℒ_brute| ≤ VALUE_TOL·max(1, |ℒ|), asserted
MEMORY_FRACTION = 0.8  # run an XLA program only if its temporaries fit in this fraction of the available memory
COVERAGE_SE, COVERAGE_MIN = 4.0, 0.99
THEOREM1_CASES = ((10, 3, 3, 10.0), (20, 5, 3, 20.0), (30, 8, 3, None))  # c None: the theorem's 4n·log L/δ
THEOREM1_SPEC = {(10, 3, 3, 10.0): {2: 9.888, 3: 6.417}, (20, 5, 3, 20.0): {3: 16.10}, (30, 8, 3, None): {}}
THEOREM1_SPEC_MAX = {(30, 8, 3, None): 0.102}  # spec §5 table: max_m T* at the theorem's c (573.9)
LSODA_RTOL, LSODA_ATOL = 1e-9, 1e-12
REF_RTOL, REF_ATOL = 1e-13, 1e-15
BISECT_RTOL = 1e-12
THEOREM2_CASES = ((32, 29, 2, 1.80e5), (23, 20, 1, 1.20e3))  # (L, n, m, spec λ_max(θ₀))


# ---------------------------------------------------------------------------------------------------------------
# Timing helpers
# ---------------------------------------------------------------------------------------------------------------
def aot(fn, *args):
    """(compiled fn, seconds spent tracing + lowering + compiling, XLA temporaries in bytes or None)."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    secs = time.perf_counter() - t0
    try:
        temp = int(compiled.memory_analysis().temp_size_in_bytes)
    except Exception:  # noqa: BLE001 — memory analysis is backend-dependent; absent means "unknown"
        temp = None
    return compiled, secs, temp


def call_times(fn, *args, repeats: int, budget: float = 30.0, min_total: float = 1.0, max_calls: int = 2000):
    """(first call's seconds, warm seconds array, last output): the first call, then warm calls (each blocked until
    ready): at least ``repeats`` of them — and more, up to ``max_calls``, until they add up to ``min_total`` seconds,
    so that sub-millisecond timings on a loaded machine rest on many samples — but stopping before the total
    would pass ``budget`` seconds (always at least one)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    warm = []
    while not warm or (
        (len(warm) < repeats or sum(warm) < min_total) and len(warm) < max_calls and sum(warm) + warm[-1] <= budget
    ):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        warm.append(time.perf_counter() - t0)
    return first, np.asarray(warm), out


def fmt_ratio(r: float) -> str:
    """markov_full_mc's ratio format, in scientific notation below 1e-3 (where it would print 0.000×)."""
    return f"{r:.1e}×" if 0 < r < 1e-3 else _fmt_ratio(r)


def available_memory() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def fmt_gb(b: int | None) -> str:
    return "?" if b is None else f"{b / 1e9:.2f} GB"


def flat(tree) -> np.ndarray:
    return np.asarray(ravel_pytree(tree)[0])


def random_theta(L: int, seed: int) -> dict:
    """θ = (W, V) with i.i.d. N(0, 1) entries."""
    kw, kv = jax.random.split(jax.random.PRNGKey(seed))
    return {"W": jax.random.normal(kw, (L, L)), "V": jax.random.normal(kv, (L, L))}


# ---------------------------------------------------------------------------------------------------------------
# Part 1a: path B vs brute force
# ---------------------------------------------------------------------------------------------------------------
def path_b_fn(prob: DecisionList, kind: str = "value_and_grad"):
    """(fn(arrays, θ), arrays): path B as a function of the problem's arrays, for AOT compilation."""
    arrs, static = eqx.partition(prob, eqx.is_array)

    def loss(a, theta):
        return eqx.combine(a, static).loss(theta)

    if kind == "loss":
        return loss, arrs
    if kind == "value_and_grad":
        return jax.value_and_grad(loss, argnums=1), arrs

    def chunked(a, theta):  # the same Σ over chunks, with the gradient taken inside the scan, chunk by chunk
        p = eqx.combine(a, static)
        T = p.table

        def body(acc, xs):
            sub = eqx.tree_at(
                lambda q: (q.table.tokens, q.table.logc, q.table.prob, q.table.valid), p, tuple(x[None] for x in xs)
            )
            v, g = jax.value_and_grad(sub.loss)(theta)
            return jax.tree_util.tree_map(jnp.add, acc, (v, g)), None

        zero = (jnp.zeros(()), jax.tree_util.tree_map(jnp.zeros_like, theta))
        return jax.lax.scan(body, zero, (T.tokens, T.logc, T.prob, T.valid))[0]

    return chunked, arrs


def bench_brute(L: int, n: int, dist: str, args) -> dict:
    lists, perm = random_lists(L, M_LISTS, args.seed), random_perm(L, args.seed)
    theta = random_theta(L, args.seed)
    t0 = time.perf_counter()
    prob = DecisionList(L, n, lists, perm, distribution=dist)
    table_s = time.perf_counter() - t0
    fn, arrs = path_b_fn(prob)
    ex_c, ex_compile, _ = aot(fn, arrs, theta)
    _, ex_warm, (v, g) = call_times(ex_c, arrs, theta, repeats=args.repeats)

    def brute(theta):
        return brute_force_loss(theta["W"], theta["V"], L, n, lists, perm, dist)

    bf_c, bf_compile, _ = aot(jax.value_and_grad(brute), theta)
    _, bf_warm, (vb, gb) = call_times(bf_c, theta, repeats=args.repeats)
    dv = abs(float(v) - float(vb))
    dg = float(np.max(np.abs(flat(g) - flat(gb))))
    gscale = float(np.max(np.abs(flat(gb))))
    ok = dv <= VALUE_TOL * max(1.0, abs(float(vb)))
    n_seq = math.perm(L, n) if dist == "distinct" else L**n
    n_hist = comb(L, n) if dist == "distinct" else comb(L + n - 1, n)
    r = {
        "L": L,
        "n": n,
        "dist": dist,
        "n_seq": n_seq,
        "n_brute_enum": L**n,
        "n_hist": n_hist,
        "loss": float(v),
        "dv": dv,
        "dg": dg,
        "gscale": gscale,
        "ok": ok,
        "table_s": table_s,
        "ex_compile": ex_compile,
        "ex_warm": float(np.median(ex_warm)),
        "bf_compile": bf_compile,
        "bf_warm": float(np.median(bf_warm)),
    }
    r["ratio"] = r["bf_warm"] / r["ex_warm"]
    print(
        f"({L}, {n}) {dist}: ℒ = {r['loss']:.15f}; |Δℒ| = {dv:.2e}, max|Δ∇ℒ| = {dg:.2e} (max|∇ℒ| {gscale:.3g}) "
        f"[{'PASS' if ok else 'FAIL'}]; path B ({n_hist} histograms): compile {fmt_time(ex_compile)}, warm "
        f"{fmt_time(r['ex_warm'])}; brute force ({n_seq} sequences of {L**n}): compile "
        f"{fmt_time(bf_compile)}, warm {fmt_time(r['bf_warm'])} → brute/path B {fmt_ratio(r['ratio'])}",
        flush=True,
    )
    assert ok, f"path B and brute force disagree at ({L}, {n}, {dist}): |Δℒ| = {dv:.3e} > {VALUE_TOL:g}"
    return r


# ---------------------------------------------------------------------------------------------------------------
# Part 1b: path B at larger sizes vs Monte Carlo
# ---------------------------------------------------------------------------------------------------------------
def make_mc(L: int, n: int, lists, perm):
    """(sample(key, B) → (s, y), seq_loss(θ, s, y)): the Monte-Carlo baseline, written independently of popdyn."""
    M = max(len(lst) for lst in lists)
    pad = np.full((L, M), L, dtype=np.int32)  # index L: never present
    for a, lst in enumerate(lists):
        pad[a, : len(lst)] = lst
    list_pad, perm_arr = jnp.asarray(pad), jnp.asarray(perm, dtype=jnp.int32)

    def labels(s):
        present = jnp.zeros(L + 1, bool).at[s].set(True)
        lp = list_pad[s]  # (n, M)
        first = jnp.argmax(present[lp], axis=1)  # the first list entry present
        return perm_arr[lp[jnp.arange(n), first]]

    def sample(key, B):
        s = jnp.argsort(jax.random.uniform(key, (B, L)), axis=1)[:, :n]  # uniform ordered n-subsets
        return s, jax.vmap(labels)(s)

    def seq_loss(theta, s, y):
        W, V = theta["W"], theta["V"]
        A = jax.nn.softmax(W[s[:, None], s[None, :]], axis=0)  # (XᵀWX)[i, j] = W[s_i, s_j]; softmax over keys i
        logp = jax.nn.log_softmax(V[:, s] @ A, axis=0)  # (L, n)
        return -jnp.mean(logp[y, jnp.arange(n)])

    return sample, seq_loss


def bench_mc_case(L: int, n: int, args, key) -> dict:
    lists, perm = random_lists(L, M_LISTS, args.seed), random_perm(L, args.seed)
    theta = random_theta(L, args.seed)
    P = 2 * L * L
    print(
        f"\n--- ({L}, {n}) distinct tokens: {comb(L, n):,} subsets; θ = N(0, 1) entries (seed {args.seed}), "
        f"{P} parameters ---",
        flush=True,
    )
    t0 = time.perf_counter()
    prob = DecisionList(L, n, lists, perm)
    table_s = time.perf_counter() - t0
    print(f"histogram table: {fmt_time(table_s)}", flush=True)
    r = {"L": L, "n": n, "subsets": comb(L, n), "P": P, "table_s": table_s, "rows": [], "variants": [], "skipped": None}
    avail = available_memory()
    r["avail"] = avail

    # ---- exact: value_and_grad of prob.loss if it fits in memory, else chunk-wise gradient -------------------
    fn, arrs = path_b_fn(prob, "value_and_grad")
    comp, csec, temp = aot(fn, arrs, theta)
    fits = temp is None or avail is None or temp <= MEMORY_FRACTION * avail
    variants = [("value_and_grad(prob.loss)", comp, csec, temp, fits)]
    if not fits:
        print(
            f"value_and_grad(prob.loss): compiled in {fmt_time(csec)}; XLA temporaries {fmt_gb(temp)} > "
            f"{MEMORY_FRACTION:.0%} of the available {fmt_gb(avail)} → not run",
            flush=True,
        )
        for kind, label in (
            ("chunked", "per-chunk value_and_grad in the scan (script-side)"),
            ("loss", "loss only (prob.loss)"),
        ):
            f2, a2 = path_b_fn(prob, kind)
            c2, s2, t2 = aot(f2, a2, theta)
            variants.append((label, c2, s2, t2, True))
    exact = None
    for label, comp, csec, temp, run in variants:
        row = {"label": label, "compile": csec, "temp": temp, "run": run}
        r["variants"].append(row)
        if not run:
            continue
        first = time.perf_counter()
        out = jax.block_until_ready(comp(arrs, theta))
        first = time.perf_counter() - first
        row["first"] = first
        if first > args.exact_limit:
            row["warm"] = None
            print(
                f"{label}: first call {fmt_time(first)} > --exact-limit {args.exact_limit:g} s: no warm repeats",
                flush=True,
            )
            if exact is None and label != "loss only (prob.loss)":
                r["skipped"] = (
                    f"exact gradient's first call took {fmt_time(first)} > {args.exact_limit:g} s: "
                    "warm repeats and Monte Carlo skipped"
                )
                exact = False
            continue
        _, warm, out = call_times(comp, arrs, theta, repeats=args.repeats, budget=min(30.0, args.exact_limit))
        row["warm"] = float(np.median(warm))
        row["n_warm"] = len(warm)
        if isinstance(out, tuple):
            row["loss"] = float(out[0])
            if exact is None:
                exact = {"loss": float(out[0]), "g": flat(out[1]), "warm": row["warm"], "label": label}
        else:
            row["loss"] = float(out)
        print(
            f"{label}: compile {fmt_time(csec)} (temporaries {fmt_gb(temp)}), first call {fmt_time(first)}, warm "
            f"median {fmt_time(row['warm'])} ({len(warm)} runs), ℒ = {row['loss']:.15f}",
            flush=True,
        )
    if not exact:
        return r
    losses = [v["loss"] for v in r["variants"] if "loss" in v]
    r["variant_spread"] = max(losses) - min(losses)
    Lx, g = exact["loss"], exact["g"]
    gnorm = float(np.linalg.norm(g))
    r.update(loss=Lx, gnorm=gnorm, exact_warm=exact["warm"], exact_label=exact["label"])

    # ---- Monte Carlo: pilot variance -------------------------------------------------------------------------
    sample, seq_loss = make_mc(L, n, lists, perm)
    per_seq = jax.jit(jax.vmap(jax.value_and_grad(seq_loss), in_axes=(None, 0, 0)))
    draw = jax.jit(sample, static_argnums=1)
    chunk = 2048
    n_pilot = chunk * max(1, -(-args.pilot // chunk))
    s1, s2 = np.zeros(P), np.zeros(P)
    l1 = l2 = 0.0
    t0 = time.perf_counter()
    for k in range(n_pilot // chunk):
        s, y = draw(jax.random.fold_in(key, k), chunk)
        ls, gs = per_seq(theta, s, y)
        G = np.concatenate([np.asarray(gs["V"]).reshape(chunk, -1), np.asarray(gs["W"]).reshape(chunk, -1)], axis=1)
        ls = np.asarray(ls)
        s1 += G.sum(0)
        s2 += (G**2).sum(0)
        l1 += ls.sum()
        l2 += (ls**2).sum()
    pilot_s = time.perf_counter() - t0
    mean_g = s1 / n_pilot
    var_g = (s2 - s1**2 / n_pilot) / (n_pilot - 1)
    var_l = (l2 - l1**2 / n_pilot) / (n_pilot - 1)
    sum_var = float(var_g.sum())
    # check of the exact values against the pilot (ravel_pytree orders the dict keys: V before W)
    se = np.sqrt(var_g / n_pilot)
    z = np.abs(mean_g - g) / np.where(se > 0, se, np.inf)
    z = np.where((se == 0) & (mean_g != g), np.inf, z)
    frac = float(np.mean(z <= COVERAGE_SE))
    loss_se = math.sqrt(var_l / n_pilot)
    loss_z = abs(l1 / n_pilot - Lx) / loss_se
    ok = frac >= COVERAGE_MIN and loss_z <= COVERAGE_SE
    r.update(
        n_pilot=n_pilot,
        pilot_s=pilot_s,
        var_l=var_l,
        sum_var=sum_var,
        frac=frac,
        zmax=float(z.max()),
        loss_z=loss_z,
        check_ok=ok,
        mc_loss_mean=l1 / n_pilot,
        loss_se=loss_se,
    )
    print(
        f"pilot: {n_pilot} single-sequence gradients ({fmt_time(pilot_s)}); Var ℓ = {var_l:.4e} "
        f"(std/ℒ = {math.sqrt(var_l) / Lx:.3g}); Σ_i Var_i = {sum_var:.4e} (sqrt/‖∇ℒ‖ = "
        f"{math.sqrt(sum_var) / gnorm:.3g}); check exact vs pilot: loss |z| = {loss_z:.2f}, {frac * 100:.2f}% of "
        f"{P} gradient coordinates within {COVERAGE_SE:g} SE (max |z| {z.max():.2f}) [{'PASS' if ok else 'FAIL'}]",
        flush=True,
    )

    # ---- Monte Carlo: time per sequence ------------------------------------------------------------------------
    bt = args.mc_batch

    def batch_loss(th, s, y):
        return jnp.mean(jax.vmap(seq_loss, in_axes=(None, 0, 0))(th, s, y))

    def make_step(b):
        def mc_step(theta, key):  # sampling included
            s, y = sample(key, b)
            return jax.value_and_grad(batch_loss)(theta, s, y)

        return mc_step

    def mc_grad(theta, s, y):  # sampling excluded
        return jax.value_and_grad(batch_loss)(theta, s, y)

    step_c, step_compile, _ = aot(make_step(bt), theta, key)
    steps = {bt: step_c}
    s_fix, y_fix = draw(jax.random.fold_in(key, 10**6), bt)
    grad_c, _, _ = aot(mc_grad, theta, s_fix, y_fix)
    _, w_step, _ = call_times(step_c, theta, key, repeats=args.repeats)
    _, w_grad, _ = call_times(grad_c, theta, s_fix, y_fix, repeats=args.repeats)
    t_seq = float(np.median(w_step)) / bt
    t_seq_grad = float(np.median(w_grad)) / bt
    r.update(mc_compile=step_compile, t_seq=t_seq, t_seq_grad=t_seq_grad, bt=bt)
    print(
        f"MC batch of {bt}: compile {fmt_time(step_compile)}; warm {fmt_time(np.median(w_step))} with sampling "
        f"({t_seq * 1e6:.3f} µs/sequence), {fmt_time(np.median(w_grad))} without ({t_seq_grad * 1e6:.3f} "
        f"µs/sequence)",
        flush=True,
    )

    # ---- cost table, and actual runs where affordable ---------------------------------------------------------
    ex = r["exact_warm"]
    for crit, numer, scale in (("loss SE = ε·ℒ", var_l, Lx), ("gradient RMSE = ε‖∇ℒ‖", sum_var, gnorm)):
        for eps in args.eps:
            B = max(1, math.ceil(numer / (eps * scale) ** 2))
            row = {"crit": crit, "eps": eps, "B": B, "T": B * t_seq, "T_grad": B * t_seq_grad}
            row["ratio"], row["ratio_grad"] = row["T"] / ex, row["T_grad"] / ex
            b_run = min(B, bt)
            nb = -(-B // b_run)
            if nb * b_run * t_seq <= args.mc_cap:
                if b_run not in steps:  # compiled once per batch size, compile excluded from the run
                    steps[b_run] = aot(make_step(b_run), theta, key)[0]
                    jax.block_until_ready(steps[b_run](theta, key))
                run_c = steps[b_run]
                acc_l, acc_g = 0.0, np.zeros(P)
                t0 = time.perf_counter()
                for k in range(nb):
                    lk, gk = run_c(theta, jax.random.fold_in(key, 2 * 10**6 + k))
                    acc_l, acc_g = acc_l + float(lk), acc_g + flat(gk)
                row["run_s"] = time.perf_counter() - t0
                row["run_nb"], row["run_b"] = nb, b_run
                row["run_loss_err"] = abs(acc_l / nb - Lx) / Lx
                row["run_grad_err"] = float(np.linalg.norm(acc_g / nb - g)) / gnorm
                row["ratio_run"] = row["run_s"] / ex
            r["rows"].append(row)
            run = (
                ""
                if "run_s" not in row
                else f"; run {nb} × {b_run} sequences: {fmt_time(row['run_s'])} → ratio "
                f"{fmt_ratio(row['ratio_run'])}, achieved |Δℒ|/ℒ = {row['run_loss_err']:.2e}, ‖Δ∇‖/‖∇ℒ‖ = "
                f"{row['run_grad_err']:.2e}"
            )
            print(
                f"  {crit}, ε = {eps:g}: B = {fmt_n(B)} → predicted MC {fmt_time(row['T'])} (without sampling "
                f"{fmt_time(row['T_grad'])}) vs exact {fmt_time(ex)}: ratio {fmt_ratio(row['ratio'])}{run}",
                flush=True,
            )
    r["eps_star_loss"] = math.sqrt(var_l * t_seq / ex) / Lx  # MC time = exact time at this ε
    r["eps_star_grad"] = math.sqrt(sum_var * t_seq / ex) / gnorm
    print(
        f"  break-even ε* (MC time = exact time, sampling included): loss {r['eps_star_loss']:.3g}, gradient "
        f"{r['eps_star_grad']:.3g}",
        flush=True,
    )
    return r


# ---------------------------------------------------------------------------------------------------------------
# Part 2: Theorem 1 T*
# ---------------------------------------------------------------------------------------------------------------
_GRADS: dict = {}


def column_grad(L: int, n: int, m: int, c: float):
    """Jitted ∇ of ℒ_m(w, ω) = column_loss, cached per (L, n, m, c) so that a second solve is warm."""
    key = (L, n, m, float(c))
    if key not in _GRADS:
        _GRADS[key] = jax.jit(jax.grad(lambda y: column_loss(y[:m], y[m], L=L, n=n, c=c)))
    return _GRADS[key]


def pc_slack(y: np.ndarray, m: int) -> float:
    """min(w_1 − w_2, …, w_{m−1} − w_m, w_m − ω): PC of a length-m column ⇔ > 0 (§4, n ≥ 3, L ≥ n+M−1)."""
    return float(np.min(y[:m] - y[1 : m + 1]))


def bisect_pc(sol_fn, lo: float, hi: float, m: int) -> float:
    """Bisection on the PC condition between lo (not PC) and hi (PC), to relative BISECT_RTOL."""
    for _ in range(200):
        if hi - lo <= BISECT_RTOL * hi:
            break
        mid = 0.5 * (lo + hi)
        if pc_slack(sol_fn(mid), m) > 0:
            hi = mid
        else:
            lo = mid
    return hi


def baseline_tstar(L: int, n: int, m: int, c: float, t1: float, method: str, rtol: float, atol: float) -> dict:
    """solve_ivp on the reduced (w, ω) ODE with the 1/(L−m) factor on ω, T* by bisection via dense output."""
    from scipy.integrate import solve_ivp

    grad = column_grad(L, n, m, c)
    metric = np.ones(m + 1)
    metric[m] = 1.0 / (L - m)

    def rhs(t, y):
        return -metric * np.asarray(grad(y))

    sol = solve_ivp(rhs, (0.0, t1), np.zeros(m + 1), method=method, rtol=rtol, atol=atol, dense_output=True)
    slacks = np.array([pc_slack(sol.y[:, k], m) for k in range(sol.y.shape[1])])
    above = np.flatnonzero(slacks > 0)
    if above.size == 0:
        return {"T": float("nan"), "nfev": sol.nfev, "steps": len(sol.t) - 1, "status": sol.status, "persisted": None}
    k = above[0]
    T = 0.0 if k == 0 else bisect_pc(sol.sol, sol.t[k - 1], sol.t[k], m)
    return {
        "T": T,
        "nfev": int(sol.nfev),
        "steps": len(sol.t) - 1,
        "status": int(sol.status),
        "persisted": bool(np.all(slacks[k:] > 0)),
    }


def bench_theorem1(case, args) -> dict:
    L, n, M, c = case
    print(f"\n--- Theorem 1: (L, n, M) = ({L}, {n}, {M}), c = {'theorem' if c is None else c} ---", flush=True)
    t0 = time.perf_counter()
    run = theorem1_run(L, n, M, c)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(5):
        t0 = time.perf_counter()
        run = theorem1_run(L, n, M, c)
        warm.append(time.perf_counter() - t0)
    traj, prob = run["trajectory"], run["problem"]
    ts = np.asarray(traj.ts)
    slack = np.asarray(jax.vmap(prob.pc_slack)(traj.params))  # (records, M)
    T_pd = {col["m"]: (float("nan") if col["T_star"] is None else col["T_star"]) for col in run["columns"]}
    persisted_pd = {
        m: bool(np.all(slack[ts > T_pd[m], i] > 0)) if np.isfinite(T_pd[m]) else None
        for i, m in enumerate(prob.lengths)
    }
    cval, t1 = run["c"], run["t1"]

    def baseline():
        return {m: baseline_tstar(L, n, m, cval, t1, "LSODA", LSODA_RTOL, LSODA_ATOL) for m in range(1, M + 1)}

    t0 = time.perf_counter()
    base = baseline()
    b_cold = time.perf_counter() - t0
    b_warm = []
    for _ in range(5):
        t0 = time.perf_counter()
        base = baseline()
        b_warm.append(time.perf_counter() - t0)
    ref = {}
    t0 = time.perf_counter()
    for m in range(1, M + 1):
        Tb = base[m]["T"]
        ref[m] = (
            baseline_tstar(L, n, m, cval, 1.5 * Tb, "DOP853", REF_RTOL, REF_ATOL)
            if np.isfinite(Tb) and Tb > 0
            else {"T": Tb}
        )
    ref_s = time.perf_counter() - t0
    rows = []
    for m in range(1, M + 1):
        tp, tb, tr = T_pd[m], base[m]["T"], ref[m]["T"]
        row = {
            "m": m,
            "popdyn": tp,
            "lsoda": tb,
            "ref": tr,
            "persisted_pd": persisted_pd[m],
            "persisted_lsoda": base[m]["persisted"],
            "nfev": base[m]["nfev"],
            "spec": THEOREM1_SPEC[case].get(m),
        }
        big = max(abs(tp), abs(tb))
        row["rel"] = abs(tp - tb) / big if big > 1e-9 else 0.0
        row["err_pd"] = abs(tp - tr) / abs(tr) if tr and abs(tr) > 1e-9 else None
        row["err_lsoda"] = abs(tb - tr) / abs(tr) if tr and abs(tr) > 1e-9 else None
        rows.append(row)
        print(
            f"  m = {m}: T* popdyn {tp:.10g}, LSODA {tb:.10g} (rel diff {row['rel']:.2e}), reference DOP853 "
            f"{tr:.10g}; PC persisted after T*: popdyn {persisted_pd[m]}, LSODA {base[m]['persisted']}; "
            f"LSODA RHS evaluations {base[m]['nfev']}",
            flush=True,
        )
    r = {
        "L": L,
        "n": n,
        "M": M,
        "c_in": c,
        "c": cval,
        "t1": t1,
        "bound": run["bound"],
        "bound_gd": run["bound_gamma_eq_delta"],
        "status": run["status"],
        "n_steps": int(traj.n_steps),
        "cold": cold,
        "warm": float(np.median(warm)),
        "b_cold": b_cold,
        "b_warm": float(np.median(b_warm)),
        "ref_s": ref_s,
        "rows": rows,
        "spec_max": THEOREM1_SPEC_MAX.get(case),
        "nfev": sum(base[m]["nfev"] for m in base),
    }
    r["ratio"] = r["b_warm"] / r["warm"]
    print(
        f"  popdyn theorem1_run: cold {fmt_time(cold)}, warm {fmt_time(r['warm'])} (status {run['status']}, "
        f"{r['n_steps']} Tsit5 steps to t1 = {t1:.4g}); LSODA baseline (Σ over m): cold {fmt_time(b_cold)}, warm "
        f"{fmt_time(r['b_warm'])} ({r['nfev']} RHS evaluations) → LSODA/popdyn warm {fmt_ratio(r['ratio'])}; "
        f"reference {fmt_time(ref_s)}",
        flush=True,
    )
    return r


# ---------------------------------------------------------------------------------------------------------------
# Part 3: Theorem 2 λ_max(θ₀)
# ---------------------------------------------------------------------------------------------------------------
def eigsh_lambda(prob: DecisionList, theta) -> dict:
    """λ_max by scipy eigsh (which="LA") on the jitted exact Hessian-vector product."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    x, unravel = ravel_pytree(theta)
    arrs, static = eqx.partition(prob, eqx.is_array)

    def hvp(a, x, v):
        f = lambda y: eqx.combine(a, static).loss(unravel(y))  # noqa: E731
        return jax.jvp(jax.grad(f), (x,), (v,))[1]

    comp, csec, _ = aot(hvp, arrs, x, x)
    count = [0]

    def mv(v):
        count[0] += 1
        return np.asarray(comp(arrs, x, jnp.asarray(np.ravel(v))))

    op = LinearOperator((x.size, x.size), matvec=mv, dtype=np.float64)
    t0 = time.perf_counter()
    lam = float(
        eigsh(
            op,
            k=1,
            which="LA",
            tol=1e-10,
            v0=np.random.default_rng(0).standard_normal(x.size),
            return_eigenvectors=False,
        )[0]
    )
    return {"lam": lam, "s": time.perf_counter() - t0, "compile": csec, "matvecs": count[0]}


def bench_theorem2(case, args, eigsh_on: bool) -> dict:
    L, n, m, spec = case
    inst = theorem2_instance(L, n, m)
    c, eps = inst["c"], inst["eps"]
    print(
        f"\n--- Theorem 2: (L, n, m) = ({L}, {n}, {m}); c = {c:.6g}, ε = {eps:.6g}, {2 * L * L} parameters; "
        f"λ_max by Lanczos ({args.lanczos_iters} iterations) ---",
        flush=True,
    )
    lams, secs = [], []
    prob0 = theta_seed0 = None
    for seed in range(args.t2_seeds):
        prob = DecisionList(L, n, random_lists(L, m, seed), random_perm(L, seed), c=c, init_eps=eps)
        theta0 = prob.init(jax.random.PRNGKey(seed))
        t0 = time.perf_counter()
        lam = float(popdyn.lambda_max(prob, theta0, iters=args.lanczos_iters))
        secs.append(time.perf_counter() - t0)
        lams.append(lam)
        if seed == 0:
            prob0, theta_seed0 = prob, theta0
        print(f"  seed {seed}: λ_max(θ₀) = {lam:.6g} ({fmt_time(secs[-1])}, compile included)", flush=True)
    theta_cp = {"W": jnp.zeros((L, L)), "V": c * jnp.asarray(prob0.P)}
    t0 = time.perf_counter()
    lam_cp = float(popdyn.lambda_max(prob0, theta_cp, iters=args.lanczos_iters))
    cp_s = time.perf_counter() - t0
    print(f"  V₀ = cP exactly (seed-0 lists): λ_max = {lam_cp:.6g} ({fmt_time(cp_s)}, warm)", flush=True)
    lams_a = np.asarray(lams)
    r = {
        "L": L,
        "n": n,
        "m": m,
        "c": c,
        "eps": eps,
        "spec": spec,
        "lams": lams,
        "secs": secs,
        "lam_cp": lam_cp,
        "cp_s": cp_s,
        "min": float(lams_a.min()),
        "median": float(np.median(lams_a)),
        "max": float(lams_a.max()),
        "below_spec": int(np.sum(lams_a < spec)),
        "scale": c**2 / (L * n**3),
        "eigsh": None,
        "eigsh_cp": None,
    }
    where = (
        "below every draw"
        if r["below_spec"] == 0
        else "above every draw"
        if r["below_spec"] == len(lams)
        else f"above {r['below_spec']} of {len(lams)} draws"
    )
    r["where"] = where
    print(
        f"  λ_max(θ₀) over seeds 0..{args.t2_seeds - 1}: min {r['min']:.4g}, median {r['median']:.4g}, max "
        f"{r['max']:.4g}; spec {spec:.3g} is {where} (spec/median {spec / r['median']:.3f}); c²/(L n³) = "
        f"{r['scale']:.3g}",
        flush=True,
    )
    if eigsh_on:
        for name, theta, lam in (("eigsh", theta_seed0, lams[0]), ("eigsh_cp", theta_cp, lam_cp)):
            e = eigsh_lambda(prob0, theta)
            e["rel"] = abs(e["lam"] - lam) / abs(lam)
            r[name] = e
            print(
                f"  baseline eigsh ({'seed 0' if name == 'eigsh' else 'V₀ = cP'}): λ_max = {e['lam']:.10g} vs "
                f"Lanczos {lam:.10g} (rel diff {e['rel']:.1e}); {e['matvecs']} Hessian-vector products, "
                f"{fmt_time(e['s'])} (+ HVP compile {fmt_time(e['compile'])}); popdyn warm {fmt_time(cp_s)}",
                flush=True,
            )
    return r


# ---------------------------------------------------------------------------------------------------------------
# RESULTS.md
# ---------------------------------------------------------------------------------------------------------------
def fmt_t(x: float | None) -> str:
    if x is None or not np.isfinite(x):
        return "—"
    return "0 (PC at every t > 0)" if x < 1e-9 else f"{x:.8g}"


def render(
    p1: list[dict],
    mc: list[dict],
    t1: list[dict],
    t2: list[dict],
    info: dict,
    args,
    command: str,
    date: str,
    total: float,
) -> str:
    out = [SECTION, ""]
    out.append(f"Written by `python -m benchmarks.decision_lists` on {date} (total run {total:.0f} s).  ")
    out.append(f"Command: `{command}`")
    out.append("")
    out.append(
        "float64, default JAX backend (CPU). *compile*: AOT `jit(...).lower(...).compile()`; *warm*: median of at "
        f"least {args.repeats} further calls (more, up to 2000, until they add up to 1 s; fewer when that would pass "
        "30 s), each `block_until_ready`; *cold* (parts 2–3): the first call in the process, compilation included; "
        "warm in part 2: median of 5. Part 1 uses the random point θ = (W, V) "
        f"with i.i.d. N(0, 1) entries (PRNGKey({args.seed})), lists `random_lists(L, {M_LISTS}, {args.seed})`, "
        f"π = `random_perm(L, {args.seed})`."
    )
    out.append("")
    out.append("### 1. Exact loss + gradient")
    out.append("")
    out.append(
        "Path B (`DecisionList.loss`, histogram enumeration) vs brute force over all L^n sequences "
        "(`brute_force_loss`), both `jit(value_and_grad)`:"
    )
    out.append("")
    out.append(
        "| (L, n) | law | sequences (of L^n) | histograms | ℒ | \\|Δℒ\\| | max\\|Δ∇ℒ\\| | path B compile | "
        "path B warm | brute compile | brute warm | brute / path B (warm) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in p1:
        out.append(
            f"| ({r['L']}, {r['n']}) | {r['dist']} | {r['n_seq']:,} (of {r['n_brute_enum']:,}) | {r['n_hist']:,} | "
            f"{r['loss']:.12f} | {r['dv']:.1e} | {r['dg']:.1e} | {fmt_time(r['ex_compile'])} | "
            f"{fmt_time(r['ex_warm'])} | {fmt_time(r['bf_compile'])} | {fmt_time(r['bf_warm'])} | "
            f"{fmt_ratio(r['ratio'])} |"
        )
    out.append("")
    out.append(
        f"Larger cases, distinct tokens (brute force is out of reach: L^n ≥ 3.2e6 sequences). XLA's "
        f"temporaries are from `compiled.memory_analysis()`; a program runs only if they fit in "
        f"{MEMORY_FRACTION:.0%} of the available memory:"
    )
    out.append("")
    out.append(
        "| (L, n) | subsets | table build | path B variant | compile | XLA temporaries | first call | warm | ℒ |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in mc:
        for v in r["variants"]:
            if not v["run"]:
                first = warm = f"not run (> {MEMORY_FRACTION:.0%} of {fmt_gb(r['avail'])} available)"
            else:
                first = fmt_time(v["first"])
                warm = "skipped" if v.get("warm") is None else f"{fmt_time(v['warm'])} ({v['n_warm']} runs)"
            loss = f"{v['loss']:.12f}" if "loss" in v else "—"
            out.append(
                f"| ({r['L']}, {r['n']}) | {r['subsets']:,} | {fmt_time(r['table_s'])} | {v['label']} | "
                f"{fmt_time(v['compile'])} | {fmt_gb(v['temp'])} | {first} | {warm} | {loss} |"
            )
    out.append("")
    done = [r for r in mc if "rows" in r and r["rows"]]
    if done:
        out.append(
            "Monte-Carlo baseline at the same θ: sequences sampled in JAX, the literal per-sequence loss, `jit(value_"
            f"and_grad)` of the batch mean (batch {args.mc_batch}). B(ε) from a pilot of single-sequence losses and "
            "gradients: *loss criterion* B = Var ℓ/(εℒ)² (standard error of the loss = εℒ), *gradient criterion* "
            "B = Σ_i Var_i/(ε‖∇ℒ‖)² (RMSE of the gradient = ε‖∇ℒ‖). *Predicted* MC time = B × warm time per "
            "sequence at the batch size, with the in-JAX sampling (and without: on pre-drawn sequences). *Run*: the MC "
            f"estimate actually computed, ⌈B/b⌉ fresh batches of b = min(B, {args.mc_batch}) sequences, whenever the "
            f"prediction is ≤ {args.mc_cap:g} s (compile excluded), with its achieved errors against the exact values. "
            "Ratio = MC time / exact warm time, from the run where there is one, else from the prediction (pred.)."
        )
        out.append("")
        out.append(
            "| (L, n) | exact (warm) | criterion | ε | B(ε) | predicted MC (with / without sampling) | run: "
            "batches × b, wall | ratio MC/exact | run's \\|Δℒ\\|/ℒ, ‖Δ∇‖/‖∇ℒ‖ |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|")
        for r in done:
            for row in r["rows"]:
                ran = "run_s" in row
                out.append(
                    f"| ({r['L']}, {r['n']}) | {fmt_time(r['exact_warm'])} | {row['crit']} | {row['eps']:g} | "
                    f"{fmt_n(row['B'])} | {fmt_time(row['T'])} / {fmt_time(row['T_grad'])} | "
                    + (
                        f"{row['run_nb']} × {row['run_b']:,}, {fmt_time(row['run_s'])} | "
                        f"{fmt_ratio(row['ratio_run'])} | {row['run_loss_err']:.1e}, {row['run_grad_err']:.1e} |"
                        if ran
                        else f"not run | {fmt_ratio(row['ratio'])} (pred.) | — |"
                    )
                )
        out.append("")
        for r in done:
            out.append(
                f"- ({r['L']}, {r['n']}): exact = {r['exact_label']}; ℒ = {r['loss']:.10f}, ‖∇ℒ‖ = {r['gnorm']:.4e}; "
                f"pilot of {r['n_pilot']:,} sequences ({fmt_time(r['pilot_s'])}): Var ℓ = {r['var_l']:.3e} "
                f"(std/ℒ {math.sqrt(r['var_l']) / r['loss']:.3g}), Σ_i Var_i = {r['sum_var']:.3e} (sqrt/‖∇ℒ‖ "
                f"{math.sqrt(r['sum_var']) / r['gnorm']:.3g}); MC {r['t_seq'] * 1e6:.3f} µs/sequence with sampling, "
                f"{r['t_seq_grad'] * 1e6:.3f} without (compile {fmt_time(r['mc_compile'])}); break-even ε* (MC = "
                f"exact time): loss {r['eps_star_loss']:.3g}, gradient {r['eps_star_grad']:.3g}. Check of the exact "
                f"values against the pilot: {'PASS' if r['check_ok'] else '**FAIL**'} (loss |z| {r['loss_z']:.2f}, "
                f"{r['frac'] * 100:.2f}% of {r['P']} gradient coordinates within {COVERAGE_SE:g} SE, max |z| "
                f"{r['zmax']:.2f})"
                + (f"; path-B variants agree on ℒ to {r['variant_spread']:.1e}" if len(r["variants"]) > 1 else "")
                + "."
            )
    for r in mc:
        if r.get("skipped"):
            out.append(f"- ({r['L']}, {r['n']}): {r['skipped']}.")
    out.append("")

    out.append("### 2. Theorem 1: first time T* of perfect classification")
    out.append("")
    out.append(
        "popdyn: `theorem1_run(L, n, M, c)` (reduced flow on (w, u = √(L−m)·ω), Tsit5 rtol 1e-10 atol 1e-12, "
        "`first_passage` on 4000 log-spaced records, linear interpolation). Baseline (the spec's): per list length m, "
        f'`solve_ivp(method="LSODA", rtol={LSODA_RTOL:g}, atol={LSODA_ATOL:g}, dense_output=True)` on dw/dt = '
        "−∂ℒ_m/∂w, dω/dt = −∂ℒ_m/∂ω/(L−m), RHS = jitted `jax.grad(column_loss)`, same horizon t1; T* by bisection "
        f"(relative {BISECT_RTOL:g}) on w_1 > … > w_m > ω through the dense output. Reference: the same with DOP853, "
        f"rtol {REF_RTOL:g}, atol {REF_ATOL:g}, to 1.5·T*."
    )
    out.append("")
    out.append(
        "| (L, n, M) | c | m | T* popdyn | T* LSODA | rel. diff | T* reference | popdyn err | LSODA err | spec |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in t1:
        for row in r["rows"]:
            spec = (
                row["spec"]
                if row["spec"] is not None
                else (f"max_m {r['spec_max']:g}" if r["spec_max"] and row["m"] == r["M"] else "—")
            )
            out.append(
                f"| ({r['L']}, {r['n']}, {r['M']}) | {r['c']:.6g} | {row['m']} | {fmt_t(row['popdyn'])} | "
                f"{fmt_t(row['lsoda'])} | {row['rel']:.1e} | {fmt_t(row['ref'])} | "
                f"{'—' if row['err_pd'] is None else format(row['err_pd'], '.1e')} | "
                f"{'—' if row['err_lsoda'] is None else format(row['err_lsoda'], '.1e')} | {spec} |"
            )
    out.append("")
    out.append(
        "| (L, n, M) | c | t1 | popdyn cold | popdyn warm | LSODA cold (Σ m) | LSODA warm (Σ m) | LSODA RHS evals "
        "| LSODA / popdyn (warm) | bound T₁ (γ = δ/L; γ = δ) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in t1:
        out.append(
            f"| ({r['L']}, {r['n']}, {r['M']}) | {r['c']:.6g} | {r['t1']:.4g} | {fmt_time(r['cold'])} | "
            f"{fmt_time(r['warm'])} | {fmt_time(r['b_cold'])} | {fmt_time(r['b_warm'])} | {r['nfev']:,} | "
            f"{fmt_ratio(r['ratio'])} | {r['bound']:.4g}; {r['bound_gd']:.4g} |"
        )
    out.append("")
    pers = all(
        row["persisted_pd"] in (True, None) and row["persisted_lsoda"] in (True, None) for r in t1 for row in r["rows"]
    )
    out.append(
        f"PC persisted after T* on every record of both solvers: {'yes' if pers else '**no**'}. popdyn's flow "
        "status at t1: "
        + ", ".join(f"({r['L']}, {r['n']}, {r['M']}) {r['status']} after {r['n_steps']} steps" for r in t1)
        + " ('max_steps' is popdyn's label for a flow that reached t1 without becoming steady)."
    )
    out.append("")

    out.append("### 3. Theorem 2: λ_max(θ₀) over random draws")
    out.append("")
    out.append(
        "θ₀ as in `theorem2_run`: `theorem2_instance(L, n, m)` (c, ε = nℒ₀/18), `DecisionList(L, n, random_lists(L, m, "
        "seed), random_perm(L, seed), c=c, init_eps=ε).init(PRNGKey(seed))`, i.e. W₀ = 0, V₀ = cP + U(−ε/2, ε/2). "
        f"λ_max = `popdyn.lambda_max(prob, θ₀, iters={args.lanczos_iters})` (Lanczos on exact Hessian-vector "
        "products). Per-seed times include a compile (the lists are static); the V₀ = cP call reuses seed 0's lists "
        'and is warm. Baseline: `scipy.sparse.linalg.eigsh(k=1, which="LA", tol=1e-10)` on a `LinearOperator` of '
        "the jitted exact HVP, at seed 0's θ₀ and at V₀ = cP (time excludes the HVP's compile)."
    )
    out.append("")
    out.append(
        "| (L, n, m) | c | ε | seeds | λ_max(θ₀) min / median / max | spec | spec's place | λ_max at V₀ = cP | "
        "c²/(L n³) | popdyn per seed (cold, median) | popdyn warm (V₀ = cP) | eigsh seed 0: λ, rel. diff, HVPs, time "
        "| eigsh V₀ = cP: λ, rel. diff, HVPs, time |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def eig(e):
        return (
            "—"
            if e is None
            else (
                f"{e['lam']:.6g}, {e['rel']:.1e}, {e['matvecs']}, {fmt_time(e['s'])} (+ "
                f"{fmt_time(e['compile'])} compile)"
            )
        )

    for r in t2:
        es = eig(r["eigsh"]) + " | " + eig(r["eigsh_cp"])
        out.append(
            f"| ({r['L']}, {r['n']}, {r['m']}) | {r['c']:.6g} | {r['eps']:.4g} | 0..{len(r['lams']) - 1} | "
            f"{r['min']:.4g} / {r['median']:.4g} / {r['max']:.4g} | {r['spec']:.3g} | {r['where']} | "
            f"{r['lam_cp']:.4g} | {r['scale']:.3g} | {fmt_time(float(np.median(r['secs'])))} | {fmt_time(r['cp_s'])} "
            f"| {es} |"
        )
    out.append("")
    for r in t2:
        out.append(
            f"- ({r['L']}, {r['n']}, {r['m']}) per seed: "
            + ", ".join(f"{s}: {lam:.5g}" for s, lam in enumerate(r["lams"]))
            + "."
        )
    out.append("")

    out.append("What this shows:")
    out.append("")
    for line in conclusions(p1, mc, t1, t2):
        out.append(f"- {line}")
    return finish_section(out, info)


def conclusions(p1, mc, t1, t2) -> list[str]:
    out = []
    if p1:
        out.append(
            "Path B equals brute force to ≤ " + f"{max(r['dv'] for r in p1):.0e} in the loss and "
            f"{max(r['dg'] for r in p1):.0e} in the gradient at (8, 4), and is "
            + " / ".join(f"{fmt_ratio(r['ratio'])} ({r['dist']})" for r in p1)
            + " faster warm; compile times are comparable."
        )
    for r in mc:
        if not r.get("rows"):
            continue
        big = [v for v in r["variants"] if not v["run"]]
        note = (
            f" `value_and_grad(prob.loss)` would need {fmt_gb(big[0]['temp'])} of XLA temporaries (reverse mode "
            "through the chunk scan keeps every chunk's residuals), so the exact gradient used here is the "
            "chunk-wise one."
            if big
            else ""
        )
        loss_rows = {row["eps"]: row for row in r["rows"] if row["crit"].startswith("loss")}
        grad_rows = {row["eps"]: row for row in r["rows"] if row["crit"].startswith("gradient")}

        def ratio(row):
            return fmt_ratio(row["ratio_run"]) if "ratio_run" in row else fmt_ratio(row["ratio"]) + " (pred.)"

        parts = ", ".join(
            f"ε = {e:g}: {ratio(loss_rows[e])} (loss) / {ratio(grad_rows[e])} (gradient)" for e in loss_rows
        )
        out.append(
            f"({r['L']}, {r['n']}): exact warm {fmt_time(r['exact_warm'])}; MC/exact time ratio {parts}. MC "
            f"is cheaper than the exact value only for relative precision coarser than ε* = "
            f"{r['eps_star_loss']:.2g} (loss) / {r['eps_star_grad']:.2g} (gradient), and never gives the exact "
            f"value.{note}"
        )
    if t1:
        worst = max(row["rel"] for r in t1 for row in r["rows"])
        perr = [row["err_pd"] for r in t1 for row in r["rows"] if row["err_pd"] is not None]
        lerr = [row["err_lsoda"] for r in t1 for row in r["rows"] if row["err_lsoda"] is not None]
        out.append(
            f"Theorem 1: popdyn and the LSODA baseline agree on every T* to relative {worst:.1e}; against the "
            f"tight DOP853 reference popdyn's error is ≤ {max(perr):.1e} (log-grid interpolation) and LSODA's ≤ "
            f"{max(lerr):.1e}. Warm wall time LSODA / popdyn: "
            + " / ".join(fmt_ratio(r["ratio"]) for r in t1)
            + " (> 1: popdyn faster); popdyn's cold call (one XLA compile per case) takes "
            + " / ".join(fmt_time(r["cold"]) for r in t1)
            + " vs the baseline's "
            + " / ".join(fmt_time(r["b_cold"]) for r in t1)
            + "."
        )
    for r in t2:
        out.append(
            f"Theorem 2 ({r['L']}, {r['n']}, {r['m']}): λ_max(θ₀) spans {r['min']:.3g}–{r['max']:.3g} over "
            f"{len(r['lams'])} draws of V₀ (median {r['median']:.3g}; V₀ = cP: {r['lam_cp']:.3g}); the spec's "
            f"{r['spec']:.3g} is {r['where']}"
            + (
                ""
                if r["eigsh"] is None
                else f"; eigsh agrees with popdyn's Lanczos to "
                f"{max(r['eigsh']['rel'], r['eigsh_cp']['rel']):.0e} and takes {fmt_time(r['eigsh']['s'])} "
                f"({r['eigsh']['matvecs']} HVPs) vs popdyn's warm {fmt_time(r['cp_s'])}"
            )
            + f". Exactly at V₀ = cP, λ_max is {r['lam_cp'] / r['median']:.2f}× the median draw, although the "
            f"perturbation is ≤ ε/2 = {r['eps'] / 2:.3g} ≈ {r['eps'] / 2 / r['c']:.0e}·c per entry: at W₀ = 0 "
            "the n present labels' logits are exactly tied at c/n, and the perturbation shifts them by "
            f"O(ε/√n) ≈ {r['eps'] / math.sqrt(12 * r['n']):.2g} (std), which is O(1) on the softmax scale "
            "(an interpretation, not a measurement)."
        )
    return out


def headline(p1, mc, t1, t2, args, command: str, date: str, info: dict, total: float) -> dict:
    """Headline figures for run_all's summary: exact vs MC (gradient criterion) at ε = 1e-3 (or the finest ε run)
    per case — the largest case is the task's row, its MC time from the actual run where there was one —, path B
    vs brute force, Theorem 1 vs LSODA and Theorem 2's Lanczos vs eigsh (warm)."""
    rows = []
    for r in p1:
        rows.append(
            headline_row(
                "decision-list",
                f"exact loss+gradient, ({r['L']}, {r['n']}) {r['dist']}: path B vs brute force over all L^n sequences",
                "path B (histograms)",
                r["ex_warm"],
                "brute force",
                r["bf_warm"],
            )
        )
    done = [r for r in mc if r.get("rows")]
    for r in done:
        grad = [row for row in r["rows"] if row["crit"].startswith("gradient")]
        c = next((row for row in grad if row["eps"] == SUMMARY_EPS), min(grad, key=lambda row: row["eps"]))
        ran = "run_s" in c
        rows.append(
            headline_row(
                "decision-list",
                f"exact loss+gradient vs Monte Carlo at gradient RMSE ε‖∇ℒ‖, ε = {c['eps']:g}; "
                f"(L, n) = ({r['L']}, {r['n']})",
                r["exact_label"],
                r["exact_warm"],
                f"MC, B(ε) = {fmt_n(c['B'])} sequences ({'run' if ran else 'predicted'})",
                c["run_s"] if ran else c["T"],
                primary=r is done[-1],
            )
        )
    for r in t1:
        rows.append(
            headline_row(
                "decision-list",
                f"Theorem 1 T*, (L, n, M) = ({r['L']}, {r['n']}, {r['M']}) (warm)",
                "`theorem1_run`",
                r["warm"],
                "`solve_ivp` LSODA per m",
                r["b_warm"],
                note=f"cold: popdyn {fmt_time(r['cold'])}, LSODA {fmt_time(r['b_cold'])}",
            )
        )
    for r in t2:
        if r["eigsh_cp"] is not None:
            rows.append(
                headline_row(
                    "decision-list",
                    f"Theorem 2 λ_max at V₀ = cP, (L, n, m) = ({r['L']}, {r['n']}, {r['m']}) (warm)",
                    "`lambda_max` (Lanczos on exact HVPs)",
                    r["cp_s"],
                    "`scipy.sparse.linalg.eigsh` on the same HVP",
                    r["eigsh_cp"]["s"],
                )
            )
    checks = [(f"({r['L']}, {r['n']}) {r['dist']}: path B equals brute force", r["ok"]) for r in p1]
    checks += [
        (f"({r['L']}, {r['n']}): exact loss and gradient within 4 SE of the MC pilot", r["check_ok"]) for r in done
    ]
    return make_headline("decision_lists", SECTION, command, date, info, args.quick, total, rows, checks)


# ---------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument(
        "--mc-cases",
        nargs="+",
        default=None,
        help="L,n pairs for the exact-vs-MC part (default 20,5 30,8; --quick: 20,5)",
    )
    ap.add_argument("--eps", type=float, nargs="+", default=[1e-2, 1e-3], help="relative precisions (1e-2 1e-3)")
    ap.add_argument("--pilot", type=int, default=16384, help="pilot sequences for the MC variances (default 16384)")
    ap.add_argument("--mc-batch", type=int, default=8192, help="MC batch size (default 8192)")
    ap.add_argument(
        "--mc-cap",
        type=float,
        default=20.0,
        help="actually run an MC estimate when its predicted time is ≤ this many seconds (default 20)",
    )
    ap.add_argument(
        "--exact-limit",
        type=float,
        default=60.0,
        help="skip warm repeats and MC of a case whose exact gradient takes longer (default 60 s)",
    )
    ap.add_argument("--repeats", type=int, default=7, help="warm timing repeats (default 7)")
    ap.add_argument("--t2-seeds", type=int, default=None, help="Theorem 2 seeds (default 10; --quick 3)")
    ap.add_argument("--lanczos-iters", type=int, default=32, help="Lanczos iterations for λ_max (default 32)")
    ap.add_argument("--no-eigsh", action="store_true", help="skip the eigsh cross-check of λ_max")
    ap.add_argument("--seed", type=int, default=0, help="seed of θ, lists and π in part 1 and of the MC keys")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="MC at (20, 5) only, 3 Theorem-2 seeds, eigsh only at (23, 20, 1); writes no results unless --results",
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file to update (default benchmarks/RESULTS.md; with --quick: none)",
    )
    args = ap.parse_args(argv)
    if args.mc_cases is None:
        args.mc_cases = ["20,5"] if args.quick else ["20,5", "30,8"]
    try:
        args.mc_cases = [tuple(int(x) for x in s.split(",")) for s in args.mc_cases]
    except ValueError:
        ap.error("--mc-cases takes L,n pairs such as 20,5")
    if any(len(cs) != 2 or not 2 <= cs[1] <= cs[0] for cs in args.mc_cases):
        ap.error("--mc-cases: each L,n needs 2 ≤ n ≤ L")
    if args.t2_seeds is None:
        args.t2_seeds = 3 if args.quick else 10
    if args.results is None and not args.quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    if args.repeats < 1 or args.pilot < 2 or args.mc_batch < 1 or args.t2_seeds < 1 or args.lanczos_iters < 1:
        ap.error("need --repeats, --mc-batch, --t2-seeds, --lanczos-iters ≥ 1 and --pilot ≥ 2")
    if any(e <= 0 for e in args.eps):
        ap.error("--eps values must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header("decision_lists", argv)
    t_start = time.perf_counter()
    print("\n=== 1a. path B vs brute force ===", flush=True)
    p1 = [bench_brute(L, n, dist, args) for L, n, dist in BRUTE_CASES]
    print("\n=== 1b. path B at larger sizes vs Monte Carlo ===", flush=True)
    key = jax.random.PRNGKey(args.seed + 1)
    mc = [bench_mc_case(L, n, args, jax.random.fold_in(key, L * 100 + n)) for L, n in args.mc_cases]
    print("\n=== 2. Theorem 1 T*: theorem1_run vs solve_ivp LSODA ===", flush=True)
    t1 = [bench_theorem1(case, args) for case in THEOREM1_CASES]
    print("\n=== 3. Theorem 2 λ_max(θ₀) ===", flush=True)
    t2 = [
        bench_theorem2(case, args, eigsh_on=not args.no_eigsh and not (args.quick and case[0] == 32))
        for case in THEOREM2_CASES
    ]
    total = time.perf_counter() - t_start
    try:
        info["load_avg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    if "load_avg" in info:
        info["load_avg_start"] = info.pop("load_avg")
    section = render(p1, mc, t1, t2, info, args, command, date, total)
    publish(section, SECTION, args.results, headline(p1, mc, t1, t2, args, command, date, info, total))
    ok = all(r["ok"] for r in p1) and all(r.get("check_ok", True) for r in mc)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
