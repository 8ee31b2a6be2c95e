"""A two-well user model for tests of the engine's contracts (several devices, several processes, checkpoints,
signals): L(x, y) = (x² − c)²/4 + y²/2, wells at x = ±√c, a saddle on x = 0. Its programs compile in a fraction of
the time of a built-in task's, and on the square [−3, 3]² its maps have what those tests look at: two basins under
gradient flow, and under GD at lr = 0.5 both wells and unresolved starts (the outer columns, where the step
overshoots). Importable as ``_tiny_models_d`` (tests/ on the path), on the command line as ``_tiny_models_d:wells``."""

import jax.numpy as jnp

import popdyn


def loss(th, data):
    return (th["x"] ** 2 - data["c"]) ** 2 / 4 + th["y"] ** 2 / 2


def right(th, data):
    """Residual of the well at x = +√c: 0 there, > 0 elsewhere."""
    return jnp.abs(th["x"] ** 3 - data["c"] * th["x"]) + jnp.abs(th["y"]) + jnp.maximum(-th["x"], 0)


def left(th, data):
    """Residual of the well at x = −√c."""
    return jnp.abs(th["x"] ** 3 - data["c"] * th["x"]) + jnp.abs(th["y"]) + jnp.maximum(th["x"], 0)


def wells(c=1.0):
    return popdyn.Problem.from_loss(
        loss, init={"x": 0.0, "y": 0.0}, init_scale=1.0, data={"c": c}, attractors={"right": right, "left": left}
    )
