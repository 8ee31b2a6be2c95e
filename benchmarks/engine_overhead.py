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
     ``popdyn.dynamics.descent._descend_batch``, its ``finish`` pass (``popdyn.dynamics.trajectory``: the Newton test
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
     ``popdyn.dynamics.stopping``; "secant": the same rule with gᵀHg ≈ g_k·(g_k − g_{k+1})/η from the next step's
     gradient, no jvp). With every part as the engine's it must reproduce the engine's loop output (checked;
     it may stop doing so after an engine change); each ablation's agreement with the engine (end points, t_final,
     status, records) is printed and stored;
   * per-point cost (XLA ``cost_analysis`` of the vmapped building block: flops and transcendentals) of the
     closed-form gradient, ``jax.grad(prob.loss)``, the naive autodiff, ``value_and_grad``, the two stopping tests,
     the divergence bookkeeping and the PRNG calls.

2. Gradient flow (default n = 64, 4,096 points; t1 = 1e4):

   * ``popdyn.gradient_flow(prob, θ0, t1, ts=None)`` split as above (``popdyn.dynamics.flow._solve_batch``, finish,
     rest), and with its default ts = 64 records;
   * the hand kernel: ``diffrax.diffeqsolve`` vmapped over the points, Tsit5, PIDController(rtol=1e-8, atol=1e-10,
     pcoeff=0.3, icoeff=0.4), dt0 = None, max_steps = 100,000, throw=False, ``SaveAt(t1=True)`` and the engine's
     steady-state event (``--rule auto``: the curvature rule with its speed floor when ``popdyn.dynamics.stopping``
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
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax

import popdyn
import popdyn.dynamics.descent as descent_mod
import popdyn.dynamics.flow as flow_mod
import popdyn.dynamics.trajectory as trajectory_mod
from benchmarks._common import REPO, fmt_time, headline_row, make_headline, parser, peak_rss_gb, run_header
from popdyn.batching import as_batch
from popdyn.tasks.markov import Canonical

SCRIPT = "engine_overhead"
HEADING = "## Engine overhead (GD and flow against hand kernels)"
RTOL, ATOL, GTOL, DIVERGE = 1e-8, 1e-10, 1e-9, 1e8  # HEAD's defaults of gradient_flow / gradient_descent
PCOEFF, ICOEFF, MAX_STEPS = 0.3, 0.4, 100_000
NAN_CODE, DIVERGED_CODE, CONVERGED_CODE, MAX_STEPS_CODE = 4, 3, 0, 2  # popdyn.Status values
ROUNDOFF = 1e3  # popdyn.dynamics.stopping.ROUNDOFF (the curvature rule's speed floor, in ε·‖f(θ0)‖)


# ---------------------------------------------------------------------------------------------------------------
# Which popdyn, timing
# ---------------------------------------------------------------------------------------------------------------
def popdyn_source() -> dict:
    """Where the measured popdyn lives and its git state (a snapshot directory may hold a COMMIT file)."""
    import subprocess

    path = Path(popdyn.__file__).resolve().parent
    info = {"path": str(path)}
    commit_file = path.parent / "COMMIT"
    if commit_file.exists():
        info["snapshot_of"] = commit_file.read_text().strip()
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True, check=True
        ).stdout.strip()
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=path, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", str(path)], cwd=path, capture_output=True, text=True, check=True
        ).stdout.strip()
        info["git"] = f"{top} @ {head}" + (" (popdyn/ has uncommitted changes)" if dirty else " (popdyn/ clean)")
    except (OSError, subprocess.CalledProcessError):
        info.setdefault("git", "not in a git checkout")
    info["has_stopping_module"] = (path / "dynamics" / "stopping.py").exists()
    return info


