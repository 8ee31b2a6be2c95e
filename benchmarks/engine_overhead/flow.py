"""Gradient flow in the engine-overhead benchmark: ``popdyn.gradient_flow`` against a hand-written vmapped
``diffrax.diffeqsolve`` with the same solver, controller and events, and its ablations."""

from __future__ import annotations

import math
import os

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optax

import popdyn
import popdyn.dynamics._flow as flow_mod
from popdyn._batching import as_batch

from ._dynamics import ATOL, DIVERGE, ICOEFF, MAX_STEPS, PCOEFF, RTOL, closed_grad, curvature_steady, speed_floor
from ._timing import LOOPS, best, captured, maxdiff, race, split_engine, split_rows, table


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


def flow_group(prob, theta0, args, checks: list) -> dict:
    n = int(np.asarray(theta0["e"]).size)
    t1 = args.t1
    print(f"\n=== gradient flow, {n:,} points, t1 = {t1:g}, ts=None ===", flush=True)

    def engine():
        return popdyn.gradient_flow(prob, theta0, t1=t1, ts=None)

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
