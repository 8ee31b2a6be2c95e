"""The identity of a run: one digest of what it computes (docs/architecture.md, "Run identity").

A chunked run applies one function to chunks of a batch of initialisations. Its identity is the SHA-256 of

- the **traced program** of that function on one chunk: the jaxpr's structure (every primitive with its parameters,
  how results feed operands, every type), with every constant it closes over (a problem's data leaves, arrays a
  user's loss reads from its module) and every literal (a number written in the loss, ``0.5``) hashed by value,
  recursively through every sub-program (a jitted helper, a solver's loop);
- the **inputs**: the initialisations (values, dtypes, shapes) and the chunk size;
- the **versions** of popdyn and its numerical stack, and the **platform** (``platform``): the JAX backend (CPU
  and GPU results differ in the last bits), XLA's flags (the command line's guard, a user's code-generation
  settings) and, on the CPU backend, the host's vector extensions (XLA's code follows them: the same program
  rounds differently on hosts with and without AVX-512, say).

Tracing sees what is computed, not how it was written: an edited constant, a helper's new body, a method a
Problem class overrides or another data value all change the program, while a renamed local variable or a
reformatted file does not. Two runs with equal identities compute the same chunks bit for bit, which is what a
checkpoint's chunks and several processes of one run are bound by (``popdyn._checkpoint``,
``popdyn._batching.map_chunks``); ``summary.json`` names the identities of the runs behind its results.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import platform as pyplatform
import re
import weakref
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from popdyn.io import PACKAGES

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class _Hash:
    """A SHA-256 fed with text (memory addresses removed, so the digest is the same in every process) and
    array bytes."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def text(self, s: str) -> None:
        self.h.update(_ADDRESS.sub("", s).encode() + b"\0")

    def array(self, x) -> None:
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        arr = np.ascontiguousarray(np.asarray(x))
        self.text(f"array {arr.dtype.str} {arr.shape}")
        self.h.update(arr.tobytes())

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def _values(jaxpr: jcore.Jaxpr, consts, out: _Hash, seen: set[int]) -> None:
    """Hash the values ``_structure`` leaves out: its constants, and (recursively through every sub-program in an
    equation's parameters) its literals, array parameters and the constants of closed sub-programs. A sub-program
    shared by several equations is visited once."""
    if id(jaxpr) in seen:
        return
    seen.add(id(jaxpr))
    for c in consts:
        out.array(c)
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if isinstance(v, jcore.Literal):
                out.array(v.val)
        for param in eqn.params.values():
            _param_values(param, out, seen)


def _param_values(param, out: _Hash, seen: set[int]) -> None:
    """``_values`` of an equation's parameter: of a sub-program, of an array, or of each item of a tuple or list."""
    if isinstance(param, jcore.ClosedJaxpr):
        _values(param.jaxpr, param.consts, out, seen)
    elif isinstance(param, jcore.Jaxpr):
        _values(param, (), out, seen)
    elif isinstance(param, (tuple, list)):
        for item in param:
            _param_values(item, out, seen)
    elif isinstance(param, (np.ndarray, jax.Array)):
        out.array(param)


_STRUCTURES: weakref.WeakKeyDictionary[jcore.Jaxpr, str] = weakref.WeakKeyDictionary()


def _structure(jaxpr: jcore.Jaxpr) -> str:
    """SHA-256 (hex) of a jaxpr's structure: what its printed form shows, and every parameter. The binders of its
    constants, inputs and outputs with their types; each equation's primitive, operands (a literal by its type),
    results with their types and every parameter, by ``repr`` (memory addresses removed) or, for a sub-program, by
    its own structure. Values are not in it: ``_values`` hashes every literal and array in the order of the
    equations, which the structure fixes.

    Remembered for each jaxpr object while it lives (a jaxpr is immutable): JAX keeps the traced program of a
    jitted function, so a run that traces the same jitted function again hashes only the few equations around it.
    """
    done = _STRUCTURES.get(jaxpr)
    if done is not None:
        return done
    names: dict[Any, str] = {}
    types: dict[Any, str] = {}  # one repr per distinct type: most variables share a few

    def typed(name: str, aval) -> str:
        return f"{name}:{types[aval] if aval in types else types.setdefault(aval, repr(aval))}"

    def binder(v) -> str:
        return typed(names.setdefault(v, f"v{len(names)}"), v.aval)

    def operand(v) -> str:
        return typed("literal", v.aval) if isinstance(v, jcore.Literal) else names.get(v, "free")

    lines = [" ".join(map(binder, [*jaxpr.constvars, *jaxpr.invars]))]
    for eqn in jaxpr.eqns:
        params = " ".join(f"{key}={_param(eqn.params[key])}" for key in sorted(eqn.params))
        operands, results = " ".join(map(operand, eqn.invars)), " ".join(map(binder, eqn.outvars))
        lines.append(f"{results} = {eqn.primitive.name}[{params}] {operands}")
    lines.append(" ".join(map(operand, jaxpr.outvars)))
    out = _Hash()
    out.text("\n".join(lines))
    digest = out.hexdigest()
    _STRUCTURES[jaxpr] = digest
    return digest


