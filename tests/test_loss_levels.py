"""Loss levels at each end point's own precision (docs/basins.md, "Labels"): the Newton decrement against its closed
forms and against the exact eigendecomposition, and minima far below the starts' loss scale kept apart."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn.analysis import LossLevels, newton_decrement
from popdyn.analysis._levels import FLOOR_TOL, LEVEL_TOL, NEWTON_FACTOR, level_groups, resolution
from popdyn.curvature import EXACT_MAX_DIM


def _quadratic(a, centre, level):
    return popdyn.Problem.from_loss(
        lambda th, d: 0.5 * jnp.sum(d["a"] * (th["x"] - d["c"]) ** 2) + d["L"],
        init={"x": jnp.zeros_like(centre)},
        data={"a": a, "c": centre, "L": level},
    )


def test_on_a_quadratic_well_the_decrement_is_the_height_above_the_minimum():
    """L = ½ Σ a_k (x_k − c_k)² + L*: δL = ½ Σ (a_k(x_k − c_k))²/|a_k| = L − L*, with curvatures of both signs and
    over six decades; to 1e-12 relative, batched and not."""
    rng = np.random.default_rng(0)
    a = rng.choice([-1.0, 1.0], 6) * np.logspace(-3, 3, 6)
    c = rng.normal(size=6)
    prob = _quadratic(jnp.asarray(a), jnp.asarray(c), jnp.asarray(5.0))
    xs = c + rng.normal(size=(4, 6))
    exact = 0.5 * np.sum(np.abs(a) * (xs - c) ** 2, axis=1)
    got = np.asarray(newton_decrement(prob, {"x": jnp.asarray(xs)}))
    np.testing.assert_allclose(got, exact, rtol=1e-12)
    np.testing.assert_allclose(float(newton_decrement(prob, {"x": jnp.asarray(xs[0])})), exact[0], rtol=1e-12)


def test_on_a_quartic_well_the_decrement_is_two_thirds_of_the_height():
    """L = x⁴: ∇L = 4x³, ∇²L = 12x², δL = ½(4x³)²/(12x²) = ⅔x⁴: the same order as L − L* although the curvature
    vanishes with the gradient."""
    prob = popdyn.Problem.from_loss(lambda th: th["x"] ** 4, init={"x": 0.0})
    xs = jnp.asarray([1e-3, 0.2, -1.5])
    np.testing.assert_allclose(np.asarray(newton_decrement(prob, {"x": xs})), 2 / 3 * np.asarray(xs) ** 4, rtol=1e-12)


def test_a_flat_direction_adds_nothing():
    """½(ab − 1)² near its manifold of minima: the Hessian is the rank-one (b, a)(b, a)ᵀ plus (ab − 1) times a
    swap, so the tangent direction's curvature is O(ab − 1) and the gradient has no component along it to that
    order: δL = L·(1 + O(ab − 1)), not inflated by the near-zero curvature."""
    prob = popdyn.Problem.from_loss(lambda th: 0.5 * (th["a"] * th["b"] - 1.0) ** 2, init={"a": 0.0, "b": 0.0})
    theta = {"a": jnp.asarray([2.0, 0.5]), "b": jnp.asarray([0.5 + 1e-6, 2.0 - 3e-7])}
    loss = np.asarray(jax.vmap(prob.loss)(theta))
    gap = np.abs(np.asarray(theta["a"] * theta["b"]) - 1.0)
    assert np.all(np.abs(np.asarray(newton_decrement(prob, theta)) / loss - 1.0) <= gap)


def test_above_the_exact_size_the_krylov_quadrature_gives_the_exact_decrement():
    """With more parameters than ``EXACT_MAX_DIM`` the decrement is the Gauss quadrature of Lanczos from ∇L: on a
    well with 8 distinct curvatures the Krylov space is invariant after 8 steps, so it is exact (1e-10)."""
    n = EXACT_MAX_DIM + 8
    a = np.repeat(np.logspace(-2, 2, 8), n // 8)
    c = np.linspace(-1.0, 1.0, n)
    prob = _quadratic(jnp.asarray(a), jnp.asarray(c), jnp.asarray(0.0))
    x = c + np.cos(np.arange(n))
    exact = 0.5 * np.sum(a * (x - c) ** 2)
    np.testing.assert_allclose(float(newton_decrement(prob, {"x": jnp.asarray(x)}, iters=16)), exact, rtol=1e-10)


def test_resolution_between_the_round_off_floor_and_the_coarse_cap():
    """r = min(LEVEL_TOL·max(S, |L|), max(FLOOR_TOL·S, NEWTON_FACTOR·δL)); a NaN decrement gives the cap."""
    loss = np.array([1e-16, 0.5, 2e5, 1.0])
    dec = np.array([1e-16, 1e-3, 0.0, np.nan])
    r = resolution(loss, dec, scale=10.0)
    expected = [max(FLOOR_TOL * 10, NEWTON_FACTOR * 1e-16), LEVEL_TOL * 10, FLOOR_TOL * 10, LEVEL_TOL * 10]
    np.testing.assert_allclose(r, expected, rtol=1e-15)
    order, group = level_groups(np.array([0.3, 1e-16, 3e-16, 0.3 + 1e-9]), np.array([1e-9, 4e-16, 1.2e-15, 1e-12]))
    assert order.tolist() == [1, 2, 0, 3] and group.tolist() == [0, 0, 1, 1]


def _tilted(th, c):
    return (th["x"] ** 2 - 1.0) ** 2 + c * (th["x"] + 1.0) ** 2 / 4


@pytest.mark.parametrize(("tilt", "reach"), [(1e-2, 20.0), (1e-8, 2.0)])
def test_minima_far_below_the_starts_loss_scale_stay_apart(tilt, reach):
    """A tilted double well, L = (x² − 1)² + c(x + 1)²/4, minima at L = 0 (x = −1) and L ≈ c (x ≈ 1), from starts
    on [−R, R]. The levels were resolved at 1e-6 × the largest |L| at the starts: the corners of [−20, 20] reach
    L = 1.6e5, so both minima were one attractor, "min L=0", at 100 %; so were c = 1e-8 and R = 2. Each end point
    is now read at its own precision: two attractors, split as the starts lie either side of the barrier."""
    prob = popdyn.Problem.from_loss(_tilted, init={"x": 0.0}, data=jnp.asarray(tilt))
    xs = np.linspace(-reach, reach, 9)
    bf = popdyn.basin_fractions(prob, {"x": jnp.asarray(xs)}, labeller=LossLevels())
    high = float(np.median(np.asarray(bf.trajectory.final_loss)[xs > 0]))
    assert high == pytest.approx(tilt, rel=1e-3)
    assert bf.attractors == ("min L=0", f"min L={high:.6g}")
    np.testing.assert_array_equal(bf.labels, (xs > 0).astype(int))
    if reach == 20.0:  # the example of docs/basins.md, "Labels"
        page = (Path(__file__).parents[1] / "docs" / "basins.md").read_text()
        corner = float(_tilted({"x": reach}, tilt))
        assert f"$L = {corner:.2g}".replace("e+05", " \\cdot 10^5") in page and f'"{bf.attractors[1]}"' in page
