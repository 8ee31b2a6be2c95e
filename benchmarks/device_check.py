"""Benchmark: the accelerator check — popdyn's basin maps and SGD ensembles on whatever device JAX finds (a GPU when
one is there), against the CPU baselines a researcher would otherwise write, with their correctness checks, in one
run of under 8 minutes.

What it measures (float64, JAX's default device; the baselines run on the CPU)
-----------------------------------------------------------------------------
1. **Basin maps** of ``Canonical(p, q)`` at --map-points initialisations (default 10⁶: a 1000² grid), flow and GD,
   exactly as ``benchmarks.throughput`` does: each method in a fresh subprocess (``throughput.run_worker``), cold
   (first call, compilation included) and warm; compute = warm − the trace/compile time JAX reports in it; points/s
   = n ÷ compute. Baseline: ``throughput.baseline``, the ``solve_ivp`` RK45 loop on --baseline-points random points
   of the flow grid, extrapolated to n at its points/s. Checks: the flow labels against the closed-form
   ``Canonical.predicted_basin`` and the baseline's labels against popdyn's flow labels (each ≥ 99% agreement).
2. **SGD ensembles**: ``popdyn.sgd`` with --seeds runs (default 10⁴) of --steps steps (η = --lr, B = --batch, drawn
   with replacement) from one generic θ₀, on a user table model (``benchmarks.sgd_noise.table_case``, least squares
   on n = 16,384 rows in R^16) and on a built-in task (its ``teacher_case``, the linear ``BilinearTeacher`` on its
   6,561 Gauss–Hermite examples), each in a fresh subprocess, cold and warm; time per run = warm ÷ seeds. Baseline:
   the same SGD as a NumPy loop, one run at a time (``benchmarks._sgd_baselines.examples_sgd``: ``rng.choice`` by
   the weights, a hand-written mean gradient), up to --numpy-runs runs, extrapolated to --seeds runs. Checks: the
   NumPy gradient equals JAX autodiff (< 1e-10 relative); every popdyn run took all its steps and stayed finite; the
   spread check: the ensemble's mean ‖θ_T − θ_GD,T‖² within 3 standard errors of ``popdyn.sgd_spread``'s
   first-order tr C_T (exact for least squares, first order in η for the teacher), and the NumPy runs' mean within
   4 of it (from 30 NumPy runs on).
3. **Time guard**: the parts share --budget seconds (default 420) on a cumulative schedule (flow map 40%, GD map
   55%, baseline 60%, SGD table 80%, SGD teacher 100%: time a part leaves unused goes to the next); each worker
   subprocess is killed at its part's deadline, the NumPy loops stop at a fifth of their part's time, and a part
   that timed out or failed is reported as such (its checks NOT RUN, exit status 1). The results file is rewritten
   after every part, so a run cut short still leaves what it measured.

Output: the section "## Accelerator check (device_check)" of the results file — the device (``jax.devices()[0]``'s
device_kind and platform, the device count), the JAX and jaxlib versions, sizes, times, points/s, ratios against the
baselines and the checks — and its figures in ``results/device_check_<device>.json`` next to it. A run on the CPU says
so in the section and never replaces a section written on an accelerator (it then writes only its JSON file).

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.device_check          # the GPU session's command (timeout 600 s): ~4-5 min on an H100
    python -m benchmarks.device_check --quick  # 10³ map points, 10² baseline points, 64 seeds × 5 steps, 30
                                               # NumPy runs: ~1.5 min on 2 busy CPU cores, compilation mostly;
                                               # writes nothing unless --results PATH
Options: --map-points, --baseline-points, --seeds, --steps, --lr, --batch, --numpy-runs, --budget, --p, --q, --seed,
--chunk-size, --results PATH.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from benchmarks import throughput
from benchmarks._common import (
    REPO,
    finish_section,
    fmt_ratio,
    fmt_time,
    headline_row,
    json_path,
    make_headline,
    parser,
    publish,
    run_header,
    write_section,
)

SCRIPT = "device_check"
HEADING = "## Accelerator check (device_check)"
MARK = "DEVICE-CHECK-RESULT "  # prefix of an SGD worker's one-line JSON answer on stdout
ACCELERATOR_MARK = "Device: accelerator"  # the line that says a section was written on an accelerator
SCHEDULE = (("flow", 0.40), ("gd", 0.55), ("baseline", 0.60), ("table", 0.80), ("teacher", 1.00))
SPREAD_SE, NUMPY_SE = 3.0, 4.0  # the spread check's bounds in standard errors: popdyn's ensemble, the NumPy runs
GRAD_TOL = 1e-10  # the NumPy gradient against autodiff, relative
NUMPY_CHECK_RUNS = 30  # fewer NumPy runs give no usable standard error (heavy tails): their check is not made


# ---------------------------------------------------------------------------------------------------------------
# The device
# ---------------------------------------------------------------------------------------------------------------
def device() -> dict:
    """JAX's default device: its kind, platform and count, and the JAX and jaxlib versions."""
    import jaxlib

    dev = jax.devices()[0]
    return {
        "kind": dev.device_kind,
        "platform": dev.platform,
        "count": len(jax.devices()),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }


