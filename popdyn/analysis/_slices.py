"""Slices: 2-D families of starts θ(x, y) on a grid of (x, y), as small objects (docs/basins.md, "Slices").

A slice names its two axes (``x``, ``y``), their values (``xs``, ``ys``) and the grid's ``shape = (ny, nx)``, and
builds the batch of starts, row-major (y slow, x fast), with ``points(prob)``. ``basin_map`` runs any slice and
figures draw its axes. ``popdyn.Grid`` varies two coordinates of θ; ``Plane`` moves along two directions of the
whole parameter space (``Plane.random`` draws them); ``BlockScales`` scales two blocks of θ along fixed directions.
A new slice is one subclass of ``AbstractSlice``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.tree_util import PyTreeDef

from popdyn import _validate
from popdyn._batching import check_memory
from popdyn.problem import Problem, Theta, ThetaLike


class AbstractSlice(abc.ABC):
    """A 2-D slice of starts: subclasses provide the axis names ``x`` and ``y``, the ranges ``x_range`` and
    ``y_range``, ``shape = (ny, nx)`` and ``points(prob)``; ``xs`` and ``ys`` are the evenly spaced axis values.
    ``axes_are_coordinates`` says whether x and y are coordinates of θ (then a figure draws the problem's overlays,
    which are drawn in θ's coordinates; for other axes it draws none)."""

    axes_are_coordinates: ClassVar[bool] = False
    x: str
    y: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    shape: tuple[int, int]

    @abc.abstractmethod
    def points(self, prob: Problem) -> Theta:
        """The batch of ny·nx starts θ(x_i, y_j), row-major (y slow, x fast).

        **Arguments:** ``prob``: the problem whose θ the starts are."""

    @property
    def xs(self) -> np.ndarray:
        """The nx values of the x axis."""
        return np.linspace(*self.x_range, self.shape[1])

    @property
    def ys(self) -> np.ndarray:
        """The ny values of the y axis."""
        return np.linspace(*self.y_range, self.shape[0])

    def _xy(self) -> tuple[np.ndarray, np.ndarray]:
        """x and y of every start, row-major (y slow, x fast)."""
        X, Y = np.meshgrid(self.xs, self.ys)
        return X.ravel(), Y.ravel()


def check_axes(s: AbstractSlice) -> None:
    """Validate a slice's ranges and shape in place (a frozen dataclass's ``__post_init__``)."""
    object.__setattr__(s, "x_range", _validate.interval("x_range", s.x_range))
    object.__setattr__(s, "y_range", _validate.interval("y_range", s.y_range))
    if isinstance(s.shape, (str, bytes)) or not hasattr(s.shape, "__len__") or len(s.shape) != 2:
        raise ValueError(f"shape={s.shape!r} is invalid: must be a pair (ny, nx) of integers >= 2")
    ny, nx = s.shape
    object.__setattr__(
        s, "shape", (_validate.int_at_least("grid (ny)", ny, 2), _validate.int_at_least("grid (nx)", nx, 2))
    )


def _flat(prob: Problem, tree, name: str) -> np.ndarray:
    """A θ-shaped pytree as one float64 vector, refused with a ValueError naming ``name`` if its structure or
    shapes differ from θ's."""
    template = prob.template()
    want: PyTreeDef = jax.tree_util.tree_structure(template)  # annotated: jaxlib ships no stubs for mypy
    if not want == jax.tree_util.tree_structure(tree):
        raise ValueError(f"{name} is invalid: must have the structure of θ, {want}")
    for leaf, t in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(template), strict=True):
        if np.shape(leaf) != t.shape:
            raise ValueError(f"{name} has a leaf of shape {np.shape(leaf)}: θ's is {t.shape}")
    return np.asarray(ravel_pytree(jax.tree_util.tree_map(np.asarray, tree))[0], dtype=np.float64)


