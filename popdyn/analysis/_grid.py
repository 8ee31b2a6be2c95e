"""A 2-D slice of initialisations: two named parameter coordinates on a grid, the rest fixed (an
``AbstractSlice``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import jax
import numpy as np
from jax.tree_util import PyTreeDef
from jaxtyping import PyTree

from popdyn import _validate
from popdyn._batching import check_memory
from popdyn.analysis import _coords as coords
from popdyn.analysis._slices import AbstractSlice, check_axes
from popdyn.problem import Problem, Theta, ThetaLike


@dataclass(frozen=True)
class Grid(AbstractSlice):
    """Initialisations θ(x_i, y_j): coordinates ``x`` and ``y`` of θ vary over ``x_range`` × ``y_range``
    with ``shape = (ny, nx)`` points (row j ↔ y_j, column i ↔ x_i); every other coordinate is taken
    from ``base`` (default: zeros; for a dict θ, a dict of some of its keys; else a whole θ). Axis names are
    coordinates of any pytree θ (``popdyn.analysis._coords``): ``"e"``, ``"W[0,1]"``, ``"[3]"`` for a flat θ."""

    axes_are_coordinates: ClassVar[bool] = True
    x: str
    y: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    shape: tuple[int, int]
    base: ThetaLike | dict | None = field(default=None, compare=False)

    def __post_init__(self):
        check_axes(self)
        coords.check_syntax(self.x, "x"), coords.check_syntax(self.y, "y")
        if self.x == self.y:
            raise ValueError(f"x={self.x!r} and y={self.y!r} must name different coordinates")

    @classmethod
    def square(cls, x: str, y: str, lo: float, hi: float, n: int, base: ThetaLike | dict | None = None) -> Grid:
        """An n × n grid over [lo, hi]² (n even keeps the axes x = 0 and y = 0 off the grid)."""
        return cls(x, y, (lo, hi), (lo, hi), (n, n), base)

    def coordinates(self, prob: Problem) -> tuple[tuple[int, tuple[int, ...]], tuple[int, tuple[int, ...]]]:
        """The axes x and y resolved on ``prob``'s θ (``popdyn.analysis._coords.resolve``): (leaf number, index into
        that leaf) each. ValueError when both name the same entry of θ under two spellings (``"x"`` and
        ``"['x']"``, ``"W[0,1]"`` and ``"W[0, 1]"``, ``"[0]"`` and ``"theta[0]"``): the slice would be a line."""
        template = prob.template()
        x_at, y_at = coords.resolve(template, self.x), coords.resolve(template, self.y)
        if x_at == y_at:
            raise ValueError(
                f"x={self.x!r} and y={self.y!r} name the same coordinate of θ: a 2-D slice needs two different "
                "coordinates"
            )
        return x_at, y_at

    def points(self, prob: Problem) -> Theta:
        """The batch of ny·nx initialisations, row-major (y slow, x fast)."""
        template = prob.template()
        leaves, treedef = jax.tree_util.tree_flatten(template)
        n_points = self.shape[0] * self.shape[1]
        check_memory(
            3 * 8.0 * n_points * sum(max(1, int(np.prod(t.shape))) for t in leaves),
            f"a grid of {self.shape[0]:,} × {self.shape[1]:,} initialisations",
        )
        base = [np.zeros(t.shape) for t in leaves]
        for i, name, value in _base_values(template, self.base):
            value = _validate.float_array(f"base[{name}]", value)
            try:
                base[i] = np.broadcast_to(value, leaves[i].shape).copy()
            except ValueError:
                raise ValueError(
                    f"base[{name}] has shape {value.shape}: must broadcast to the parameter's shape {leaves[i].shape}"
                ) from None
        X, Y = np.meshgrid(self.xs, self.ys)
        n = X.size
        batch = [np.broadcast_to(v, (n, *v.shape)).copy() for v in base]
        for (i, idx), vals in zip(self.coordinates(prob), (X.ravel(), Y.ravel()), strict=True):
            index: tuple[slice | int, ...] = (slice(None), *idx)
            batch[i][index] = vals
        return jax.tree_util.tree_unflatten(treedef, [jax.device_put(b) for b in batch])  # no compiled copy


def _base_values(template: PyTree[jax.ShapeDtypeStruct], base) -> list[tuple[int, str, object]]:
    """(leaf number, name, value) for each part of ``base`` given: a dict of some top-level keys of a dict θ,
    or a whole θ of the template's structure."""
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(template)[0]]
    if base is None:
        return []
    if isinstance(template, dict) and isinstance(base, dict) and all(len(p) == 1 for p in paths):
        tops = [p[0].key for p in paths]
        unknown = [k for k in base if k not in tops]
        if unknown:
            raise ValueError(f"base has unknown parameter {unknown[0]!r}: allowed {sorted(tops)}")
        return [(tops.index(k), repr(k), v) for k, v in base.items()]
    structure: PyTreeDef = jax.tree_util.tree_structure(template)  # annotated: jaxlib ships no stubs for mypy
    try:
        parts = structure.flatten_up_to(base)
    except (TypeError, ValueError):
        raise ValueError(
            f"base={base!r} is invalid: must have the structure of θ, {jax.tree_util.tree_structure(template)}"
        ) from None
    return [(i, jax.tree_util.keystr(p), v) for i, (p, v) in enumerate(zip(paths, parts, strict=False))]
