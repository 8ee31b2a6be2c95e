"""Gradient descent in the engine-overhead benchmark: ``popdyn.gradient_descent`` against hand-written jitted
``lax.scan`` kernels of the same steps, and ablations of a replica of the engine's loop."""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

import popdyn
import popdyn.dynamics._descent as descent_mod
from popdyn._batching import as_batch

from ._dynamics import (
    ATOL,
    CONVERGED_CODE,
    DIVERGE,
    DIVERGED_CODE,
    GTOL,
    MAX_STEPS_CODE,
    NAN_CODE,
    RTOL,
    closed_grad,
    curvature_steady,
    naive_grad,
    speed_floor,
)
from ._timing import LOOPS, best, captured, loop_reference, maxdiff, race, split_engine, split_rows, table


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
    """A copy of the plain-GD loop of ``popdyn.dynamics._descent._descend_batch`` (HEAD) with parts switchable:
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


def gd_group(prob, theta0, args, rec_every: int, checks: list) -> dict:
    steps, lr = args.steps, args.lr
    n = int(np.asarray(theta0["e"]).size)
    print(f"\n=== GD, {n:,} points × {steps} steps, record_every={rec_every} ===", flush=True)
    kw = {} if rec_every == 1 else {"record_every": rec_every}

    def engine():
        return popdyn.gradient_descent(prob, theta0, lr=lr, steps=steps, **kw)

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
