"""Part 1b of the decision-list benchmark: path B at larger sizes (distinct tokens) against a Monte-Carlo estimate
of the same loss and gradient, written independently of popdyn, at equal precision."""

from __future__ import annotations

import math
import time
from math import comb

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._common import COVERAGE_MIN, COVERAGE_SE, SUMMARY_EPS, fmt_n, fmt_time, headline_row
from popdyn.tasks.decision_list import DecisionList, random_lists, random_perm

from ._shared import (
    M_LISTS,
    MEMORY_FRACTION,
    aot_memory,
    available_memory,
    call_times,
    flat,
    fmt_gb,
    fmt_ratio,
    path_b_fn,
    random_theta,
)


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
    comp, csec, temp = aot_memory(fn, arrs, theta)
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
            c2, s2, t2 = aot_memory(f2, a2, theta)
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

    step_c, step_compile, _ = aot_memory(make_step(bt), theta, key)
    steps = {bt: step_c}
    s_fix, y_fix = draw(jax.random.fold_in(key, 10**6), bt)
    grad_c, _, _ = aot_memory(mc_grad, theta, s_fix, y_fix)
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
                    steps[b_run] = aot_memory(make_step(b_run), theta, key)[0]
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


def run(args) -> list[dict]:
    key = jax.random.PRNGKey(args.seed + 1)
    return [bench_mc_case(L, n, args, jax.random.fold_in(key, L * 100 + n)) for L, n in args.mc_cases]


def section_lines(mc: list[dict], args) -> list[str]:
    out = []
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
    return out


def conclusions(mc: list[dict]) -> list[str]:
    out = []
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
    return out


def done(mc: list[dict]) -> list[dict]:
    """The cases whose Monte-Carlo part ran."""
    return [r for r in mc if r.get("rows")]


def headline_rows(mc: list[dict]) -> list[dict]:
    rows = []
    cases = done(mc)
    for r in cases:
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
                primary=r is cases[-1],
            )
        )
    return rows


def checks(mc: list[dict]) -> list[tuple[str, bool]]:
    return [
        (f"({r['L']}, {r['n']}): exact loss and gradient within 4 SE of the MC pilot", r["check_ok"]) for r in done(mc)
    ]
