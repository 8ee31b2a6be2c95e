"""The teacher's basin-map and step-size jobs (docs/models/teacher.md §3, §6; docs/jobs.md): the labels of random starts
against the teacher's loss level recomputed step by step, and the step-size verdicts against λ_max and η, with
λ_max checked on the exact Hessian."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from popdyn import Status
from popdyn.dynamics import gradient_descent
from popdyn.jobs.teacher import commands
from popdyn.jobs.teacher.commands import basins_teacher, random_directions, stepsize_teacher
from popdyn.jobs.teacher.rates import NO_STOP
from popdyn.tasks.teacher.builders import build

# A small CNN teacher: D = 6 positions, pooling windows of K = 2, ReLU (θ has 4·4 + 6·6 = 52 parameters).
SMALL = dict(teacher="cnn", D=6, K=2, activation="relu")
BASINS = dict(SMALL, grid=4, lo=0.0, hi=6.0, steps=600, progress=False)


def zero_init_excess(prob) -> float:
    """L(0) − L_opt = (1 + α²)σ_x²‖V*‖²D/(4K) at W = 0, A = 0 (§10, item 2)."""
    return (1 + float(prob.alpha) ** 2) * float(prob.sigma_x) ** 2 * float(prob.v) * prob.D / (4 * prob.K)


def check_labels(prob, res, starts):
    """Every start's label against the teacher's level recomputed independently: "teacher" (0) exactly where the
    loss falls to L_opt + tol·(L(0) − L_opt) within the budget, at the reported step (the first GD step k with
    L(θ_k) ≤ level in a run recorded at every step, without a target); "other" (1) only at steady end points above
    the level; −1 (unresolved) at the rest. Returns that run and the steps k (NaN: never)."""
    r, inp, b = res.results, res.inputs, res.arrays["basins"]
    level = float(prob.L_opt) + inp["tol"] * zero_init_excess(prob)
    assert r["level"] == pytest.approx(level, rel=1e-12)
    traj = gradient_descent(
        prob, starts, lr=inp["lr"], steps=inp["steps"], record_every=1, save_params=True, gtol=1e-300
    )
    below = np.asarray(traj.loss) <= level
    k = np.where(below.any(axis=1), np.argmax(below, axis=1), np.nan)
    labels = b["labels"].ravel()
    np.testing.assert_array_equal(labels == 0, np.isfinite(k))
    np.testing.assert_array_equal(b["steps_to_level"].ravel()[labels == 0], k[labels == 0])
    assert np.all(np.isnan(b["steps_to_level"].ravel()[labels != 0]))
    status = b["status"].ravel()
    assert np.all(status[labels == 0] == Status.REACHED)
    resolved = np.isin(status, (Status.CONVERGED, Status.SADDLE, Status.CONVERGED_LATE))
    np.testing.assert_array_equal(labels == 1, resolved)
    # the end point of a reached start is the step that met the level; the others end above it
    excess = b["end_excess_over_zero_init"].ravel()
    assert np.all(excess[labels == 0] <= inp["tol"]) and np.all(excess[labels != 0] > inp["tol"])
    fr = r["fractions"]
    assert fr["teacher"] == pytest.approx(np.mean(labels == 0)) and sum(fr.values()) == pytest.approx(1.0)
    return traj, k


@pytest.fixture(scope="module")
def scale_map():
    return basins_teacher(**BASINS)


@pytest.mark.slow
def test_basins_scale_slice_labels_random_starts(scale_map):
    """The default slice (scales of W and of the logits of A along one random direction each): labels against the
    recomputed level; small logit scales reach the teacher within 600 steps and large ones (saturated attention)
    do not (measured: rows of logit scale 0 and 2 reach it at steps 169–172 and 538–591, rows 4 and 6 end at
    0.32–0.58 of L(0) − L_opt, still moving: unresolved)."""
    res = scale_map
    prob = build(SMALL["teacher"], SMALL["D"], SMALL["K"], SMALL["activation"])
    assert res.results["zero_init_excess"] == pytest.approx(zero_init_excess(prob), rel=1e-12)
    assert res.inputs["lr"] == pytest.approx(1 / prob.lambda_max_at_teacher(), rel=1e-15)
    b = res.arrays["basins"]
    dirs = random_directions(prob, 0)
    X, Y = np.meshgrid(b["x"], b["y"])
    starts = {"W": X.ravel()[:, None, None] * dirs["W"], "A": Y.ravel()[:, None, None] * dirs["A"]}
    traj, k = check_labels(prob, res, starts)
    labels = b["labels"]
    assert (labels == 0).any() and (labels != 0).any()
    # the start (0, 0) of the slice is the paper's W = 0, A = 0: its step is the reference reported beside the map
    assert b["x"][0] == 0.0 and b["y"][0] == 0.0
    assert b["steps_to_level"][0, 0] == res.results["steps_to_level_from_zero_init"]
    # the theory residual ‖W − V*‖ + ‖S − S*‖ of the problem's attractor, at end points recomputed by GD to each
    # start's step at the level (reached) or to the whole budget; smaller where the level was reached
    idx = np.where(np.isfinite(k), k, res.inputs["steps"]).astype(int)
    ends = jax.tree_util.tree_map(lambda v: jnp.asarray(v)[np.arange(idx.size), idx], traj.params)
    residual = np.asarray(jax.vmap(prob.attractors()["teacher"])(ends))
    np.testing.assert_allclose(b["residual"].ravel(), residual, rtol=1e-9, atol=1e-12)
    resid = res.results["residual_median_over_scale"]
    assert resid["teacher"] < resid["unresolved"]


@pytest.mark.slow
def test_basins_user_coordinates_on_a_random_base(tmp_path):
    """A slice through two named coordinates: they vary over the range, every other coordinate is the random
    initialisation (W_dir, A_dir); labels against the recomputed level; the result writes as JSON. The grid (4 × 4)
    and budget (600 steps) are the scale slice's, so the runs reuse its compiled programs."""
    res = basins_teacher(**dict(BASINS, x="W[0,1]", y="A[2,3]", lo=-4.0, hi=4.0))
    prob = build(SMALL["teacher"], SMALL["D"], SMALL["K"], SMALL["activation"])
    b = res.arrays["basins"]
    base = {k: np.asarray(v) for k, v in random_directions(prob, 0).items()}
    X, Y = np.meshgrid(b["x"], b["y"])
    n = X.size
    W = np.broadcast_to(base["W"], (n, *base["W"].shape)).copy()
    A = np.broadcast_to(base["A"], (n, *base["A"].shape)).copy()
    W[:, 0, 1], A[:, 2, 3] = X.ravel(), Y.ravel()
    check_labels(prob, res, {"W": jnp.asarray(W), "A": jnp.asarray(A)})
    assert res.inputs["x"] == "W[0,1]" and res.inputs["y"] == "A[2,3]"
    res.write(tmp_path / "out", "basins", 0.0)
    json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (tmp_path / "out" / "basins.png").exists()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(grid=1), "grid=1 is out of range"),
        (dict(lo=2.0, hi=1.0), "range=(2.0, 1.0) is invalid"),
        (dict(steps=0), "steps=0 is out of range"),
        (dict(lr=-0.1), "lr=-0.1 is out of range"),
        (dict(tol=1.0), "tol=1.0 is out of range"),
        (dict(chunk=0), "chunk=0 is out of range"),
        (dict(x="W[0,1]"), "give both coordinates"),
        (dict(x="W[9,9]", y="A[0,0]"), "does not index"),
        (dict(x="B[0]", y="A[0,0]"), "names no parameter"),
        (dict(teacher="mlp"), "teacher='mlp' is invalid"),
    ],
)
def test_basins_bad_input_is_refused_before_running(monkeypatch, kwargs, message):
    def forbidden(*args, **kw):
        raise AssertionError("bad input must be refused before anything runs")

    monkeypatch.setattr(commands, "basin_fractions", forbidden)
    with pytest.raises(ValueError, match=re.escape(message)):
        basins_teacher(**dict(BASINS, **kwargs))


