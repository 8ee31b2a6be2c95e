"""The ``Problem`` interface every task implements (DESIGN.md, "Core contract").

A Problem is an equinox Module (a pytree) holding the data distribution's parameters. Its
``loss(theta)`` is the exact population loss, a pure JAX function of the parameter pytree, so it
jits, differentiates and vmaps.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import equinox as eqx
import jax
from jaxtyping import Array, Float, PyTree

Theta = PyTree[Float[Array, "..."]]


@dataclass(frozen=True)
class Overlay:
    """Something a task knows about a 2-D slice of its landscape, to draw over a basin map.

    ``kind`` is "line" (polyline through x, y; NaN breaks it) or "points"; coordinates are in the
    slice's (x, y) axes.
    """

    label: str
    kind: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    style: dict = field(default_factory=dict)


class Problem(eqx.Module):
    """A data distribution + a model + its exact population loss."""

    @abc.abstractmethod
    def loss(self, theta: Theta) -> Float[Array, ""]:
        """The exact population loss L(θ) for one (unbatched) parameter pytree."""

    @abc.abstractmethod
    def init(self, key: Array) -> Theta:
        """A default initialisation (the paper's, where it has one)."""

    def attractors(self) -> dict[str, Callable[[Theta], Float[Array, ""]]]:
        """Known attractors from theory: name → residual(θ) ≥ 0 that vanishes exactly on the set.

        Empty when theory gives none; basin maps then cluster end points instead.
        """
        return {}

    def overlays(self, x_axis: str, y_axis: str, x_range: tuple[float, float]) -> list[Overlay]:
        """Known critical sets, separatrices etc. on the (x_axis, y_axis) slice (default: none)."""
        return []

    def template(self) -> Theta:
        """Shapes and dtypes of one parameter pytree (no computation)."""
        return jax.eval_shape(lambda: self.init(jax.random.PRNGKey(0)))  # the key too is only traced

    def n_params(self) -> int:
        """Number of scalar parameters."""
        return sum(math.prod(t.shape) for t in jax.tree_util.tree_leaves(self.template()))
