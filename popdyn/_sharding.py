"""Spreading a chunk of initialisations over this process's JAX devices (docs/architecture.md, "Scale").

The batch axis is split with JAX's own SPMD partitioning: a 1-D mesh ``Mesh(jax.local_devices(), ("batch",))`` and
``NamedSharding(mesh, PartitionSpec("batch"))`` on the leading axis of every leaf, so one jitted call runs
each device's share of the initialisations and no code changes between one device and many. Chunk sizes
are rounded up to a multiple of the device count so the split is even.

Several processes (``popdyn.distributed.initialize``, docs/distributed.md): each process computes whole chunks on
its own devices, so a chunk has the same shape as in a one-process run with as many devices, and
``from_every_process`` hands every process the outputs of all of them.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "batch"


def device_count() -> int:
    """Number of devices a chunk is spread over: this process's ``jax.local_devices()``."""
    return jax.local_device_count()


def batch_sharding() -> NamedSharding:
    """Leading axis split over a 1-D mesh of this process's devices; the other axes replicated."""
    return NamedSharding(Mesh(np.array(jax.local_devices()), (AXIS,)), PartitionSpec(AXIS))


def padded_size(size: int) -> int:
    """``size`` rounded up to a multiple of the device count (unchanged on one device)."""
    d = device_count()
    return -(-size // d) * d


def place(tree):
    """Every leaf (leading axis divisible by the device count) split over this process's devices along that axis.

    On one device the tree is returned as is, so single-device runs are exactly what they were before
    sharding existed. Leaves are built shard by shard from host data (``make_array_from_callback``).
    """
    if device_count() == 1:
        return tree
    sharding = batch_sharding()

    def put(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

    return jax.tree_util.tree_map(put, tree)


def gather(tree):
    """Every leaf as a NumPy array holding the whole chunk (its shards come back from this process's devices)."""
    return jax.tree_util.tree_map(np.asarray, tree)


def from_every_process(tree):
    """Every process's ``tree`` (NumPy leaves of equal shapes and dtypes on all processes), stacked along a new
    leading axis in process order, on every process (docs/distributed.md); in a one-process run, ``tree`` with
    that axis added. The leaves are copied, never summed, so every bit (signed zeros, NaN payloads) arrives as
    sent."""
    if jax.process_count() == 1:
        return jax.tree_util.tree_map(lambda x: np.asarray(x)[None], tree)
    return multihost_utils.process_allgather(tree, tiled=False)
