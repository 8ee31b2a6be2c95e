"""Benchmark: a phase diagram of a user model, its points stacked into one compiled program per chunk, against the
loop over points a researcher would write.

What it measures
----------------
The model is a tilted double well (x² − 1)² + c·x + ½y² (a ``Problem.from_loss`` user model, c a data leaf),
swept over P values of c in [−0.5, 0.5] with the same B starts at every point. popdyn:
``popdyn.analysis.basin_sweep(problems, axes, starts, dynamics, stack=True)``, the P problems stacked
(``AbstractDynamics.run_stack``). Baseline: ``[popdyn.basin_fractions(prob, starts, dynamics) for prob in
problems]``, every point its own call of the programs compiled for the first. Both for the gradient flow (end
points) and for 2,000 GD steps. Each side in a fresh interpreter (compilation cache off): the first call (trace,
compile, run, label) and then the best of three warm calls. Both sides name the same attractors with the same
fractions at every point (checked).

How to run (from the repository root)
-------------------------------------
    python -m benchmarks.sweep_stack            # ~2 min; writes its section of benchmarks/RESULTS.md
    python -m benchmarks.sweep_stack --quick    # P = 4, B = 64; writes nothing unless --results
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from benchmarks._common import (
    finish_section,
    headline_row,
    make_headline,
    popdyn_env,
    publish,
    quick_or_full,
    run_header,
)

SCRIPT = "sweep_stack"
HEADING = "## A phase diagram: stacked points against a loop over points"

CHILD = """
import json, sys, time
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import popdyn
from popdyn.analysis import basin_sweep
from popdyn.dynamics import GradientDescent, GradientFlow
side, method, P, B = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def loss(th, c):
    return (th["x"] ** 2 - 1.0) ** 2 + c * th["x"] + 0.5 * th["y"] ** 2
cs = np.linspace(-0.5, 0.5, P)
problems = [popdyn.Problem.from_loss(loss, {"x": 0.0, "y": 0.0}, init_scale=1.0, data=jnp.asarray(c)) for c in cs]
starts = jax.vmap(problems[0].init)(jax.random.split(jax.random.PRNGKey(0), B))
dynamics = GradientFlow() if method == "flow" else GradientDescent(lr=0.05, steps=2000)
def run():
    if side == "stack":
        return [p.fractions for p in basin_sweep(problems, (("c", cs),), starts, dynamics, stack=True).points]
    return [popdyn.basin_fractions(p, starts, dynamics).fractions_of_resolved for p in problems]
t = time.perf_counter(); fractions = run(); first = time.perf_counter() - t
warm = []
for _ in range(3):
    t = time.perf_counter(); run(); warm.append(time.perf_counter() - t)
print(json.dumps({"first": first, "warm": min(warm), "fractions": fractions}))
"""


def _run(side: str, method: str, points: int, starts: int) -> dict:
    """The timings and fractions printed by one side in a fresh interpreter, compilation cache off."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, side, method, str(points), str(starts)],
        env=popdyn_env("off"),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    args = quick_or_full(__doc__, "P = 4 points, B = 64 starts", argv)
    command, date, info = run_header(SCRIPT, argv)
    t_start = time.perf_counter()
    points, starts = (4, 64) if args.quick else (16, 256)
    res = {m: {s: _run(s, m, points, starts) for s in ("stack", "loop")} for m in ("flow", "gd")}
    for m, sides in res.items():
        print(f"{m}: " + ", ".join(f"{s} first {v['first']:.2f} s, warm {v['warm']:.3f} s" for s, v in sides.items()))
    lines = [
        HEADING,
        "",
        f"A user model (x² − 1)² + c·x + ½y² swept over P = {points} values of c in [−0.5, 0.5], B = {starts} starts "
        "at every point (the same ones). popdyn: `basin_sweep(…, stack=True)`, the points stacked (one compiled "
        "program per chunk). Baseline: a loop of `basin_fractions` over the points, each reusing the programs "
        "compiled for the first. Each side in a fresh interpreter, compilation cache off; warm = best of three calls "
        "after the first.",
        "",
        "| dynamics | stacked: first call | loop: first call | stacked: warm | loop: warm | loop ÷ stacked, warm |",
        "|---|---|---|---|---|---|",
    ]
    for m, name in (("flow", "gradient flow, end points"), ("gd", "GD, 2,000 steps")):
        s, lo = res[m]["stack"], res[m]["loop"]
        lines.append(
            f"| {name} | {s['first']:.2f} s | {lo['first']:.2f} s | {s['warm']:.3f} s | {lo['warm']:.3f} s | "
            f"{lo['warm'] / s['warm']:.2f}× |"
        )
    lines += [
        "",
        "A stacked program compiles once for the whole grid but is larger (every operation batched over the points), "
        "so the first call pays more compilation than the loop's first point; warm, the points share every call.",
        "",
        f"Command: `{command}` ({date}).",
    ]
    same = all(res[m]["stack"]["fractions"] == res[m]["loop"]["fractions"] for m in res)
    rows = [
        headline_row(
            "sweep",
            f"phase diagram, {m}, warm",
            f"basin_sweep, {points} stacked points × {starts} starts",
            res[m]["stack"]["warm"],
            "a loop of basin_fractions over the points",
            res[m]["loop"]["warm"],
        )
        for m in ("flow", "gd")
    ]
    checks = [("stacked and looped sweeps give the same fractions at every point", same)]
    head = make_headline(SCRIPT, HEADING, command, date, info, args.quick, time.perf_counter() - t_start, rows, checks)
    publish(finish_section(lines, info), HEADING, args.results, head)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
