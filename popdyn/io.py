"""Results on disk: ``summary.json`` (inputs, versions, device, results, wall time), ``.npz`` arrays and
``.png`` figures, written atomically: everything goes to a temporary folder first and is moved into
``--out`` only when complete, so an error never leaves partial output behind."""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

PACKAGES = ("popdyn", "jax", "jaxlib", "diffrax", "equinox", "optax", "numpy")


def environment() -> dict:
    """Versions of popdyn and its numerical stack, the JAX devices and the default float dtype."""
    import jax
    import jax.numpy as jnp

    versions = {}
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


def write_results(out: str | os.PathLike, summary: dict, arrays: dict[str, dict[str, np.ndarray]],
                  figures: dict) -> list[Path]:
    """Write ``summary.json``, each ``arrays[name]`` as ``name.npz`` and each figure as ``name.png``
    into ``out`` atomically (non-finite floats become JSON null). Returns the paths written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        with open(tmp / "summary.json", "w") as f:
            json.dump(_jsonable(summary), f, indent=2, allow_nan=False)
        for name, arrs in arrays.items():
            np.savez_compressed(tmp / f"{name}.npz", **arrs)
        for name, fig in figures.items():
            fig.savefig(tmp / f"{name}.png", dpi=120, bbox_inches="tight")
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for item in sorted(tmp.iterdir()):
            os.replace(item, out / item.name)
            written.append(out / item.name)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Result:
    """What one job produced: the summary's ``results``, arrays, figures and printed lines."""

    inputs: dict
    results: dict
    arrays: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    lines: list = field(default_factory=list)

    def write(self, out: Path, command: str, wall: float) -> None:
        summary = {"command": command, "inputs": self.inputs, "results": self.results,
                   "wall_time_s": wall, **environment()}
        write_results(out, summary, self.arrays, self.figures)
        files = ["summary.json", *(f"{a}.npz" for a in self.arrays), *(f"{f}.png" for f in self.figures)]
        self.lines.append(f"wrote {out}/ ({', '.join(files)})")