def race(variants: dict, repeats: int, skip_warm: tuple = ()) -> dict[str, list[float]]:
    """Seconds of each variant (a thunk), after one warm-up call each (unless its name is in ``skip_warm``: already
    warm), all variants timed round-robin ``repeats`` times in this process, every call blocked until ready."""
    for name, f in variants.items():
        if name not in skip_warm:
            jax.block_until_ready(f())
    times = {name: [] for name in variants}
    for r in range(repeats):
        for name, f in variants.items():
            t0 = time.perf_counter()
            out = f()
            jax.block_until_ready(out)
            times[name].append(time.perf_counter() - t0)
            del out
        print(f"  round {r + 1}/{repeats}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in times.items()), flush=True)
    return times


@contextlib.contextmanager
def captured(module, names: tuple[str, ...]):
    """Record the (args, kwargs) of the last call of each module-level function ``names`` (still calling it)."""
    got, orig = {}, {n: getattr(module, n) for n in names}

    def wrap(n):
        def f(*args, **kwargs):
            got[n] = (args, kwargs)
            return orig[n](*args, **kwargs)

        return f

    for n in names:
        setattr(module, n, wrap(n))
    try:
        yield got, orig
    finally:
        for n in names:
            setattr(module, n, orig[n])


FINISH_PARTS = ("extreme_eigenvalues", "_losses", "_late")  # what finish calls (those present in this version)


LOOPS = {"gd": ("_descend_batch", "_descend_lanes"), "flow": ("_solve_batch", "_solve_lanes")}
"""The engine's jitted loops, by name in ``popdyn.dynamics.descent`` / ``.flow`` (those present in this version)."""


def split_engine(engine, loop_module, loop_names: tuple[str, ...], log: list):
    """A thunk calling ``engine()`` with blocking timers around its jitted loop (``loop_module.<loop_names>``), its
    ``finish`` and finish's jitted parts (``FINISH_PARTS`` in ``popdyn.dynamics.trajectory``), appending
    {part: seconds, "total": seconds} of each call to ``log``: the split of one and the same call, so that
    rest = total − loop − finish is not a difference of separately timed minima."""
    targets = [(loop_module, n, "loop") for n in loop_names] + [(loop_module, "finish", "finish")]
    targets += [(trajectory_mod, n, f"finish: {n}") for n in FINISH_PARTS]
    targets = [t for t in targets if hasattr(t[0], t[1])]

    def thunk():
        rec, saved = {}, [(m, n, getattr(m, n), key) for m, n, key in targets]

        def timer(fn, key):
            def f(*args, **kwargs):
                t0 = time.perf_counter()
                out = jax.block_until_ready(fn(*args, **kwargs))
                rec[key] = rec.get(key, 0.0) + time.perf_counter() - t0
                return out

            return f

        for m, n, fn, key in saved:
            setattr(m, n, timer(fn, key))
        try:
            t0 = time.perf_counter()
            out = jax.block_until_ready(engine())
            rec["total"] = time.perf_counter() - t0
        finally:
            for m, n, fn, _ in saved:
                setattr(m, n, fn)
        rec["rest"] = rec["total"] - rec.get("loop", 0.0) - rec.get("finish", 0.0)
        log.append(rec)
        return out

    return thunk


def split_rows(log: list[dict], loop_label: str, rest_label: str) -> tuple[list, dict]:
    """Table rows of the engine split: each part's best over the timed calls (warm: the engine ran before)."""
    timed = log
    keys = ["total", "loop", "finish", *[k for k in timed[0] if k.startswith("finish: ")], "rest"]
    bestof = {k: min(r.get(k, 0.0) for r in timed) for k in keys if any(k in r for r in timed)}
    labels = {"loop": f"  {loop_label}", "finish": "  finish pass", "rest": f"  {rest_label}"}
    med = {k: float(np.median([r.get(k, 0.0) for r in timed])) for k in bestof}
    rows = [(labels.get(k, f"    {k}"), v, med[k], "split within each call") for k, v in bestof.items() if k != "total"]
    return rows, bestof


def best(ts) -> float:
    return float(np.min(ts))


def loop_reference(got: dict, orig: dict, traj) -> tuple[str, dict]:
    """(name, output) of the engine's jitted loop re-run on the arguments it was called with; when no known loop ran
    (an engine change), the trajectory's fields instead."""
    for name, (a, kw) in got.items():
        return name, jax.block_until_ready(orig[name](*a, **kw))
    return "trajectory", {"final": traj.final, "loss": traj.loss, "grad_norm": traj.grad_norm, "t_final": traj.t_final}


def maxdiff(a: dict, b: dict, keys=("e", "w")) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in keys)


# ---------------------------------------------------------------------------------------------------------------
# Gradients of the profiled loss
# ---------------------------------------------------------------------------------------------------------------
def closed_grad(prob):
    """∇L(e, w) = ℓ'(A)·(2c(w)e, 4|w|e²), A = c(w)e², c(w) = 1 + 2w|w|, ℓ' = ``prob.profile_slope``."""
    slope = prob.profile_slope if hasattr(prob, "profile_slope") else jax.grad(prob.profile_loss)

    def grad(theta):
        e, w = theta["e"], theta["w"]
        c = 1.0 + 2.0 * w * jnp.abs(w)
        s = slope(c * e * e)
        return {"e": 2.0 * c * e * s, "w": 4.0 * jnp.abs(w) * e * e * s}

    return grad


def naive_grad(prob):
    """Autodiff straight through the profiled cross-entropy (f0*, f1* and logaddexp), bypassing the custom_jvp of the
    profiled loss; None when this version of Canonical has no such pieces."""
    if not (hasattr(prob, "_cross_entropy") and hasattr(prob, "profiled_logits")):
        return None
    return jax.grad(lambda t: prob._cross_entropy(*prob.profiled_logits(prob.gap(t))))


def curvature_steady(field, y, tol, floor):
    """popdyn.dynamics.stopping.steady: ‖f‖³ ≤ tol·(−fᵀJf) or ‖f‖ ≤ floor."""
    f, jf = jax.jvp(field, (y,), (field(y),))
    speed2 = optax.tree.vdot(f, f)
    speed = jnp.sqrt(speed2)
    return (speed2 * speed <= tol * -optax.tree.vdot(f, jf)) | (speed <= floor)


def speed_floor(speed0):
    return ROUNDOFF * jnp.finfo(speed0.dtype).eps * speed0


