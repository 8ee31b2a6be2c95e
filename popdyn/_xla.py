"""The guard against a miscompile of XLA on CPU: from jaxlib 0.10.2 on, XLA hands reductions to YNNPACK fusions,
and such a fusion that also holds a dot can return a wrong sum with no error. Two triggers are known, in float32
and float64 alike, when the dot and the reduction are compiled into one program (``jax.jit``):

- a dot with a matrix whose entries are all equal, a broadcast scalar (``x @ jnp.full((4, 4), c)``, c a constant
  or a traced number), with at least 4096 outputs, then a reduction: ``jnp.sum(x @ C)`` with x of shape
  (1024, 4) can come out as −1.98 for −46.25, while at 1023 rows it is right;
- a vmapped matrix-vector product then a reduction over a long batch: ``jnp.sum((M @ r) ** 2)`` over n rows r of
  length 3 is wrong from row 16 384 on for 16 384 < n ≤ 49 152 (lengths 5, 6, 7 too), M a constant or an
  argument alike (reported upstream as jax-ml/jax#39103).

popdyn's full Markov transformer meets the first: its exact loss at the rank-one weights of the default direction
α = 1/√d, held as constants by a jitted function, is 0.7767 for 0.6384 (N = 8, d = 4).

The XLA flag ``--xla_cpu_experimental_ynn_fusion_type=-reduce`` keeps reductions out of YNNPACK fusions, which
gives both triggers' right answers (those of jaxlib 0.10.1, which fused no reduction). XLA reads its flags once,
when JAX starts its backend, so the flag must be in ``XLA_FLAGS`` before the first computation: the command line
calls ``guard_xla`` first thing; ``POPDYN_XLA_GUARD=off`` leaves ``XLA_FLAGS`` alone (docs/jobs.md, "A guarded
XLA"). In Python, popdyn leaves XLA's flags alone, as it leaves float64.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from importlib import metadata

FLAG = "--xla_cpu_experimental_ynn_fusion_type=-reduce"
"""The XLA flag that keeps reductions out of YNNPACK fusions."""

FIRST_AFFECTED = (0, 10, 2)
"""The first jaxlib whose XLA fuses reductions into YNNPACK by default (0.9.2, 0.10.0 and 0.10.1 do not)."""

SWITCH = "POPDYN_XLA_GUARD"
"""Environment variable: ``off`` leaves ``XLA_FLAGS`` as it is."""


@functools.cache
def jaxlib_version() -> tuple[int, ...]:
    """The installed jaxlib's release as integers (``"0.10.2"`` → (0, 10, 2)), read once from its package metadata
    without importing it; a part that is not a number ends the tuple (``"0.11.0rc1"`` → (0, 11))."""
    parts = []
    for part in metadata.version("jaxlib").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def affected(version: tuple[int, ...] | None = None) -> bool:
    """Whether a jaxlib release fuses reductions into YNNPACK by default, hence needs the guard: 0.10.2 and later
    (later releases count as affected until one is shown to be right without the flag).

    **Arguments:**

    - ``version``: the release as integers (default: the installed jaxlib's).
    """
    return (jaxlib_version() if version is None else version) >= FIRST_AFFECTED


def guarded(xla_flags: str) -> str:
    """``xla_flags`` (the value of ``XLA_FLAGS``) with ``FLAG`` added, unless it already holds a setting of the
    YNNPACK fusion types (the user's own choice stays).

    **Arguments:**

    - ``xla_flags``: space-separated XLA flags, possibly empty.
    """
    name = FLAG.split("=")[0]
    if any(f.split("=")[0] == name for f in xla_flags.split()):
        return xla_flags
    return f"{xla_flags} {FLAG}".strip()


def _backend_started() -> bool:
    """Whether JAX has started a backend in this process (then XLA has read its flags already)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False
    started = getattr(bridge, "backends_are_initialized", None)
    return True if started is None else bool(started())


def guard_xla() -> bool:
    """Put ``FLAG`` into ``XLA_FLAGS`` when the installed jaxlib is affected, before JAX starts its backend.

    Nothing is changed when ``POPDYN_XLA_GUARD=off``, when the jaxlib is not affected, or when ``XLA_FLAGS``
    already sets the YNNPACK fusion types. When JAX's backend has already started (XLA has read its flags) and
    the flag is missing, ``XLA_FLAGS`` stays as it is (a change would now only alter the keys of JAX's
    compilation cache) and one warning says how to start the process with the guard.

    Returns whether ``XLA_FLAGS`` holds ``FLAG`` after the call.
    """
    current = os.environ.get("XLA_FLAGS", "")
    wanted = guarded(current)
    if wanted != current and os.environ.get(SWITCH, "").lower() != "off" and affected():
        if _backend_started():
            warnings.warn(_UNGUARDED.format(version=metadata.version("jaxlib")), stacklevel=2)
        else:
            os.environ["XLA_FLAGS"] = wanted
    return FLAG in os.environ.get("XLA_FLAGS", "").split()


_UNGUARDED = (
    "jaxlib {version} on CPU can return wrong sums from reductions fused with a dot, and JAX started in this process "
    f'without the guard: start it with XLA_FLAGS={FLAG} (docs/jobs.md, "A guarded XLA"; {SWITCH}=off silences '
    "this)"
)
_warned = False


def warn_unguarded() -> None:
    """Warn once per process when popdyn computes on CPU with an affected jaxlib and XLA's flags miss ``FLAG``
    (neither the command line's guard nor the user's own setting holds it), unless ``POPDYN_XLA_GUARD=off``. Called
    where a problem enters the engine (``popdyn.problem.check_problem``); Python users thus learn of the miscompile
    without popdyn changing the flags of their process."""
    global _warned
    flags = os.environ.get("XLA_FLAGS", "")
    if _warned or os.environ.get(SWITCH, "").lower() == "off" or guarded(flags) == flags:
        return  # warned already, silenced, or the flag (or the user's own choice of the fusion types) is set
    if not affected():
        return
    import jax

    if jax.default_backend() == "cpu":
        _warned = True
        warnings.warn(_UNGUARDED.format(version=metadata.version("jaxlib")), stacklevel=3)
