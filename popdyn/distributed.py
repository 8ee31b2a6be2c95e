"""Several processes on JAX's own distributed runtime (docs/distributed.md).

Every process runs the same program on the same inputs; ``popdyn.batching.map_chunks`` deals whole chunks of a
batch out to the processes and gathers their outputs back to every process, and only process 0 writes files.
"""

from __future__ import annotations

import jax

from popdyn import _validate

PORT_RANGE = (1, 65535)


def _check_coordinator(coordinator: str) -> None:
    """ValueError unless ``coordinator`` is ``HOST:PORT`` with a non-empty host and a port in [1, 65535]."""
    host, sep, port = coordinator.rpartition(":") if isinstance(coordinator, str) else ("", "", "")
    if not (sep and host and port.isdigit() and PORT_RANGE[0] <= int(port) <= PORT_RANGE[1]):
        raise ValueError(
            f"coordinator={coordinator!r} is invalid: must be 'HOST:PORT' with a port in "
            f"[{PORT_RANGE[0]}, {PORT_RANGE[1]}], e.g. 'localhost:1234' (docs/distributed.md)"
        )


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None) -> None:
    """Join this process to a run of ``num_processes`` processes through ``jax.distributed.initialize``.

    With all three arguments None, JAX reads them from a cluster scheduler's environment (SLURM, Open MPI, Cloud
    TPU). Call it first, before anything that touches JAX (a computation, ``jax.devices()``): JAX raises a
    RuntimeError otherwise, and also when it is called twice. See docs/distributed.md.
    """
    if coordinator is not None:
        _check_coordinator(coordinator)
    if num_processes is not None:
        num_processes = _validate.int_at_least("num_processes", num_processes, 1)
    if process_id is not None:
        process_id = _validate.int_at_least("process_id", process_id, 0)
        if num_processes is not None and process_id >= num_processes:
            raise ValueError(
                f"process_id={process_id!r} is out of range: must be an integer in "
                f"[0, {num_processes - 1}] for num_processes={num_processes}"
            )
    try:
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
    except ValueError as err:  # JAX found no cluster environment to fill in what was left None
        raise ValueError(
            f"cannot start a distributed run ({err}): pass coordinator ('HOST:PORT'), num_processes "
            "and process_id, or launch under a cluster scheduler such as SLURM "
            "(docs/distributed.md)"
        ) from err


def is_writer() -> bool:
    """True on process 0, the one process that writes outputs and checkpoints; True in a one-process run too
    (docs/distributed.md)."""
    return jax.process_index() == 0
