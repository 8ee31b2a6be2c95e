"""Spreading a chunk of initialisations over every JAX device (DESIGN.md, "Scale").

The batch axis is split with JAX's own SPMD partitioning: a 1-D mesh ``Mesh(jax.devices(), ("batch",))`` and
``NamedSharding(mesh, PartitionSpec("batch"))`` on the leading axis of every leaf, so one jitted call runs
each device's share of the initialisations and no code changes between one device and many. Chunk sizes
are rounded up to a multiple of the device count so the split is even.

Several hosts: call ``jax.distributed.initialize()`` before popdyn computes anything; ``jax.devices()``
then lists the devices of every host and the mesh spans them all. Every process must run the same
program on the same inputs (the usual multi-controller JAX contract); each places only its own shards
and results are gathered back on every process.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "batch"


def device_count() -> int:
    """Number of devices the batch is spread over: all of ``jax.devices()``, on every host."""
    return len(jax.devices())


def batch_sharding() -> NamedSharding:
    """Leading axis split over a 1-D mesh of all devices; the other axes replicated."""
    return NamedSharding(Mesh(np.array(jax.devices()), (AXIS,)), PartitionSpec(AXIS))


def padded_size(size: int) -> int:
    """``size`` rounded up to a multiple of the device count (unchanged on one device)."""
    d = device_count()
    return -(-size // d) * d


def place(tree):
    """Every leaf (leading axis divisible by the device count) split over the devices along that axis.

    On one device the tree is returned as is, so single-device runs are exactly what they were before
    sharding existed. Leaves are built shard by shard from host data (``make_array_from_callback``), which
    also works when some devices belong to other hosts.
    """
    if device_count() == 1:
        return tree
    sharding = batch_sharding()

    def put(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

    return jax.tree_util.tree_map(put, tree)


def gather(tree):
    """Every leaf as a NumPy array holding the whole batch, on every process (all-gathered across hosts)."""
    if jax.process_count() > 1:
        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree_util.tree_map(np.asarray, tree)