@dataclass(frozen=True)
class Plane(AbstractSlice):
    """The plane θ(x, y) = origin + x·u + y·v through the parameter space.

    **Arguments:**

    - ``u``, ``v``: the directions, θ-shaped pytrees.
    - ``x_range``, ``y_range``: the ranges of x and y; ``shape``: (ny, nx), each ≥ 2.
    - ``origin``: θ at (0, 0), a θ-shaped pytree (default: zero).
    - ``x``, ``y``: the axis names (default "u", "v").
    """

    u: ThetaLike = field(compare=False)
    v: ThetaLike = field(compare=False)
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    shape: tuple[int, int]
    origin: ThetaLike | None = field(default=None, compare=False)
    x: str = "u"
    y: str = "v"

    def __post_init__(self):
        check_axes(self)

    @classmethod
    def random(
        cls,
        prob: Problem,
        seed: int,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
        shape: tuple[int, int],
        origin: ThetaLike | None = None,
    ) -> Plane:
        """A plane through ``origin`` along two random orthonormal directions of θ (Gaussian draws from ``seed``,
        orthonormalised: ‖u‖ = ‖v‖ = 1, u·v = 0 over the flattened θ).

        **Arguments:** ``prob`` the problem; ``seed`` the seed; the rest as ``Plane``."""
        template = prob.template()
        flat, unravel = ravel_pytree(jax.tree_util.tree_map(lambda t: jnp.zeros(t.shape, t.dtype), template))
        if flat.size < 2:
            raise ValueError(f"a random plane needs at least 2 parameters; θ has {flat.size}")
        draws = np.asarray(jax.random.normal(jax.random.PRNGKey(_validate.seed("seed", seed)), (2, flat.size)))
        q, _ = np.linalg.qr(draws.T)
        u, v = (unravel(jnp.asarray(q[:, i], flat.dtype)) for i in range(2))
        return cls(u, v, x_range, y_range, shape, origin)

    def points(self, prob: Problem) -> Theta:
        u, v = _flat(prob, self.u, "u"), _flat(prob, self.v, "v")
        origin = np.zeros_like(u) if self.origin is None else _flat(prob, self.origin, "origin")
        X, Y = self._xy()
        check_memory(3 * 8.0 * X.size * u.size, f"a plane of {self.shape[0]:,} × {self.shape[1]:,} starts")
        flat = origin[None] + X[:, None] * u[None] + Y[:, None] * v[None]
        unravel = ravel_pytree(jax.tree_util.tree_map(lambda t: jnp.zeros(t.shape, t.dtype), prob.template()))[1]
        return jax.vmap(unravel)(jnp.asarray(flat))


@dataclass(frozen=True)
class BlockScales(AbstractSlice):
    """Two blocks of a dict θ scaled along fixed directions: θ[x_block] = x·directions[x_block],
    θ[y_block] = y·directions[y_block], every other block zero. (0, 0) is θ = 0.

    **Arguments:**

    - ``x_block``, ``y_block``: two top-level keys of θ.
    - ``directions``: {block: array of that block's shape}, for both blocks.
    - ``x_range``, ``y_range``, ``shape``: as ``Plane``.
    - ``x``, ``y``: the axis names (default "<block> scale").
    """

    x_block: str
    y_block: str
    directions: dict = field(compare=False)
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    shape: tuple[int, int]
    x: str = ""
    y: str = ""

    def __post_init__(self):
        check_axes(self)
        if self.x_block == self.y_block:
            raise ValueError(f"x_block={self.x_block!r} and y_block={self.y_block!r} must name different blocks")
        for block in (self.x_block, self.y_block):
            if block not in self.directions:
                raise ValueError(f"directions has no {block!r}: give a direction for both blocks")
        object.__setattr__(self, "x", self.x or f"{self.x_block} scale")
        object.__setattr__(self, "y", self.y or f"{self.y_block} scale")

    def points(self, prob: Problem) -> Theta:
        template = prob.template()
        if not isinstance(template, dict) or not {self.x_block, self.y_block} <= set(template):
            raise ValueError(f"BlockScales needs a dict θ with keys {self.x_block!r} and {self.y_block!r}")
        X, Y = self._xy()
        out = {k: jnp.zeros((X.size, *t.shape), t.dtype) for k, t in template.items()}
        for block, scale in ((self.x_block, X), (self.y_block, Y)):
            d = jnp.asarray(self.directions[block])
            if d.shape != template[block].shape:
                raise ValueError(f"directions[{block!r}] has shape {d.shape}: θ's block is {template[block].shape}")
            out[block] = jnp.asarray(scale).reshape((-1,) + (1,) * d.ndim) * d
        return out
