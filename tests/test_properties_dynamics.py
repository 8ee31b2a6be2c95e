"""Property tests of the generic dynamics entry points: gradient_descent, gradient_flow,
basin_map and Grid refuse every invalid option with a ValueError naming it, before any JAX work; a basin map over
any valid grid labels every point (an attractor, or −1 with a non-OK status) and never raises.

The problem is the profiled canonical Markov model (two parameters); the valid-value basin maps share one compiled
GD loop (fixed grid shape and settings, the ranges only move the initialisations).
"""

import math

import numpy as np
import pytest
from _props import (
    WRONG_TYPE,
    bad_choice,
    bad_int,
    bad_positive,
    bad_seed,
    check_per_point,
    examples,
    raises_naming,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import popdyn
from popdyn.tasks.markov import Canonical

PROB = Canonical(0.2, 0.3)
THETA = {"e": np.array([1.0, -0.5]), "w": np.array([0.5, 0.1])}
GRID = popdyn.Grid.square("w", "e", -1.0, 1.0, 3)


def bad_theta() -> st.SearchStrategy:
    """Initialisations of the wrong structure or shape for θ = {"e", "w"}."""
    return st.sampled_from(
        [
            {"e": 1.0},
            {"e": 1.0, "w": 1.0, "b": 0.0},
            [1.0, 2.0],
            {"e": np.ones(2), "w": np.ones(3)},
            {"e": np.ones((2, 2)), "w": np.ones((2, 2))},
            {"e": np.ones(2), "w": 1.0},
        ]
    )


# ---- gradient descent -----------------------------------------------------------------------------------
GD_BAD = {
    "steps": bad_int(1),
    "record_every": bad_int(1),
    "seed": bad_seed(),
    "saddle_tol": bad_positive(allow_zero=True),
    "momentum": st.one_of(bad_positive(allow_zero=True), st.floats(min_value=1.0)),
    "noise": st.one_of(bad_positive(allow_zero=True), st.sampled_from([{"x": 0.1}, {"e": -1.0}, {"w": math.nan}])),
    "gtol": bad_positive().filter(lambda v: v is not None),
    "rtol": bad_positive(),
    "atol": bad_positive(),
    "diverge": bad_positive(),
    "lr": bad_positive().filter(lambda v: np.ndim(v) == 0 if not isinstance(v, (str, dict)) else True),
    "lr_array": st.sampled_from([np.array([0.1, -0.1]), np.array([0.1, math.nan]), np.ones(3), np.ones((2, 1))]),
    "time_scales": st.sampled_from([{"x": 1.0}, {"e": 0.0}, {"w": -1.0}, {"e": math.inf}, [1.0], 2.0]),
    "optimizer": st.sampled_from(["adam", 1.0, [1]]),
    "chunk_size": bad_int(1, optional=True),
    "theta0": bad_theta(),
    "steps%record_every": st.integers(2, 50),
}


@pytest.mark.validation
@settings(max_examples=examples(60))
@given(option=st.sampled_from(sorted(GD_BAD)), data=st.data())
def test_gradient_descent_options_are_validated(option, data):
    """gradient_descent refuses bad steps, record_every (or steps not a multiple of it), seeds (negative, past 32
    bits), momentum outside [0, 1), noise levels, gtol, diverge, saddle_tol, learning rates (scalar or per point),
    time scales, optimizers, chunk sizes and initialisations, naming the option, before any compilation."""
    kwargs = {"lr": 0.1, "steps": 4, "record_every": 2}
    theta = THETA
    value = data.draw(GD_BAD[option], label=option)
    name = {"lr_array": "lr", "steps%record_every": "steps"}.get(option, option)
    if option == "theta0":
        theta, name = value, "theta"
    elif option == "lr_array":
        kwargs["lr"] = value
    elif option == "steps%record_every":
        kwargs["steps"], kwargs["record_every"] = value * 3 + 1, 3
    else:
        kwargs[option] = value
    raises_naming(name, popdyn.gradient_descent, PROB, theta, **kwargs)


# ---- gradient flow --------------------------------------------------------------------------------------
FLOW_BAD = {
    "t1": bad_positive(),
    "rtol": bad_positive(),
    "atol": bad_positive(),
    "diverge": bad_positive(),
    "gtol": bad_positive(optional=True),
    "max_steps": bad_int(1),
    "ts": st.one_of(
        st.integers(max_value=1), st.sampled_from([[], [0.0, 2.0, 1.0], [-1.0, 1.0], [0.0, 20.0], [[0.0, 1.0]]])
    ),
    "solver": bad_choice(("tsit5", "kvaerno5", "dopri8")).filter(lambda v: v is not None),
    "time_scales": st.sampled_from([{"x": 1.0}, {"e": 0.0}, {"w": -1.0}, {"e": math.nan}]),
    "chunk_size": bad_int(1, optional=True),
    "theta0": bad_theta(),
    "pcoeff": bad_positive(allow_zero=True),
    "icoeff": bad_positive(),
    "saddle_tol": bad_positive(allow_zero=True),
}


@pytest.mark.validation
@settings(max_examples=examples(50))
@given(option=st.sampled_from(sorted(FLOW_BAD)), data=st.data())
def test_gradient_flow_options_are_validated(option, data):
    """gradient_flow refuses bad t1, tolerances, divergence bound, max_steps, record times (too few, decreasing,
    negative, past t1), unknown solvers, PI controller coefficients, saddle_tol, time scales, chunk sizes and
    initialisations, naming the option, before any compilation."""
    kwargs = {"t1": 10.0}
    theta = THETA
    value = data.draw(FLOW_BAD[option], label=option)
    name = option
    if option == "theta0":
        theta, name = value, "theta"
    else:
        kwargs[option] = value
    raises_naming(name, popdyn.gradient_flow, PROB, theta, **kwargs)


# ---- basin maps and grids -------------------------------------------------------------------------------
@pytest.mark.validation
@settings(max_examples=examples(40))
@given(
    option=st.sampled_from(["grid", "method", "tol", "cluster_radius", "t1", "lr", "steps", "chunk_size"]),
    data=st.data(),
)
def test_basin_map_options_are_validated(option, data):
    """basin_map refuses a non-Grid, an unknown method, non-positive tol or cluster radius, and bad flow or GD
    settings, naming the option."""
    kwargs = {"method": "gd" if option in ("lr", "steps") else "flow"}
    grid = GRID
    bad = {
        "grid": st.one_of(WRONG_TYPE, st.just((-1.0, 1.0))),
        "method": bad_choice(("flow", "gd")),
        "tol": bad_positive(),
        "cluster_radius": bad_positive(),
        "t1": bad_positive(optional=True),  # None: the method's default
        "lr": bad_positive(optional=True),
        "steps": bad_int(1, optional=True),
        "chunk_size": bad_int(1, optional=True),
    }[option]
    if option == "grid":
        grid = data.draw(bad, label="grid")
    else:
        kwargs[option] = data.draw(bad, label=option)
    raises_naming(option, popdyn.basin_map, PROB, grid, **kwargs)


def bad_range() -> st.SearchStrategy:
    """Pairs that are no finite increasing interval, and non-pairs."""
    return st.one_of(
        st.tuples(st.floats(allow_nan=True), st.floats(allow_nan=True)).filter(
            lambda r: not (math.isfinite(r[0]) and math.isfinite(r[1]) and r[0] < r[1])
        ),
        st.sampled_from([None, 1.0, (1.0,), (0.0, 1.0, 2.0), ("a", "b")]),
    )


@pytest.mark.validation
@settings(max_examples=examples(40))
@given(option=st.sampled_from(["x", "y", "x_range", "y_range", "shape", "same"]), data=st.data())
def test_grid_construction_is_validated(option, data):
    """Grid refuses axis names that are not parameter names, equal axes, ranges that are no finite increasing
    pair and shapes that are not two integers >= 2, naming the argument (a grid size as 'grid')."""
    kwargs = dict(x="w", y="e", x_range=(-1.0, 1.0), y_range=(-1.0, 1.0), shape=(3, 3))
    name = option
    if option in ("x", "y"):
        kwargs[option] = data.draw(
            st.one_of(
                st.sampled_from(["", "1e", "e[0", "e[x]", "w e", "e[-1]", "0.5"]),
                WRONG_TYPE.filter(lambda v: not isinstance(v, str)),
            ),
            label=option,
        )
    elif option == "same":
        kwargs["y"], name = "w", "y"
    elif option == "shape":
        shape = data.draw(
            st.one_of(
                st.tuples(bad_int(2), st.integers(2, 5)),
                st.tuples(st.integers(2, 5), bad_int(2)),
                st.sampled_from([3, (3,), (3, 3, 3), "33", None]),
            ),
            label="shape",
        )
        kwargs["shape"] = shape
        name = "shape" if not (isinstance(shape, tuple) and len(shape) == 2) else "grid"
    else:
        kwargs[option] = data.draw(bad_range(), label=option)
    raises_naming(name, popdyn.Grid, **kwargs)


@settings(max_examples=examples(20))
@given(
    case=st.sampled_from(
        [
            ("axis", dict(x="b")),
            ("axis", dict(y="e[0]")),
            ("axis", dict(x="w[1,2]")),
            ("base", dict(base={"a": 1.0})),
            ("base", dict(base={"e": [1.0, 2.0]})),
        ]
    )
)
def test_grid_points_refuse_axes_the_problem_lacks(case):
    """Grid.points refuses axes that name no parameter (or index a scalar) and base values for unknown or misshapen
    parameters, naming the axis or base."""
    name, kwargs = case
    grid = popdyn.Grid(**(dict(x="w", y="e", x_range=(-1.0, 1.0), y_range=(-1.0, 1.0), shape=(3, 3)) | kwargs))
    raises_naming(name, grid.points, PROB)


# ---- valid values ---------------------------------------------------------------------------------------
@pytest.mark.slow
@settings(max_examples=examples(10))
@given(lo=st.floats(-1e4, 1e4), width=st.floats(1e-6, 1e4), lr=st.floats(1e-3, 1e3))
def test_basin_maps_label_every_point(lo, width, lr):
    """A GD basin map over any finite square (3 x 3, tiny to huge) labels every point: a known attractor with an OK
    status, or −1; fractions sum to 1, and the run behind it reports each point as finite or non-OK."""
    grid = popdyn.Grid.square("w", "e", lo, lo + width, 3)
    bm = popdyn.basin_map(PROB, grid, "gd", lr=lr, steps=8)
    assert bm.labels.shape == (3, 3) and set(np.unique(bm.labels)) <= {-1, *range(len(bm.attractors))}
    assert math.isclose(sum(bm.fractions.values()), 1.0)
    ok = np.isin(bm.status, [int(s) for s in (popdyn.Status.CONVERGED, popdyn.Status.SADDLE)])
    assert np.all(ok[bm.labels >= 0]), (bm.labels, bm.status)


@settings(max_examples=examples(10))
@given(e=st.floats(-1e6, 1e6), w=st.floats(-1e6, 1e6), lr=st.floats(1e-3, 1e4))
def test_gradient_descent_from_any_point_reports_its_status(e, w, lr):
    """An unbatched GD run from any point (far ones included) returns an end point and loss that are finite unless
    the status says diverged or NaN."""
    traj = popdyn.gradient_descent(PROB, {"e": np.array([e]), "w": np.array([w])}, lr=lr, steps=4, record_every=2)
    check_per_point(traj)
