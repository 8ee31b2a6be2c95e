"""Minibatch SGD as a dynamics object (docs/sgd.md, "SGD runs"): ``popdyn.dynamics.SGD`` and ``popdyn.sgd``.

One step of SGD with η = 1 from θ is θ − ĝ_B(θ), so a large ensemble of one-step runs samples the minibatch
gradient itself: its mean is ∇L(θ) and its mean squared deviation the exact tr(c_B Σ(θ)) of ``gradient_noise``
(within 4 standard errors), with and without replacement, on a weighted table, a uniform one and a product
distribution. A whole batch drawn without replacement is every example once: a step of GD. Runs are
deterministic (the same seed, the same bits) and a run's minibatches do not depend on the starts and seeds beside it
or on the chunks; a checkpoint resumes them. Each run has its own status, and the analyses run SGD unchanged.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _sgd_maps import exact_moments

import popdyn
from popdyn import Status
from popdyn.dynamics import SGD, GradientDescent, SaveAt
from popdyn.exact import ProductDistribution, WeightedTable
from popdyn.exact import _minibatch as minibatch

DOCS = Path(__file__).resolve().parents[1] / "docs"
X = np.array([[1.0, 0.5], [-0.3, 1.0], [0.8, -1.2], [-1.0, -0.4], [0.6, 0.9], [1.4, -0.2]])
Y = np.array([1.0, 1.0, -1.0, -1.0, 1.0, -1.0])


def logistic(th, x):
    """ℓ(θ, x) = log(1 + exp(−y θ·x)): per-example gradients that do not vanish anywhere."""
    return jax.nn.softplus(-x["y"] * (x["x"] @ th))


def _problem(weights=None):
    points = {"x": X, "y": Y}
    table = WeightedTable.uniform(points) if weights is None else WeightedTable(points, weights)
    return popdyn.Problem.from_examples(logistic, np.zeros(2), data=table)


UNIFORM = _problem()
WEIGHTED = _problem(np.array([0.3, 0.05, 0.15, 0.2, 0.1, 0.2]))
THETA = np.array([0.5, -0.2])
REGRESSION = popdyn.Problem.from_examples(
    lambda th, x: 0.5 * (x["x"] @ th - x["y"]) ** 2,
    np.zeros(2),
    data=WeightedTable.uniform({"x": X, "y": X @ np.array([0.6, -0.4])}),
)
"""A realisable least-squares regression: every example's loss vanishes at θ* = (0.6, −0.4)."""


def _one_step_gradients(prob, batch, replace, seeds):
    """ĝ_B at THETA from ``seeds`` one-step runs at η = 1: θ_0 − θ_1 (θ recorded: one vmapped batch, no lanes)."""
    traj = popdyn.sgd(prob, THETA, lr=1.0, batch=batch, steps=1, seeds=seeds, replace=replace, save_params=True)
    return THETA - np.asarray(traj.final)


def _assert_within_4_se(samples, exact):
    se = samples.std(ddof=1) / math.sqrt(samples.size)
    assert abs(samples.mean() - exact) <= 4 * se, (samples.mean(), exact, se)


@pytest.mark.parametrize(("prob", "batch", "replace"), [(UNIFORM, 2, False), (WEIGHTED, 3, True)])
def test_one_step_is_a_minibatch_gradient_with_the_exact_noise(prob, batch, replace):
    """Over 20,000 one-step runs: each coordinate of ĝ_B has mean ∇L(θ), and ‖ĝ_B − ∇L‖² has mean tr(c_B Σ(θ)),
    both within 4 standard errors (c_B = (n − B)/(B(n − 1)) without replacement, 1/B with)."""
    g = _one_step_gradients(prob, batch, replace, 20_000)
    noise = popdyn.gradient_noise(prob, THETA, batch=batch, replace=replace)
    for k in range(2):
        _assert_within_4_se(g[:, k], noise.mean[k])
    _assert_within_4_se(np.sum((g - noise.mean) ** 2, axis=1), noise.trace)


