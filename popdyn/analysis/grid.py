"""A 2-D slice of initialisations: two named parameter coordinates on a grid, the rest fixed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from popdyn import _validate
from popdyn.problem import Problem, Theta

_AXIS = re.compile(r"^([A-Za-z_]\w*)(?:\[(\d+(?:\s*,\s*\d+)*)\])?$")


def _parse_axis(name: str, label: str = "axis") -> tuple[str, tuple[int, ...]]:
    m = _AXIS.match(name) if isinstance(name, str) else None
    if not m:
        raise ValueError(f"{label}={name!r} is invalid: must be a parameter name like 'e' or 'W[0,1]'")
    idx = tuple(int(i) for i in m.group(2).split(",")) if m.group(2) else ()
    return m.group(1), idx


@dataclass(frozen=True)
class Grid:
    """Initialisations θ(x_i, y_j): coordinates ``x`` and ``y`` of θ vary over ``x_range`` × ``y_range``
    with ``shape = (ny, nx)`` points (row j ↔ y_j, column i ↔ x_i); every other coordinate is taken
    from ``base`` (default: zeros). Axis names are top-level keys of θ, with an index for array leaves
    (``"W[0,1]"``)."""

    x: str
    y: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    shape: tuple[int, int]
    base: dict | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "x_range", _validate.interval("x_range", self.x_range))
        object.__setattr__(self, "y_range", _validate.interval("y_range", self.y_range))
        if isinstance(self.shape, (str, bytes)) or not hasattr(self.shape, "__len__") or len(self.shape) != 2:
            raise ValueError(f"shape={self.shape!r} is invalid: must be a pair (ny, nx) of integers >= 2")
        ny, nx = self.shape
        object.__setattr__(self, "shape", (_validate.int_at_least("grid (ny)", ny, 2),
                                           _validate.int_at_least("grid (nx)", nx, 2)))
        _parse_axis(self.x, "x"), _parse_axis(self.y, "y")
        if self.x == self.y:
            raise ValueError(f"x={self.x!r} and y={self.y!r} must name different coordinates")

    @classmethod
    def square(cls, x: str, y: str, lo: float, hi: float, n: int, base: dict | None = None) -> "Grid":
        """An n × n grid over [lo, hi]² (n even keeps the axes x = 0 and y = 0 off the grid)."""
        return cls(x, y, (lo, hi), (lo, hi), (n, n), base)

    @property
    def xs(self) -> np.ndarray:
        return np.linspace(*self.x_range, self.shape[1])

    @property
    def ys(self) -> np.ndarray:
        return np.linspace(*self.y_range, self.shape[0])

    def points(self, prob: Problem) -> Theta:
        """The batch of ny·nx initialisations, row-major (y slow, x fast)."""
        template = prob.template()
        if not isinstance(template, dict):
            raise ValueError("Grid needs a problem whose parameters are a dict of arrays")
        base = {k: np.zeros(v.shape) for k, v in template.items()}
        for k, v in (self.base or {}).items():
            if k not in base:
                raise ValueError(f"base has unknown parameter {k!r}: allowed {sorted(base)}")
            value = _validate.float_array(f"base[{k!r}]", v)
            try:
                base[k] = np.broadcast_to(value, base[k].shape).copy()
            except ValueError:
                raise ValueError(f"base[{k!r}] has shape {value.shape}: must broadcast to the parameter's shape "
                                 f"{base[k].shape}") from None
        X, Y = np.meshgrid(self.xs, self.ys)
        n = X.size
        batch = {k: np.broadcast_to(v, (n, *v.shape)).copy() for k, v in base.items()}
        for axis, vals in ((self.x, X.ravel()), (self.y, Y.ravel())):
            key, idx = _parse_axis(axis)
            if key not in batch:
                raise ValueError(f"axis {axis!r} names no parameter: allowed {sorted(batch)}")
            if len(idx) != batch[key].ndim - 1 or any(i >= s for i, s in zip(idx, batch[key].shape[1:])):
                raise ValueError(f"axis {axis!r} does not index parameter {key!r} of shape {batch[key].shape[1:]}")
            batch[key][(slice(None), *idx)] = vals
        return jax.tree_util.tree_map(jnp.asarray, batch)