# ---------------------------------------------------------------------------------------------------------------
# Hand kernels and the replica of the GD loop
# ---------------------------------------------------------------------------------------------------------------
def _gd_end_points(grad, batch, steps: int, lr: float):
    """vmap(scan) of θ ← θ − η∇L(θ) over ``batch``: the end points only."""

    def one(theta):
        def body(t, _):
            g = grad(t)
            return {k: t[k] - lr * g[k] for k in t}, None

        return jax.lax.scan(body, theta, None, length=steps)[0]

    return jax.vmap(one)(batch)


def hand_gd(grad, steps: int, lr: float):
    """jit(vmap(scan)) of θ ← θ − η∇L(θ): the end points only."""
    return jax.jit(lambda batch: _gd_end_points(grad, batch, steps, lr))


def hand_gd_traced(prob, steps: int, lr: float):
    """``hand_gd`` with ∇L = jax.grad(prob.loss) where the problem is an argument of the jitted function (its array
    leaves, e.g. data p and q, are traced values, as in the engine's ``eqx.filter_jit(prob, …)``) instead of constants
    closed over."""
    run = jax.jit(lambda pr, batch: _gd_end_points(jax.grad(pr.loss), batch, steps, lr))
    return lambda batch: run(prob, batch)


def hand_gd_records(prob, steps: int, lr: float):
    """The same scan recording (L, ‖∇L‖) at steps 0..steps from the value_and_grad each step needs anyway (one
    more at the end point): the engine's ``record_every=1`` output, one gradient per step."""
    vg = jax.value_and_grad(prob.loss)

    @jax.jit
    def run(batch):
        def one(theta):
            def body(t, _):
                loss, g = vg(t)
                return {k: t[k] - lr * g[k] for k in t}, (loss, optax.tree.norm(g))

            final, (ls, gs) = jax.lax.scan(body, theta, None, length=steps)
            loss, g = vg(final)
            return final, jnp.append(ls, loss), jnp.append(gs, optax.tree.norm(g))

        return jax.vmap(one)(batch)

    return run


