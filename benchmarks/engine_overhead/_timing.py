"""Timing of the engine-overhead benchmark: which popdyn is measured, round-robin races of variants, the engine
split into its jitted loop, its finish pass and the rest (blocking timers inside one call), and the printed table."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import jax
import numpy as np

import popdyn
import popdyn.dynamics._trajectory as trajectory_mod


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
    info["has_stopping_module"] = any((path / "dynamics" / name).exists() for name in ("stopping.py", "_stopping.py"))
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
"""The engine's jitted loops, by name in ``popdyn.dynamics._descent`` / ``._flow`` (those present in this version)."""


def split_engine(engine, loop_module, loop_names: tuple[str, ...], log: list):
    """A thunk calling ``engine()`` with blocking timers around its jitted loop (``loop_module.<loop_names>``), its
    ``finish`` and finish's jitted parts (``FINISH_PARTS`` in ``popdyn.dynamics._trajectory``), appending
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
