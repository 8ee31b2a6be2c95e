"""Part 1a of the decision-list benchmark: path B (``DecisionList.loss``, enumeration of histograms) against brute
force over all L^n sequences (``brute_force_loss``), both ``jit(value_and_grad)``, at (L, n) = (8, 4)."""

from __future__ import annotations

import math
import time
from math import comb

import jax
import numpy as np

from benchmarks._common import fmt_time, headline_row
from popdyn.tasks.decision_list import DecisionList, brute_force_loss, random_lists, random_perm

from ._shared import M_LISTS, aot_memory, call_times, flat, fmt_ratio, path_b_fn, random_theta

BRUTE_CASES = ((8, 4, "distinct"), (8, 4, "iid"))
VALUE_TOL = 1e-12  # |ℒ_pathB − ℒ_brute| ≤ VALUE_TOL·max(1, |ℒ|), asserted


def bench_brute(L: int, n: int, dist: str, args) -> dict:
    lists, perm = random_lists(L, M_LISTS, args.seed), random_perm(L, args.seed)
    theta = random_theta(L, args.seed)
    t0 = time.perf_counter()
    prob = DecisionList(L, n, lists, perm, distribution=dist)
    table_s = time.perf_counter() - t0
    fn, arrs = path_b_fn(prob)
    ex_c, ex_compile, _ = aot_memory(fn, arrs, theta)
    _, ex_warm, (v, g) = call_times(ex_c, arrs, theta, repeats=args.repeats)

    def brute(theta):
        return brute_force_loss(theta["W"], theta["V"], L, n, lists, perm, dist)

    bf_c, bf_compile, _ = aot_memory(jax.value_and_grad(brute), theta)
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


def run(args) -> list[dict]:
    return [bench_brute(L, n, dist, args) for L, n, dist in BRUTE_CASES]


def section_lines(p1: list[dict]) -> list[str]:
    out = []
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
    return out


def conclusions(p1: list[dict]) -> list[str]:
    out = []
    if p1:
        out.append(
            "Path B equals brute force to ≤ " + f"{max(r['dv'] for r in p1):.0e} in the loss and "
            f"{max(r['dg'] for r in p1):.0e} in the gradient at (8, 4), and is "
            + " / ".join(f"{fmt_ratio(r['ratio'])} ({r['dist']})" for r in p1)
            + " faster warm; compile times are comparable."
        )
    return out


def headline_rows(p1: list[dict]) -> list[dict]:
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
    return rows


def checks(p1: list[dict]) -> list[tuple[str, bool]]:
    return [(f"({r['L']}, {r['n']}) {r['dist']}: path B equals brute force", r["ok"]) for r in p1]
