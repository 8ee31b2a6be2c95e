"""Shared helpers of the benchmarks: machine information, the run header, writing one benchmark's section of
``benchmarks/RESULTS.md`` while keeping the others, the machine-readable headline file of each benchmark
(``benchmarks/results/<name>.json``, read by ``benchmarks.run_all``), timing and formatting, and the Monte-Carlo
"equal precision" bookkeeping shared by the exact-vs-MC benchmarks.

Every benchmark measures in float64: importing this module switches JAX's ``jax_enable_x64`` on (every benchmark
imports it at start-up, before any computation)."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.flatten_util
import numpy as np

jax.config.update("jax_enable_x64", True)

REPO = Path(__file__).resolve().parent.parent
RESULTS_HEADER = (
    "# popdyn benchmarks\n\n"
    "Measured results written by the benchmarks in `benchmarks/` (`python -m benchmarks.<name>` from the repository "
    "root); each benchmark replaces its own section when re-run. On a GPU, `python -m benchmarks.device_check` (run it "
    'with a 600 s timeout; under 8 min) writes the section "Accelerator check (device_check)": basin maps at 10⁶ '
    "starts and 10⁴-seed SGD ensembles against their CPU baselines, with their checks.\n"
)


def machine_info() -> dict:
    import diffrax
    import jaxlib

    info = {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or "(empty)",
        "uname": " ".join(platform.uname()),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "diffrax": diffrax.__version__,
        "numpy": np.__version__,
        "devices": str(jax.devices()),
    }
    try:
        import scipy

        info["scipy"] = scipy.__version__  # the baselines' solve_ivp / eigsh
    except ImportError:
        pass
    try:
        info["load_avg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as fh:
            models = [ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")]
        if models:
            info["cpu_model"] = models[0]
    except OSError:
        pass
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        info["git"] = head + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def write_section(path: Path, heading: str, section: str, first: bool = False) -> None:
    """Replace (or add) the block under ``heading`` in ``path``, keeping every other section. A new block goes at the
    end, or, with ``first``, right after the file header (before the first ``## `` section)."""
    text = path.read_text() if path.exists() else RESULTS_HEADER
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == heading), None)
    if start is None and first:
        start = end = next((j for j, ln in enumerate(lines) if ln.startswith("## ")), len(lines))
    elif start is None:
        start = end = len(lines)
    else:
        end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
    before = "\n".join(lines[:start]).rstrip("\n")
    after = "\n".join(lines[end:]).strip("\n")
    new = (before + "\n\n" if before else "") + section.rstrip("\n") + "\n" + ("\n" + after + "\n" if after else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def module_name() -> str | None:
    """The dotted name of the module running as ``__main__`` (``benchmarks.lanes`` for ``python -m benchmarks.lanes``,
    ``benchmarks.decision_lists`` for a package's ``__main__``), or None when it was not started with ``-m``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name.removesuffix(".__main__") if spec is not None and spec.name else None


def command_line(argv: list[str] | None) -> str:
    """The command line of this run, as typed: ``python -m benchmarks.<name> ARGS``."""
    args = list(sys.argv[1:] if argv is None else argv)
    name = module_name()
    return "python " + " ".join(shlex.quote(a) for a in [*(["-m", name] if name else [sys.argv[0]]), *args])


def run_header(name: str, argv: list[str] | None) -> tuple[str, str, dict]:
    """Print and return the command line, the ISO date and the machine information of this run."""
    command = command_line(argv)
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    info = machine_info()
    print(f"{name} benchmark, {date}\n{command}")
    for k, v in info.items():
        print(f"  {k}: {v}")
    return command, date, info


def finish_section(lines: list[str], info: dict) -> str:
    """Close a RESULTS.md section: a blank line, the "Machine:" block, and the joined text."""
    return "\n".join([*lines, "", "Machine:", "", *(f"- {k}: {v}" for k, v in info.items()), ""])


def popdyn_env(cache: str) -> dict[str, str]:
    """This process's environment for a ``popdyn`` subprocess run from the repository: JAX's persistent
    compilation cache in ``cache`` (or ``off``) and the repository on the import path."""
    env = dict(os.environ, POPDYN_CACHE_DIR=cache)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def parser(doc: str):
    """An argument parser whose description is the benchmark docstring's first paragraph."""
    import argparse

    name = module_name()
    return argparse.ArgumentParser(
        prog=f"python -m {name}" if name else None,
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def quick_or_full(doc: str, quick_help: str, argv: list[str] | None):
    """Parsed ``--quick`` (with ``quick_help``) and ``--results PATH`` of a benchmark with no other options; the
    results file defaults to benchmarks/RESULTS.md for a full run and to none for a quick one."""
    ap = parser(doc)
    ap.add_argument("--quick", action="store_true", help=f"{quick_help}; writes nothing unless --results")
    ap.add_argument("--results", type=Path, default=None, help="default benchmarks/RESULTS.md; --quick: none")
    args = ap.parse_args(argv)
    if args.results is None and not args.quick:
        args.results = REPO / "benchmarks" / "RESULTS.md"
    return args


def publish(section: str, heading: str, results: str | Path | None, headline: dict | None = None) -> None:
    """Print the section (without its machine block) and write it into ``results`` when given, together with the
    script's headline figures (``headline``, see ``make_headline``) in ``json_path(results, script)``."""
    print("\n" + section.split("\nMachine:")[0].rstrip())
    if results is not None:
        write_section(Path(results), heading, section)
        print(f"\nwrote section '{heading}' to {results}")
        if headline is not None:
            path = json_path(results, headline["script"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(headline, indent=1, ensure_ascii=False, default=float) + "\n")
            print(f"wrote headline figures to {path}")
    else:
        print("\n(--quick: no results file written; pass --results PATH to write one)")


# ---------------------------------------------------------------------------------------------------------------
# Headline figures: benchmarks/results/<name>.json, read by benchmarks.run_all for the summary section
# ---------------------------------------------------------------------------------------------------------------
SUMMARY_EPS = 1e-3  # the relative precision at which every benchmark reports its Monte-Carlo headline


def json_path(results: str | Path, script: str) -> Path:
    """Where a script writing ``results`` (a RESULTS.md) keeps its headline figures: ``results/<script>.json`` next
    to it (``benchmarks/results/`` for the default file)."""
    return Path(results).parent / "results" / f"{script}.json"


def headline_row(
    task: str,
    comparison: str,
    popdyn: str,
    popdyn_s: float,
    baseline: str,
    baseline_s: float,
    primary: bool = False,
    note: str = "",
) -> dict:
    """One popdyn-vs-baseline comparison: what each side computes, its seconds, and baseline ÷ popdyn (> 1: popdyn
    is faster). ``primary`` marks the task's row in the summary table (one per task)."""
    return {
        "task": task,
        "comparison": comparison,
        "popdyn": popdyn,
        "popdyn_s": float(popdyn_s),
        "baseline": baseline,
        "baseline_s": float(baseline_s),
        "speedup": float(baseline_s) / float(popdyn_s),
        "primary": primary,
        "note": note,
    }


def make_headline(
    script: str,
    heading: str,
    command: str,
    date: str,
    info: dict,
    quick: bool,
    wall_s: float,
    rows: list[dict],
    checks: list[tuple[str, bool]],
) -> dict:
    """The machine-readable summary of one run: its comparisons (``headline_row``), PASS/FAIL checks and the
    process's peak resident memory so far."""
    return {
        "script": script,
        "heading": heading,
        "command": command,
        "date": date,
        "quick": quick,
        "wall_s": float(wall_s),
        "peak_rss_gb": peak_rss_gb(),
        "machine": info,
        "rows": rows,
        "checks": [{"name": name, "ok": bool(ok)} for name, ok in checks],
    }


# ---------------------------------------------------------------------------------------------------------------
# Timing, memory and formatting
# ---------------------------------------------------------------------------------------------------------------
def aot(fn, *args):
    """(compiled fn, seconds spent tracing + lowering + compiling)."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def warm_times(fn, *args, repeats: int) -> np.ndarray:
    """Seconds of ``repeats`` calls (after one warm-up call), each blocked until ready."""
    jax.block_until_ready(fn(*args))
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append(time.perf_counter() - t0)
    return np.asarray(out)


def cold_warm(run) -> tuple[object, float, float]:
    """(result, seconds of the first call, seconds of an identical second call), each blocked until ready."""
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        out = jax.block_until_ready(run())
        times.append(time.perf_counter() - t0)
    return out, times[0], times[1]


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (``ru_maxrss``, KiB on Linux), in GB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def accelerator() -> str | None:
    """The kind of JAX's default device when it is not a CPU (e.g. "NVIDIA H100 80GB HBM3"), else None."""
    dev = jax.devices()[0]
    return None if dev.platform == "cpu" else dev.device_kind


def gpu_note() -> str:
    """Whether this run saw a GPU: the accelerators in ``jax.devices()``, or a statement that there were none."""
    gpus = [d for d in jax.devices() if d.platform != "cpu"]
    if gpus:
        return f"GPU run on {', '.join(sorted({d.device_kind for d in gpus}))} ({len(gpus)} device(s))."
    return "No GPU: `jax.devices()` lists only CPU devices, so there is no GPU table."


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    if s < 120:
        return f"{s:.2f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    if s < 2 * 365.25 * 86400:
        return f"{s / 86400:.1f} days"
    return f"{s / (365.25 * 86400):.3g} years"


def fmt_n(x: float) -> str:
    return f"{x:,.0f}" if x < 1e7 else f"{x:.3g}"


def fmt_ratio(r: float) -> str:
    if r < 0.1:
        return f"{r:.3f}×"
    if r < 100:
        return f"{r:.2f}×"
    return f"{r:,.0f}×" if r < 1e7 else f"{r:.3g}×"


# ---------------------------------------------------------------------------------------------------------------
# Monte Carlo at equal precision
# ---------------------------------------------------------------------------------------------------------------
COVERAGE_SE, COVERAGE_MIN = 4.0, 0.99  # exact values must lie within 4 SE of the MC mean (≥ 99% of coordinates)


class Moments:
    """Running means and sums of squared deviations of per-sample losses ℓ_i and flattened per-sample gradients g_i
    (one row per sample), merged chunk by chunk (Chan et al.'s pairwise update, no cancellation), giving their means
    and sample variances without storing the samples."""

    def __init__(self, n_params: int):
        self.n = 0
        self.loss_mean, self.loss_m2 = 0.0, 0.0
        self.grad_mean, self.grad_m2 = np.zeros(n_params), np.zeros(n_params)

    @staticmethod
    def _merge(n_a: int, mean_a, m2_a, x: np.ndarray):
        n_b = len(x)
        mean_b = x.mean(0)
        m2_b = ((x - mean_b) ** 2).sum(0)
        delta = mean_b - mean_a
        n = n_a + n_b
        return mean_a + delta * n_b / n, m2_a + m2_b + delta**2 * n_a * n_b / n

    def add(self, losses: np.ndarray, grads: np.ndarray) -> None:
        losses, grads = np.asarray(losses, float), np.asarray(grads, float)
        self.loss_mean, self.loss_m2 = self._merge(self.n, self.loss_mean, self.loss_m2, losses)
        self.grad_mean, self.grad_m2 = self._merge(self.n, self.grad_mean, self.grad_m2, grads)
        self.n += len(losses)

    @property
    def loss_var(self) -> float:
        return float(self.loss_m2) / (self.n - 1)

    @property
    def grad_var(self) -> np.ndarray:
        return self.grad_m2 / (self.n - 1)


def flat_rows(tree, n: int) -> np.ndarray:
    """A batch of ``n`` gradient pytrees as an (n, P) array, coordinates in ``ravel_pytree`` order."""
    return np.concatenate([np.asarray(v).reshape(n, -1) for v in jax.tree_util.tree_leaves(tree)], axis=1)


def pilot_moments(per_sample, draw, theta, key, n: int, chunk: int) -> tuple[Moments, float]:
    """(``Moments`` of ``n`` (rounded up to whole chunks) per-sample losses and gradients, seconds): ``draw(key,
    chunk)`` gives a tuple of sample arrays, ``per_sample(θ, *samples)`` their losses (chunk,) and gradients
    (a pytree with a leading chunk axis)."""
    mom = None
    t0 = time.perf_counter()
    for k in range(-(-n // chunk)):
        ls, gs = per_sample(theta, *draw(jax.random.fold_in(key, k), chunk))
        rows = flat_rows(gs, chunk)
        mom = Moments(rows.shape[1]) if mom is None else mom
        mom.add(np.asarray(ls), rows)
    return mom, time.perf_counter() - t0


def mc_time_per_sample(batch_loss, draw, theta, key, batch: int, repeats: int) -> dict:
    """Warm seconds per sample of ``jit(value_and_grad(batch_loss))`` at ``batch`` pre-drawn, device-resident
    samples (sampling excluded), its AOT compile seconds, and the sampler's own seconds per sample."""
    data = jax.block_until_ready(draw(key, batch))
    comp, compile_s = aot(jax.value_and_grad(batch_loss), theta, *data)
    t_batch = float(np.median(warm_times(comp, theta, *data, repeats=repeats)))
    t_draw = float(np.median(warm_times(draw, key, batch, repeats=repeats)))
    return {"t_sample": t_batch / batch, "t_draw": t_draw / batch, "compile": compile_s, "t_batch": t_batch}


def exactness_check(L: float, g: np.ndarray, mom: Moments) -> dict:
    """The exact (L, ∇L) against the Monte-Carlo means of ``mom``: z = |mean − exact| / SE per gradient coordinate
    and for the loss. Coordinates whose per-sample gradient is identically zero (variance 0: parameters the loss
    does not depend on, or frozen by the point) are counted apart as "dead" and must agree exactly. PASS: ≥ 99% of
    the live coordinates and the loss within 4 SE, every dead coordinate equal."""
    se = np.sqrt(mom.grad_var / mom.n)
    live = se > 0
    z = np.abs(mom.grad_mean - g)[live] / se[live]
    dead_ok = bool(np.allclose(mom.grad_mean[~live], g[~live], rtol=1e-9, atol=1e-12))
    frac = float(np.mean(z <= COVERAGE_SE)) if z.size else 1.0
    loss_se = math.sqrt(mom.loss_var / mom.n)
    loss_z = abs(mom.loss_mean - L) / loss_se if loss_se > 0 else (0.0 if mom.loss_mean == L else math.inf)
    gnorm = float(np.linalg.norm(g))
    return {
        "n": mom.n,
        "live": int(live.sum()),
        "dead": int((~live).sum()),
        "dead_ok": dead_ok,
        "frac": frac,
        "zmax": float(z.max()) if z.size else 0.0,
        "loss_z": loss_z,
        "loss_se": loss_se,
        "rel_err": float(np.linalg.norm(mom.grad_mean - g)) / gnorm,
        "rel_err_pred": math.sqrt(float(mom.grad_var.sum()) / mom.n) / gnorm,
        "ok": frac >= COVERAGE_MIN and loss_z <= COVERAGE_SE and dead_ok,
    }


def check_text(c: dict) -> str:
    """One line for a check of ``exactness_check``."""
    dead = (
        f", {c['dead']} dead coordinates (zero variance) {'equal' if c['dead_ok'] else 'NOT equal'} to the exact ones"
        if c["dead"]
        else ""
    )
    return (
        f"{'PASS' if c['ok'] else '**FAIL**'} — MC mean of {c['n']:,} samples: {c['frac'] * 100:.2f}% of "
        f"{c['live']} live gradient coordinates within {COVERAGE_SE:g} SE (max |z| {c['zmax']:.2f}){dead}; loss "
        f"|z| = {c['loss_z']:.2f}; ‖mean − ∇L‖/‖∇L‖ = {c['rel_err']:.2e} (expected from the variance "
        f"{c['rel_err_pred']:.2e})"
    )


def mc_costs(sum_var: float, gnorm: float, t_sample: float, exact_s: float, eps: list[float]) -> list[dict]:
    """Per ε: the batch B(ε) = Σ_i Var_i / (ε‖∇L‖)² whose gradient RMSE is ε‖∇L‖, its time B(ε)·t_sample, and that
    time ÷ the exact time."""
    rows = []
    for e in eps:
        B = max(1, math.ceil(sum_var / (e * gnorm) ** 2))
        rows.append({"eps": e, "B": B, "T": B * t_sample, "ratio": B * t_sample / exact_s})
    return rows


def break_even(sum_var: float, gnorm: float, t_sample: float, exact_s: float) -> float:
    """ε* with B(ε*)·t_sample = exact time: Monte Carlo is cheaper only for relative precisions coarser than ε*."""
    return math.sqrt(sum_var * t_sample / exact_s) / gnorm


def at_eps(rows: list[dict], eps: float = SUMMARY_EPS) -> dict:
    """The ``mc_costs`` row at ``eps`` (else the finest ε there is)."""
    return next((r for r in rows if r["eps"] == eps), min(rows, key=lambda r: r["eps"]))


def mc_headline_rows(task: str, points: list[dict], setting: str, exact: str, unit: str) -> list[dict]:
    """One ``headline_row`` per ``equal_precision`` point: exact loss+gradient against Monte Carlo at ε =
    ``SUMMARY_EPS`` (the first point is the task's row in the summary); ``unit``: what one MC sample is."""
    rows = []
    for i, p in enumerate(points):
        c = at_eps(p["rows"])
        rows.append(
            headline_row(
                task,
                f"exact loss+gradient vs Monte Carlo at gradient RMSE ε‖∇L‖, ε = {c['eps']:g}; {p['label']}, {setting}",
                exact,
                p["exact_s"],
                f"MC, B(ε) = {fmt_n(c['B'])} {unit}s",
                c["T"],
                primary=i == 0,
            )
        )
    return rows


GRAD_CHECK_TOL = 1e-10  # a NumPy baseline's backward pass must equal autodiff to this relative difference


def sampled_task_checks(points: list[dict], grad_check: float) -> list[tuple[str, bool]]:
    """The PASS/FAIL checks of a task whose baseline samples: each point's exact loss and gradient within 4 SE of
    its Monte-Carlo pilot, and the NumPy baseline's gradient equal to autodiff (``max_relative_difference``)."""
    checks = [(f"{p['label']}: exact loss and gradient within 4 SE of the MC pilot", p["check"]["ok"]) for p in points]
    return checks + [("NumPy backward pass equals JAX autodiff", grad_check < GRAD_CHECK_TOL)]


def grad_check_line(grad_check: float) -> str:
    """The results line of the NumPy-vs-autodiff gradient check."""
    return (
        f"- NumPy backward pass vs JAX autodiff: {'PASS' if grad_check < GRAD_CHECK_TOL else '**FAIL**'} — max "
        f"relative difference {grad_check:.1e} (pass: < {GRAD_CHECK_TOL:g})."
    )


def max_relative_difference(numpy_grads: dict, jax_grads: dict) -> float:
    """max over blocks of |NumPy gradient − JAX autodiff gradient|, relative to the largest autodiff entry: the
    check that a baseline's hand-written backward pass computes the same gradient."""
    diff = max(float(np.max(np.abs(numpy_grads[k] - np.asarray(jax_grads[k])))) for k in jax_grads)
    return diff / max(float(np.max(np.abs(np.asarray(jax_grads[k])))) for k in jax_grads)


PILOT_CHUNK = 2048


def exact_timing(loss, theta, repeats: int) -> dict:
    """``jit(value_and_grad(loss))`` at θ: AOT compile seconds, warm median seconds, L and the flat ∇L."""
    comp, compile_s = aot(jax.value_and_grad(loss), theta)
    warm = warm_times(comp, theta, repeats=repeats)
    L, g = comp(theta)
    return {
        "compile": compile_s,
        "warm": float(np.median(warm)),
        "L": float(L),
        "g": np.asarray(jax.flatten_util.ravel_pytree(g)[0]),
    }


def equal_precision(
    label: str,
    loss,
    theta,
    batch_loss,
    per_sample,
    draw,
    key,
    *,
    time_batch: int,
    pilot: int,
    repeats: int,
    eps: list[float],
    unit: str,
) -> dict:
    """Exact loss+gradient against Monte Carlo at one point θ: ``exact_timing`` of ``loss``; MC time per sample of
    ``batch_loss(θ, *samples)`` (``mc_time_per_sample``); a pilot of per-sample losses and gradients
    (``per_sample``, ``pilot_moments``) for Σ_i Var_i, B(ε) and the MC time per ε (``mc_costs``), and the
    ``exactness_check``. ``draw(key, b)`` returns a tuple of ``b`` samples. Prints as it goes."""
    ex = exact_timing(loss, theta, repeats)
    gnorm = float(np.linalg.norm(ex["g"]))
    print(
        f"\n--- {label}: exact L = {ex['L']:.12g}, ‖∇L‖ = {gnorm:.4e}; compile {fmt_time(ex['compile'])}, warm "
        f"{fmt_time(ex['warm'])} ---",
        flush=True,
    )
    k_time, k_pilot = jax.random.split(key)
    mc = mc_time_per_sample(batch_loss, draw, theta, k_time, time_batch, repeats)
    mom, pilot_s = pilot_moments(per_sample, draw, theta, k_pilot, pilot, PILOT_CHUNK)
    sum_var = float(mom.grad_var.sum())
    t = mc["t_sample"]
    r = {
        "label": label,
        "L": ex["L"],
        "gnorm": gnorm,
        "exact_s": ex["warm"],
        "exact_compile": ex["compile"],
        "t_sample": t,
        "t_draw": mc["t_draw"],
        "mc_compile": mc["compile"],
        "sum_var": sum_var,
        "eps_star": break_even(sum_var, gnorm, t, ex["warm"]),
        "rows": mc_costs(sum_var, gnorm, t, ex["warm"], eps),
        "check": exactness_check(ex["L"], ex["g"], mom),
        "pilot_s": pilot_s,
    }
    print(
        f"MC: batch {time_batch} warm {fmt_time(mc['t_batch'])} → {t * 1e6:.3f} µs/{unit} (sampling "
        f"{r['t_draw'] * 1e6:.3f} µs/{unit} more, not counted); pilot of {mom.n:,} in {fmt_time(pilot_s)}: "
        f"sqrt(ΣVar)/‖∇L‖ = {math.sqrt(sum_var) / gnorm:.4g}; ε* = {r['eps_star']:.3g}",
        flush=True,
    )
    for row in r["rows"]:
        print(
            f"  ε = {row['eps']:g}: B = {fmt_n(row['B'])} → MC {fmt_time(row['T'])} vs exact {fmt_time(ex['warm'])}: "
            f"ratio {fmt_ratio(row['ratio'])}",
            flush=True,
        )
    print(f"check: {check_text(r['check'])}", flush=True)
    return r


MC_DEFINITION = (
    "*Equal precision*: with Var_i the variance of coordinate i of one sample's gradient, the batch gradient's mean "
    "squared error is Σ_i Var_i / B, so **B(ε) = Σ_i Var_i / (ε‖∇L‖)²** is the batch whose gradient RMSE is ε‖∇L‖; "
    "MC time = B(ε) × measured time per sample (warm batch gradient ÷ batch size, extrapolated linearly); ratio = "
    "MC time ÷ exact warm time. ε* is the break-even precision (MC is cheaper only for coarser ε). The exact gradient "
    "is accurate to float64 rounding."
)


def mc_table(points: list[dict], unit: str) -> list[str]:
    """Markdown rows of the equal-precision table: per point (``label``, ``L``, ``gnorm``, ``exact_s``, ``t_sample``,
    ``sum_var``, ``eps_star``, ``rows`` of ``mc_costs``) and ε."""
    out = [
        f"| point | L | ‖∇L‖ | exact warm | MC µs/{unit} | sqrt(ΣVar)/‖∇L‖ | ε* | ε | B(ε) | MC time | "
        "ratio MC/exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        for r in p["rows"]:
            out.append(
                f"| {p['label']} | {p['L']:.6g} | {p['gnorm']:.4e} | {fmt_time(p['exact_s'])} | "
                f"{p['t_sample'] * 1e6:.3f} | {math.sqrt(p['sum_var']) / p['gnorm']:.4g} | {p['eps_star']:.3g} "
                f"| {r['eps']:g} | {fmt_n(r['B'])} | {fmt_time(r['T'])} | {fmt_ratio(r['ratio'])} |"
            )
    return out
