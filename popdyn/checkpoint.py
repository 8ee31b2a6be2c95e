"""Checkpoints of long chunked runs: each finished chunk on disk, so an interrupted run resumes where it
stopped and ends with the same bits as an uninterrupted one (docs/architecture.md, "Scale").

A checkpoint directory holds ``manifest.json`` (a fingerprint of everything the chunks depend on) and
``chunk_00000.npz``, ``chunk_00001.npz``, … (the outputs of each finished chunk, trimmed of padding). Every
file is written to a temporary name in the directory first and moved into place with ``os.replace``, so a
file that exists is complete. A directory whose manifest has another fingerprint is refused, never mixed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import secrets
import types
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np

from popdyn.io import PACKAGES, partial

MANIFEST = "manifest.json"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _describe(obj, h, seen: frozenset = frozenset()) -> None:
    """Feed a process-independent description of ``obj`` into the hash ``h``.

    Arrays contribute dtype, shape and bytes; dataclasses (equinox Modules: problems, solvers, bound
    methods) their type and every field, static ones included; functions their qualified name, bytecode,
    defaults and closure; containers their items; anything else its ``repr`` with memory addresses removed.
    """

    def put(text: str) -> None:
        h.update(_ADDRESS.sub("", text).encode() + b"\0")

    if id(obj) in seen:
        return put("<cycle>")
    seen = seen | {id(obj)}
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        if isinstance(obj, jax.Array) and jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):  # JAX only
            obj = jax.random.key_data(obj)
        arr = np.ascontiguousarray(np.asarray(obj))
        put(f"array {arr.dtype.str} {arr.shape}")
        return h.update(arr.tobytes())
    if isinstance(obj, dict):
        put(f"dict {len(obj)}")
        for k in sorted(obj, key=repr):
            put(repr(k))
            _describe(obj[k], h, seen)
        return None
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        put(f"{type(obj).__name__} {len(obj)}")
        for v in obj:
            _describe(v, h, seen)
        return None
    if isinstance(obj, (set, frozenset)):
        put(f"set {len(obj)}")
        for v in sorted(obj, key=repr):
            _describe(v, h, seen)
        return None
    if isinstance(obj, functools.partial):
        put("partial")
        return _describe((obj.func, obj.args, obj.keywords), h, seen)
    if isinstance(obj, types.MethodType):
        put("method")
        return _describe((obj.__func__, obj.__self__), h, seen)
    if isinstance(obj, types.FunctionType):
        put(f"function {obj.__module__}.{obj.__qualname__}")
        h.update(obj.__code__.co_code)
        cells = tuple(c.cell_contents for c in obj.__closure__ or () if _filled(c))
        return _describe((obj.__defaults__, obj.__kwdefaults__, cells), h, seen)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        put(f"dataclass {type(obj).__module__}.{type(obj).__qualname__}")
        for f in dataclasses.fields(obj):
            put(f.name)
            _describe(getattr(obj, f.name, None), h, seen)
        return None
    if hasattr(obj, "_fields"):  # a NamedTuple, e.g. an optax GradientTransformation
        put(f"namedtuple {type(obj).__qualname__}")
        return _describe(dict(zip(obj._fields, obj, strict=False)), h, seen)
    if callable(obj) and hasattr(obj, "__wrapped__"):  # jax.jit and functools.wraps wrappers
        put(f"wrapper {type(obj).__qualname__}")
        return _describe(obj.__wrapped__, h, seen)
    return put(f"{type(obj).__qualname__} {obj!r}")


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # an empty closure cell
        return False
    return True


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def fingerprint(*parts) -> str:
    """SHA-256 (hex) over ``parts`` (see ``_describe``), the versions of popdyn and its numerical stack and
    the JAX backend (CPU and GPU results differ in the last bits): runs with equal fingerprints compute the
    same chunks bit for bit."""
    h = hashlib.sha256()
    _describe((parts, _versions(), jax.default_backend()), h)
    return h.hexdigest()


def _atomic_write(path: Path, write) -> None:
    """``write(file)`` into a new temporary file next to ``path`` (permissions from the umask, unlike
    ``mkstemp``), then move it onto ``path``."""
    with partial(path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")) as tmp:
        with open(tmp, "xb") as f:
            write(f)
        os.replace(tmp, path)


class ChunkStore:
    """The finished chunks of one chunked run in ``directory`` (created if missing).

    ``fp`` is the run's ``fingerprint``: a directory whose manifest holds another one is refused. ``expected``
    is one padded chunk's output structure (``jax.eval_shape``): loaded chunks must match it leaf for leaf
    (names, trailing shapes, dtypes), else ``ValueError`` naming the file. ``info`` (sizes) goes into the
    manifest of a new directory, for people reading it.
    """

    def __init__(self, directory: str | os.PathLike, fp: str, expected, info: dict):
        self.directory = Path(directory)
        self.leaves, self.treedef = jax.tree_util.tree_flatten(expected)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"checkpoint={str(self.directory)!r} is not a directory")
        self.directory.mkdir(parents=True, exist_ok=True)
        manifest = self.directory / MANIFEST
        if manifest.exists():
            try:
                old = str(json.loads(manifest.read_text())["fingerprint"])
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise ValueError(
                    f"checkpoint manifest {manifest} is unreadable ({err}); delete the directory to start afresh"
                ) from err
            if old != fp:
                raise ValueError(
                    f"checkpoint {self.directory} holds chunks for different inputs (fingerprint "
                    f"{old[:12]}…≠{fp[:12]}…); use a new directory or delete it"
                )
        elif any(self.directory.glob("chunk_*.npz")):
            raise ValueError(
                f"checkpoint {self.directory} holds chunk files but no {MANIFEST}: their inputs are "
                "unknown; use a new directory or delete it"
            )
        else:
            self._write_manifest(
                {"fingerprint": fp, **info, "versions": _versions(), "backend": jax.default_backend(), "chunks": {}}
            )
        self.fp = fp

    def _manifest(self) -> dict:
        return json.loads((self.directory / MANIFEST).read_text())

    def _write_manifest(self, content: dict) -> None:
        text = json.dumps(content, indent=2).encode()
        _atomic_write(self.directory / MANIFEST, lambda f: f.write(text))

    def path(self, i: int) -> Path:
        return self.directory / f"chunk_{i:05d}.npz"

    def has(self, i: int) -> bool:
        return self.path(i).exists()

    def load(self, i: int, rows: int):
        """Chunk ``i`` (``rows`` initialisations) as a pytree of NumPy arrays. ValueError, naming the file, unless
        it is this run's chunk ``i`` exactly: its arrays' names, shapes and dtypes (read from the archive's headers
        before any array is loaded), the run's fingerprint and the index stored in it, and the digest of its
        contents recorded in the manifest when it was saved."""
        path = self.path(i)
        want = {f"leaf_{k}": (rows, *s.shape[1:], np.dtype(s.dtype)) for k, s in enumerate(self.leaves)}
        want |= {"run": (64, np.dtype(np.uint8)), "index": (np.dtype(np.int64),)}
        try:
            with open(path, "rb") as f:  # our own handle, closed on any error
                with zipfile.ZipFile(f) as zf:
                    got = {}
                    for name in zf.namelist():
                        with zf.open(name) as member:
                            read = (
                                np.lib.format.read_array_header_1_0
                                if np.lib.format.read_magic(member) == (1, 0)
                                else np.lib.format.read_array_header_2_0
                            )
                            shape, _, dtype = read(member)
                        got[name.removesuffix(".npy")] = (*shape, dtype)
                if got != want:
                    raise _Mismatch(f"arrays {got}, expected {want}")
                f.seek(0)
                with np.load(f, allow_pickle=False) as z:
                    arrays = {k: z[k] for k in z.files}
        except _Mismatch as err:
            raise ValueError(
                f"checkpoint chunk {path} does not hold this run's outputs ({err}); delete it to recompute it"
            ) from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(
                f"checkpoint chunk {path} is unreadable ({type(err).__name__}: {err}); delete it to recompute it"
            ) from err
        run = bytes(np.asarray(arrays["run"], np.uint8)).decode("ascii", "replace")
        recorded = self._manifest().get("chunks", {}).get(str(i))
        if run != self.fp or int(arrays["index"]) != i:
            raise ValueError(
                f"checkpoint chunk {path} belongs to another run or position (run {run[:12]}…, index "
                f"{int(arrays['index'])}; expected {self.fp[:12]}…, {i}); delete it to recompute it"
            )
        leaves = [arrays[f"leaf_{k}"] for k in range(len(self.leaves))]
        if recorded is None or _digest(leaves) != recorded:
            raise ValueError(
                f"checkpoint chunk {path} does not match the digest recorded in {MANIFEST} when it was "
                "saved (edited or replaced); delete it to recompute it"
            )
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def save(self, i: int, out) -> None:
        """Write chunk ``i``'s outputs (a pytree shaped like ``expected``, trimmed) atomically, with the run's
        fingerprint and its index inside, and record the digest of its contents in the manifest. The digest goes
        first: a run stopped between the two writes leaves a digest without its chunk (recomputed on resume, to
        the same bytes), never a chunk without its digest (refused on resume)."""
        leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(out)]
        run = np.frombuffer(self.fp.encode("ascii"), np.uint8)
        manifest = self._manifest()
        manifest.setdefault("chunks", {})[str(i)] = _digest(leaves)
        self._write_manifest(manifest)
        # Any: numpy's stub matches **named against its bool keyword allow_pickle, which no leaf is named
        named: dict[str, Any] = {f"leaf_{k}": a for k, a in enumerate(leaves)}
        _atomic_write(self.path(i), lambda f: np.savez(f, run=run, index=np.int64(i), **named))


class _Mismatch(Exception):
    """A chunk archive whose arrays are not this run's (found from its headers)."""


def _digest(leaves: list[np.ndarray]) -> str:
    """SHA-256 of the arrays' dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for a in leaves:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str} {a.shape}".encode() + b"\0")
        h.update(a.tobytes())
    return h.hexdigest()
