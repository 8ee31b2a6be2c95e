"""Record the engine's results on small instances of every task into ``golden.npz`` (next to this file).

``tests/test_golden.py`` reruns the same cases and compares bit for bit: a change of the engine that should keep
every result (a refactor) proves it there. Re-record only when a change of results is intended and explained:

    python tests/data/record_golden.py

It records under the test session's settings (the repository's conftest.py: float64, XLA's flags), which the
comparison needs for bit identity.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import optax

import popdyn
from popdyn._identity import platform
from popdyn.analysis import LossBelow
from popdyn.tasks import decision_list, markov, scan_snap, scb, teacher

PATH = Path(__file__).with_name("golden.npz")


def _problems() -> dict[str, Callable[[], popdyn.Problem]]:
    """One small Problem per task besides Markov's (e, w) model, built when called."""

    def decision_lists() -> popdyn.Problem:
        lists, perm = decision_list.random_lists(3, 2, seed=5), decision_list.random_perm(3, seed=2)
        return decision_list.DecisionList(3, 2, lists, perm, "distinct", chunk=64)

    def teachers() -> popdyn.Problem:
        v_star = np.asarray(teacher.random_V(jax.random.PRNGKey(0), 2, 3))
        return teacher.BilinearTeacher(teacher.cnn_pooling(6, 2), v_star, "relu")

    return {
        "decision_list": decision_lists,
        "scan_snap": lambda: scan_snap.ScanSnap(scan_snap.syn_small()),
        "scb": lambda: scb.SparseBigram(*scb.random_instance(jax.random.PRNGKey(4), 4, 6, 2)),
        "teacher": teachers,
    }


def _starts(prob: popdyn.Problem, n: int) -> popdyn.Theta:
    """n starts: the problem's own initialisation, scaled by 1 + U(−½, ½) per leaf so that they differ."""
    keys = jax.random.split(jax.random.PRNGKey(7), n)
    base = jax.vmap(prob.init)(keys)
    scale = jax.random.uniform(jax.random.PRNGKey(8), (n,), minval=0.5, maxval=1.5)
    return jax.tree_util.tree_map(lambda x: x * scale.reshape((n,) + (1,) * (x.ndim - 1)), base)


def _trajectory(traj: popdyn.Trajectory) -> dict[str, np.ndarray]:
    leaves = jax.tree_util.tree_leaves(traj.final)
    out = {"final": np.concatenate([np.asarray(x).reshape(x.shape[0], -1) for x in leaves], axis=1)}
    for name in ("final_loss", "status", "t_final", "ts", "loss", "grad_norm", "n_steps"):
        out[name] = np.asarray(getattr(traj, name))
    if traj.params is not None:
        out["params"] = np.concatenate(
            [np.asarray(x).reshape(*x.shape[:2], -1) for x in jax.tree_util.tree_leaves(traj.params)], axis=2
        )
    return out


def _task_cases(name: str, make: Callable[[], popdyn.Problem]) -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    """GD with records on a task's problem (its flows cost a compilation each and share the engine's code with the
    Markov cases)."""

    def gd() -> dict[str, np.ndarray]:
        prob = make()
        return _trajectory(popdyn.gradient_descent(prob, _starts(prob, 4), lr=0.05, steps=40, record_every=8))

    return {f"{name}/gd": gd}


def _markov_cases() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    """Flows (recorded, and end points through lanes), GD through lanes, basin maps, hitting times, audits and the
    step options on the Markov (e, w) model."""
    prob = markov.Canonical(0.9, 0.9)
    grid = popdyn.Grid.square("e", "w", -2.0, 2.0, 5)
    lrs = np.linspace(0.2, 1.2, 6)

    def basins(method: str, **kw) -> dict[str, np.ndarray]:
        bm = popdyn.basin_map(prob, grid, method, **kw)
        return {"labels": bm.labels, "times": bm.times, "status": bm.status}

    def audit() -> dict[str, np.ndarray]:
        traj = popdyn.gradient_descent(prob, _starts(prob, 6), lr=lrs, steps=30, save_params=True, momentum=0.5)
        a = popdyn.step_size_audit(prob, traj, lrs, momentum=0.5)
        return {"lambda_max": a.lambda_max, "loss": np.asarray(traj.loss)}

    def hits(method: str) -> dict[str, np.ndarray]:
        h = popdyn.hitting_times(prob, _starts(prob, 6), LossBelow(prob, 0.4), method, t1=200.0, lr=0.3, steps=400)
        return {"times": h.times, "status": h.status}

    def gd(**kw) -> dict[str, np.ndarray]:
        return _trajectory(popdyn.gradient_descent(prob, _starts(prob, 6), **kw))

    def flow(**kw) -> dict[str, np.ndarray]:
        return _trajectory(popdyn.gradient_flow(prob, _starts(prob, 4), t1=50.0, **kw))

    return {
        "markov/flow": lambda: flow(ts=6, save_params=True),
        "markov/flow_ends": lambda: flow(ts=None, lanes=2),
        "markov/gd": lambda: _trajectory(
            popdyn.gradient_descent(prob, _starts(prob, 4), lr=0.05, steps=64, record_every=64, lanes=2, lane_steps=16)
        ),
        "markov/basins_flow": lambda: basins("flow", t1=200.0),
        "markov/basins_gd": lambda: basins("gd", lr=0.5, steps=300, lanes=8, lane_steps=32),
        "markov/gd_lrs_momentum": audit,
        "markov/adam": lambda: gd(lr=0.1, steps=50, record_every=10, optimizer=optax.adam),
        "markov/noise_scales": lambda: gd(
            lr=0.1, steps=20, noise=0.01, seed=3, time_scales={"e": 2.0, "w": 0.5}, record_every=5
        ),
        "markov/hit_flow": lambda: hits("flow"),
        "markov/hit_gd": lambda: hits("gd"),
    }


def cases() -> dict[str, Callable[[], dict[str, np.ndarray]]]:
    """Every recorded case: a name → a function computing its arrays."""
    out = _markov_cases()
    for name, make in _problems().items():
        out |= _task_cases(name, make)
    return out


def versions() -> dict[str, str]:
    """The versions, and the platform (``popdyn._identity.platform``), that decide the last bit of a result."""
    import diffrax
    import equinox
    import jaxlib

    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "diffrax": diffrax.__version__,
        "equinox": equinox.__version__,
        "optax": optax.__version__,
        **platform(),  # backend, XLA's flags and the host's vector extensions: XLA's code, hence the last bit
    }


def versions_list() -> list[str]:
    """``versions()`` as the sorted "name=value" strings golden.npz keeps under ``__versions__``."""
    return sorted(f"{k}={v}" for k, v in versions().items())


def _test_session() -> None:
    """Run the repository's conftest.py, as pytest does first: the test session's float64 and XLA flags. XLA reads its
    flags when its backend starts, at the first computation, which nothing here has run yet."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("popdyn_test_session", PATH.parents[2] / "conftest.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def main() -> None:
    _test_session()
    arrays = {}
    for case, compute in cases().items():
        for key, value in compute().items():
            arrays[f"{case}/{key}"] = value
    np.savez_compressed(PATH, __versions__=np.array(versions_list()), **arrays)
    print(f"{len(arrays)} arrays from {len(cases())} cases written to {PATH}")


if __name__ == "__main__":
    main()