# ---- step sizes ---------------------------------------------------------------------------------------------
STEPSIZE = dict(SMALL, steps=600, records=12)


@pytest.fixture(scope="module")
def stepsize_default_rates():
    return stepsize_teacher(**STEPSIZE)


@pytest.mark.slow
def test_stepsize_verdicts_follow_lambda_max_and_eta(stepsize_default_rates):
    """Each run's verdict from its λ_max records and η: held ⇔ max λ_max ≤ 1/η; between ⇔ 1/η < max ≤ 2/η; past 2/η
    otherwise. At the default rates (1, 1.5, 2.5)/λ_max(teacher) they are held, between and past 2/η (§6: along the
    zero-initialisation run λ_max rises towards its value at the teacher, so η = 1/λ_max(teacher) holds and
    2.5/λ_max(teacher) crosses 2/η near the teacher; measured over 600 steps: end λ_max/λ_teacher 0.873 and 0.895,
    and max λ_max = 0.886 λ_teacher > 2/η = 0.8 λ_teacher; λ_max(0)/κ = 1.07)."""
    res = stepsize_default_rates
    lam_t = res.results["lambda_max_teacher"]
    prob = build(SMALL["teacher"], SMALL["D"], SMALL["K"], SMALL["activation"])
    assert lam_t == prob.lambda_max_at_teacher()
    lrs = np.array(res.inputs["lr"])
    np.testing.assert_allclose(lrs * lam_t, [1.0, 1.5, 2.5], rtol=1e-15)
    lam = res.arrays["stepsize"]["lambda_max"]
    assert lam.shape == (3, STEPSIZE["records"] + 1)
    for i, row in enumerate(res.results["runs"]):
        top = float(np.max(lam[i]))
        assert row["max_lambda"] == top and row["lr"] == lrs[i]
        expect = (
            "held"
            if top <= 1 / lrs[i]
            else "between"
            if top <= 2 / lrs[i]
            else ("edge of stability", "unstable", "diverged")
        )
        assert row["verdict"] in expect if isinstance(expect, tuple) else row["verdict"] == expect
        assert row["monotone_safe"] == (top <= 1 / lrs[i]) and row["stable"] == (top <= 2 / lrs[i])
    held, between, past = res.results["runs"]
    assert held["verdict"] == "held" and between["verdict"] == "between"
    assert past["verdict"] in ("edge of stability", "unstable")
    # λ_max rises along the run and stays below its value at the teacher while the run is stable
    for i in (0, 1):
        assert np.all(np.diff(lam[i]) > 0) and lam[i, -1] < lam_t and lam[i, -1] > 0.5 * lam_t
    kappa = (1 + float(prob.alpha) ** 2) / 2  # §6: at uniform S, λ_max ≈ κσ_x²‖S‖_F² = κ, slightly above
    assert 1.0 <= lam[0, 0] / kappa < 1.15
    assert all(line.startswith("  η = ") for line in res.lines[1:4])


