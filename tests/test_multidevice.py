"""Batched flow and GD spread over several devices (JAX SPMD, ``popdyn._sharding``) give the same basin map,
bit for bit, as one device. The devices are 4 forced CPU devices, which XLA only creates when
``XLA_FLAGS`` is set before jax is imported, hence the subprocesses. The map is of a two-well user model
(tests/_tiny_models_d.py): what is checked is how chunks are placed and gathered, which is the same for every
problem, and its programs compile in a fraction of a built-in task's time."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import PartitionSpec

from popdyn import _sharding as sharding

REPO = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from jax.sharding import PartitionSpec
import popdyn
from popdyn import _sharding as sharding
from _tiny_models_d import wells

placed, computed = [], []
place, gather = sharding.place, sharding.gather


def recording_place(tree):  # the chunk as map_chunks hands it to the jitted batch function
    out = place(tree)
    placed.extend([len(x.sharding.device_set), [s.data.shape[0] for s in x.addressable_shards]]
                  for x in jax.tree_util.tree_leaves(out))
    return out


def recording_gather(tree):  # the batch function's outputs, before they come back to the host
    computed.extend(len(x.sharding.device_set) for x in jax.tree_util.tree_leaves(tree))
    return gather(tree)


sharding.place, sharding.gather = recording_place, recording_gather
prob = wells()
grid = popdyn.Grid.square("x", "y", -3.0, 3.0, 12)
arrays = {}
for method in ("flow", "gd"):
    bm = popdyn.basin_map(prob, grid, method, steps=300, lr=0.5, chunk_size=30)
    arrays |= {f"{method}_labels": bm.labels, f"{method}_status": bm.status, f"{method}_times": bm.times,
               **{f"{method}_final_{k}": v for k, v in bm.final.items()}}
np.savez(sys.argv[1], **arrays)
print(json.dumps({"devices": len(jax.devices()), "placed": placed, "computed": computed,
                  "chunk": sharding.padded_size(30)}))
"""


def _start(tmp_path: Path, devices: int) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("XLA_FLAGS", None)
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    script = tmp_path / "basins.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"basins-{devices}.npz"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out


@pytest.mark.slow
def test_four_devices_give_the_one_device_basin_map_bit_for_bit(tmp_path):
    runs = {d: _start(tmp_path, d) for d in (1, 4)}  # concurrently: each is a fresh interpreter
    info = {}
    try:
        for d, (proc, _) in runs.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr
            info[d] = json.loads(stdout.strip().splitlines()[-1])
    finally:  # a timeout or a failed run leaves no process behind
        for proc, _ in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    one, four = info[1], info[4]
    assert one["devices"] == 1 and one["chunk"] == 30
    assert all(n == 1 for n in one["computed"])
    assert four["devices"] == 4
    assert four["chunk"] == 32  # 30 rounded up to a multiple of the device count
    # 144 points in chunks of 32: 5 chunks per method, each leaf split 8 + 8 + 8 + 8 over the 4 devices
    assert len(four["placed"]) == 5 * 2 + 5 * 4  # leaves per chunk: flow x, y; gd x, y, lr, PRNG key
    assert all(p == [4, [8, 8, 8, 8]] for p in four["placed"])
    assert all(n == 4 for n in four["computed"])  # outputs stayed sharded: the computation ran on 4 devices

    a, b = np.load(runs[1][1]), np.load(runs[4][1])
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        # times are NaN exactly where a point is unresolved (label −1), hence equal_nan there
        assert np.array_equal(a[k], b[k], equal_nan=k.endswith("_times")), k
    assert len(np.unique(a["flow_labels"])) >= 2  # a real map: both basins present


def test_one_device_places_nothing():
    """Single device: chunks go to the jitted function untouched, so results are exactly as before."""
    tree = {"e": np.arange(6.0)}
    assert sharding.device_count() == 1
    assert sharding.place(tree) is tree
    assert sharding.padded_size(7) == 7
    assert sharding.batch_sharding().spec == PartitionSpec("batch")
