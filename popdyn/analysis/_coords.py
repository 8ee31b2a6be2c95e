"""Named scalar coordinates of a parameter pytree θ, for 2-D slices and pictures (docs/problem.md).

A coordinate is a leaf of θ and an index into it: ``"e"`` (a scalar leaf of a dict θ), ``"W[0,1]"`` (an
entry of an array leaf of a dict θ), ``"[3]"`` or ``"theta[3]"`` (an entry of a single flat-array θ), or a
leaf path as ``jax.tree_util.keystr`` writes it followed by an index (``"[1]['U'][2,0]"``) for any pytree.
"""

from __future__ import annotations

import re

import jax
import numpy as np

_SYNTAX = re.compile(r"""^(?:[A-Za-z_]\w*)?(?:\[(?:\s*\d+(?:\s*,\s*\d+)*\s*|'[^'\[\]]*'|"[^"\[\]]*")\])*$""")
_INDEX = re.compile(r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]$")


def check_syntax(name: str, label: str = "axis") -> str:
    """``name`` if it is written like a coordinate, else a ValueError naming ``label``."""
    if not isinstance(name, str) or not name or not _SYNTAX.match(name):
        raise ValueError(f"{label}={name!r} is invalid: must name a coordinate of θ like 'e', 'W[0,1]' or '[3]'")
    return name


def _aliases(path, n_leaves: int) -> list[str]:
    key = jax.tree_util.keystr(path)
    out = [key]
    if len(path) == 1 and isinstance(getattr(path[0], "key", None), str):
        out.append(path[0].key)  # a top-level dict key, bare
    if not path and n_leaves == 1:
        out.append("theta")
    return out


def resolve(template, name: str, label: str = "axis") -> tuple[int, tuple[int, ...]]:
    """(leaf number in ``tree_leaves`` order, index into that leaf) of coordinate ``name`` of θ; ValueError
    naming ``label`` and ``name`` when it names no scalar entry of θ."""
    check_syntax(name, label)
    leaves = jax.tree_util.tree_flatten_with_path(template)[0]
    known = []
    for i, (path, leaf) in enumerate(leaves):
        shape = tuple(leaf.shape)
        for alias in _aliases(path, len(leaves)):
            if not name.startswith(alias):
                continue
            rest = name[len(alias) :]
            m = _INDEX.fullmatch(rest) if rest else None
            if rest and m is None:
                continue
            idx = tuple(int(v) for v in m.group(1).split(",")) if m else ()
            if len(idx) != len(shape) or any(j >= s for j, s in zip(idx, shape, strict=False)):
                raise ValueError(f"{label} {name!r} does not index parameter {alias or 'θ'!r} of shape {shape}")
            return i, idx
        known.append(_aliases(path, len(leaves))[-1] + ("" if not leaf.shape else f"[…] of shape {tuple(leaf.shape)}"))
    raise ValueError(f"{label} {name!r} names no parameter: allowed {known}")


def names(template) -> list[str]:
    """Every scalar coordinate of θ by name, in ``tree_leaves`` order, row-major within a leaf: ``"e"``,
    ``"W[0,1]"``, ``"[3]"`` for a flat θ (the first names are the defaults of a 2-D slice)."""
    leaves = jax.tree_util.tree_flatten_with_path(template)[0]
    out = []
    for path, leaf in leaves:
        alias = _aliases(path, len(leaves))[-1] if path else ""
        shape = tuple(leaf.shape)
        if not shape:
            out.append(alias or "theta")
        else:
            out += [f"{alias}[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape)]
    return out
