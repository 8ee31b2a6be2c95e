"""Benchmark: what a small user model pays in popdyn against the hand-written JAX a researcher would otherwise write.

What it measures
----------------
The model is a two-layer linear network L(W1, W2) = ½‖W2 W1 − Φ‖²_F (W1: 3 × 4, W2: 2 × 3, Φ fixed), a
``Problem.from_loss`` user model.

1. Cold first call of a flow: ``GradientFlow(t1=100).run`` from 256 starts in a fresh interpreter (compilation
   cache off), against fresh interpreters that compile and run a hand-written ``diffeqsolve`` of the same loss
   (Tsit5, PI controller with the same coefficients and tolerances, a blow-up event) with a steady event on
   ‖∇L‖ < 1e-8, and with popdyn's own scale-aware stopping rule as the steady event. Tracing and XLA compilation
   included, interpreter start-up and imports not (timed inside each process). popdyn's time is split by program
   (trace + lowering + compilation, from ``jax.monitoring``): the solver, the end-point classification (Hessian
   spectra) and the higher-order probe of degenerate end points (run here: the network's minima form a manifold).
2. GD per step: ``GradientDescent(lr=0.01, steps=S)`` on 1,000 starts with every point running every step (end
   points only, no lanes), warm, at S = 2,000 and S = 8,000: the time per step is the difference over 6,000 steps,
   the rest is the fixed cost of a call (the end-point classification and probe). Against a jitted
   ``vmap(lax.scan)`` of θ ← θ − η∇L, and the same loop that also checks ‖θ‖ every step and freezes a point that
   diverges or turns non-finite (what gives popdyn's per-point statuses).

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.user_model_costs            # ~2 min; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.user_model_costs --quick    # 200 and 800 steps; writes nothing unless --results
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from benchmarks._common import finish_section, make_headline, popdyn_env, publish, quick_or_full, run_header

SCRIPT = "user_model_costs"
HEADING = "## A user model: cold first call and GD per step"

MODEL = """
import time, json, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import popdyn
PHI = np.arange(8.0).reshape(2, 4) / 8.0
def loss(t):
    return 0.5 * jnp.sum((t["W2"] @ t["W1"] - PHI) ** 2)
prob = popdyn.Problem.from_loss(loss, {"W1": np.zeros((3, 4)), "W2": np.zeros((2, 3))}, init_scale=0.5)
def starts(n):
    return jax.vmap(prob.init)(jax.random.split(jax.random.PRNGKey(0), n))
"""

FLOW_POPDYN = """
import collections
stages = collections.defaultdict(float)
def listen(name, seconds, **kw):
    if name.startswith("/jax/core/compile/"):
        stages[kw.get("fun_name", "")] += seconds
theta = jax.block_until_ready(starts(256))
jax.monitoring.register_event_duration_secs_listener(listen)
t = time.perf_counter()
traj = popdyn.GradientFlow(t1=100.0).run(prob, theta)
jax.block_until_ready(traj.final)
seconds = time.perf_counter() - t
def stage(*names):
    return sum(v for k, v in stages.items() if any(n in k for n in names))
out = {"seconds": seconds, "status": traj.status_counts(), "solver": stage("_solve_lanes", "_solve_batch", "<lambda>"),
       "classify": stage("_classify"), "probe": stage("_falls_batch")}
print(json.dumps(out))
"""

FLOW_HAND = """
import diffrax, optax
from popdyn.dynamics import _stopping as stopping
theta = jax.block_until_ready(starts(256))
def term(t, y, args):
    return jax.tree_util.tree_map(jnp.negative, jax.grad(loss)(y))
def steady(t, y, args, **kw):
    if sys.argv[1] == "rule":  # popdyn's scale-aware rule (docs/dynamics.md, "Stopping rules")
        tol = stopping.state_tol(y, 1e-8, 1e-10)
        return stopping.steady(lambda z: term(t, z, None), y, tol, jnp.zeros(()))
    return optax.tree.norm(jax.grad(loss)(y)) < 1e-8
def blowup(t, y, args, **kw):
    return optax.tree.norm(y) > 1e8
controller = diffrax.PIDController(rtol=1e-8, atol=1e-10, pcoeff=0.3, icoeff=0.4)
def one(y0):
    sol = diffrax.diffeqsolve(diffrax.ODETerm(term), diffrax.Tsit5(), 0.0, 100.0, None, y0,
                              stepsize_controller=controller, event=diffrax.Event((steady, blowup)),
                              max_steps=100_000, throw=False)
    return sol.ys
t = time.perf_counter()
jax.block_until_ready(jax.jit(jax.vmap(one))(theta))
print(json.dumps({"seconds": time.perf_counter() - t}))
"""

GD_BOTH = """
import optax
counts = [int(a) for a in sys.argv[1:]]
theta = jax.block_until_ready(starts(1000))
tm = jax.tree_util.tree_map
def plain(steps, freeze):
    @jax.jit
    def run(th):
        def one(t0):
            def body(c, _):
                t, bad = c
                new = tm(lambda a, b: a - 0.01 * b, t, jax.grad(loss)(t))
                if not freeze:
                    return (new, bad), None
                n = optax.tree.norm(new)
                bad = jnp.where((bad == -1) & (~jnp.isfinite(n) | (n > 1e8)), 1, bad)
                return (tm(lambda a, b: jnp.where(bad != -1, a, b), t, new), bad), None
            return jax.lax.scan(body, (t0, jnp.int32(-1)), None, length=steps)[0][0]
        return jax.vmap(one)(th)
    return lambda: jax.block_until_ready(run(theta))
