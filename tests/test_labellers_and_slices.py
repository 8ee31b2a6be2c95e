"""Labellers and slices are pieces (docs/basins.md, "Labels", "Slices"): a new way of naming attractors and a new
family of starts are one class each, run by ``basin_map`` unchanged; the built-in ones compose; the keyword
settings name the default labeller, with the same labels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn.analysis import (
    AbstractLabeller,
    AbstractSlice,
    BlockScales,
    Clusters,
    FirstOf,
    Labels,
    LossBelow,
    LossLevels,
    Plane,
    Reached,
    Residuals,
    Rest,
    label_end_points,
)
from popdyn.dynamics import GradientDescent, GradientFlow, Status
from popdyn.plot import plot_basin_map


def _gap(th):
    return jnp.abs(th["a"] * th["b"] - 1.0)


HYPERBOLA = popdyn.Problem.from_loss(
    lambda th: 0.5 * (th["a"] * th["b"] - 1.0) ** 2,
    init={"a": 0.0, "b": 0.0},
    attractors={
        "a+b>0": lambda th: _gap(th) + jax.nn.relu(-th["a"] - th["b"]),
        "a+b<0": lambda th: _gap(th) + jax.nn.relu(th["a"] + th["b"]),
    },
)
"""L(a, b) = ½(ab − 1)²: minima on the hyperbola ab = 1, a saddle at 0; a² − b² is conserved by the flow, so a + b
keeps its sign and picks the branch. One Problem (its functions are static: one compiled solver), and the flows below
run 96 starts each (the polar grid's 16 × 6): one compiled solver for the whole module."""


class SignOfSum(AbstractLabeller):
    """A labeller written outside the library: minima by the sign of a + b."""

    statuses = (int(Status.CONVERGED), int(Status.CONVERGED_LATE))

    def label(self, prob, traj, todo):
        s = np.sign(np.asarray(traj.final["a"]) + np.asarray(traj.final["b"]))
        return Labels(np.where(todo & (s != 0), (s < 0).astype(int), -1), ("a+b>0", "a+b<0"))


class Polar(AbstractSlice):
    """A slice written outside the library: θ = r·(cos φ, sin φ) over r in x_range, φ in y_range."""

    def __init__(self, r_range, phi_range, shape):
        self.x, self.y, self.x_range, self.y_range, self.shape = "r", "phi", r_range, phi_range, shape

    def points(self, prob):
        R, PHI = np.meshgrid(self.xs, self.ys)
        return {"a": jnp.asarray((R * np.cos(PHI)).ravel()), "b": jnp.asarray((R * np.sin(PHI)).ravel())}


@pytest.mark.slow  # ~12 s: two flows and a clustering
def test_a_new_labeller_and_a_new_slice_are_one_class_each():
    """On ½(ab − 1)², the branch is the sign of a + b at the start. A user labeller (by the sign of a + b at the end)
    over a user slice (polar coordinates) gives exactly that sign at every start off the line a + b = 0, and the
    same map as the problem's own residuals; starts on that line end at the saddle, which this labeller leaves
    unresolved."""
    grid = Polar((0.5, 2.0), (0.0, 2 * np.pi), (16, 6))
    bm = popdyn.basin_map(HYPERBOLA, grid, GradientFlow(t1=1e3), labeller=SignOfSum())
    assert bm.labels.shape == (16, 6) and bm.attractors == ("a+b>0", "a+b<0")
    R, PHI = np.meshgrid(grid.xs, grid.ys)
    s0 = np.cos(PHI) + np.sin(PHI)
    off = np.abs(s0) > 1e-9
    assert off.sum() >= 90
    np.testing.assert_array_equal(bm.labels[off], (s0[off] < 0).astype(int))
    assert np.all(bm.labels[~off] == -1)  # at the saddle: not a status this labeller names
    theory = popdyn.basin_map(HYPERBOLA, grid, GradientFlow(t1=1e3))
    np.testing.assert_array_equal(theory.labels[off], bm.labels[off])


def test_reached_then_rest_names_the_deep_and_the_shallow_well():
    """L(x) = (x² − 1)²/4 + x/10 has a deep minimum left of its local maximum x_m (the middle root of L' = x³ − x +
    0.1) and a shallow one right of it. GD with the target L ≤ 0 (between the two levels): every start left of x_m
    reaches it ("deep", status REACHED), every start right of it converges above it ("shallow")."""
    prob = popdyn.Problem.from_loss(lambda th: (th[0] ** 2 - 1.0) ** 2 / 4 + 0.1 * th[0], init=np.zeros(1))
    x_m = np.sort(np.roots([1.0, 0.0, -1.0, 0.1]).real)[1]
    x0 = np.linspace(-1.95, 1.95, 40)
    assert np.min(np.abs(x0 - x_m)) > 0.02
    gd = GradientDescent(lr=0.1, steps=3000, target=LossBelow(prob, 0.0))
    bf = popdyn.basin_fractions(prob, x0[:, None], gd, labeller=FirstOf(Reached("deep"), Rest("shallow")))
    assert bf.attractors == ("deep", "shallow")
    np.testing.assert_array_equal(bf.labels, np.where(x0 < x_m, 0, 1))
    np.testing.assert_array_equal(bf.status == int(Status.REACHED), x0 < x_m)
    assert bf.fractions["deep"] == np.mean(x0 < x_m) and bf.fractions["unresolved"] == 0.0


@pytest.mark.slow  # ~8 s
def test_the_keyword_settings_are_the_default_labeller():
    """``label_end_points`` with keywords equals the labeller they name, for levels, positions and a featuriser;
    a labeller given beside those keywords, or something that is not a labeller, is refused."""
    prob = HYPERBOLA
    starts = jax.vmap(prob.init)(jax.random.split(jax.random.PRNGKey(1), 96))
    traj = GradientFlow(t1=1e3).run(prob, starts)
    pairs = [
        ({}, FirstOf(Residuals(), LossLevels())),
        ({"use_theory": False}, FirstOf(LossLevels())),
        ({"use_theory": False, "features": "position"}, FirstOf(Clusters())),
        ({"use_theory": False, "features": _signs, "cluster_radius": 0.5}, Clusters(_signs, 0.5)),
        ({"tol": 1e-6}, FirstOf(Residuals(1e-6), LossLevels())),
    ]
    for kwargs, labeller in pairs:
        a, b = label_end_points(prob, traj, **kwargs), label_end_points(prob, traj, labeller)
        np.testing.assert_array_equal(a.labels, b.labels)
        assert a.names == b.names
    labels, names = label_end_points(prob, traj)
    assert names == ("a+b>0", "a+b<0") and set(np.unique(labels)) <= {-1, 0, 1}


@pytest.mark.validation
def test_a_labeller_beside_its_settings_or_a_wrong_one_is_refused():
    prob = HYPERBOLA
    starts = {"a": np.array([0.5, 1.0]), "b": np.array([1.0, 2.0])}
    with pytest.raises(ValueError, match="tol is a setting of the default labeller"):
        popdyn.basin_fractions(prob, starts, labeller=LossLevels(), tol=1e-2)
    with pytest.raises(ValueError, match="labeller=.* is invalid"):
        popdyn.basin_fractions(prob, starts, labeller="level")
    with pytest.raises(ValueError, match="tol"):
        Residuals(tol=-1.0)
    with pytest.raises(ValueError, match="directions has no 'c'"):
        BlockScales("W", "c", {"W": np.ones((2, 3))}, (0.0, 2.0), (-1.0, 1.0), (3, 4))
    with pytest.raises(ValueError, match="u is invalid"):
        Plane({"a": 1.0}, {"a": 0.0, "b": 1.0}, (-1.0, 1.0), (-1.0, 1.0), (2, 2)).points(prob)


@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
def test_plane_and_block_scales_are_the_points_they_promise():
    """``Plane``: origin + x·u + y·v at every grid point, row-major; ``Plane.random``: orthonormal directions;
    ``BlockScales``: the two blocks scaled, the rest zero. A basin map runs over a plane: with u = (1, 1)/√2 and
    v = (1, −1)/√2 through 0, a + b = √2·x, so the branch is the sign of x."""
    prob = HYPERBOLA
    u, v = {"a": 2**-0.5, "b": 2**-0.5}, {"a": 2**-0.5, "b": -(2**-0.5)}
    plane = Plane(u, v, (-1.5, 1.5), (-1.0, 1.0), (16, 6), origin={"a": 0.25, "b": -0.5})
    pts = plane.points(prob)
    X, Y = np.meshgrid(plane.xs, plane.ys)
    np.testing.assert_allclose(pts["a"], 0.25 + (X * 2**-0.5 + Y * 2**-0.5).ravel(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(pts["b"], -0.5 + (X * 2**-0.5 - Y * 2**-0.5).ravel(), rtol=0, atol=1e-15)
    bm = popdyn.basin_map(prob, Plane(u, v, (-1.5, 1.5), (-1.0, 1.0), (16, 6)), GradientFlow(t1=1e3))
    np.testing.assert_array_equal(bm.labels, np.broadcast_to(np.where(plane.xs < 0, 1, 0), (16, 6)))
    fig = plot_basin_map(bm, prob)
    assert fig.axes[0].get_xlabel() == "u"

    wide = popdyn.Problem.from_loss(lambda th: jnp.sum(th["W"] ** 2) + jnp.sum(th["c"] ** 2), init=_blocks())
    r = Plane.random(wide, 3, (-1.0, 1.0), (-1.0, 1.0), (2, 2))
    flat = [np.concatenate([np.ravel(d["W"]), np.ravel(d["c"])]) for d in (r.u, r.v)]
    np.testing.assert_allclose(np.array(flat) @ np.array(flat).T, np.eye(2), atol=1e-14)

    dirs = {"W": np.arange(6.0).reshape(2, 3), "c": np.array([1.0, -2.0])}
    bs = BlockScales("W", "c", dirs, (0.0, 2.0), (-1.0, 1.0), (3, 4))
    assert (bs.x, bs.y) == ("W scale", "c scale")
    got = bs.points(wide)
    X, Y = np.meshgrid(bs.xs, bs.ys)
    np.testing.assert_array_equal(got["W"], X.ravel()[:, None, None] * dirs["W"])
    np.testing.assert_array_equal(got["c"], Y.ravel()[:, None] * dirs["c"])


def _signs(th):
    return jnp.sign(jnp.stack([th["a"], th["b"]]))


def _blocks() -> dict:
    return {"W": np.zeros((2, 3)), "c": np.zeros(2)}
