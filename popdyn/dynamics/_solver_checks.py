"""diffrax's checks of a flow's inputs, traced without host callbacks, so that the flow's compiled programs can be
written to JAX's persistent compilation cache (docs/dynamics.md, "Compiled programs").

``diffrax.diffeqsolve`` checks its inputs inside the traced program, with ``equinox.internal.error_if``: the first
step dt0 has the sign of t1 − t0, and the record times increase and lie in [t0, t1]. In equinox's default mode
(``EQX_ON_ERROR=raise``) a check of traced values compiles to host callbacks, and JAX writes no program that holds a
host callback to its persistent cache: every process compiled every flow again. popdyn guarantees these inputs
before it traces (``popdyn.dynamics._flow.record_times`` validates the record times; the first step of
``_Pieces.first_step`` is ≥ 0 or NaN, and t0 ≤ t1), so ``inputs_checked`` traces these checks in equinox's ``nan``
mode: no callback, and the same values bit for bit (a check that failed would give NaN values, hence the point's
status NAN, never a wrong number).

The ``nan`` mode applies only to ``diffeqsolve``'s own checks (the module ``diffrax._integrate``, which makes them
and no other) on the thread inside the block. A user's ``eqx.error_if`` (in a loss, say), any other library's checks
and any other thread's keep the process's mode (``EQX_ON_ERROR``), and JAX's cache of traced checks keys them by
mode, so a check traced here is not reused by another program. Where diffrax does not make its checks this way, the
block changes nothing: the programs are then right, and not cacheable (tests/test_cacheable.py fails).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from types import ModuleType

_SOLVE_MODULE = "diffrax._integrate"
"""The module of ``diffrax.diffeqsolve``: it reaches ``equinox.internal`` through its global ``eqxi``."""

_LOCK = threading.RLock()


class _InputChecks:
    """``equinox.internal`` as ``diffeqsolve`` sees it inside ``inputs_checked``: the same module, but its
    ``error_if`` checks in ``nan`` mode on the thread ``owner``.

    **Arguments:**

    - ``internal``: the module ``equinox.internal`` (or, inside a nested block, the enclosing block's view of it).
    - ``owner``: the thread (``threading.get_ident()``) whose checks trace in ``nan`` mode.
    """

    def __init__(self, internal: ModuleType | _InputChecks, owner: int) -> None:
        self._internal = internal
        self._owner = owner

    def __getattr__(self, name: str):
        return getattr(self._internal, name)

    def error_if(self, x, pred, msg, *, on_error="default"):
        """``equinox.internal.error_if``, in ``nan`` mode on the owner thread unless a mode is given."""
        if on_error == "default" and threading.get_ident() == self._owner:
            on_error = "nan"
        return self._internal.error_if(x, pred, msg, on_error=on_error)


@contextlib.contextmanager
def inputs_checked() -> Iterator[None]:
    """Within the block, on this thread, ``diffrax.diffeqsolve``'s checks of its inputs trace in equinox's ``nan``
    mode (module docstring): call ``diffeqsolve`` inside it only with inputs that popdyn has checked."""
    solve = sys.modules.get(_SOLVE_MODULE)
    internal = getattr(solve, "eqxi", None)
    if not isinstance(internal, (ModuleType, _InputChecks)):
        yield
        return
    with _LOCK:
        setattr(solve, "eqxi", _InputChecks(internal, threading.get_ident()))  # noqa: B010
        try:
            yield
        finally:
            setattr(solve, "eqxi", internal)  # noqa: B010