def engine(steps):
    gd = popdyn.GradientDescent(lr=0.01, steps=steps, lanes=1000)
    return lambda: jax.block_until_ready(gd.run(prob, theta).final)
def best(fn, repeats=5):
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return min(out)
out = {"steps": counts}
for name, make in (("engine", engine), ("hand", lambda s: plain(s, False)), ("freeze", lambda s: plain(s, True))):
    out[name] = [best(make(s)) for s in counts]
print(json.dumps(out))
"""


def _run(code: str, *args: str) -> dict:
    """The JSON line printed by ``code`` (after the model) in a fresh interpreter, compilation cache off."""
    out = subprocess.run(
        [sys.executable, "-c", MODEL + code, *args], env=popdyn_env("off"), check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _per_step(times: list[float], counts: list[int]) -> float:
    """Seconds per step: the difference of two runs' times over the difference of their step counts."""
    return (times[1] - times[0]) / (counts[1] - counts[0])


def main(argv=None) -> int:
    args = quick_or_full(__doc__, "200 and 800 GD steps", argv)
    command, date, info = run_header(SCRIPT, argv)
    t_start = time.perf_counter()
    flow, grad, rule = _run(FLOW_POPDYN), _run(FLOW_HAND, "grad"), _run(FLOW_HAND, "rule")
    counts = [200, 800] if args.quick else [2000, 8000]
    gd = _run(GD_BOTH, *map(str, counts))
    step = {k: _per_step(gd[k], counts) for k in ("engine", "hand", "freeze")}
    fixed = gd["engine"][0] - step["engine"] * counts[0]
    ratios = {"grad": flow["seconds"] / grad["seconds"], "rule": flow["seconds"] / rule["seconds"]}
    per_step = {"hand": step["engine"] / step["hand"], "freeze": step["engine"] / step["freeze"]}
    print(f"cold flow: popdyn {flow['seconds']:.2f} s; hand ‖∇L‖ {grad['seconds']:.2f} s, rule {rule['seconds']:.2f} s")
    print(
        f"GD per step (µs): popdyn {1e6 * step['engine']:.1f}, hand {1e6 * step['hand']:.1f}, "
        f"hand + freeze {1e6 * step['freeze']:.1f}; popdyn's fixed cost {fixed:.3f} s"
    )
    lines = _lines(flow, grad, rule, ratios, step, per_step, fixed, counts) + [
        f"popdyn's flow statuses: {flow['status']}. Command: `{command}` ({date}).",
    ]
    checks = [
        ("cold flow within 2× of diffeqsolve with popdyn's stopping rule", ratios["rule"] <= 2.0),
        ("GD per step within 1.2× of the loop with the same per-point freeze", per_step["freeze"] <= 1.2),
    ]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, time.perf_counter() - t_start, [], checks)
    head["cold"] = {"popdyn": flow, "hand_grad": grad["seconds"], "hand_rule": rule["seconds"]}
    head["per_step"] = step | {"fixed": fixed}
    publish(finish_section(lines, info), HEADING, args.results, head)
    return 0


def _lines(flow, grad, rule, ratios, step, per_step, fixed, counts) -> list[str]:
    """The section's text: the two tables and what they say."""
    us = {k: 1e6 * v for k, v in step.items()}
    return [
        HEADING,
        "",
        "A two-layer linear network ½‖W₂W₁ − Φ‖² (20 parameters) as a `Problem.from_loss` user model. Measured by "
        "`python -m benchmarks.user_model_costs` in one run (each side in its own fresh interpreter, compilation "
        "cache off).",
        "",
        "**Cold first call**: a flow from 256 starts to t = 100 (trace + compile + run).",
        "",
        "| what | seconds | popdyn ÷ it |",
        "|---|---|---|",
        f"| popdyn `GradientFlow(t1=100).run` | {flow['seconds']:.2f} | |",
        f"| … of which compiling the solver | {flow['solver']:.2f} | |",
        f"| … compiling the end-point classification (Hessian spectra) | {flow['classify']:.2f} | |",
        f"| … compiling the probe of degenerate end points | {flow['probe']:.2f} | |",
        f"| hand `diffeqsolve`, steady event ‖∇L‖ < 1e-8 | {grad['seconds']:.2f} | {ratios['grad']:.1f}× |",
        f"| hand `diffeqsolve`, popdyn's stopping rule as the steady event | {rule['seconds']:.2f} | "
        f"**{ratios['rule']:.1f}×** (target ≤ 2×) |",
        "",
        f"**GD per step**: 1,000 starts, every start every step, warm; per step = the difference between "
        f"{counts[0]:,} and {counts[1]:,} steps.",
        "",
        "| loop | µs per step | popdyn ÷ it |",
        "|---|---|---|",
        f"| popdyn `GradientDescent` | {us['engine']:.1f} | |",
        f"| `jit(vmap(scan))` of θ ← θ − η∇L | {us['hand']:.1f} | {per_step['hand']:.2f}× |",
        f"| the same loop, checking ‖θ‖ and freezing a diverged point every step | {us['freeze']:.1f} | "
        f"**{per_step['freeze']:.2f}×** (target ≤ 1.2×) |",
        "",
        f"popdyn's fixed cost per call (classifying and probing 1,000 end points, packaging): {fixed:.3f} s.",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
