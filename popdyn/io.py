"""Results on disk: ``summary.json`` (inputs, versions, device, results, wall time), ``.npz`` arrays and
``.png`` figures, written atomically: everything goes to a temporary folder first and is moved into
``--out`` only when complete, so an error never leaves partial output behind."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import numpy as np

PACKAGES = ("popdyn", "jax", "jaxlib", "diffrax", "equinox", "optax", "numpy")

_PARTIAL: set[Path] = set()
"""Temporary files and folders being written now: removed by ``discard_partial`` when a signal stops the run."""


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


def environment() -> dict:
    """Versions of popdyn and its numerical stack, the JAX devices and the default float dtype."""
    import jax
    import jax.numpy as jnp

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "versions": versions,
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


OUTPUT_SUFFIXES = (".npz", ".png", ".json")
"""The files a command writes into its folder (summary.json, arrays, figures): what a replacement removes."""


def _previous(out: Path) -> tuple[dict | None, list[Path]]:
    """(the summary of the results already in ``out`` or None, the other entries there)."""
    if not out.is_dir():
        return None, []
    entries = list(out.iterdir())
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    return summary, [e for e in entries if e.name != "summary.json"]


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
    a non-empty path that is no file; its nearest existing ancestor writable (a probe folder is made and removed
    there: the atomic rename writes beside ``out``); not holding another command's results or other files unless
    ``replace``. Temporary folders left by a killed run are removed. Returns ``out`` as a Path."""
    out = check_folder("out", out)
    summary, others = _previous(out)
    if not replace:
        inputs = (summary or {}).get("inputs") or {}
        theirs = (summary or {}).get("command"), inputs.get("task", inputs.get("figure"))
        if summary is not None and theirs != (command, task):
            raise ValueError(
                f"out={str(out)!r} holds the results of another command ({' '.join(map(str, theirs))})"
                ": choose another --out, or --replace"
            )
        strays = [e.name for e in others if e.suffix not in OUTPUT_SUFFIXES or summary is None]
        if strays:
            raise ValueError(
                f"out={str(out)!r} holds other files ({', '.join(sorted(strays)[:3])}"
                f"{', …' if len(strays) > 3 else ''}): choose an empty or new folder, or --replace"
            )
    parent = next(p for p in (out.parent, *out.parent.parents) if p.exists())  # nothing is created here
    try:
        for stale in parent.glob(f".{out.name}.tmp-*") if parent == out.parent else ():
            shutil.rmtree(stale, ignore_errors=True)
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}.probe-", dir=parent))
    except OSError as err:
        raise ValueError(f"out={str(out)!r} is not writable: {err.strerror or err}") from None
    return out


def write_results(
    out: str | os.PathLike, summary: dict, arrays: dict[str, dict[str, np.ndarray]], figures: dict
) -> list[Path]:
    """Write ``summary.json``, each ``arrays[name]`` as ``name.npz`` and each figure as ``name.png``
    into ``out`` atomically (non-finite floats become JSON null), removing the outputs of an earlier run
    there (``prepare_out`` decides whether that is allowed). Returns the paths written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with partial(Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))) as tmp:
        with open(tmp / "summary.json", "w") as f:
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
            if not out.exists() or (out.is_dir() and not any(out.iterdir())):
                os.replace(tmp, out)  # one atomic step
            else:
                if (out / "summary.json").is_file():  # an earlier run's outputs: replaced as a whole
                    for old in out.iterdir():
                        if old.name not in names and old.suffix in OUTPUT_SUFFIXES and old.is_file():
                            old.unlink()
                for name in names:
                    os.replace(tmp / name, out / name)
    return [out / name for name in names]


@contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM while results move into place, so that ``out`` never mixes old and new files;
    a signal that arrived meanwhile is raised again once they are all there."""
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return
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

    def write(self, out: Path, command: str, wall: float) -> None:
        summary = {
            "command": command,
            "inputs": self.inputs,
            "results": self.results,
            "wall_time_s": wall,
            **environment(),
        }
        write_results(out, summary, self.arrays, self.figures)
        files = ["summary.json", *(f"{a}.npz" for a in self.arrays), *(f"{f}.png" for f in self.figures)]
        self.lines.append(f"wrote {out}/ ({', '.join(files)})")