def _param(value) -> str:
    """An equation's parameter for ``_structure``: a sub-program by its structure, arrays by type (``_values`` has
    their bytes), sets sorted, anything else by ``repr``."""
    if isinstance(value, jcore.ClosedJaxpr):
        return f"closed {_structure(value.jaxpr)}"
    if isinstance(value, jcore.Jaxpr):
        return f"open {_structure(value)}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({', '.join(map(_param, value))})"
    if isinstance(value, (np.ndarray, jax.Array)):
        return f"array {value.dtype} {value.shape}"
    if isinstance(value, frozenset):
        return f"frozenset({', '.join(sorted(map(repr, value)))})"
    return repr(value)


def program(fn: Callable, *args) -> str:
    """SHA-256 (hex) of the program ``fn`` traces to on ``args`` (arrays or ``jax.ShapeDtypeStruct``\\ s): its
    jaxpr's structure (``_structure``: primitives, wiring, types and parameters, through every sub-program), plus
    every constant and literal by value (``_values``).

    **Arguments:**

    - ``fn``: a JAX-traceable function (jitted or not).
    - ``args``: its arguments, or their shapes and dtypes; only shapes and dtypes matter.
    """
    closed = jax.make_jaxpr(fn)(*args)
    out = _Hash()
    out.text(_structure(closed.jaxpr))
    _values(closed.jaxpr, closed.consts, out, set())
    return out.hexdigest()


def data(tree) -> str:
    """SHA-256 (hex) of a pytree of arrays and numbers: its structure and every leaf's dtype, shape and bytes."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    out = _Hash()
    out.text(str(treedef))
    for leaf in leaves:
        out.array(leaf)
    return out.hexdigest()


def versions() -> dict[str, str | None]:
    """The installed versions of popdyn and its numerical stack (None for a package that is not installed)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


VECTOR_EXTENSIONS = ("avx512f", "avx2", "fma", "avx", "sse4_2", "asimd", "sve")
"""CPU instruction-set extensions that XLA's CPU code generation uses when the host offers them."""


@functools.cache
def host_cpu() -> str:
    """The host's architecture and the vector extensions from ``VECTOR_EXTENSIONS`` it offers, e.g.
    ``x86_64+avx2+fma+avx+sse4_2`` (read once from /proc/cpuinfo; the architecture alone where that file is
    missing)."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = set(" ".join(line for line in info if line.startswith(("flags", "Features"))).split())
    except OSError:
        flags = set()
    return "+".join([pyplatform.machine(), *(x for x in VECTOR_EXTENSIONS if x in flags)])


def platform() -> dict[str, str]:
    """What besides the versions decides a result's last bits: ``backend`` (JAX's default backend), ``xla_flags``
    (``XLA_FLAGS``' settings in sorted order, those that only dump files left out) and, on the CPU backend,
    ``cpu`` (``host_cpu``)."""
    flags = sorted(f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_dump"))
    found = {"backend": jax.default_backend(), "xla_flags": " ".join(flags)}
    if found["backend"] == "cpu":
        found["cpu"] = host_cpu()
    return found


def run(fn: Callable, example, inputs, chunk_size: int) -> str:
    """The identity of a chunked run (module docstring): SHA-256 (hex) of the program ``fn`` traces to on one
    chunk ``example``, the ``inputs`` (every initialisation), the ``chunk_size``, the versions and the platform.

    **Arguments:**

    - ``fn``: the function applied to each chunk.
    - ``example``: one chunk (arrays or ``jax.ShapeDtypeStruct``\\ s), for tracing.
    - ``inputs``: the whole batch ``fn``'s chunks are cut from.
    - ``chunk_size``: the number of initialisations in a chunk, padding included.
    """
    out = _Hash()
    out.text(program(fn, example))
    out.text(data(inputs))
    out.text(f"chunk {chunk_size} platform {sorted(platform().items())} versions {sorted(versions().items())}")
    digest = out.hexdigest()
    _record(digest)
    return digest


_RUNS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("popdyn_runs", default=None)


def _record(digest: str) -> None:
    runs = _RUNS.get()
    if runs is not None and digest not in runs:
        runs.append(digest)


@contextlib.contextmanager
def collect() -> Iterator[list[str]]:
    """Within the block, every chunked run's identity (``run``) is appended, once, to the list this yields: what a
    command names in its ``summary.json``."""
    runs: list[str] = []
    token = _RUNS.set(runs)
    try:
        yield runs
    finally:
        _RUNS.reset(token)


def summary(runs: list[str], inputs: Any) -> dict[str, Any]:
    """The ``identity`` entry of a ``summary.json``: the identities of the chunked ``runs`` behind its results, and
    ``digest``, the SHA-256 of those with the command's ``inputs`` (JSON-like), the versions and the platform."""
    out = _Hash()
    out.text(repr(runs))
    out.text(repr(inputs))
    out.text(repr(sorted(versions().items())))
    out.text(repr(sorted(platform().items())))
    return {"runs": list(runs), "digest": out.hexdigest()}