def gd_replica(
    prob,
    steps: int,
    k: int,
    lr: float,
    *,
    rule: str,
    div=True,
    keyed=True,
    records="separate",
    ts_out=True,
    status=True,
    layout="BT",
):
    """A copy of the plain-GD loop of ``popdyn.dynamics.descent._descend_batch`` (HEAD) with parts switchable:
    ``div`` per-step divergence bookkeeping; ``keyed`` per-step fold_in + split of the point's key; ``records``
    "separate" (value_and_grad again at each record, as the engine), "fused" (the record at a block's start is the
    value_and_grad whose gradient takes the block's first step), "carry" (the gradient at θ rides in the scan carry
    from one step to the next: one gradient evaluation per step, records included) or "none" (no records, no status);
    ``rule`` the stopping test at each record ("norm": ‖∇L‖ < gtol; "curvature": the field+jvp rule; "secant",
    with records="carry": the curvature rule with gᵀHg ≈ g_k·(g_k − g_{k+1})/η from the next step's gradient, no
    jvp, the exact rule once at the end point); ``ts_out`` the per-point
    ``ts`` output; ``status`` the t_final/status reductions; ``layout`` "BT" (the engine's, vmap transposes the scan's
    (T, B) records) or "TB" (records left as the scan wrote them)."""
    vg = jax.value_and_grad(prob.loss)
    n_rec = steps // k
    ts = jnp.arange(n_rec + 1, dtype=jnp.float64) * k

    def field(theta):
        return jax.tree_util.tree_map(jnp.negative, jax.grad(prob.loss)(theta))

    def advance(theta, bad, g):
        new = jax.tree_util.tree_map(lambda x, d: x - lr * d, theta, g)
        if not div:
            return new, bad
        norm = optax.tree.norm(new)
        blown = ~jnp.isfinite(norm) | (norm > DIVERGE)
        code = jnp.where(~jnp.isfinite(norm), NAN_CODE, DIVERGED_CODE)
        bad = jnp.where((bad < 0) & blown, code, bad)
        keep = bad >= 0
        return jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), theta, new), bad

    def direction(theta, key, i):
        if keyed:  # as the engine: a key per step, split into (gradient key, noise key), both unused in plain GD
            kk = jax.random.fold_in(key, i)
            kk, _ = jax.random.split(kk)
        return jax.grad(prob.loss)(theta)

    def run_one(theta, key):
        floor = speed_floor(optax.tree.norm(field(theta))) if rule in ("curvature", "secant") else None

        def record(theta, loss, g):
            gn = optax.tree.norm(g)
            rec = {"loss": loss, "grad_norm": gn}
            if status:
                rec["steady"] = (
                    gn < GTOL
                    if rule == "norm"
                    else curvature_steady(field, theta, ATOL + RTOL * optax.tree.norm(theta), floor)
                )
            return rec

        def snapshot(theta):
            return record(theta, *vg(theta))

        def step(carry, i):
            theta, bad = carry
            return advance(theta, bad, direction(theta, key, i)), None

        carry0 = (theta, jnp.int32(-1))
        if records == "none":
            (final, bad), _ = jax.lax.scan(step, carry0, jnp.arange(steps))
            return {"final": final}
        if records == "separate":

            def block(carry, b):
                carry, _ = jax.lax.scan(step, carry, b * k + jnp.arange(k))
                return carry, snapshot(carry[0])

            (final, bad), recs = jax.lax.scan(block, carry0, jnp.arange(n_rec))
            recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), snapshot(theta), recs)
        elif records == "carry":  # the gradient at θ rides in the carry: one evaluation per step, records included

            def gstep(carry, i):
                theta, g, bad = carry
                theta, bad = advance(theta, bad, g)
                return (theta, jax.grad(prob.loss)(theta), bad), None

            def block(carry, b):
                theta, loss, g, bad = carry  # loss and g at θ, the record point of this block
                theta1, bad = advance(theta, bad, g)
                if k == 1:
                    loss1, g1 = vg(theta1)
                else:
                    g1 = jax.grad(prob.loss)(theta1)
                gn = optax.tree.norm(g)
                rec = {"loss": loss, "grad_norm": gn}
                if status:
                    if rule == "secant":  # gᵀHg ≈ g_k·(g_k − g_{k+1})/η from the next step's gradient
                        curv = optax.tree.vdot(g, jax.tree_util.tree_map(jnp.subtract, g, g1)) / lr
                        tol = ATOL + RTOL * optax.tree.norm(theta)
                        rec["steady"] = (gn**3 <= tol * curv) | (gn <= floor)
                    else:
                        rec["steady"] = record(theta, loss, g)["steady"]
                if k > 1:
                    (theta1, g1, bad), _ = jax.lax.scan(gstep, (theta1, g1, bad), b * k + 1 + jnp.arange(k - 2))
                    theta1, bad = advance(theta1, bad, g1)
                    loss1, g1 = vg(theta1)
                return (theta1, loss1, g1, bad), rec

            loss0, g0 = vg(theta)
            (final, loss_f, g_f, bad), recs = jax.lax.scan(block, (theta, loss0, g0, jnp.int32(-1)), jnp.arange(n_rec))
            last = {"loss": loss_f, "grad_norm": optax.tree.norm(g_f)}
            if status:  # the end point: the exact rule, once
                last["steady"] = curvature_steady(field, final, ATOL + RTOL * optax.tree.norm(final), floor)
            recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), recs, last)
        else:  # fused

            def block(carry, b):
                theta, bad = carry
                loss, g = vg(theta)
                rec = record(theta, loss, g)
                if keyed:
                    kk = jax.random.fold_in(key, b * k)
                    kk, _ = jax.random.split(kk)
                carry = advance(theta, bad, g)
                if k > 1:
                    carry, _ = jax.lax.scan(step, carry, b * k + 1 + jnp.arange(k - 1))
                return carry, rec

            (final, bad), recs = jax.lax.scan(block, carry0, jnp.arange(n_rec))
            recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), recs, snapshot(final))
        out = {"final": final, "loss": recs["loss"], "grad_norm": recs["grad_norm"]}
        if status:
            below = recs["steady"]
            gn = recs["grad_norm"]
            out["t_final"] = jnp.where(jnp.any(below), ts[jnp.argmax(below)], float(steps))
            finite = jnp.isfinite(recs["loss"][-1]) & jnp.isfinite(gn[-1])
            out["status"] = jnp.where(
                bad >= 0, bad, jnp.where(~finite, NAN_CODE, jnp.where(below[-1], CONVERGED_CODE, MAX_STEPS_CODE))
            )
        if ts_out:
            out["ts"] = ts
        return out

    @jax.jit
    def run(batch, keys):
        if layout == "BT" or records == "none":
            return jax.vmap(run_one)(batch, keys)
        shape = jax.eval_shape(jax.vmap(run_one), batch, keys)
        axes = {name: (1 if name in ("loss", "grad_norm", "ts") else 0) for name in shape}
        return jax.vmap(run_one, out_axes=axes)(batch, keys)

    return run