def device_slug(kind: str) -> str:
    """A device kind as a file-name part: "NVIDIA H100 80GB HBM3" → "nvidia_h100_80gb_hbm3", "cpu" → "cpu"."""
    return re.sub(r"[^A-Za-z0-9]+", "_", kind).strip("_").lower()


# ---------------------------------------------------------------------------------------------------------------
# SGD worker: one model in a fresh process
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SgdResult:
    """One model's SGD ensemble against its NumPy loop and ``sgd_spread`` (module docstring, part 2)."""

    model: str
    d: int
    n: int
    seeds: int
    steps: int
    lr: float
    batch: int
    cold: float  # popdyn.sgd, first call (compilation included), seconds
    warm: float  # an identical second call
    numpy_runs: int  # NumPy loop runs done within its time
    numpy_wall: float
    numpy_mean_sq: float  # their mean ‖θ_T − θ_GD,T‖²
    numpy_se_sq: float
    grad_check: float  # max relative difference of the NumPy gradient against autodiff
    all_steps: bool  # every popdyn run took all its steps
    finite: bool  # and stayed finite
    mean_sq: float  # the ensemble's mean ‖θ_T − θ_GD,T‖² and its standard error
    se_sq: float
    predicted: float  # sgd_spread's tr C_T
    spread_cold: float  # sgd_spread's first call, seconds

    @property
    def per_run(self) -> float:
        return self.warm / self.seeds

    @property
    def numpy_per_run(self) -> float:
        return self.numpy_wall / self.numpy_runs

    @property
    def z(self) -> float:
        return abs(self.mean_sq - self.predicted) / self.se_sq

    @property
    def numpy_z(self) -> float:
        return abs(self.numpy_mean_sq - self.predicted) / self.numpy_se_sq

    def checks(self) -> list[tuple[str, bool]]:
        """The PASS/FAIL checks; the NumPy runs' spread only from ``NUMPY_CHECK_RUNS`` runs on."""
        numpy = [(f"{self.model}: NumPy runs' mean ‖θ − θ_GD‖² within {NUMPY_SE:g} SE", self.numpy_z <= NUMPY_SE)]
        return [
            *numpy[: self.numpy_runs >= NUMPY_CHECK_RUNS],
            (f"{self.model}: NumPy gradient equals autodiff (< {GRAD_TOL:g})", self.grad_check < GRAD_TOL),
            (f"{self.model}: every popdyn.sgd run took all {self.steps} steps, finite", self.all_steps and self.finite),
            (f"{self.model}: ensemble mean ‖θ − θ_GD‖² within {SPREAD_SE:g} SE of sgd_spread", self.z <= SPREAD_SE),
        ]


def sgd_case(model: str, quick: bool):
    """(``sgd_noise.Case``, the NumPy mean gradient over drawn rows, the example table as NumPy arrays, weights)."""
    from benchmarks import _sgd_baselines as base
    from benchmarks.sgd_noise import table_case, teacher_case

    case = table_case(*((4096, 8) if quick else (16_384, 16))) if model == "table" else teacher_case()
    data = case.prob.examples()
    points = {k: np.asarray(v) for k, v in data.points.items()}
    grad = base.least_squares_grad if model == "table" else base.teacher_examples_grad(base.NumpyTeacher(case.prob))
    return case, grad, points, np.asarray(data.weights)


def mean_se(sq: np.ndarray) -> tuple[float, float]:
    return float(np.mean(sq)), float(np.std(sq, ddof=1) / math.sqrt(sq.size))


