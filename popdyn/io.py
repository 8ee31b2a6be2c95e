"""Results on disk: ``summary.json`` (inputs, versions, device, results, wall time), ``.npz`` arrays and
``.png`` figures, written atomically: everything goes to a temporary folder first and is moved into
``--out`` only when complete, so an error never leaves partial output behind."""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

PACKAGES = ("popdyn", "jax", "jaxlib", "diffrax", "equinox", "optax", "numpy")

_PARTIAL: set[Path] = set()
"""Temporary files and folders being written now, and lock files held: removed by ``discard_partial`` when a
signal stops the run."""


@contextmanager
def partial(path: Path):
    """Register ``path`` (a temporary file or folder being written) for ``discard_partial`` while the block runs,
    and remove it when the block leaves."""
    _PARTIAL.add(path)
    try:
        yield path
    finally:
        _remove(path)
        _PARTIAL.discard(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def discard_partial() -> None:
    """Remove every temporary file and folder being written: called by the command line's signal handler just
    before the process ends, so that an interrupted run leaves no partial output (docs/jobs.md, "Outputs")."""
    for path in list(_PARTIAL):
        _remove(path)


def environment() -> dict[str, Any]:
    """Versions of popdyn and its numerical stack, the platform (backend, XLA's flags, the host's vector
    extensions), the JAX devices and the default float dtype: the JSON block of every summary.json."""
    import jax
    import jax.numpy as jnp

    from popdyn._identity import platform as computing_platform
    from popdyn._identity import versions

    return {
        "versions": versions(),
        "platform": computing_platform(),
        "python": platform.python_version(),
        "devices": [str(d) for d in jax.devices()],
        "dtype": str(jnp.result_type(float)),
    }


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        v = float(x)
        return v if np.isfinite(v) else None
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if isinstance(x, np.ndarray):
        return [_jsonable(v) for v in x.tolist()] if x.ndim else _jsonable(x.item())
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


SUMMARY = "summary.json"


def _owned(out: Path) -> tuple[dict | None, set[str], list[str]]:
    """(the summary of the results already in ``out`` or None, the names of the files popdyn wrote there as that
    summary's ``files`` lists them, the other entries' names: the user's, whatever their suffix)."""
    if not out.is_dir():
        return None, set(), []
    try:
        summary = json.loads((out / SUMMARY).read_text())
    except (OSError, ValueError):
        summary = None
    listed = summary.get("files") if isinstance(summary, dict) else None
    if not (isinstance(listed, list) and SUMMARY in listed):  # written by someone else, or by an older popdyn
        summary, listed = None, []
    ours = {e.name for e in out.iterdir() if e.name in listed and e.is_file() and not e.is_symlink()}
    return summary, ours, sorted(e.name for e in out.iterdir() if e.name not in ours)


def _refuse_others(out: Path, others: list[str]) -> None:
    """ValueError when ``out`` holds entries popdyn did not write (``others``): no run removes or overwrites them."""
    if others:
        raise ValueError(
            f"out={str(out)!r} holds files popdyn did not write ({', '.join(others[:3])}"
            f"{', …' if len(others) > 3 else ''}): choose an empty or new folder"
        )


def resolve_out(out: str | os.PathLike) -> Path:
    """``out`` as a Path, with a symbolic link to a folder followed: results go into the folder it points to."""
    out = Path(out)
    return out.resolve() if out.is_symlink() else out


def check_folder(name: str, path: str | os.PathLike) -> Path:
    """``path`` as a Path when it names a folder that is or can be a directory: not empty, neither it nor an
    existing ancestor a file; else ValueError naming ``name``."""
    if str(path) == "":
        raise ValueError(f"{name}='' is invalid: must name a folder")
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                what = "exists and is not a directory" if p == path else f"lies under the file {str(p)!r}"
                raise ValueError(f"{name}={str(path)!r} is invalid: it {what}")
            break
    return path


def prepare_out(out: str | os.PathLike, command: str, task: str | None, replace: bool = False) -> Path:
    """Check, before any computing, that ``out`` can take this command's results (docs/jobs.md, "Outputs"):
    a non-empty path that is no file (a symbolic link to a folder is followed); holding nothing but the files an
    earlier popdyn run wrote there (its summary lists them), and those of this same command unless ``replace``.
    Temporary folders left by a killed run are removed. Call it while holding ``lock(out)``. Returns the folder
    to write into."""
    out = check_folder("out", resolve_out(check_folder("out", out)))
    if out.exists() and not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"out={str(out)!r} is not writable")
    summary, _, others = _owned(out)
    _refuse_others(out, others)
    inputs = (summary or {}).get("inputs") or {}
    theirs = (summary or {}).get("command"), inputs.get("task", inputs.get("figure"))
    if summary is not None and not replace and theirs != (command, task):
        raise ValueError(
            f"out={str(out)!r} holds the results of another command ({' '.join(map(str, theirs))})"
            ": choose another --out, or --replace"
        )
    for stale in out.parent.glob(f".{out.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return out


@contextmanager
def exclusive(path: Path, busy: str):
    """Hold an exclusive ``fcntl.flock`` on the file ``path`` (made on entry, removed on exit) while the block
    runs; ValueError(``busy``) when another process holds it. A signal that stops the run removes the file too
    (``discard_partial``); the kernel releases the lock of a killed process, so a lock file it left behind blocks
    nobody. OSError when ``path`` cannot be made."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(busy) from None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed the file between our open and our lock: lock a new one
    _PARTIAL.add(path)  # a signal's ``discard_partial`` removes it too
    try:
        yield
    finally:
        _PARTIAL.discard(path)
        os.unlink(path)  # still locked: a process waiting on this file finds it gone and makes its own
        os.close(fd)


@contextmanager
def lock(name: str, folder: str | os.PathLike):
    """Hold ``folder`` (``--out`` or ``--checkpoint``) for this process while the block runs: a second popdyn
    writing there is refused with ValueError naming ``name``. The lock is ``exclusive`` on the file
    ``.NAME.popdyn-lock`` beside the folder; parent folders made for it and still empty on exit are removed.
    Yields the folder (a symbolic link to a folder followed)."""
    folder = resolve_out(check_folder(name, folder))
    missing = [p for p in (folder.parent, *folder.parent.parents) if not p.exists()]
    path = folder.parent / f".{folder.name}.popdyn-lock"
    busy = (
        f"{name}={str(folder)!r} is in use by another popdyn run (which holds {path.name} beside it): "
        "wait for it to end, or choose another folder"
    )
    with ExitStack() as stack:
        stack.callback(_remove_empty, missing)  # last, once the lock file is gone
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(exclusive(path, busy))
        except OSError as err:
            raise ValueError(f"{name}={str(folder)!r} is not writable: {err.strerror or err}") from None
        yield folder


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (each inside the next) as long as they are empty."""
    for p in folders:
        try:
            p.rmdir()
        except OSError:
            return


def write_results(
    out: str | os.PathLike, summary: dict, arrays: dict[str, dict[str, np.ndarray]], figures: dict
) -> list[Path]:
    """Write ``summary.json``, each ``arrays[name]`` as ``name.npz`` and each figure as ``name.png``
    into ``out`` atomically (non-finite floats become JSON null; a symbolic link to a folder is followed).
    An earlier run's outputs there, the files its summary lists under ``files``, are replaced as a whole
    (``prepare_out`` decides whether that is allowed); ValueError, with nothing written, when ``out`` holds any
    other entry. Returns the paths written."""
    out = resolve_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with partial(Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))) as tmp:
        with open(tmp / SUMMARY, "w") as f:
            json.dump(_jsonable(summary), f, indent=2, allow_nan=False)
        for name, arrs in arrays.items():
            # cast: numpy's stub matches **arrays against its bool keyword allow_pickle, which no array is named
            np.savez_compressed(tmp / f"{name}.npz", **cast(dict[str, Any], arrs))
        for name, fig in figures.items():
            tight = None if fig.get_layout_engine() is not None else "tight"  # a layout engine has fitted it
            fig.savefig(tmp / f"{name}.png", dpi=120, bbox_inches=tight, pil_kwargs={"compress_level": 1})
        names = sorted(item.name for item in tmp.iterdir())
        mask = os.umask(0)
        os.umask(mask)
        tmp.chmod(0o777 & ~mask)  # a folder's usual permissions, not mkdtemp's private ones
        with _signals_deferred():
            _, ours, others = _owned(out)
            _refuse_others(out, others)
            if not out.exists() or not ours:
                os.replace(tmp, out)  # one atomic step (onto a missing or empty folder)
            else:
                for old in ours - set(names):
                    (out / old).unlink()
                for name in names:
                    os.replace(tmp / name, out / name)
    return [out / name for name in names]