@pytest.mark.slow
def test_a_product_distribution_is_sampled_coordinate_by_coordinate_or_as_subsets():
    """Examples of a product distribution (3 × 4 uniform values, and unequal marginals with replacement): the same
    checks of the mean and the noise of ĝ_B as on tables."""

    def ell(th, x):
        return 0.5 * (th[0] * x[0] + th[1] * x[1] - jnp.sin(x[0] + 2 * x[1])) ** 2

    uniform = ProductDistribution([np.full(3, 1 / 3), np.full(4, 1 / 4)], [[-1.0, 0.0, 1.0], [0.0, 1.0, 2.0, 3.0]])
    skewed = ProductDistribution([[0.2, 0.5, 0.3], [0.1, 0.2, 0.3, 0.4]], [[-1.0, 0.0, 1.0], [0.0, 1.0, 2.0, 3.0]])
    for data, replace in ((uniform, False), (skewed, True)):
        prob = popdyn.Problem.from_examples(ell, np.zeros(2), data=data)
        g = _one_step_gradients(prob, 3, replace, 20_000)
        noise = popdyn.gradient_noise(prob, THETA, batch=3, replace=replace)
        for k in range(2):
            _assert_within_4_se(g[:, k], noise.mean[k])
        _assert_within_4_se(np.sum((g - noise.mean) ** 2, axis=1), noise.trace)


@pytest.mark.parametrize(("n", "batch"), [(5, 2), (7, 3), (6, 5)])
def test_subsets_without_replacement_are_uniform(n, batch):
    """40,000 draws of a B-subset of n (Floyd's algorithm for B² ≤ n log₂ n, a permutation's head otherwise): B
    distinct indices, and every one of the C(n, B) subsets within 4 binomial standard errors of 1/C(n, B)."""
    draws = 40_000
    keys = jax.random.split(jax.random.PRNGKey(1), draws)
    subsets = np.sort(np.asarray(jax.jit(jax.vmap(lambda k: minibatch._subset(k, n, batch)))(keys)), axis=1)
    assert np.all((subsets >= 0) & (subsets < n)) and np.all(np.diff(subsets, axis=1) > 0)
    _, counts = np.unique(subsets, axis=0, return_counts=True)
    p = 1 / math.comb(n, batch)
    assert counts.size == math.comb(n, batch)
    assert np.all(np.abs(counts / draws - p) <= 4 * math.sqrt(p * (1 - p) / draws)), counts


@pytest.mark.slow
def test_a_whole_batch_without_replacement_is_gd():
    """B = n without replacement draws every example once: 30 steps of SGD are GD's, to rounding (1e-13 relative),
    for every seed."""
    starts = np.array([[0.5, -0.2], [-1.0, 0.3]])
    traj = popdyn.sgd(UNIFORM, starts, lr=0.7, batch=6, steps=30, seeds=3, replace=False)
    gd = popdyn.gradient_descent(UNIFORM, np.repeat(starts, 3, axis=0), lr=0.7, steps=30, record_every=30)
    np.testing.assert_allclose(np.asarray(traj.final), np.asarray(gd.final), rtol=1e-13, atol=0)


RUN = SGD(lr=0.4, batch=2, steps=40, seeds=3, seed=7, save=SaveAt(every=10, params=True))
STARTS = np.array([[0.5, -0.2], [-1.0, 0.3], [0.2, 0.9]])


@pytest.mark.slow
def test_the_same_seed_gives_the_same_runs_bit_for_bit():
    a, b = RUN.run(UNIFORM, STARTS), RUN.run(UNIFORM, STARTS)
    for x, y in [(a.final, b.final), (a.params, b.params), (a.loss, b.loss), (a.status, b.status)]:
        assert np.array_equal(np.asarray(x), np.asarray(y))
    other = SGD(lr=0.4, batch=2, steps=40, seeds=3, seed=8, save=RUN.save).run(UNIFORM, STARTS)
    assert not np.any(np.all(np.asarray(other.final) == np.asarray(a.final), axis=1))
    runs = np.asarray(a.final).reshape(3, 3, 2)  # (start, seed, θ): the seeds of one start are different runs
    assert len({tuple(r) for r in runs[0]}) == 3


