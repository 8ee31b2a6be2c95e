"""Basin maps as probabilities (``popdyn.basin_probabilities``, docs/sgd.md "Basin maps as probabilities"): SGD's runs
from every start of a grid, each counted for the attractor whose basin holds its end point.

The model is a double well with a noisy tilt: ℓ(θ, x) = (u² − 1)²/4 + v²/2 + x·u, x = ±a with equal weights, so
L = (u² − 1)²/4 + v²/2 has minima (±1, 0), the saddle (0, 0) with unstable rate μ = 1, and GD's separatrix u = 0;
the minibatch noise lies along u with per-example variance σ² = a². Near the saddle SGD ends on the side of
u0 − η Σ_k (1 + ημ)^{−(k+1)} ξ_k, so P(u > 0) = Φ(u0/s) with s² = ησ²/(Bμ(2 + ημ)) (the module docstring of
popdyn/analysis/_basin_probabilities.py) [derived]: the band of uncertain starts narrows like √(η/B) and the map
tends to GD's as η → 0."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import binom, norm

import popdyn
from popdyn.dynamics import SGD, GradientFlow
from popdyn.exact import WeightedTable
from popdyn.plot import plot_basin_probabilities

A = 1.0
"""The tilt's amplitude a: x = ±a."""


def example_loss(th, x):
    return (th["u"] ** 2 - 1) ** 2 / 4 + th["v"] ** 2 / 2 + x["x"] * th["u"]


def wells() -> popdyn.Problem:
    table = WeightedTable.uniform({"x": np.array([-A, A])})
    attractors = {
        "u>0": lambda th, d: jnp.abs(th["u"] - 1) + jnp.abs(th["v"]),
        "u<0": lambda th, d: jnp.abs(th["u"] + 1) + jnp.abs(th["v"]),
    }
    return popdyn.Problem.from_examples(example_loss, {"u": 0.0, "v": 0.0}, data=table, attractors=attractors)


def band(lr: float, batch: int) -> float:
    """s = a √(η/(Bμ(2 + ημ))), μ = 1: the width of the band of uncertain starts."""
    return A * math.sqrt(lr / (batch * (2 + lr)))


@pytest.mark.slow  # SGD, the settling flow and a figure compiled: ~15 s
def test_probabilities_count_each_start_s_runs():
    prob, grid = wells(), popdyn.Grid("u", "v", (-0.5, 0.5), (-0.2, 0.2), (2, 4))  # u = 0, the saddle, left out
    sgd = SGD(lr=0.05, batch=2, steps=60, seeds=3, seed=4)
    bp = popdyn.basin_probabilities(prob, grid, sgd, chunk_size=24)
    assert bp.attractors == ("u>0", "u<0") and bp.seeds == 3
    assert bp.probabilities.shape == (2, 4, 3) and bp.labels.shape == bp.status.shape == (2, 4, 3)
    np.testing.assert_array_equal(bp.probabilities.sum(axis=-1), np.ones((2, 4)))
    for i, name in enumerate(bp.attractors):
        np.testing.assert_array_equal(bp.probability(name), np.mean(bp.labels == i, axis=-1))
    p = bp.probability("u>0")
    np.testing.assert_allclose(bp.stderr("u>0"), np.sqrt(p * (1 - p) / 3), rtol=1e-15)
    # the flow's map of the same grid (the settling flow's compiled program): u0's sign, SGD's away from u = 0
    flow = popdyn.basin_map(prob, grid, GradientFlow(), chunk_size=24)
    np.testing.assert_array_equal(flow.labels, np.where(grid.points(prob)["u"] > 0, 0, 1).reshape(2, 4))
    np.testing.assert_array_equal(p[:, [0, 3]], [[0.0, 1.0], [0.0, 1.0]])
    fig = plot_basin_probabilities(bp, separatrix=flow)
    assert fig.axes[0].get_title().startswith("basins as probabilities")
    assert [h.get_label() for h in fig.axes[0].get_legend().legend_handles] == ["P = 1/2", "flow separatrix"]
    with pytest.raises(ValueError, match="name='w' is not an attractor of this map"):
        bp.probability("w")