def numpy_loop(case, grad, points, weights, end: np.ndarray, args, seconds: float) -> tuple[int, float, np.ndarray]:
    """NumPy SGD runs (seeds 0, 1, …) until --numpy-runs or ``seconds`` are spent (at least two runs): (runs, wall
    seconds, their ‖θ_T − θ_GD,T‖²)."""
    from jax.flatten_util import ravel_pytree

    from benchmarks._sgd_baselines import examples_sgd

    w = weights / weights.sum()  # rng.choice wants probabilities summing to 1 to rounding
    theta0 = jax.tree_util.tree_map(np.asarray, case.theta)
    sq, t0 = [], time.perf_counter()
    while len(sq) < args.numpy_runs and (len(sq) < 2 or time.perf_counter() - t0 < seconds):
        final = examples_sgd(grad, points, w, theta0, args.lr, args.batch, args.steps, seed=len(sq))
        sq.append(float(np.sum((np.asarray(ravel_pytree(final)[0]) - end) ** 2)))
    return len(sq), time.perf_counter() - t0, np.asarray(sq)


def sgd_worker(model: str, args) -> SgdResult:
    """popdyn.sgd (cold, warm) with --seeds runs, sgd_spread's prediction, the NumPy loop and its gradient check."""
    from jax.flatten_util import ravel_pytree

    import popdyn
    from benchmarks._common import cold_warm
    from benchmarks._sgd_baselines import examples_grad_check

    case, grad, points, weights = sgd_case(model, args.quick)
    settings = {"lr": args.lr, "batch": args.batch, "steps": args.steps, "replace": True}
    traj, cold, warm = cold_warm(lambda: popdyn.sgd(case.prob, case.theta, seeds=args.seeds, **settings))
    t0 = time.perf_counter()
    spread = popdyn.sgd_spread(case.prob, case.theta, record_every=args.steps, **settings)
    spread_cold = time.perf_counter() - t0
    end = np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda a: a[-1], spread.path))[0])
    finals = np.asarray(jax.vmap(lambda t: ravel_pytree(t)[0])(traj.final))
    mean, se = mean_se(np.sum((finals - end) ** 2, axis=1))
    runs, wall, sq_np = numpy_loop(case, grad, points, weights, end, args, args.worker_budget / 5)
    np_mean, np_se = mean_se(sq_np)
    return SgdResult(
        model=case.name, d=int(end.size), n=int(weights.size), seeds=args.seeds, steps=args.steps, lr=args.lr,
        batch=args.batch, cold=cold, warm=warm, numpy_runs=runs, numpy_wall=wall, numpy_mean_sq=np_mean,
        numpy_se_sq=np_se, grad_check=examples_grad_check(case.prob, grad, case.theta, points, args.batch, 0),
        all_steps=bool(np.all(np.asarray(traj.n_steps) == args.steps)),
        finite=bool(np.all(np.isfinite(finals))), mean_sq=mean, se_sq=se,
        predicted=float(spread.expected_sq_distance[-1]), spread_cold=spread_cold,
    )  # fmt: skip


SGD_OPTIONS = ("quick", "seeds", "steps", "lr", "batch", "numpy_runs")


