"""Input validation at the API boundary.

Every check raises ``ValueError`` naming the parameter, the offending value and the allowed range,
so the CLI can print it as a single line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def open_unit(name: str, value) -> float:
    """Require ``value`` in the open interval (0, 1)."""
    if not _is_number(value) or not (0.0 < float(value) < 1.0):
        raise ValueError(f"{name}={value!r} is out of range: must lie in the open interval (0, 1)")
    return float(value)


def half_open_unit(name: str, value) -> float:
    """Require ``value`` in [0, 1) (a heavy-ball momentum, a leaky slope)."""
    if not _is_number(value) or not (0.0 <= float(value) < 1.0):
        raise ValueError(f"{name}={value!r} is out of range: must lie in [0, 1)")
    return float(value)


def positive(name: str, value, *, allow_zero: bool = False) -> float:
    """Require a finite ``value > 0`` (or ``>= 0`` with ``allow_zero``)."""
    ok = _is_number(value) and math.isfinite(float(value))
    ok = ok and (float(value) >= 0.0 if allow_zero else float(value) > 0.0)
    if not ok:
        bound = "[0, inf)" if allow_zero else "(0, inf)"
        raise ValueError(f"{name}={value!r} is out of range: must be a finite number in {bound}")
    return float(value)


def finite(name: str, value) -> float:
    """Require a finite real number."""
    if not _is_number(value) or not math.isfinite(float(value)):
        raise ValueError(f"{name}={value!r} is invalid: must be a finite real number")
    return float(value)


INT_MAX = 2**31 - 1
"""The largest count (steps, points, draws, …) accepted: beyond it loop counters overflow without x64, and no
run of that many steps or points would finish."""


def int_at_least(name: str, value, minimum: int, maximum: int | None = INT_MAX) -> int:
    """Require an integer ``minimum <= value <= maximum`` (a count for a run: at most INT_MAX; ``maximum=None``
    for sizes that only enter closed forms)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}={value!r} is out of range: must be an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}={value!r} is out of range: must be an integer <= {maximum:,}")
    return int(value)


SEED_MAX = 2**32 - 1


def seed(name: str, value) -> int:
    """Require an integer seed in [0, 2**32 - 1]: the range where ``jax.random.PRNGKey`` gives the same key with
    and without x64 (larger seeds overflow or are silently truncated to 32 bits) and NumPy accepts it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= SEED_MAX:
        raise ValueError(f"{name}={value!r} is out of range: must be an integer in [0, 2**32 - 1]")
    return int(value)


def _is_int(value) -> bool:
    """An int, a NumPy integer or a 0-d integer array (not a bool)."""
    if isinstance(value, (int, np.integer)):
        return not isinstance(value, bool)
    return hasattr(value, "dtype") and np.ndim(value) == 0 and np.issubdtype(value.dtype, np.integer)


def int_sequence(name: str, value) -> tuple[int, ...]:
    """Require a sequence of integers (no bools, floats or strings); returns it as a tuple of ints."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name}={value!r} is invalid: must be a sequence of integers")
    items = tuple(value)
    if not all(_is_int(v) for v in items):
        raise ValueError(f"{name}={list(items)!r} is invalid: entries must be integers")
    return tuple(int(v) for v in items)


def float_array(name: str, value) -> np.ndarray:
    """``value`` as a float64 NumPy array; ValueError naming it when it is not real-numeric (strings, None, complex,
    ragged: NumPy's conversion raises TypeError or ValueError for each)."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is invalid: must be an array of real numbers") from None


def interval(name: str, value: Sequence[float]) -> tuple[float, float]:
    """Require a finite, increasing pair ``(lo, hi)`` with ``lo < hi`` and a finite width ``hi − lo`` (a wider one,
    such as (−1e308, 1e308), would put NaN points between its ends)."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is invalid: must be a pair (lo, hi) of numbers") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise ValueError(f"{name}=({lo}, {hi}) is invalid: must be finite with lo < hi")
    if not math.isfinite(hi - lo):
        raise ValueError(f"{name}=({lo}, {hi}) is invalid: the width hi - lo overflows (must be <= {_FLOAT_MAX:.4g})")
    return lo, hi


_FLOAT_MAX = float(np.finfo(np.float64).max)


def choice(name: str, value, allowed: Sequence[str]) -> str:
    """Require ``value`` to be one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is invalid: must be one of {', '.join(map(repr, allowed))}")
    return value