# ---------------------------------------------------------------------------------------------------------------
# Flow kernels
# ---------------------------------------------------------------------------------------------------------------
def flow_replica(prob, grad, *, event="norm", blowup=True, saveat="t1", t1=1e4, times=None, traced=False):
    """jit(vmap(diffeqsolve)) of θ̇ = −∇L(θ) as popdyn's HEAD engine: Tsit5, PID(rtol, atol, 0.3, 0.4), dt0=None,
    throw=False. ``event``: "norm" (‖f‖ < atol + rtol‖θ‖, HEAD's steady state), "curvature" (field + jvp rule,
    per-point floor as args), "oracle" (t ≥ the per-point stop time passed as args: the same steps as the run that
    produced it, no field evaluation in the event), "none"; ``blowup`` adds ‖θ‖ > 1e8 or non-finite; ``saveat``
    "t1" or "subs" (the engine's SubSaveAt(t1) + SubSaveAt(ts=times, fn=(L, ‖∇L‖))); ``traced``: ∇L =
    jax.grad(problem.loss) with the problem an argument of the jitted function (its data leaves traced, as the
    engine's), ``grad`` unused. Returns (end points, num_steps, event time t_final)."""
    vg = jax.value_and_grad(prob.loss)

    current = {"grad": grad}  # the gradient in use while tracing (the traced problem's, when ``traced``)

    def field(t, y, args):
        return jax.tree_util.tree_map(jnp.negative, current["grad"](y))

    def steady_norm(t, y, args, **kw):
        return optax.tree.norm(field(t, y, args)) < ATOL + RTOL * optax.tree.norm(y)

    def steady_curv(t, y, args, **kw):
        return curvature_steady(lambda z: field(t, z, None), y, ATOL + RTOL * optax.tree.norm(y), args)

    def oracle(t, y, args, **kw):
        return t >= args

    def blow(t, y, args, **kw):
        n = optax.tree.norm(y)
        return (n > DIVERGE) | ~jnp.isfinite(n)

    def record(t, y, args):
        loss, g = vg(y)
        return {"loss": loss, "grad_norm": optax.tree.norm(g)}

    conds = {"norm": (steady_norm,), "curvature": (steady_curv,), "oracle": (oracle,), "none": ()}[event]
    conds = conds + ((blow,) if blowup else ())
    ev = diffrax.Event(conds) if conds else None
    times = jnp.asarray([0.0, t1] if times is None else times)

    @jax.jit
    def run_with(pr, batch, args):
        if traced:
            current["grad"] = jax.grad(pr.loss)
        sa = (
            diffrax.SaveAt(subs=[diffrax.SubSaveAt(t1=True), diffrax.SubSaveAt(ts=times, fn=record)])
            if saveat == "subs"
            else diffrax.SaveAt(t1=True)
        )

        def one(y0, a):
            if event == "curvature":
                a = speed_floor(optax.tree.norm(field(0.0, y0, None)))
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(field),
                diffrax.Tsit5(),
                t0=0.0,
                t1=t1,
                dt0=None,
                y0=y0,
                args=a,
                saveat=sa,
                stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL, pcoeff=PCOEFF, icoeff=ICOEFF),
                event=ev,
                max_steps=MAX_STEPS,
                throw=False,
            )
            ys, tt = (sol.ys[0], sol.ts[0]) if saveat == "subs" else (sol.ys, sol.ts)
            return jax.tree_util.tree_map(lambda x: x[0], ys), sol.stats["num_steps"], tt[0]

        return jax.vmap(one)(batch, args)

    def run(batch, args):
        return run_with(prob if traced else None, batch, args)

    return run


# ---------------------------------------------------------------------------------------------------------------
# Per-point cost of the building blocks (XLA cost analysis)
# ---------------------------------------------------------------------------------------------------------------
def building_blocks(prob) -> list[dict]:
    """flops and transcendentals per point of one evaluation of each building block, vmapped over 1,024 points."""
    n = 1024
    x = {"e": jnp.linspace(-2, 2, n), "w": jnp.linspace(-1.9, 2.1, n)}
    field = lambda z: jax.tree_util.tree_map(jnp.negative, jax.grad(prob.loss)(z))  # noqa: E731
    blocks = {
        "closed-form gradient": closed_grad(prob),
        "jax.grad(prob.loss)": jax.grad(prob.loss),
        "naive autodiff (no custom_jvp)": naive_grad(prob),
        "value_and_grad(prob.loss)": jax.value_and_grad(prob.loss),
        "steady test, norm (field + 2 norms)": lambda y: optax.tree.norm(field(y)) < ATOL + RTOL * optax.tree.norm(y),
        "steady test, curvature (field + jvp)": lambda y: curvature_steady(
            field, y, ATOL + RTOL * optax.tree.norm(y), 0.0
        ),
        "divergence bookkeeping (norm + 3 where)": lambda y: jax.tree_util.tree_map(
            lambda a: jnp.where(~jnp.isfinite(optax.tree.norm(y)) | (optax.tree.norm(y) > DIVERGE), a, a + 1.0), y
        ),
        "PRNG fold_in + split": lambda y: jax.random.split(
            jax.random.fold_in(jax.random.PRNGKey(0), y["e"].astype(jnp.int32))
        ),
    }
    rows = []
    for name, f in blocks.items():
        if f is None:
            continue
        try:
            ca = jax.jit(jax.vmap(f)).lower(x).compile().cost_analysis()
            ca = ca[0] if isinstance(ca, (list, tuple)) else ca
            rows.append(
                {
                    "block": name,
                    "flops": float(ca.get("flops", float("nan"))) / n,
                    "transcendentals": float(ca.get("transcendentals", float("nan"))) / n,
                }
            )
        except Exception as exc:  # noqa: BLE001 — cost analysis is information only
            rows.append({"block": name, "error": repr(exc)})
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------------------------
def table(
    title: str,
    rows: list[tuple[str, float, float | None, str]],
    total: float,
    base: float,
    base_name: str,
    med_total: float,
    med_base: float,
) -> list[str]:
    """Lines of a printed table: part, best seconds, % of the engine total, ratio to the hand kernel; the same for
    the median of the rounds where there is one."""
    out = [
        f"\n{title}",
        f"  {'part':72s} {'best s':>9s} {'% engine':>9s} {'/ hand':>7s} {'median s':>9s} {'/ hand':>7s}  note",
    ]
    for name, s, med, note in rows:
        m = f"{med:9.4f} {med / med_base:6.2f}×" if med is not None else f"{'':9s} {'':7s}"
        out.append(f"  {name:72s} {s:9.4f} {100 * s / total:8.1f}% {s / base:6.2f}× {m}  {note}")
    out.append(
        f"  (hand kernel: {base_name}: best {base:.4f} s, median {med_base:.4f} s; engine median {med_total:.4f} s)"
    )
    return out


