"""Benchmark: what a small user model pays in popdyn against the hand-written JAX a researcher would otherwise write.

What it measures
----------------
The model is a two-layer linear network L(W1, W2) = ½‖W2 W1 − Φ‖²_F (W1: 3 × 4, W2: 2 × 3, Φ fixed), a
``Problem.from_loss`` user model.

1. Cold first call of a flow: ``GradientFlow(t1=100).run`` from 256 starts in a fresh interpreter (compilation
   cache off), against a fresh interpreter that compiles and runs a hand-written ``diffeqsolve`` of the same loss
   (Tsit5, PI controller with the same coefficients and tolerances, a steady event on ‖∇L‖ and a blow-up event),
   vmapped over the same starts. Both include tracing and XLA compilation; neither includes interpreter start-up
   or imports (timed inside each process).
2. GD per step: ``GradientDescent(lr=0.01, steps=2000)`` on 1,000 starts with every point running every step (end
   points only, no lanes), warm, against a jitted ``vmap(lax.scan)`` of θ ← θ − η∇L(θ) for the same steps.

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.user_model_costs            # ~1 min; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.user_model_costs --quick    # 200 steps; writes nothing unless --results
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
theta = jax.block_until_ready(starts(256))
t = time.perf_counter()
traj = popdyn.GradientFlow(t1=100.0).run(prob, theta)
jax.block_until_ready(traj.final)
print(json.dumps({"seconds": time.perf_counter() - t, "status": traj.status_counts()}))
"""

FLOW_HAND = """
import diffrax, optax
theta = jax.block_until_ready(starts(256))
def term(t, y, args):
    return jax.tree_util.tree_map(jnp.negative, jax.grad(loss)(y))
def steady(t, y, args, **kw):
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
steps = int(sys.argv[1])
theta = jax.block_until_ready(starts(1000))
gd = popdyn.GradientDescent(lr=0.01, steps=steps, lanes=1000)
def engine():
    return jax.block_until_ready(gd.run(prob, theta).final)
@jax.jit
def hand(th):
    def one(t0):
        def body(t, _):
            g = jax.grad(loss)(t)
            return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, t, g), None
        return jax.lax.scan(body, t0, None, length=steps)[0]
    return jax.vmap(one)(th)
def best(fn, repeats=5):
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return min(out)
e = best(engine)
h = best(lambda: jax.block_until_ready(hand(theta)))
print(json.dumps({"engine": e, "hand": h, "steps": steps}))
"""


def _run(code: str, *args: str) -> dict:
    """The JSON line printed by ``code`` (after the model) in a fresh interpreter, compilation cache off."""
    out = subprocess.run(
        [sys.executable, "-c", MODEL + code, *args], env=popdyn_env("off"), check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    args = quick_or_full(__doc__, "200 GD steps", argv)
    command, date, info = run_header(SCRIPT, argv)
    t_start = time.perf_counter()
    flow, hand = _run(FLOW_POPDYN), _run(FLOW_HAND)
    gd = _run(GD_BOTH, "200" if args.quick else "2000")
    cold = flow["seconds"] / hand["seconds"]
    per_step = gd["engine"] / gd["hand"]
    print(f"cold flow: popdyn {flow['seconds']:.2f} s, hand {hand['seconds']:.2f} s ({cold:.1f}×)")
    print(
        f"GD {gd['steps']} steps × 1000 starts: popdyn {gd['engine']:.3f} s, hand {gd['hand']:.3f} s ({per_step:.2f}×)"
    )
    lines = [
        HEADING,
        "",
        "A two-layer linear network ½‖W₂W₁ − Φ‖² (20 parameters) as a `Problem.from_loss` user model. Measured by "
        "`python -m benchmarks.user_model_costs` in one run (each side in its own fresh interpreter, compilation "
        "cache off).",
        "",
        "| what | popdyn | hand-written JAX | popdyn ÷ hand | target |",
        "|---|---|---|---|---|",
        f"| cold first call: flow from 256 starts to t = 100 (trace + compile + run) | {flow['seconds']:.2f} s | "
        f"{hand['seconds']:.2f} s: `diffeqsolve`, same solver, controller and events | **{cold:.1f}×** | ≤ 2× |",
        f"| GD, 1,000 starts × {gd['steps']:,} steps, every start every step (warm) | {gd['engine']:.3f} s | "
        f"{gd['hand']:.3f} s: `jit(vmap(scan))` of θ ← θ − η∇L | **{per_step:.2f}×** | ≤ 1.2× |",
        "",
        f"popdyn's flow statuses: {flow['status']}. Command: `{command}` ({date}).",
    ]
    checks = [("cold flow within 2× of diffeqsolve", cold <= 2.0), ("GD per step within 1.2×", per_step <= 1.2)]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, time.perf_counter() - t_start, [], checks)
    head["cold"], head["per_step"] = {"popdyn": flow["seconds"], "hand": hand["seconds"]}, gd
    publish(finish_section(lines, info), HEADING, args.results, head)
    return 0


if __name__ == "__main__":
    sys.exit(main())
