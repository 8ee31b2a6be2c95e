"""Benchmark: decision lists (docs/models/decision_lists.md §3, §5, §6) — popdyn's exact paths against the baselines a
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
   rtol 1e-10, + ``first_passage`` on 4000 log-spaced records) against the baseline a researcher would use: for
   each list length m the reduced ODE dw_i/dt = −∂ℒ_m/∂w_i, dω/dt = −(1/(L−m))·∂ℒ_m/∂ω with ℒ_m = ``column_loss``
   (jitted JAX gradient as the right-hand side) integrated by ``scipy.integrate.solve_ivp(method="LSODA",
   rtol=1e-9, atol=1e-12, dense_output=True)`` over the same horizon t1, T* located by bisection (to relative
   1e-12) on the PC condition w_1 > … > w_m > ω (exact for distinct tokens with n ≥ 3, L ≥ n+M−1, §4) through the
   dense output. A tighter reference (DOP853, rtol 1e-13, atol 1e-15, integrated to 1.5·T*) arbitrates the
   difference. Cases: (10, 3, 3, c = 10) and (20, 5, 3, c = 20) (reference values of §5) and (30, 8, 3) at
   the theorem's c = 4n·log L/δ. Cold = first call in the process (compile included); warm = median of 5.

3. Theorem 2's λ_max(θ₀) over random draws (§6): for (L, n, m) = (32, 29, 2) and (23, 20, 1), θ₀ built exactly as
   ``theorem2_run`` does (``theorem2_instance``; ``DecisionList(L, n, random_lists(L, m, seed),
   random_perm(L, seed), c=c, init_eps=ε)``; ``prob.init(PRNGKey(seed))``: W₀ = 0, V₀ = cP + U(−ε/2, ε/2)) for
   seeds 0..--t2-seeds−1, λ_max by ``popdyn.lambda_max(prob, θ₀, iters=--lanczos-iters)`` (Lanczos on exact
   Hessian-vector products; 2L² > 512 parameters). Reports min/median/max, where §6's sanity-run value falls, and
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

Modules: ``brute_force`` (1a), ``monte_carlo`` (1b), ``theorem1`` (2), ``theorem2`` (3); ``_shared`` holds their
timing helpers; this module parses the options, runs the parts in turn and writes the section.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks._common import REPO, finish_section, make_headline, parser, publish, run_header

from . import brute_force, monte_carlo, theorem1, theorem2
from ._shared import M_LISTS

SECTION = "## Decision lists: exact paths, Theorem 1 and Theorem 2"


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
    out += brute_force.section_lines(p1)
    out += monte_carlo.section_lines(mc, args)
    out += theorem1.section_lines(t1)
    out += theorem2.section_lines(t2, args)
    out.append("What this shows:")
    out.append("")
    for line in conclusions(p1, mc, t1, t2):
        out.append(f"- {line}")
    return finish_section(out, info)


def conclusions(p1, mc, t1, t2) -> list[str]:
    return (
        brute_force.conclusions(p1) + monte_carlo.conclusions(mc) + theorem1.conclusions(t1) + theorem2.conclusions(t2)
    )


def headline(p1, mc, t1, t2, args, command: str, date: str, info: dict, total: float) -> dict:
    """Headline figures for run_all's summary: exact vs MC (gradient criterion) at ε = 1e-3 (or the finest ε run)
    per case — the largest case is the task's row, its MC time from the actual run where there was one —, path B
    vs brute force, Theorem 1 vs LSODA and Theorem 2's Lanczos vs eigsh (warm)."""
    rows = (
        brute_force.headline_rows(p1)
        + monte_carlo.headline_rows(mc)
        + theorem1.headline_rows(t1)
        + theorem2.headline_rows(t2)
    )
    checks = brute_force.checks(p1) + monte_carlo.checks(mc)
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
    p1 = brute_force.run(args)
    print("\n=== 1b. path B at larger sizes vs Monte Carlo ===", flush=True)
    mc = monte_carlo.run(args)
    print("\n=== 2. Theorem 1 T*: theorem1_run vs solve_ivp LSODA ===", flush=True)
    t1 = theorem1.run(args)
    print("\n=== 3. Theorem 2 λ_max(θ₀) ===", flush=True)
    t2 = theorem2.run(args)
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
