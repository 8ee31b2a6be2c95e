"""A user's own code run by a command (docs/jobs.md, "Your own model"): objects named ``module.path:name`` imported
from the current directory or sys.path, and calls into them whose errors become one clear ValueError."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable

import jax

LIBRARIES = frozenset({"jax", "jaxlib", "numpy", "equinox", "jaxtyping", "beartype"} | set(sys.stdlib_module_names))
"""Top-level modules whose frames say nothing about whose code raised: an error raised there was caused by the
nearest caller outside them."""


def _raised_by_popdyn(err: BaseException) -> bool:
    """Whether the innermost frame of ``err``'s traceback outside LIBRARIES (and past the frame that caught it) is
    popdyn's: an error popdyn raised itself (its own ValueError, or a bug), not one of the user's code."""
    owner = None
    tb = err.__traceback__.tb_next if err.__traceback__ is not None else None
    while tb is not None:
        top = str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0]
        owner = owner if top in LIBRARIES else top
        tb = tb.tb_next
    return owner == "popdyn"


def call_user(what: str, fn: Callable, args: tuple = (), kwargs: dict | None = None, keep: tuple = ()):
    """``fn(*args, **kwargs)``, a call into the user's code (importing their module, calling their factory, tracing
    their loss). An error raised in their code becomes one ValueError ``{what} raised TYPE: message``; one that
    popdyn raised (its own ValueError, or a bug with its traceback) passes unchanged, and so do those of the types
    in ``keep``. A call that turns float64 off (``jax.config.update("jax_enable_x64", False)``) is refused, and
    float64 turned back on.

    Args:
        what: the user's code in words, for the message (``factory='m:f' (called with …)``).
        fn: the function to call, with ``args`` and ``kwargs``.
        keep: exception types that pass unchanged (the caller words them).
    """
    x64 = bool(jax.config.read("jax_enable_x64"))
    try:
        out = fn(*args, **(kwargs or {}))
    except Exception as err:
        if isinstance(err, keep) or _raised_by_popdyn(err):
            raise
        raise ValueError(f"{what} raised {type(err).__name__}: {' '.join(str(err).split())}") from err
    finally:
        switched_off = x64 and not jax.config.read("jax_enable_x64")
        if switched_off:
            jax.config.update("jax_enable_x64", True)
    if switched_off:
        raise ValueError(
            f"{what} turned float64 off (jax_enable_x64 = False): popdyn computes in float64 and a switch "
            "half-way leaves float32 and float64 arrays side by side; remove the jax.config.update call"
        )
    return out


def load_object(option: str, spec: str, form: str, what: str) -> object:
    """The object named by ``spec`` = ``"module.path:name"`` (imported from the current directory or sys.path), for
    the option ``option`` that expects ``form`` (``'module.path:function'``, say) naming ``what`` (both in words, for
    messages); an import that fails, whatever it raises, or a module without that name is a ValueError naming the
    module and the error."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"{option}={spec!r} is invalid: must be {form} {what}")
    module, name = spec.split(":")
    if not all(part.isidentifier() for part in module.split(".")) or not name.isidentifier():
        raise ValueError(
            f"{option}={spec!r} is invalid: must be {form} with Python names (a module, not a "
            "file path: for ./models/wells.py:f run popdyn in the folder holding models/ and write models.wells:f)"
        )
    try:
        mod = _import_here(option, spec, module)
    except ImportError as err:
        raise ValueError(f"{option}={spec!r} is invalid: cannot import {module!r} ({err})") from None
    if not hasattr(mod, name):
        raise ValueError(f"{option}={spec!r} is invalid: {module!r} has no {name!r}")
    return getattr(mod, name)


def _import_here(option: str, spec: str, module: str):
    """Import ``module`` from sys.path or else from the current directory, which ``python -m`` searches and the
    ``popdyn`` console script does not (ImportError when neither has it; ValueError when importing it raises)."""
    here = os.getcwd()
    if here not in sys.path and importlib.util.find_spec(module.split(".")[0]) is None:
        sys.path.insert(0, here)
    what = f"{option}={spec!r} is invalid: importing {module!r}"
    return call_user(what, importlib.import_module, (module,), keep=(ImportError,))
