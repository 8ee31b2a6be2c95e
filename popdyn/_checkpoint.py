"""Checkpoints of long chunked runs: each finished chunk on disk, so an interrupted run resumes where it
stopped and ends with the same bits as an uninterrupted one (docs/architecture.md, "Scale").

A checkpoint directory holds ``manifest.json`` (the run's identity, ``popdyn._identity.run``: the traced program,
its constants and data, the initialisations, the chunk size and the versions) and
``chunk_00000.npz``, ``chunk_00001.npz``, … (the outputs of each finished chunk, trimmed of padding). Every
file is written to a temporary name in the directory first and moved into place with ``os.replace``, so a
file that exists is complete. A directory whose manifest has another fingerprint is refused, never mixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

from popdyn import _identity as identity
from popdyn.io import partial

MANIFEST = "manifest.json"


def _atomic_write(path: Path, write) -> None:
    """``write(file)`` into a new temporary file next to ``path`` (permissions from the umask, unlike
    ``mkstemp``), then move it onto ``path``."""
    with partial(path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")) as tmp:
        with open(tmp, "xb") as f:
            write(f)
        os.replace(tmp, path)


class ChunkStore:
    """The finished chunks of one chunked run in ``directory`` (created if missing).

    ``fp`` is the run's identity (``popdyn._identity.run``): a directory whose manifest holds another one is
    refused. ``expected`` is one padded chunk's output structure (``jax.eval_shape``): loaded chunks must match
    it leaf for leaf (names, trailing shapes, dtypes), else ``ValueError`` naming the file. ``info`` (sizes) goes
    into the manifest of a new directory, for people reading it.
    """

    def __init__(self, directory: str | os.PathLike, fp: str, expected, info: dict):
        self.directory = Path(directory)
        self.leaves, self.treedef = jax.tree_util.tree_flatten(expected)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"checkpoint={str(self.directory)!r} is not a directory")
        self.directory.mkdir(parents=True, exist_ok=True)
        manifest = self.directory / MANIFEST
        if manifest.exists():
            old = self._manifest()["fingerprint"]
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
                {
                    "fingerprint": fp,
                    **info,
                    "versions": identity.versions(),
                    "platform": identity.platform(),
                    "chunks": {},
                }
            )
        self.fp = fp

    def _manifest(self) -> dict:
        """The manifest: a JSON object whose ``fingerprint`` is a string and whose ``chunks`` (empty when absent)
        maps chunk numbers to digests (strings); else ValueError naming the file."""
        path = self.directory / MANIFEST
        try:
            content = json.loads(path.read_text())
            if not isinstance(content, dict):
                raise ValueError(f"a JSON {type(content).__name__}, not an object")
            fp, chunks = content.get("fingerprint"), content.setdefault("chunks", {})
            if not isinstance(fp, str):
                raise ValueError(f"'fingerprint' is {fp!r:.40}, not a string")
            if not (isinstance(chunks, dict) and all(isinstance(v, str) for v in chunks.values())):
                raise ValueError(f"'chunks' is {chunks!r:.40}, not an object of digests")
        except (OSError, ValueError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise ValueError(
                f"checkpoint manifest {path} is unreadable ({err}); delete the directory to start afresh"
            ) from None
        return content

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
        except Exception as err:  # a damaged archive fails anywhere in zipfile, zlib or NumPy's header parser
            raise ValueError(
                f"checkpoint chunk {path} is unreadable ({type(err).__name__}: {' '.join(str(err).split())}); "
                "delete it to recompute it"
            ) from err
        run = bytes(np.asarray(arrays["run"], np.uint8)).decode("ascii", "replace")
        recorded = self._manifest()["chunks"].get(str(i))
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
        manifest["chunks"][str(i)] = _digest(leaves)
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
