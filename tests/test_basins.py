"""Basin maps (docs/models/markov.md §4.4), the Grid slice, and the end-point clustering fallback."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn import Status
from popdyn.analysis import UNRESOLVED, cluster_points
from popdyn.dynamics._status import RESOLVED
from popdyn.tasks.markov import ATTRACTORS, Canonical


class Vector(popdyn.Problem):
    """θ = {"x": R^4, "s": scalar}: only used for the Grid layout / indexing tests."""

    def loss(self, theta):
        return 0.5 * jnp.sum(theta["x"] ** 2) + 0.5 * theta["s"] ** 2

    def init(self, key):
        return {"x": jnp.zeros(4), "s": jnp.zeros(())}


_THEORY = {}


def _theory(prob, grid):
    """Closed-form basin labels (§4.4) and the mask of points farther than 0.05 from the separatrix (cached:
    several tests share a grid)."""
    key = (float(prob.p), float(prob.q), grid)
    if key not in _THEORY:
        theta = grid.points(prob)
        predicted = np.asarray(jax.jit(jax.vmap(prob.predicted_basin))(theta)).reshape(grid.shape)
        far = np.asarray(prob.separatrix_distance(theta)).reshape(grid.shape) > 0.05
        _THEORY[key] = predicted, far
    return _THEORY[key]


# ---- acceptance: flow basin map vs the closed-form basins ----------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("pq", [0.1, 0.9])
def test_flow_basin_map_agrees_with_theory(pq):
    prob = Canonical(pq, pq)
    grid = popdyn.Grid.square("w", "e", -3.0, 3.0, 48)
    bm = popdyn.basin_map(prob, grid, method="flow")
    assert bm.attractors == ("global", "local", "saddle") == ATTRACTORS
    assert bm.labels.shape == grid.shape == (48, 48)
    assert bm.times.shape == bm.status.shape == grid.shape
    assert bm.method == "flow"

    predicted, far = _theory(prob, grid)
    assert far.mean() > 0.9  # the exclusion band is thin: the comparison is not vacuous
    agreement = np.mean((predicted == bm.labels)[far])
    assert agreement >= 0.99, agreement

    # both basins are really present on [−3, 3]² (a constant map could not pass by luck)
    assert 0.05 < np.mean(bm.labels == 0) < 0.95
    assert 0.05 < np.mean(bm.labels == 1) < 0.95

    fr = bm.fractions
    assert set(fr) == {"global", "local", "saddle", UNRESOLVED}
    assert sum(fr.values()) == pytest.approx(1.0, abs=1e-12)
    for i, name in enumerate(bm.attractors):
        assert fr[name] == pytest.approx(np.mean(bm.labels == i), abs=1e-15)
    assert np.all((bm.labels >= -1) & (bm.labels < len(bm.attractors)))

    labelled = bm.labels >= 0
    assert np.all(np.isfinite(bm.times[labelled])) and np.all(bm.times[labelled] >= 0)
    assert np.all(np.isnan(bm.times[~labelled]))
    # a labelled point ended at a steady state
    assert np.all(np.isin(bm.status[labelled], (int(Status.CONVERGED), int(Status.SADDLE))))
    # end points: global-basin points end on Γ* (c(w)e² = A*), local ones on e = 0
    e, w = bm.final["e"], bm.final["w"]
    assert e.shape == grid.shape
    A = (1 + 2 * w * np.abs(w)) * e**2
    g = bm.labels == 0
    assert np.max(np.abs(A[g] - prob.optimal_gap())) < 1e-3
    assert np.max(np.abs(e[bm.labels == 1])) < 1e-3


@pytest.mark.slow
def test_unresolved_points_are_labelled_minus_one():
    """Points that blow up get label −1 (same compiled shape and settings as the acceptance map)."""
    prob = Canonical(0.1, 0.1)
    grid = popdyn.Grid.square("w", "e", 1e9, 2e9, 48)  # ‖θ0‖ > diverge = 1e8
    bm = popdyn.basin_map(prob, grid, method="flow")
    assert np.all(bm.labels == -1)
    assert bm.fractions[UNRESOLVED] == 1.0
    assert all(bm.fractions[name] == 0.0 for name in bm.attractors)
    assert np.all(np.isnan(bm.times))
    assert np.all(np.isin(bm.status, (int(Status.DIVERGED), int(Status.NAN))))


@pytest.mark.slow
def test_gd_basin_map_labels_every_point():
    prob = Canonical(0.1, 0.1)
    grid = popdyn.Grid.square("w", "e", -3.0, 3.0, 8)
    # diverge goes through **dynamics_kwargs to gradient_descent: a tight bound leaves far points unresolved
    bm = popdyn.basin_map(prob, grid, method="gd", lr=0.01, steps=1000, diverge=2.0)
    assert bm.method == "gd"
    assert bm.labels.shape == bm.status.shape == bm.times.shape == (8, 8)
    assert np.all((bm.labels >= -1) & (bm.labels < len(bm.attractors)))
    assert np.all(np.isin(bm.status, [int(s) for s in Status]))
    th = grid.points(prob)
    norm0 = np.hypot(np.asarray(th["e"]), np.asarray(th["w"])).reshape(grid.shape)
    far = norm0 > 2.5  # one step of size ≤ 0.5 cannot bring these inside ‖θ‖ ≤ 2
    assert far.any() and (~far).any()
    assert np.all(bm.status[far] == int(Status.DIVERGED)) and np.all(bm.labels[far] == -1)
    labelled = bm.labels >= 0
    assert labelled.any()
    # labelled points stopped at a critical point, or passed the Newton test when the budget ran out
    assert np.all(np.isin(bm.status[labelled], [int(s) for s in RESOLVED]))
    assert np.all(np.isfinite(bm.times[labelled])) and np.all(np.isnan(bm.times[~labelled]))
    # GD times are step counts within the budget
    assert np.all((bm.times[labelled] >= 0) & (bm.times[labelled] <= 1000))
    assert bm.fractions[UNRESOLVED] == pytest.approx(np.mean(~labelled), abs=1e-15)
    assert sum(bm.fractions.values()) == pytest.approx(1.0, abs=1e-12)


def test_basin_map_rejects_bad_arguments():
    prob = Canonical(0.1, 0.1)
    grid = popdyn.Grid.square("w", "e", -3.0, 3.0, 4)
    with pytest.raises(ValueError, match="method"):
        popdyn.basin_map(prob, grid, method="euler")
    with pytest.raises(ValueError, match="tol"):
        popdyn.basin_map(prob, grid, tol=0.0)
    with pytest.raises(ValueError, match="cluster_radius"):
        popdyn.basin_map(prob, grid, cluster_radius=-1.0)


@pytest.mark.slow
def test_clustering_fallback_is_consistent_with_theory():
    prob = Canonical(0.1, 0.1)
    grid = popdyn.Grid.square("w", "e", -3.0, 3.0, 48)  # same compiled shape as the acceptance map
    bm = popdyn.basin_map(prob, grid, method="flow", use_theory=False, features="position")
    assert len(bm.attractors) >= 2
    assert all(re.fullmatch(r"(min|saddle)\d+", name) for name in bm.attractors)
    mins = [n for n in bm.attractors if n.startswith("min")]
    assert mins[0] == "min0" and mins == [f"min{k}" for k in range(len(mins))]
    # cluster ids are sorted by size
    sizes = [np.sum(bm.labels == bm.attractors.index(n)) for n in mins]
    assert sizes == sorted(sizes, reverse=True)

    predicted, _ = _theory(prob, grid)
    labelled = bm.labels >= 0
    assert labelled.mean() > 0.95
    for k, name in enumerate(bm.attractors):
        members = bm.labels == k
        assert members.any(), name
        assert len(np.unique(predicted[members])) == 1, (name, np.unique(predicted[members]))
    # both theory basins are represented among the clusters
    assert set(np.unique(predicted[labelled])) == {0, 1}
    assert sum(bm.fractions.values()) == pytest.approx(1.0, abs=1e-12)


# ---- cluster_points ----------------------------------------------------------------------------------
def test_cluster_points_two_blobs():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.0, 0.004, (30, 2))
    b = 1.0 + rng.uniform(0.0, 0.004, (10, 2))
    ids = cluster_points(np.concatenate([b, a]), 0.01)
    assert ids.shape == (40,)
    assert set(ids) == {0, 1}
    assert np.all(ids[10:] == 0)  # the larger blob is cluster 0
    assert np.all(ids[:10] == 1)


def test_cluster_points_dense_line_is_one_cluster():
    t = np.linspace(0.0, 1.0, 1001)
    X = np.stack([t, 2.0 * t - 0.3], axis=1)  # spacing ~0.002 along a line, radius 0.01
    ids = cluster_points(X, 0.01)
    assert np.all(ids == 0)
    # the same line sampled sparsely (spacing 0.1 ≫ radius) falls apart
    ids_sparse = cluster_points(X[::100], 0.01)
    assert len(np.unique(ids_sparse)) == len(X[::100])


def test_cluster_points_ids_sorted_by_size():
    rng = np.random.default_rng(1)
    blobs = [c + rng.uniform(0.0, 0.003, (n, 3)) for c, n in ((0.0, 5), (5.0, 20), (-5.0, 10))]
    ids = cluster_points(np.concatenate(blobs), 0.01)
    assert np.all(ids[:5] == 2)
    assert np.all(ids[5:25] == 0)
    assert np.all(ids[25:] == 1)
    assert cluster_points(np.zeros((0, 2)), 0.01).shape == (0,)


# ---- Grid ----------------------------------------------------------------------------------------
def test_grid_layout_rows_are_y_columns_are_x():
    prob = Canonical(0.1, 0.1)
    grid = popdyn.Grid("w", "e", (-1.0, 2.0), (10.0, 20.0), (3, 5))
    assert grid.shape == (3, 5)
    np.testing.assert_array_equal(grid.xs, np.linspace(-1.0, 2.0, 5))
    np.testing.assert_array_equal(grid.ys, np.linspace(10.0, 20.0, 3))
    th = grid.points(prob)
    assert set(th) == {"e", "w"}
    assert th["w"].shape == th["e"].shape == (15,)
    W = np.asarray(th["w"]).reshape(grid.shape)
    E = np.asarray(th["e"]).reshape(grid.shape)
    for j in range(3):
        for i in range(5):
            assert W[j, i] == grid.xs[i]
            assert E[j, i] == grid.ys[j]


def test_grid_indexed_axes_and_base():
    prob = Vector()
    grid = popdyn.Grid("x[1]", "s", (0.0, 1.0), (-1.0, 1.0), (2, 3), base={"x": 7.0})
    th = grid.points(prob)
    assert th["x"].shape == (6, 4) and th["s"].shape == (6,)
    x = np.asarray(th["x"]).reshape(2, 3, 4)
    np.testing.assert_array_equal(x[:, :, 1], np.broadcast_to(grid.xs, (2, 3)))
    np.testing.assert_array_equal(x[:, :, [0, 2, 3]], 7.0)
    np.testing.assert_array_equal(np.asarray(th["s"]).reshape(2, 3), np.broadcast_to(grid.ys[:, None], (2, 3)))


@pytest.mark.parametrize(
    "make",
    [
        lambda: popdyn.Grid.square("w", "e", -3.0, 3.0, 1),
        lambda: popdyn.Grid("w", "e", (-3.0, 3.0), (-3.0, 3.0), (1, 5)),
        lambda: popdyn.Grid("w", "e", (-3.0, 3.0), (-3.0, 3.0), (5, 1)),
        lambda: popdyn.Grid.square("w", "e", 3.0, -3.0, 8),
        lambda: popdyn.Grid.square("w", "e", 1.0, 1.0, 8),
        lambda: popdyn.Grid("w", "e", (-3.0, 3.0), (2.0, -2.0), (4, 4)),
        lambda: popdyn.Grid("w", "e", (-3.0, float("inf")), (-3.0, 3.0), (4, 4)),
        lambda: popdyn.Grid.square("w", "w", -3.0, 3.0, 8),
        lambda: popdyn.Grid.square("w", "1e", -3.0, 3.0, 8),
        lambda: popdyn.Grid.square("w", "e[0", -3.0, 3.0, 8),
    ],
)
def test_grid_rejects_bad_construction(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize(
    "prob, grid, match",
    [
        (Canonical(0.1, 0.1), popdyn.Grid.square("w", "zz", -1.0, 1.0, 2), "zz"),  # unknown name
        (Canonical(0.1, 0.1), popdyn.Grid.square("w", "e[0]", -1.0, 1.0, 2), r"e\[0\]"),  # index on a scalar
        (Vector(), popdyn.Grid.square("x[4]", "s", -1.0, 1.0, 2), r"x\[4\]"),  # index out of range
        (Vector(), popdyn.Grid.square("x", "s", -1.0, 1.0, 2), "'x'"),  # array leaf without an index
        (Vector(), popdyn.Grid.square("x[0,1]", "s", -1.0, 1.0, 2), r"x\[0,1\]"),  # too many indices
        (Vector(), popdyn.Grid("x[0]", "s", (-1.0, 1.0), (-1.0, 1.0), (2, 2), base={"y": 1.0}), "'y'"),
    ],
)
def test_grid_points_rejects_bad_axes(prob, grid, match):
    with pytest.raises(ValueError, match=match):
        grid.points(prob)


FLAT = popdyn.Problem.from_loss(lambda th: jnp.sum(th**2), init=jnp.zeros(3))
MATRIX = popdyn.Problem.from_loss(lambda th: jnp.sum(th["W"] ** 2), init={"W": jnp.zeros((2, 2))})


@pytest.mark.parametrize(
    "prob, x, y",
    [
        (Canonical(0.1, 0.1), "e", "['e']"),
        (MATRIX, "W[0,1]", "W[0, 1]"),
        (MATRIX, "['W'][1,0]", "W[1,0]"),
        (FLAT, "[0]", "theta[0]"),
        (FLAT, "[2]", "[ 2 ]"),
    ],
)
def test_two_names_of_one_coordinate_are_refused_as_the_same_axis(prob, x, y):
    """Axis names are resolved to a leaf and an index before they are compared: two spellings of one coordinate
    would make the 2-D map a line along the diagonal."""
    grid = popdyn.Grid.square(x, y, -1.0, 1.0, 2)
    with pytest.raises(ValueError, match="name the same coordinate of θ"):
        grid.points(prob)
    with pytest.raises(ValueError, match="name the same coordinate of θ"):
        popdyn.basin_map(prob, grid)