def gd_group(prob, theta0, args, rec_every: int, checks: list) -> dict:
    steps, lr = args.steps, args.lr
    n = int(np.asarray(theta0["e"]).size)
    print(f"\n=== GD, {n:,} points × {steps} steps, record_every={rec_every} ===", flush=True)
    kw = {} if rec_every == 1 else {"record_every": rec_every}
    engine = lambda: popdyn.gradient_descent(prob, theta0, lr=lr, steps=steps, **kw)  # noqa: E731
    loops = tuple(name for name in LOOPS["gd"] if hasattr(descent_mod, name))
    with captured(descent_mod, loops) as (got, orig):
        traj = engine()
        jax.block_until_ready(traj)
    batch = as_batch(prob, theta0)[0]
    keys = jax.random.split(jax.random.PRNGKey(0), n)  # the engine's default seed 0
    split_log = []
    variants = {"engine": split_engine(engine, descent_mod, loops, split_log)}
    info = {"points": n, "steps": steps, "record_every": rec_every, "rule": args.rule}
    other = "norm" if args.rule == "curvature" else "curvature"
    if rec_every == 1:
        hand = hand_gd_records(prob, steps, lr)
        f_end, ls, gs = hand(batch)
        d = maxdiff(f_end, traj.final)
        dl = float(np.max(np.abs(np.asarray(ls) - np.asarray(traj.loss))))
        dg = float(np.max(np.abs(np.asarray(gs) - np.asarray(traj.grad_norm))))
        print(
            f"hand kernel (records every step) vs engine: end points {d:.2e}, loss records {dl:.2e}, "
            f"‖∇L‖ records {dg:.2e}",
            flush=True,
        )
        checks.append(
            (
                f"GD record_every=1: hand kernel end points and records equal the engine's to 1e-12 "
                f"({d:.1e}, {dl:.1e}, {dg:.1e})",
                max(d, dl, dg) <= 1e-12,
            )
        )
        del f_end, ls, gs
        base_name = "hand_rec: scan, one value_and_grad per step, records emitted"
        variants[base_name] = lambda: hand(batch)
        rep = {
            "replica (= engine loop)": {},
            "replica, records fused (one value_and_grad per step)": {"records": "fused"},
            "replica, fused, no per-point ts": {"records": "fused", "ts_out": False},
            "replica, fused, no ts, no divergence bookkeeping": {"records": "fused", "ts_out": False, "div": False},
            "replica, fused, no ts, records left (T, B)": {"records": "fused", "ts_out": False, "layout": "TB"},
            f"replica, {other} stopping rule at every record": {"rule": other},
            "replica, gradient carried, no ts, secant stopping rule (no jvp)": {
                "records": "carry",
                "rule": "secant",
                "ts_out": False,
            },
        }
    else:
        closed, auto = hand_gd(closed_grad(prob), steps, lr), hand_gd(jax.grad(prob.loss), steps, lr)
        e_closed, e_auto = closed(batch), auto(batch)
        d1, d2, d12 = maxdiff(e_closed, traj.final), maxdiff(e_auto, traj.final), maxdiff(e_closed, e_auto)
        print(
            f"end points: hand closed-form vs engine {d1:.2e}, hand jax.grad vs engine {d2:.2e}, closed vs jax.grad "
            f"{d12:.2e}",
            flush=True,
        )
        checks.append(
            (
                f"GD record_every=steps: hand kernels' end points equal the engine's to 1e-12 (closed form "
                f"{d1:.1e}, jax.grad {d2:.1e})",
                max(d1, d2) <= 1e-12,
            )
        )
        base_name = "hand_closed: scan, closed-form gradient"
        variants[base_name] = lambda: closed(batch)
        variants["hand_autodiff: scan, jax.grad(prob.loss)"] = lambda: auto(batch)
        if jax.tree_util.tree_leaves(prob):  # data as array leaves: the cost of tracing them, as the engine does
            traced = hand_gd_traced(prob, steps, lr)
            info["traced_problem_vs_engine_maxdiff"] = maxdiff(traced(batch), traj.final)
            variants["hand_autodiff, problem a traced argument (its data leaves traced)"] = lambda: traced(batch)
        ng = naive_grad(prob)
        if ng is not None:
            naive = hand_gd(ng, steps, lr)
            e_naive = naive(batch)
            info["naive_vs_engine_maxdiff"] = maxdiff(e_naive, traj.final)
            variants["hand_naive: scan, autodiff without the custom_jvp"] = lambda: naive(batch)
        rep = {
            "replica (= engine loop)": {},
            "replica, no divergence bookkeeping": {"div": False},
            "replica, no per-step PRNG key": {"keyed": False},
            "replica, neither": {"div": False, "keyed": False},
            f"replica, {other} stopping rule at the records": {"rule": other},
            "replica, gradient carried, secant stopping rule": {"records": "carry", "rule": "secant"},
        }
    # the replica must reproduce the engine's loop output (HEAD); report, do not fail, after an engine change
    loop_name, ref = loop_reference(got, orig, traj)
    info["engine_loop"] = loop_name
    print(f"engine loop: {loop_name}", flush=True)
    for name, flags in rep.items():
        fn = gd_replica(prob, steps, rec_every, lr, **({"rule": args.rule} | flags))
        out = fn(batch, keys)
        if flags and "t_final" in out and "t_final" in ref:  # agreement of an ablation with the engine's outcome
            agree = {
                "final_maxdiff": maxdiff(out["final"], ref["final"]),
                "same_t_final": float(np.mean(np.asarray(out["t_final"]) == np.asarray(ref["t_final"]))),
            }
            if "status" in ref:
                agree["same_status"] = float(np.mean(np.asarray(out["status"]) == np.asarray(ref["status"])))
            if ref.get("loss") is not None and np.shape(ref["loss"]) == np.shape(traj.loss):
                lo = np.asarray(out["loss"]) if flags.get("layout", "BT") == "BT" else np.asarray(out["loss"]).T
                agree["loss_records_maxdiff"] = float(np.max(np.abs(lo - np.asarray(ref["loss"]))))
            info.setdefault("ablation_agreement", {})[name] = agree
            print(f"{name}: vs engine {agree}", flush=True)
        if not flags:
            diffs = {"final": maxdiff(out["final"], ref["final"])}
            for key in ("loss", "grad_norm", "t_final", "status"):
                if ref.get(key) is not None and key in out and np.shape(ref[key]) == np.shape(out[key]):
                    diffs[key] = float(np.nanmax(np.abs(np.asarray(out[key], float) - np.asarray(ref[key], float))))
            same = all(v <= 1e-12 for v in diffs.values())
            info["replica_vs_engine"] = diffs
            print(
                f"replica vs engine loop output: {diffs} → {'equal' if same else 'DIFFERENT (engine changed?)'}",
                flush=True,
            )
            checks.append(
                (f"GD record_every={rec_every}: replica of the HEAD loop reproduces the engine's loop output", same)
            )
        del out
        variants[name] = lambda fn=fn: fn(batch, keys)
    del ref, traj
    load0 = os.getloadavg()
    times = race(variants, args.repeats, skip_warm=tuple(variants))  # every variant has run (compiled) once already
    res = {name: best(t) for name, t in times.items()}
    load = {"before": load0, "after": os.getloadavg()}
    total, base = res["engine"], res[base_name]
    split, parts = split_rows(
        split_log, f"jitted loop {info['engine_loop']}", "rest (validation, as_batch, keys, map_chunks, Python)"
    )
    loop = parts.get("loop", math.nan)
    med = {name: float(np.median(t)) for name, t in times.items()}
    rows = [("engine total: popdyn.gradient_descent", total, med["engine"], "")] + split
    for name, s in res.items():
        if not name.startswith("engine"):
            rows.append((name, s, med[name], ""))
    title = (
        f"GD, {n:,} points × {steps} steps, record_every={rec_every} (best of {args.repeats}, warm; % of the "
        "engine total; / hand = ÷ hand kernel)"
    )
    lines = table(title, rows, total, base, base_name, med["engine"], med[base_name])
    print("\n".join(lines), flush=True)
    info.update(
        {
            "times_best": res,
            "times_median": med,
            "times_all": times,
            "load_avg": load,
            "engine_split_best": parts,
            "engine_split_calls": split_log,
            "hand": base_name,
            "engine_over_hand": total / base,
            "loop_over_hand": loop / base,
            "table": lines,
        }
    )
    return info