@pytest.mark.slow
def test_a_runs_minibatches_do_not_depend_on_the_runs_beside_it_or_the_chunks():
    """Run (j, s) is the same with 3 starts × 3 seeds, one start × 9 seeds, 9 starts × 1 seed, and in chunks of 4
    runs (which pad the last chunk)."""
    full = np.asarray(RUN.run(UNIFORM, STARTS).params).reshape(3, 3, 5, 2)  # (start, seed, record, θ)
    alone = np.asarray(dataclasses.replace(RUN, seeds=9).run(UNIFORM, STARTS[0]).params)
    assert np.array_equal(alone[:3], full[0])  # one unbatched start: its S runs on a leading axis
    more = np.concatenate([STARTS, -STARTS, 2 * STARTS])
    assert np.array_equal(np.asarray(dataclasses.replace(RUN, seeds=1).run(UNIFORM, more).params)[:3], full[:, 0])
    chunked = np.asarray(RUN.run(UNIFORM, STARTS, chunk_size=4).params)
    assert np.array_equal(chunked.reshape(3, 3, 5, 2), full)


def test_a_checkpoint_resumes_the_same_runs(tmp_path):
    ck = tmp_path / "ck"
    first = RUN.run(UNIFORM, STARTS, chunk_size=4, checkpoint=ck)
    (ck / "chunk_00001.npz").unlink()
    again = RUN.run(UNIFORM, STARTS, chunk_size=4, checkpoint=ck)
    assert (ck / "chunk_00001.npz").exists()
    assert np.array_equal(np.asarray(first.params), np.asarray(again.params))
    assert np.array_equal(np.asarray(first.params), np.asarray(RUN.run(UNIFORM, STARTS, chunk_size=4).params))


@pytest.mark.slow
def test_each_run_has_its_own_status_and_the_trajectory_carries_the_sgd():
    """Per-start rates on the regression: the start at η = 5 diverges in all its seeds and is frozen at its last
    finite point; the others run on. With one unbatched start and one seed, the Trajectory has no batch axis, as
    GD's."""
    dynamics = SGD(lr=np.array([0.3, 5.0, 0.3]), batch=2, steps=60, seeds=3, diverge=1e3)
    traj = dynamics.run(REGRESSION, STARTS)
    status = np.asarray(traj.status).reshape(3, 3)
    assert np.all(status[1] == Status.DIVERGED) and not np.any(status[[0, 2]] == Status.DIVERGED)
    assert np.all(np.isfinite(np.asarray(traj.final))) and np.all(np.linalg.norm(traj.final, axis=1) <= 1e3)
    assert traj.dynamics is dynamics and traj.dynamics.method == "sgd" and traj.time_unit == "step"
    single = SGD(lr=0.3, batch=2, steps=20).run(REGRESSION, THETA)
    assert np.shape(single.final) == (2,) and np.ndim(single.status) == 0


@pytest.mark.slow
def test_the_analyses_run_it_unchanged():
    """``basin_fractions`` and ``hitting_times`` take the S runs of every start; ``basin_map`` one run per grid point
    (seeds = 1), and refuses several by name. On a realisable regression every run reaches its minimum."""
    prob = REGRESSION
    dynamics = SGD(lr=0.3, batch=2, steps=600, seeds=3)
    fractions = popdyn.basin_fractions(prob, STARTS, dynamics)
    assert fractions.labels.shape == (9,) and fractions.fractions_of_resolved == {"min L=0": 1.0}
    hits = popdyn.hitting_times(prob, STARTS, popdyn.LossBelow(prob, 1e-6), dynamics)
    assert hits.times.shape == (9,) and np.all(hits.reached) and np.all(hits.times > 0)
    grid = popdyn.Grid("[0]", "[1]", (-1.0, 1.0), (-1.0, 1.0), (2, 3))
    assert popdyn.basin_map(prob, grid, SGD(lr=0.3, batch=2, steps=600)).labels.shape == (2, 3)
    with pytest.raises(ValueError, match="method=SGD makes 3 runs from each start: a basin map labels one run"):
        popdyn.basin_map(prob, grid, dynamics)