@pytest.mark.slow
def test_stepsize_lambda_max_is_the_exact_hessian_along_the_run(stepsize_default_rates):
    """The audited λ_max at three records of the η = 1.5/λ_teacher run equals the top eigenvalue of the exact dense
    Hessian of an independent GD run at the same steps (float64 rounding). The independent run is GD from W = 0,
    A = 0 at the job's three rates with the job's settings (a batch of three, runs to the full budget), so its
    compiled program is the one the job ran."""
    res = stepsize_default_rates
    prob = build(SMALL["teacher"], SMALL["D"], SMALL["K"], SMALL["activation"])
    lrs, steps = np.array(res.inputs["lr"]), res.inputs["steps"]
    every = res.results["record_every"]
    starts = jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v, (len(lrs), *v.shape)), prob.init(None))
    traj = gradient_descent(prob, starts, lr=lrs, steps=steps, record_every=every, save_params=True, gtol=NO_STOP)
    flat, unravel = ravel_pytree(prob.init(None))
    hessian = jax.jit(jax.hessian(lambda x: prob.loss(unravel(x))))  # one compiled Hessian for the three records
    for j in (0, 4, 12):
        H = hessian(ravel_pytree(jax.tree_util.tree_map(lambda v, j=j: v[1, j], traj.params))[0])
        top = float(np.linalg.eigvalsh(0.5 * (H + H.T))[-1])
        assert res.arrays["stepsize"]["lambda_max"][1, j] == pytest.approx(top, rel=1e-9)
        assert res.arrays["stepsize"]["steps"][1, j] == j * every
    np.testing.assert_allclose(res.arrays["stepsize"]["loss"][1], np.asarray(traj.loss[1]), rtol=1e-12)


@pytest.mark.slow
def test_stepsize_one_rate_and_validation(tmp_path):
    """One given rate (a number or a one-element list) runs one audit; bad rates, steps and records are refused."""
    res = stepsize_teacher(**dict(STEPSIZE, lr=[0.2], steps=50, records=5))
    assert res.inputs["lr"] == [0.2] and len(res.results["runs"]) == 1
    assert res.arrays["stepsize"]["lambda_max"].shape == (1, 6)
    one = stepsize_teacher(**dict(STEPSIZE, lr=0.2, steps=50, records=5))
    np.testing.assert_array_equal(one.arrays["stepsize"]["lambda_max"], res.arrays["stepsize"]["lambda_max"])
    res.write(tmp_path / "out", "stepsize", 0.0)
    json.loads((tmp_path / "out" / "summary.json").read_text())
    for kwargs, message in (
        (dict(lr=[0.1, -1.0]), "lr=-1.0 is out of range"),
        (dict(lr=[]), "at least one"),
        (dict(steps=0), "steps=0 is out of range"),
        (dict(records=0), "records=0 is out of"),
        (dict(steps=5, records=6), "records=6 is out of range"),
    ):
        with pytest.raises(ValueError, match=message):
            stepsize_teacher(**dict(STEPSIZE, **kwargs))
