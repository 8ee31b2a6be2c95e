"""Unresolved runs grouped by what they are doing (docs/basins.md, "Unresolved runs"): escaping to infinity towards
a loss level, still moving at a level, or failed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popdyn
from popdyn.analysis import group_unresolved

LOGISTIC = popdyn.Problem.from_loss(lambda t: jnp.logaddexp(0.0, -t["x"]), {"x": jnp.asarray(0.0)})
BOWL = popdyn.Problem.from_loss(lambda t: 0.5 * (t["x"] ** 2 + 4.0 * t["y"] ** 2), {"x": 0.0, "y": 0.0})


@pytest.mark.slow  # moved out of the quick tier (< 3 min); still in the full suite
def test_a_run_escaping_to_infinity_is_named_by_the_level_it_tends_to():
    """The logistic loss log(1 + e^{−x}) has no minimum: every run moves out, x → ∞, L → 0."""
    bf = popdyn.basin_fractions(LOGISTIC, {"x": jnp.array([-1.0, 0.5, 2.0])}, popdyn.GradientFlow(t1=10.0))
    assert bf.resolved_fraction == 0.0
    groups = group_unresolved(LOGISTIC, bf)
    assert groups.names == ("‖θ‖ → ∞, L → 0",) and groups.fractions == {"‖θ‖ → ∞, L → 0": 1.0}


@pytest.mark.slow
def test_runs_cut_short_are_moving_at_their_level_and_failures_are_named():
    """A bowl whose flow is stopped early: the runs move inward, one level each (levels at the starts' scale); GD
    past 2/λ diverges."""
    starts = {"x": jnp.array([1.0, 1.0, -1.0, 3.0]), "y": jnp.array([0.0, 0.0, 0.0, 0.0])}
    bf = popdyn.basin_fractions(BOWL, starts, popdyn.GradientFlow(t1=0.1))
    groups = group_unresolved(BOWL, bf)
    level = 0.5 * np.exp(-0.2)  # x(t) = x0·e^{−t}
    assert groups.names == (f"moving at L ≈ {level:.3g}", f"moving at L ≈ {9 * level:.3g}")
    np.testing.assert_array_equal(groups.groups, [0, 0, 0, 1])
    bf = popdyn.basin_fractions(BOWL, starts, popdyn.GradientDescent(lr=0.6, steps=200))  # 4·0.6 > 2: y diverges
    bf_x = popdyn.basin_fractions(BOWL, {"x": starts["x"], "y": starts["x"]}, popdyn.GradientDescent(lr=0.6, steps=200))
    assert group_unresolved(BOWL, bf).names == ()  # y = 0 stays 0: every run converges in x
    assert group_unresolved(BOWL, bf_x).fractions == {"diverged": 1.0}


@pytest.mark.slow
def test_the_xor_networks_unresolved_starts_head_to_zero_loss_or_to_one_sixteenth():
    """A 2-2-1 sigmoid network on XOR from 400 random starts: GD resolves none in 3,000 steps, and the grouping tells
    the starts heading to L → 0 at infinity (70.5%) from those still moving on the plateau above L = 1/16 (27.75%),
    with a few on other plateaus."""
    x = jnp.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = jnp.array([0.0, 1.0, 1.0, 0.0])

    def loss(t):
        out = jax.nn.sigmoid(jax.nn.sigmoid(x @ t["W1"].T + t["b1"]) @ t["w2"] + t["b2"])
        return 0.5 * jnp.mean((out - y) ** 2)

    template = {"W1": np.zeros((2, 2)), "b1": np.zeros(2), "w2": np.zeros(2), "b2": np.zeros(())}
    prob = popdyn.Problem.from_loss(loss, template, init_scale=1.0)
    bf = popdyn.basin_fractions(prob, 400, popdyn.GradientDescent(lr=1.0, steps=3000))
    assert bf.resolved_fraction == 0.0
    shares = group_unresolved(prob, bf).fractions
    moving = {float(name.split("≈")[1]): f for name, f in shares.items() if name.startswith("moving at L ≈")}
    plateau = max(moving, key=moving.__getitem__)  # the largest group still moving: at the plateau L → 1/16
    to_zero = shares["‖θ‖ → ∞, L → 0"]
    assert 0.0625 <= plateau < 0.07 and 0.6 < to_zero < 0.8 and 0.15 < moving[plateau] < 0.35, shares
    assert to_zero + moving[plateau] > 0.9, shares