@pytest.mark.validation
@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"batch": 0}, "batch=0 is out of range: must be an integer >= 1"),
        ({"batch": 2.0}, "batch=2.0 is out of range"),
        ({"replace": None}, "replace=None is invalid: must be True"),
        ({"seeds": 0}, "seeds=0 is out of range: must be an integer >= 1"),
        ({"lr": -0.1}, "lr=-0.1 is out of range"),
        ({"lr": np.array([0.1, np.nan])}, "lr has shape \\(2,\\): one learning rate per start must be finite"),
        ({"steps": 0}, "steps=0 is out of range"),
        ({"seed": -1}, "seed=-1 is out of range"),
        ({"momentum": 1.0}, "momentum=1.0 is out of range"),
        ({"diverge": 0.0}, "diverge=0.0 is out of range"),
        ({"steps": 10, "save": SaveAt(every=3)}, "steps=10 is invalid: must be a multiple of record_every=3"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, match):
    with pytest.raises(ValueError, match=match):
        SGD(**settings)


@pytest.mark.validation
def test_what_a_problem_cannot_give_is_refused_by_name():
    with pytest.raises(ValueError, match="batch=7 is out of range: without replacement it must be an integer in"):
        SGD(batch=7, replace=False).run(UNIFORM, THETA)
    with pytest.raises(ValueError, match="replace=False needs n = 6 equally weighted examples"):
        SGD(batch=2, replace=False).run(WEIGHTED, THETA)
    plain = popdyn.Problem.from_loss(lambda th: jnp.sum(th**2), np.zeros(2))
    with pytest.raises(ValueError, match="FunctionProblem declares no per-example data"):
        SGD().run(plain, THETA)
    with pytest.raises(ValueError, match="per-initialisation learning rates must be 3 finite numbers"):
        SGD(lr=np.array([0.1, 0.2])).run(UNIFORM, STARTS)
    with pytest.raises(ValueError, match="per-initialisation learning rates must be 1 finite numbers"):
        SGD(lr=np.array([0.1]), seeds=2).run(UNIFORM, THETA)
    with pytest.raises(ValueError, match="seeds=0 is out of range"):
        popdyn.sgd(UNIFORM, THETA, lr=0.1, batch=1, steps=5, seeds=0)


@pytest.mark.slow
def test_the_docs_example():
    """docs/sgd.md, "SGD runs", executed from the page: E‖δ_32‖²/‖δ_0‖² of its 2,000 runs at 0.98 η* and 1.02 η* on
    the hexagon is within 4 exact standard errors of the linearised recursion's (0.2781 and 3.595, from every
    minibatch enumerated), η* = 2/α², and its 16 runs of two starts all converge."""
    section = (DOCS / "sgd.md").read_text(encoding="utf-8").split("## SGD runs", 1)[1].split("\n## ", 1)[0]
    code = [block for block in re.findall(r"```python\n(.*?)```", section, re.S) if block.startswith("import")]
    namespace: dict = {}
    exec(compile(code[0], str(DOCS / "sgd.md"), "exec"), namespace)
    prob, theta_star, delta0, eta_star = (namespace[k] for k in ("prob", "theta_star", "delta0", "eta_star"))
    assert abs(eta_star * 1.3**2 / 2 - 1) <= 1e-12
    Hs, r2 = np.einsum("ni,nj->nij", namespace["x"], namespace["x"]), delta0 @ delta0
    for factor, ratio in namespace["ratio"].items():
        m2, m4 = exact_moments(Hs, np.full(6, 1 / 6), 1, True, factor * eta_star, delta0, 32)
        assert abs(float(ratio) - m2 / r2) <= 4 * math.sqrt((m4 - m2**2) / 2000) / r2, (factor, ratio, m2 / r2)
    traj = namespace["traj"]
    assert traj.status_counts()["converged"] == 16 and traj.dynamics is namespace["sgd"]


def test_the_public_names():
    assert popdyn.sgd is popdyn.dynamics.sgd and popdyn.SGD is popdyn.dynamics.SGD
    assert isinstance(SGD().descent(0.1, None), GradientDescent)
    assert SGD(seeds=4).runs_per_start == 4 and GradientDescent().runs_per_start == 1