def flow_group(prob, theta0, args, checks: list) -> dict:
    n = int(np.asarray(theta0["e"]).size)
    t1 = args.t1
    print(f"\n=== gradient flow, {n:,} points, t1 = {t1:g}, ts=None ===", flush=True)
    engine = lambda: popdyn.gradient_flow(prob, theta0, t1=t1, ts=None)  # noqa: E731
    loops = tuple(name for name in LOOPS["flow"] if hasattr(flow_mod, name))
    with captured(flow_mod, loops) as (got, orig):
        traj = engine()
        jax.block_until_ready(traj)
    batch = as_batch(prob, theta0)[0]
    g_auto, g_closed = jax.grad(prob.loss), closed_grad(prob)
    t_stop = jnp.asarray(traj.t_final)
    dummy = jnp.zeros(n)
    rule, other = args.rule, "norm" if args.rule == "curvature" else "curvature"
    what = {"norm": "norm rule: field + 2 norms per step", "curvature": "curvature rule: field + jvp per step"}
    kernels = {
        f"hand: Tsit5+PID, Event({rule} steady, blow-up), SaveAt(t1), jax.grad": (
            flow_replica(prob, g_auto, t1=t1, event=rule),
            dummy,
        ),
        "hand, closed-form gradient": (flow_replica(prob, g_closed, t1=t1, event=rule), dummy),
        "hand, problem a traced argument (its data leaves traced, as the engine's)": (
            flow_replica(prob, None, t1=t1, event=rule, traced=True),
            dummy,
        ),
        "hand + engine's record SaveAt (subs: t1, ts=[0, t1] fn)": (
            flow_replica(prob, g_auto, t1=t1, event=rule, saveat="subs"),
            dummy,
        ),
        "hand, no blow-up test": (flow_replica(prob, g_auto, t1=t1, event=rule, blowup=False), dummy),
        "hand, oracle stop t ≥ t_final(engine): no field in the event": (
            flow_replica(prob, g_auto, t1=t1, event="oracle", blowup=False),
            t_stop,
        ),
        f"hand, the other stopping rule ({what[other]})": (flow_replica(prob, g_auto, t1=t1, event=other), dummy),
        "hand + 64 records (SaveAt subs as the engine's default ts=64)": (
            flow_replica(
                prob,
                g_auto,
                t1=t1,
                event=rule,
                saveat="subs",
                times=np.concatenate([[0.0], np.geomspace(1e-6 * t1, t1, 63)]),
            ),
            dummy,
        ),
    }
    base_name = next(iter(kernels))
    split_log = []
    variants = {
        "engine": split_engine(engine, flow_mod, loops, split_log),
        "engine, ts=64 records (its default)": lambda: popdyn.gradient_flow(prob, theta0, t1=t1),
    }
    eng_steps = np.asarray(traj.n_steps)
    info = {
        "points": n,
        "t1": t1,
        "rule": rule,
        "engine_loop": next(iter(got), "unknown"),
        "engine_steps_mean": float(eng_steps.mean()),
        "engine_steps_max": int(eng_steps.max()),
        "engine_status": traj.status_counts(),
        "kernels": {},
    }
    for name, (fn, a) in kernels.items():
        ends, steps, tf = fn(batch, a)
        steps = np.asarray(steps)
        d = maxdiff(ends, traj.final)
        same_steps = float(np.mean(steps == eng_steps))
        info["kernels"][name] = {
            "maxdiff_vs_engine": d,
            "steps_mean": float(steps.mean()),
            "steps_max": int(steps.max()),
            "same_steps_fraction": same_steps,
        }
        print(
            f"{name}: end points vs engine {d:.2e}; steps mean {steps.mean():.1f}, max {steps.max()}; same step "
            f"count as the engine at {100 * same_steps:.1f}% of the points",
            flush=True,
        )
        variants[name] = lambda fn=fn, a=a: fn(batch, a)
    hb = info["kernels"][base_name]
    checks.append(
        (
            f"flow: hand kernel (the engine's {rule} stopping rule) reproduces the engine's end points to "
            f"1e-12 ({hb['maxdiff_vs_engine']:.1e})",
            hb["maxdiff_vs_engine"] <= 1e-12,
        )
    )
    orc = info["kernels"]["hand, oracle stop t ≥ t_final(engine): no field in the event"]
    checks.append(
        ("flow: oracle-stop kernel takes the engine's steps at every point", orc["same_steps_fraction"] == 1.0)
    )
    load0 = os.getloadavg()
    times = race(variants, args.flow_repeats, skip_warm=tuple(v for v in variants if "ts=64" not in v))
    res = {name: best(t) for name, t in times.items()}
    load = {"before": load0, "after": os.getloadavg()}
    total, base = res["engine"], res[base_name]
    split, parts = split_rows(
        split_log, f"jitted solve {info['engine_loop']}", "rest (validation, as_batch, map_chunks, Python)"
    )
    loop = parts.get("loop", math.nan)
    med = {name: float(np.median(t)) for name, t in times.items()}
    rows = [("engine total: popdyn.gradient_flow(ts=None)", total, med["engine"], "")] + split
    for name, s in res.items():
        if name != "engine":
            rows.append((name, s, med[name], ""))
    lines = table(
        f"Gradient flow, {n:,} points, t1 = {t1:g} (best of {args.flow_repeats}, warm); engine steps per "
        f"point mean {eng_steps.mean():.1f}, max {eng_steps.max()}",
        rows,
        total,
        base,
        base_name,
        med["engine"],
        med[base_name],
    )
    print("\n".join(lines), flush=True)
    info.update(
        {
            "times_best": res,
            "times_median": med,
            "times_all": times,
            "load_avg": load,
            "engine_split_best": parts,
            "engine_split_calls": split_log,
            "hand": base_name,
            "engine_over_hand": total / base,
            "solve_over_hand": loop / base,
            "table": lines,
        }
    )
    return info


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
        "popdyn.dynamics.stopping exists, else HEAD-before-it's ‖∇L‖ / ‖f‖ norm test)",
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