MOVING = threading.Lock()
"""Held while results move into place: a thread that ends the process on a signal waits for it."""


@contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM (and ``MOVING``) while results move into place, so that ``out`` never mixes old and
    new files; a signal that arrived meanwhile is raised again once they are all there."""
    with MOVING:
        if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
            yield
        else:
            with _handlers_deferred():
                yield


@contextmanager
def _handlers_deferred():
    """In the main thread: SIGINT and SIGTERM are recorded while the block runs, then the first is raised again."""
    pending: list[int] = []
    previous = {
        s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        for signum in pending[:1]:
            signal.raise_signal(signum)


@dataclass
class Result:
    """What one job produced: the summary's ``results``, arrays, figures and printed lines."""

    inputs: dict
    results: dict
    arrays: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    lines: list = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    """The identities of the chunked runs behind the results (``popdyn._identity.run``), set by ``produce``."""

    def write(self, out: Path, command: str, wall: float) -> None:
        from popdyn import _identity as identity

        files = [SUMMARY, *(f"{a}.npz" for a in self.arrays), *(f"{f}.png" for f in self.figures)]
        summary = {
            "command": command,
            "inputs": self.inputs,
            "results": self.results,
            "identity": identity.summary(self.runs, self.inputs),
            "files": files,  # what a later run into ``out`` may replace: every other file there is the user's
            "wall_time_s": wall,
            **environment(),
        }
        write_results(out, summary, self.arrays, self.figures)
        self.lines.append(f"wrote {out}/ ({', '.join(files)})")


def produce(job: Callable[[], Result]) -> Result:
    """``job()``, its Result carrying the identities of the chunked runs it made (``popdyn._identity.collect``), which
    ``Result.write`` names in ``summary.json`` (docs/architecture.md, "Run identity")."""
    from popdyn import _identity as identity

    with identity.collect() as runs:
        res = job()
    res.runs = list(runs)
    return res
