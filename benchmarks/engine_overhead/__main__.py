"""Benchmark: where popdyn's gradient-descent and gradient-flow engines spend their time, against hand-written
jitted kernels of the same dynamics on the canonical Markov (e, w) problem (profiled bias).

What it measures
----------------
Problem: ``popdyn.tasks.markov.Canonical(p=0.9, q=0.9)``, θ = {"e", "w"}, float64; initialisations
``Grid.square("e", "w", -2, 2, n).points(prob)``.

1. Gradient descent (default n = 256, i.e. 65,536 points; 2,000 steps at η = 0.1):

   * ``popdyn.gradient_descent(prob, θ0, lr, steps, record_every=steps)``, and with its defaults (``record_every=1``:
     loss and ‖∇L‖ recorded at every step);
   * the engine split, within each timed engine call (blocking timers around the parts): its jitted loop
     ``popdyn.dynamics._descent._descend_batch``, its ``finish`` pass (``popdyn.dynamics._trajectory``: the Newton test
     of points whose budget ran out, Hessian eigenvalues of converged points, final losses, packaging) with finish's
     jitted parts, and the rest (validation, ``as_batch``, keys, ``map_chunks``, Python) = total − loop − finish;
   * the hand kernels: a jitted, vmapped ``lax.scan`` of θ ← θ − η∇L(θ) with ∇L = ``jax.grad(prob.loss)`` and with
     the closed form ∇L = ℓ'(A)·(2c(w)e, 4|w|e²), A = c(w)e², c(w) = 1 + 2w|w|, ℓ' = ``prob.profile_slope``;
     for ``record_every=1`` the same scan emitting (L, ‖∇L‖) from the one ``value_and_grad`` it needs per step
     (records 0..steps, as the engine's). End points must equal the engine's to 1e-12 (checked), records too; also
     a naive autodiff of the profiled loss that bypasses its custom_jvp (what the custom_jvp saves);
   * ablations of the engine loop: ``gd_replica`` is a copy of the loop body of ``_descend_batch`` (plain GD branch)
     whose parts can be switched off or replaced: the per-step divergence bookkeeping (‖θ‖, isfinite, where), the
     per-step PRNG key (``fold_in`` + ``split``), the snapshot at each record (a second ``value_and_grad`` per
     record, "separate") against records from the step's own evaluation ("fused") or a gradient carried from step
     to step ("carry"), the per-point ``ts`` output (a (B, T) array of identical rows), the record layout, and the
     stopping rule at each record ("norm": ‖∇L‖ < gtol; "curvature": ‖f‖³ ≤ δ·(−fᵀJf) with a jvp of the field, as
     ``popdyn.dynamics._stopping``; "secant": the same rule with gᵀHg ≈ g_k·(g_k − g_{k+1})/η from the next step's
     gradient, no jvp). With every part as the engine's it must reproduce the engine's loop output (checked;
     it may stop doing so after an engine change); each ablation's agreement with the engine (end points, t_final,
     status, records) is printed and stored;
   * per-point cost (XLA ``cost_analysis`` of the vmapped building block: flops and transcendentals) of the
     closed-form gradient, ``jax.grad(prob.loss)``, the naive autodiff, ``value_and_grad``, the two stopping tests,
     the divergence bookkeeping and the PRNG calls.

2. Gradient flow (default n = 64, 4,096 points; t1 = 1e4):

   * ``popdyn.gradient_flow(prob, θ0, t1, ts=None)`` split as above (``popdyn.dynamics._flow._solve_batch``, finish,
     rest), and with its default ts = 64 records;
   * the hand kernel: ``diffrax.diffeqsolve`` vmapped over the points, Tsit5, PIDController(rtol=1e-8, atol=1e-10,
     pcoeff=0.3, icoeff=0.4), dt0 = None, max_steps = 100,000, throw=False, ``SaveAt(t1=True)`` and the engine's
     steady-state event (``--rule auto``: the curvature rule with its speed floor when ``popdyn.dynamics._stopping``
     exists, else the older ‖f(θ)‖ < atol + rtol‖θ‖) plus the blow-up event ‖θ‖ > 1e8 or non-finite; its end
     points must equal the engine's;
   * ablations (``flow_replica``): the engine's record ``SaveAt`` (t1 and ``ts`` with a loss/‖∇L‖ fn) and the same
     with 64 record times; the steady event's per-step cost, isolated by an "oracle" event t ≥ t_stop (t_stop = the
     engine's own t_final per point: the very same steps, no field evaluation in the event); the blow-up test; the
     other stopping rule.

Timing: every variant runs once first (compiling; checked), then all variants of a group are timed round-robin in the
same process, ``--repeats`` rounds (``--flow-repeats`` for the flow), each call blocked until ready; the table shows
the best and the median round, their percentage of the engine total and their ratio to the group's hand kernel. The
machine may be shared: the load average before and after each group is stored; trust ratios, not seconds.

Which popdyn is measured: the one ``import popdyn`` finds; its path and git state are printed and stored. ``python -m``
puts the current directory first on the path, so from the repository root that is the checkout. To measure another
copy (e.g. a ``git archive HEAD popdyn`` snapshot with a COMMIT file, to compare engine versions), run from outside
both: ``cd /tmp && PYTHONPATH=/some/copy:/path/to/repo python -m benchmarks.engine_overhead``.

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.engine_overhead                 # GD 256² × 2000 steps, flow 64²; ~20 min on 2 busy cores
    python -m benchmarks.engine_overhead --quick         # GD 64² × 200 steps, flow 16²; writes nothing
    python -m benchmarks.engine_overhead --skip-rec1     # without the record_every=1 group (3+ GB of records)
Options: --gd-grid N, --steps S, --lr, --flow-grid N, --t1, --repeats R, --flow-repeats R, --rule, --json PATH.
Writes ``benchmarks/results/engine_overhead.json`` (full run; ``--json`` to choose). Peak memory ~13 GB at the
defaults (the record_every=1 group).

Modules: ``gd`` (part 1: hand GD kernels, the replica of the engine's loop and its ablations), ``flow`` (part 2),
``building_blocks`` (per-point costs), ``_dynamics`` (tolerances, gradients and stopping tests of the hand kernels),
``_timing`` (races, the engine split, the printed tables); this module runs them and writes the JSON file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import popdyn
from benchmarks._common import REPO, fmt_time, headline_row, make_headline, parser, peak_rss_gb, run_header
from popdyn.tasks.markov import Canonical

from ._timing import popdyn_source
from .building_blocks import building_blocks
from .flow import flow_group
from .gd import gd_group

SCRIPT = "engine_overhead"
HEADING = "## Engine overhead: GD and flow against hand-written kernels"  # the section of RESULTS.md


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="GD 64² × 200 steps, flow 16²; writes nothing unless --json")
    ap.add_argument("--gd-grid", type=int, default=None, help="GD grid n (n² points; default 256)")
    ap.add_argument("--steps", type=int, default=None, help="GD steps (default 2000)")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--flow-grid", type=int, default=None, help="flow grid n (default 64)")
    ap.add_argument("--t1", type=float, default=1e4)
    ap.add_argument("--p", type=float, default=0.9)
    ap.add_argument("--q", type=float, default=0.9)
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds of the GD groups (best reported)")
    ap.add_argument("--flow-repeats", type=int, default=10, help="timed rounds of the flow group")
    ap.add_argument(
        "--rule",
        choices=("auto", "norm", "curvature"),
        default="auto",
        help="stopping rule of the hand kernels and replicas: auto = the engine's (curvature when "
        "popdyn.dynamics._stopping exists, else HEAD-before-it's ‖∇L‖ / ‖f‖ norm test)",
    )
    ap.add_argument("--skip-rec1", action="store_true", help="skip the record_every=1 GD group")
    ap.add_argument("--skip-gd", action="store_true")
    ap.add_argument("--skip-flow", action="store_true")
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"where to write the numbers (default benchmarks/results/{SCRIPT}.json; --quick: none)",
    )
    args = ap.parse_args(argv)
    args.gd_grid = args.gd_grid or (64 if args.quick else 256)
    args.steps = args.steps or (200 if args.quick else 2000)
    args.flow_grid = args.flow_grid or (16 if args.quick else 64)
    if args.json is None and not args.quick:
        args.json = REPO / "benchmarks" / "results" / f"{SCRIPT}.json"
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command, date, info = run_header(SCRIPT, argv)
    src = popdyn_source()
    if args.rule == "auto":
        args.rule = "curvature" if src["has_stopping_module"] else "norm"
    print(f"  popdyn measured: {src}; stopping rule of the hand kernels and replicas: {args.rule}", flush=True)
    t0 = time.perf_counter()
    prob = Canonical(args.p, args.q)
    checks, out = [], {"popdyn_source": src, "settings": vars(args) | {"json": str(args.json)}}
    out["building_blocks"] = building_blocks(prob)
    print("\nPer-point cost of one evaluation (XLA cost analysis of the vmapped block):")
    for r in out["building_blocks"]:
        print(
            f"  {r['block']:44s} "
            + (
                f"flops {r['flops']:8.1f}  transcendentals {r['transcendentals']:5.1f}"
                if "error" not in r
                else r["error"]
            )
        )
    if not args.skip_gd:
        theta = popdyn.Grid.square("e", "w", -2, 2, args.gd_grid).points(prob)
        out["gd_record_end"] = gd_group(prob, theta, args, args.steps, checks)
        if not args.skip_rec1:
            out["gd_record_every_step"] = gd_group(prob, theta, args, 1, checks)
    if not args.skip_flow:
        theta = popdyn.Grid.square("e", "w", -2, 2, args.flow_grid).points(prob)
        out["flow"] = flow_group(prob, theta, args, checks)
    total = time.perf_counter() - t0
    rows = []
    for key, label in (("gd_record_end", "record_every=steps"), ("gd_record_every_step", "record_every=1 (default)")):
        if key in out:
            g = out[key]
            rows.append(
                headline_row(
                    "engine-overhead",
                    f"GD {g['points']:,} points × {g['steps']} steps, {label}: engine vs hand kernel",
                    "`popdyn.gradient_descent`",
                    g["times_best"]["engine"],
                    g["hand"],
                    g["times_best"][g["hand"]],
                    primary=key == "gd_record_end",
                    note=f"engine ÷ hand {g['engine_over_hand']:.2f}, loop ÷ hand {g['loop_over_hand']:.2f}",
                )
            )
    if "flow" in out:
        f = out["flow"]
        rows.append(
            headline_row(
                "engine-overhead",
                f"gradient flow {f['points']:,} points, t1 = {f['t1']:g}, ts=None: engine vs hand diffeqsolve",
                "`popdyn.gradient_flow`",
                f["times_best"]["engine"],
                f["hand"],
                f["times_best"][f["hand"]],
                note=f"engine ÷ hand {f['engine_over_hand']:.2f}, solve ÷ hand {f['solve_over_hand']:.2f}",
            )
        )
    print("\nChecks:")
    for name, ok in checks:
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}")
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, total, rows, checks)
    head["details"] = out
    head["peak_rss_gb"] = peak_rss_gb()
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(head, indent=1, ensure_ascii=False, default=float) + "\n")
        print(f"\nwrote {args.json}")
    print(f"total {fmt_time(total)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
