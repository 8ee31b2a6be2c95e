"""Shared pieces of the hypothesis property suites ``test_properties_*.py``.

Invalid-value strategies for each kind of parameter, and the two checks every suite makes: a bad value raises a
``ValueError`` whose message names the parameter (before any JAX work), and a run reports every point as finite
or with a non-OK status. Example counts are per test; ``POPDYN_HYPOTHESIS_SCALE=10`` multiplies them for a
longer local search (CI runs the root ``conftest.py`` profile: derandomised, no database, no deadline).
"""

from __future__ import annotations

import contextlib
import math
import os
import re

import jax
import numpy as np
import pytest
from hypothesis import strategies as st

from popdyn.dynamics import Status

SCALE = float(os.environ.get("POPDYN_HYPOTHESIS_SCALE", "1"))


def examples(n: int) -> int:
    """``n`` examples, times ``POPDYN_HYPOTHESIS_SCALE``."""
    return max(1, int(round(n * SCALE)))


# ---- invalid values ------------------------------------------------------------------------------------
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
WRONG_TYPE = st.sampled_from(["0.5", "abc", None, [0.5], (1, 2), {"x": 1}, True, False, 1j, b"1"])
"""Values of no numeric type (bools included: they are not numbers to popdyn)."""


def bad_open_unit() -> st.SearchStrategy:
    """Anything outside the open interval (0, 1): the ends, beyond them, non-finite, wrong types."""
    return st.one_of(
        st.floats(max_value=0.0),
        st.floats(min_value=1.0),
        st.integers(max_value=0),
        st.integers(min_value=1),
        NON_FINITE,
        WRONG_TYPE,
    )


def _wrong_type(optional: bool) -> st.SearchStrategy:
    return WRONG_TYPE.filter(lambda v: v is not None) if optional else WRONG_TYPE


def bad_positive(allow_zero: bool = False, optional: bool = False) -> st.SearchStrategy:
    """Anything that is not a finite number > 0 (>= 0 with ``allow_zero``); ``optional``: None is valid."""
    neg = st.floats(max_value=0.0, exclude_max=allow_zero, allow_nan=False)
    return st.one_of(neg, st.integers(max_value=-1 if allow_zero else 0), NON_FINITE, _wrong_type(optional))


def bad_int(minimum: int, optional: bool = False) -> st.SearchStrategy:
    """Anything that is not an integer >= ``minimum``: smaller integers, floats (even integral), wrong types;
    ``optional``: None is valid."""
    return st.one_of(st.integers(max_value=minimum - 1), st.floats(allow_nan=True), _wrong_type(optional))


def bad_choice(allowed) -> st.SearchStrategy:
    """A string (or non-string) that is none of ``allowed``."""
    text = st.text(alphabet="abcdeilnoprstuvwxyz-_ 0123456789", max_size=10)  # ASCII: no Unicode tables to load
    return st.one_of(
        text, st.sampled_from([a.upper() for a in allowed] + [f" {a}" for a in allowed]), WRONG_TYPE, st.integers()
    ).filter(lambda v: v not in allowed)


def bad_seed() -> st.SearchStrategy:
    """Seeds popdyn refuses: negative, beyond 32 bits, non-integers."""
    return st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32), st.floats(), WRONG_TYPE)


# ---- checks ---------------------------------------------------------------------------------------------
def names(message: str, name: str) -> bool:
    """True when ``message`` names ``name`` as a word (``p=``, ``P[0,1]``, ``row 0 of P``, ``lists[2]``…)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?![\w(])", message) is not None


_COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration",)  # XLA compilations (not eval_shape's tracing)
_compilations = [0]


def _on_event(event: str, duration: float, fun_name: str = "", **kwargs) -> None:
    if event in _COMPILE_EVENTS and "stage" not in fun_name:  # jit(stage): placing a NumPy array on the device
        _compilations[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)
jax.random.PRNGKey(0)  # compiled here once: making a key (as jobs do before their builders validate) is not counted


@contextlib.contextmanager
def no_compilation(failure: str = "JAX compiled a computation before the bad value was refused"):
    """Fail with ``failure`` when JAX compiles anything inside the block: bad input must be refused before any JAX
    computation (one whose program is already cached goes unseen, so this catches the first offending example),
    and a rerun that only changes traced values must reuse its compiled programs."""
    before = _compilations[0]
    yield
    assert _compilations[0] == before, failure


def raises_naming(name: str, fn, /, *args, **kwargs) -> ValueError:
    """Call ``fn``; it must raise ``ValueError`` naming ``name`` without any JAX compilation first (anything else
    fails the test)."""
    with no_compilation(), pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    assert names(str(info.value), name), f"{name!r} not named in: {info.value}"
    return info.value


def tree_finite(tree) -> bool:
    """Every leaf entirely finite."""
    return all(bool(np.all(np.isfinite(np.asarray(x)))) for x in jax.tree_util.tree_leaves(tree))


OK_STATUS = (Status.CONVERGED, Status.SADDLE, Status.MAX_STEPS)


def check_per_point(traj) -> None:
    """Every point of a batched run either ended OK with a finite end point and loss, or carries a non-OK status
    (diverged, NaN, solver failure); nothing else."""
    status = np.asarray(traj.status)
    final = [np.asarray(x).reshape(status.shape[0], -1) for x in jax.tree_util.tree_leaves(traj.final)]
    finite = np.all(np.isfinite(np.concatenate(final, axis=1)), axis=1) & np.isfinite(np.asarray(traj.final_loss))
    assert set(status.tolist()) <= {int(s) for s in Status}, status
    ok = np.isin(status, [int(s) for s in OK_STATUS])
    assert np.all(finite[ok]), (status, traj.final_loss)