@pytest.mark.slow  # SGD and the settling flow compiled: ~10 s
def test_diverged_runs_neither_name_nor_scale_the_attractors():
    """Runs that diverge stay unresolved and are not settled: their end points (‖θ‖ > 1e8, L ~ 1e32) once set the
    loss scale of the level names, so the minima at L = 1 were named "min L=0" (shown as 0 within the tolerance of
    that scale)."""
    table = WeightedTable.uniform({"x": np.array([-A, A])})
    prob = popdyn.Problem.from_examples(lambda th, x: example_loss(th, x) + 1.0, {"u": 0.0, "v": 0.0}, data=table)
    grid = popdyn.Grid("u", "v", (-4.0, 4.0), (-0.5, 0.5), (3, 6))
    bp = popdyn.basin_probabilities(prob, grid, SGD(lr=0.3, batch=1, steps=40, seeds=4, seed=1))
    diverged = bp.status == int(popdyn.Status.DIVERGED)
    assert 0 < diverged.sum() < diverged.size  # from |u0| = 4 the step overshoots and the quartic throws it out
    assert np.all(bp.labels[diverged] == -1)
    assert bp.attractors == ("min L=1",)  # both wells at L = 1: one level
    np.testing.assert_array_equal(bp.labels >= 0, ~diverged)


@pytest.mark.slow  # SGD compiled: ~5 s
def test_when_no_run_ended_no_attractor_is_named():
    """Every run diverges: nothing is settled, no attractor is named (the end points at ‖θ‖ > 1e8 were once settled
    and named attractors at 0 %), and every start is unresolved with probability 1."""
    table = WeightedTable.uniform({"x": np.array([-A, A])})
    prob = popdyn.Problem.from_examples(example_loss, {"u": 0.0, "v": 0.0}, data=table)
    grid = popdyn.Grid("u", "v", (2.0, 4.0), (-0.5, 0.5), (2, 2))
    bp = popdyn.basin_probabilities(prob, grid, SGD(lr=3.0, batch=1, steps=40, seeds=3, seed=1))
    assert np.all(bp.status == int(popdyn.Status.DIVERGED))
    assert bp.attractors == () and bp.probabilities.shape == (2, 2, 1)
    np.testing.assert_array_equal(bp.probability("unresolved"), 1.0)
    np.testing.assert_array_equal(bp.labels, -1)


@pytest.mark.validation
def test_what_is_not_a_map_of_runs_is_refused():
    prob, grid = wells(), popdyn.Grid("u", "v", (-0.5, 0.5), (-0.2, 0.2), (2, 4))
    with pytest.raises(ValueError, match="method='sgd' is invalid: must be a dynamics object"):
        popdyn.basin_probabilities(prob, grid, "sgd")
    with pytest.raises(ValueError, match="grid=3 is invalid"):
        popdyn.basin_probabilities(prob, 3, SGD(seeds=2))
    with pytest.raises(ValueError, match="use basin_probabilities"):
        popdyn.basin_map(prob, grid, SGD(seeds=2))


@pytest.mark.slow  # 300 runs from each of 16 starts, at two step sizes: ~30 s on two shared cores
@pytest.mark.parametrize("lr,steps", [(0.02, 250), (0.005, 1000)])
def test_the_band_of_uncertain_starts_is_the_predicted_one_and_closes_onto_gd_as_the_step_shrinks(lr, steps):
    """At every start of a grid across the separatrix, the count of S = 300 runs ending at u > 0 is what
    Binomial(S, Φ(u0/s)) gives; the same grid at a quarter of the step has a band half as wide, so the map tends to
    GD's 0/1 map as η → 0. (SGD runs for ≈ ln(u_escape/s)/(ημ) steps and more: long enough to leave the saddle's
    neighbourhood, where noise can no longer bring it back; the flow settles the rest.)"""
    batch, seeds = 4, 300
    prob = wells()
    grid = popdyn.Grid("u", "v", (-0.09, 0.09), (-0.3, 0.3), (2, 8))
    bp = popdyn.basin_probabilities(prob, grid, SGD(lr=lr, batch=batch, steps=steps, seeds=seeds, seed=7))
    assert np.all(bp.probability("unresolved") == 0.0)
    u0 = np.asarray(grid.points(prob)["u"]).reshape(grid.shape)
    predicted = norm.cdf(u0 / band(lr, batch))
    # the exact binomial test of each start's count (its tails too, where S·p is below 1): two-sided p-values
    # above 1e-4 at all 16 starts, a false alarm of at most 0.2 % for the whole grid
    count = np.rint(bp.probability("u>0") * seeds)
    tail = np.minimum(binom.cdf(count, seeds, predicted), binom.sf(count - 1, seeds, predicted))
    assert np.all(2 * tail > 1e-4), (bp.probability("u>0"), predicted)
    assert bp.uncertain(0.05).any() and not bp.uncertain(0.05).all()  # a band, and GD's labels beyond it