def run_sgd_worker(model: str, args, timeout: float) -> SgdResult:
    """One SGD worker subprocess, killed after ``timeout`` seconds (``subprocess.TimeoutExpired``); its answer."""
    opts = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in SGD_OPTIONS if k != "quick"]
    cmd = [sys.executable, "-m", "benchmarks.device_check", "--worker", model, f"--worker-budget={timeout}", *opts]
    proc = subprocess.run(cmd + ["--quick"] * args.quick, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)), None)
    if proc.returncode or line is None:
        raise RuntimeError(f"SGD worker {model} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    r = SgdResult(**json.loads(line[len(MARK) :]))
    print(
        f"{r.model}: popdyn.sgd {r.seeds:,} runs × {r.steps} steps cold {fmt_time(r.cold)}, warm {fmt_time(r.warm)}"
        f" ({fmt_time(r.per_run)} per run); NumPy loop {r.numpy_runs} runs {fmt_time(r.numpy_per_run)} per run; "
        f"mean ‖θ − θ_GD‖² {r.mean_sq:.6g} ± {r.se_sq:.2g} vs sgd_spread {r.predicted:.6g} (z = {r.z:.2f})",
        flush=True,
    )
    return r


# ---------------------------------------------------------------------------------------------------------------
# Parent: the parts on their schedule
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What the parts gave so far: the maps (``throughput.run_worker``'s answers by method), the baseline
    (``throughput.baseline``), the SGD results by model, and the parts that did not complete, with why."""

    maps: dict = dataclasses.field(default_factory=dict)
    base: dict | None = None
    sgd: dict = dataclasses.field(default_factory=dict)
    incomplete: dict = dataclasses.field(default_factory=dict)


MIN_PART_S = 5.0  # a part with less of the budget left than this is not started


def run_part(name: str, work, deadline: float, run: Run) -> None:
    """``work(seconds left)`` for one part, or the reason it did not complete in ``run.incomplete``."""
    left = deadline - time.perf_counter()
    if left < MIN_PART_S:
        run.incomplete[name] = f"not started: {max(left, 0):.0f} s of its schedule left"
        return
    try:
        work(left)
    except subprocess.TimeoutExpired:
        run.incomplete[name] = f"killed by the time guard after {left:.0f} s"
    except RuntimeError as err:
        run.incomplete[name] = "failed: " + str(err).strip().splitlines()[-1][:300]
    if name in run.incomplete:
        print(f"{name}: {run.incomplete[name]}", flush=True)


def part_work(name: str, args, run: Run):
    """The work of one part of ``SCHEDULE``, a function of the seconds it has left."""

    def a_map(left):
        run.maps[name] = throughput.run_worker(name, args.map_points, args, timeout=left)

    def baseline(left):
        if "flow" not in run.maps:
            raise RuntimeError("needs the flow map's labels, which did not come")
        run.base = throughput.baseline(args, run.maps["flow"])

    def an_sgd(left):
        run.sgd[name] = run_sgd_worker(name, args, left)

    return {"flow": a_map, "gd": a_map, "baseline": baseline}.get(name, an_sgd)


def section_text(section: str) -> str:
    """The body of ``HEADING``'s section of a results file's text, or "" when it has none."""
    lines = section.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == HEADING), None)
    if start is None:
        return ""
    end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
    return "\n".join(lines[start:end])


def writable(results: Path | None, dev: dict) -> bool:
    """Whether this run may write its section into ``results``: not on the CPU over an accelerator's section."""
    if results is None:
        return False
    if dev["platform"] != "cpu" or not results.exists():
        return True
    return ACCELERATOR_MARK not in section_text(results.read_text())


# ---------------------------------------------------------------------------------------------------------------
# The section and the headline figures
# ---------------------------------------------------------------------------------------------------------------
def device_lines(dev: dict, quick: bool) -> list[str]:
    """Which device ran, and on the CPU, that this is no accelerator evidence."""
    what = (
        f"`{dev['kind']}` (platform {dev['platform']}, {dev['count']} device(s) in `jax.devices()`); jax "
        f"{dev['jax']}, jaxlib {dev['jaxlib']}; float64"
    )
    if dev["platform"] != "cpu":
        return [f"{ACCELERATOR_MARK} {what}."]
    return [
        f"**No GPU figure exists yet.** This section comes from a run on the CPU, {what}"
        + (", at the `--quick` sizes" if quick else "")
        + ": it shows that the script runs and that its checks pass, and is not evidence about any accelerator. A "
        "GPU session runs `python -m benchmarks.device_check` (timeout 600 s), which replaces this section with the "
        "accelerator's figures; a CPU run never replaces those."
    ]


def map_lines(run: Run, args) -> list[str]:
    """The basin-map table: popdyn per method against the solve_ivp loop extrapolated to the same points."""
    base = run.base
    out = [
        f"**Basin maps** of `Canonical({args.p:g}, {args.q:g})` on the square [−3, 3]² (`benchmarks.throughput`'s "
        "worker and settings: flow Tsit5 rtol 1e-8, atol 1e-10; GD lr 0.5 × 2000 steps); compute = warm − the "
        "trace/compile time JAX reports in it. Baseline: the `solve_ivp` RK45 loop on "
        + (f"{base['points']} random points of the flow grid, extrapolated to n." if base else "– (not run).")
        + "",
        "",
        "| method | grid | points n | cold | warm | compute | points/s | solve_ivp loop for n (extrapolated) | "
        "speed-up | labels = predicted_basin |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m, r in run.maps.items():
        pps = r["n"] / r["compute"]
        loop = f"{fmt_time(r['n'] / base['pps'])} | {fmt_ratio(pps / base['pps'])}" if base else "– | –"
        agree = f"{r['agree_pred']:.6f}" if "agree_pred" in r else "–"
        out.append(
            f"| {m} | {r['side']}² | {r['n']:,} | {fmt_time(r['cold'])} | {fmt_time(r['warm'])} | "
            f"{fmt_time(r['compute'])} | {pps:,.0f} | {loop} | {agree} |"
        )
    if base:
        out.append(
            f"| solve_ivp loop (baseline) | {base['points']} of {base['side']}² | {base['points']} | – | – | "
            f"{fmt_time(base['wall'])} | {base['pps']:,.1f} | – | 1× | {base['agree_flow']:.4f} of popdyn's flow |"
        )
    return [*out, ""]


def sgd_lines(run: Run, args) -> list[str]:
    """The SGD table: popdyn.sgd's ensemble against the NumPy loop, and the spread check."""
    out = [
        f"**SGD ensembles**: `popdyn.sgd(prob, θ₀, lr={args.lr:g}, batch={args.batch}, steps={args.steps}, "
        f"seeds={args.seeds:,}, replace=True)` from one generic θ₀; per run = warm ÷ seeds. Baseline: the same SGD "
        "as a NumPy loop, one run at a time (`benchmarks._sgd_baselines.examples_sgd`), extrapolated to the seeds. "
        f"Spread check: mean ‖θ_T − θ_GD,T‖² over the runs against `popdyn.sgd_spread`'s tr C_T (pass: within "
        f"{SPREAD_SE:g} SE; the NumPy runs within {NUMPY_SE:g}, from {NUMPY_CHECK_RUNS} runs on).",
        "",
        "| model | d | examples | popdyn cold | popdyn warm | per run | NumPy runs | NumPy per run | NumPy for the "
        "seeds (extrapolated) | speed-up per run | mean ‖θ − θ_GD‖² ± SE | sgd_spread tr C_T | z | NumPy runs' z |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in run.sgd.values():
        out.append(
            f"| {r.model} | {r.d} | {r.n:,} | {fmt_time(r.cold)} | {fmt_time(r.warm)} | {fmt_time(r.per_run)} | "
            f"{r.numpy_runs} | {fmt_time(r.numpy_per_run)} | {fmt_time(r.numpy_per_run * r.seeds)} | "
            f"{fmt_ratio(r.numpy_per_run / r.per_run)} | {r.mean_sq:.6g} ± {r.se_sq:.2g} | {r.predicted:.6g} | "
            f"{r.z:.2f} | {f'{r.numpy_z:.2f}' if r.numpy_runs >= NUMPY_CHECK_RUNS else '– (too few runs)'} |"
        )
    return [*out, ""]


def checks(run: Run) -> list[tuple[str, bool]]:
    """Every PASS/FAIL check, a part that did not complete failing its own."""
    out = [(f"{m} map: labels agree with predicted_basin", r["agree_pred"] >= throughput.AGREE_MIN) for m, r in
           run.maps.items() if "agree_pred" in r]  # fmt: skip
    if run.base:
        out.append(("solve_ivp labels agree with popdyn's flow labels", run.base["agree_flow"] >= throughput.AGREE_MIN))
    for r in run.sgd.values():
        out += r.checks()
    return out + [(f"part {name} completed ({why})", False) for name, why in run.incomplete.items()]


def render(run: Run, dev: dict, args, command: str, date: str, info: dict, total: float) -> str:
    lines = [
        HEADING,
        "",
        *device_lines(dev, args.quick),
        "",
        f"Written by `{command}` on {date} (total run {total:.0f} s of a {args.budget:g} s budget).",
        "",
        *map_lines(run, args),
        *sgd_lines(run, args),
        "Checks:",
        "",
        *(f"- {'PASS' if ok else '**FAIL**'} — {name}" for name, ok in checks(run)),
    ]
    return finish_section(lines, info)


def headline(run: Run, dev: dict, args, command: str, date: str, info: dict, total: float) -> dict:
    """The JSON figures: one row per map (time per point against the loop) and per SGD model (time per run)."""
    rows = [
        headline_row(
            "device-check",
            f"basin map, {m}, {r['n']:,} initialisations on {dev['kind']}: time per initialisation",
            f'`basin_map(method="{m}")`',
            r["compute"] / r["n"],
            f"`solve_ivp` loop ({run.base['points']} points)",
            1.0 / run.base["pps"],
            primary=m == "flow",
        )
        for m, r in run.maps.items()
        if run.base
    ]
    rows += [
        headline_row(
            "device-check",
            f"SGD, time per run ({r.steps} steps) of {r.seeds:,} seeds on {dev['kind']}; {r.model}",
            "`popdyn.sgd`",
            r.per_run,
            f"NumPy loop ({r.numpy_runs} runs)",
            r.numpy_per_run,
        )
        for r in run.sgd.values()
    ]
    head = make_headline(f"{SCRIPT}_{device_slug(dev['kind'])}", HEADING, command, date, info, args.quick, total,
                         rows, checks(run))  # fmt: skip
    head["device"] = dev
    head["maps"], head["baseline"] = run.maps, run.base
    head["sgd"] = {k: dataclasses.asdict(r) for k, r in run.sgd.items()}
    head["incomplete"] = run.incomplete
    return head


# ---------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--map-points", type=float, default=None, help="basin-map initialisations (1e6; --quick 1e3)")
    ap.add_argument("--baseline-points", type=int, default=None, help="solve_ivp points (200; --quick 100)")
    ap.add_argument("--seeds", type=int, default=None, help="SGD runs per ensemble (10000; --quick 64)")
    ap.add_argument("--steps", type=int, default=None, help="SGD steps (200; --quick 5)")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD's step η (default 0.05)")
    ap.add_argument("--batch", type=int, default=8, help="SGD's minibatch B (default 8)")
    ap.add_argument("--numpy-runs", type=int, default=None, help="most NumPy SGD runs per model (100; --quick 30)")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds the parts share (default 420)")
    ap.add_argument("--p", type=float, default=0.1)
    ap.add_argument("--q", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0, help="seed of the baseline subset")
    ap.add_argument("--chunk-size", type=int, default=None, help="basin-map points per compiled call")
    ap.add_argument("--quick", action="store_true", help="small sizes (above); writes nothing unless --results")
    ap.add_argument("--results", type=Path, default=None, help="default benchmarks/RESULTS.md; --quick: none")
    ap.add_argument("--worker", choices=("table", "teacher"), help=argparse.SUPPRESS)  # one SGD model
    ap.add_argument("--worker-budget", type=float, default=60.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    q = args.quick
    for name, full, quick in (("map_points", 1e6, 1e3), ("baseline_points", 200, 100), ("seeds", 10_000, 64),
                              ("steps", 200, 5), ("numpy_runs", 100, 30)):  # fmt: skip
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    args.map_points = int(args.map_points)
    if args.results is None and not q:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    if min(args.map_points, args.seeds, args.numpy_runs) < 2 or min(args.baseline_points, args.steps, args.batch) < 1:
        ap.error("--map-points, --seeds and --numpy-runs must be ≥ 2; --baseline-points, --steps and --batch ≥ 1")
    if not (args.lr > 0 and args.budget > 0):
        ap.error(f"--lr={args.lr} and --budget={args.budget} must be > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(MARK + json.dumps(dataclasses.asdict(sgd_worker(args.worker, args))), flush=True)
        return 0
    command, date, info = run_header(SCRIPT, argv)
    dev, run, t_start = device(), Run(), time.perf_counter()
    results = None if args.results is None else Path(args.results)
    write = writable(results, dev)
    if results is not None and not write:
        print(f"{results} holds an accelerator's section: this CPU run writes only its JSON file", flush=True)
    for name, share in SCHEDULE:
        run_part(name, part_work(name, args, run), t_start + share * args.budget, run)
        if write:  # what is measured so far survives a kill
            total = time.perf_counter() - t_start
            write_section(results, HEADING, render(run, dev, args, command, date, info, total))
    total = time.perf_counter() - t_start
    head = headline(run, dev, args, command, date, info, total)
    publish(render(run, dev, args, command, date, info, total), HEADING, results if write else None, head)
    if results is not None and not write:
        path = json_path(results, head["script"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(head, indent=1, ensure_ascii=False, default=float) + "\n")
    return 0 if all(ok for _, ok in checks(run)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
