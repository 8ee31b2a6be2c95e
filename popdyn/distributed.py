"""Several processes on JAX's own distributed runtime (docs/distributed.md).

Every process runs the same program on the same inputs; ``popdyn._batching.map_chunks`` deals whole chunks of a
batch out to the processes and gathers their outputs back to every process, and only process 0 writes files.
"""

from __future__ import annotations

import atexit
import json
import socket
import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path

import jax
from jax._src import distributed as _runtime

from popdyn import _validate
from popdyn.io import exclusive

PORT_RANGE = (1, 65535)


def _check_coordinator(coordinator: str) -> None:
    """ValueError unless ``coordinator`` is ``HOST:PORT`` with a non-empty host and a port in [1, 65535]."""
    host, sep, port = coordinator.rpartition(":") if isinstance(coordinator, str) else ("", "", "")
    if not (sep and host and port.isdigit() and PORT_RANGE[0] <= int(port) <= PORT_RANGE[1]):
        raise ValueError(
            f"coordinator={coordinator!r} is invalid: must be 'HOST:PORT' with a port in "
            f"[{PORT_RANGE[0]}, {PORT_RANGE[1]}], e.g. 'localhost:1234' (docs/distributed.md)"
        )


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    timeout_s: int = 300,
) -> None:
    """Join this process to a run of ``num_processes`` processes through ``jax.distributed.initialize``, waiting
    at most ``timeout_s`` seconds for the others (JAX's runtime then ends the process itself).

    With all three arguments None, JAX reads them from a cluster scheduler's environment (SLURM, Open MPI, Cloud
    TPU). Call it first, before anything that touches JAX (a computation, ``jax.devices()``): JAX raises a
    RuntimeError otherwise, and also when it is called twice. See docs/distributed.md.
    """
    timeout_s = _validate.int_at_least("timeout_s", timeout_s, 1)
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
    if process_id == 0 and coordinator is not None:
        _serve(coordinator)
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout_s,
        )
    except ValueError as err:  # JAX found no cluster environment to fill in what was left None
        raise ValueError(
            f"cannot start a distributed run ({err}): pass coordinator ('HOST:PORT'), num_processes "
            "and process_id, or launch under a cluster scheduler such as SLURM "
            "(docs/distributed.md)"
        ) from err
    except jax.errors.JaxRuntimeError as err:  # e.g. the coordinator's port taken meanwhile
        raise ValueError(f"cannot start a distributed run on {coordinator}: {str(err).splitlines()[0]}") from None


def _serve(coordinator: str) -> None:
    """On process 0, before JAX's runtime serves ``coordinator``'s port: ValueError unless this process is the
    only process 0 on this machine for that port (a lock file in the temporary folder) and the port is free.
    JAX's server shares a port with another (SO_REUSEPORT), and a second process 0 then ends every process
    natively instead."""
    port = int(coordinator.rpartition(":")[2])
    held = ExitStack()
    held.enter_context(
        exclusive(
            Path(tempfile.gettempdir()) / f"popdyn-coordinator-{port}.lock",
            f"process_id=0 is taken: another process 0 already serves port {port} on this machine; give each "
            "process its own --process-id in [0, N-1]",
        )
    )
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: a closed run's port is free
        try:
            probe.bind(("", port))
        except OSError as err:
            held.close()
            raise ValueError(
                f"coordinator={coordinator!r} is unusable: port {port} is taken on this machine "
                f"({err.strerror or err}); choose a free port"
            ) from None
    atexit.register(held.close)  # held for the life of the process


def preflight(settings: dict[str, str], refused: ValueError | None = None, timeout_s: int = 300) -> None:
    """Check, right after ``initialize`` and before any work, that every process of the run was given the same
    ``settings`` (option → value) and the same number of processes, and that none refused its inputs
    (``refused``: this process's error, re-raised here once the others know). Every process exchanges these
    through JAX's key-value store, waiting at most ``timeout_s`` seconds for each; on any disagreement every
    process raises the same ValueError, naming the option and the processes (docs/distributed.md)."""
    from jax._src import distributed as runtime

    client, me = runtime.global_state.client, runtime.global_state.process_id
    if client is None:
        raise RuntimeError("preflight runs after initialize")
    mine = {"settings": settings, "count": runtime.global_state.num_processes, "refused": refused and str(refused)}
    client.key_value_set(f"popdyn/preflight/{me}", json.dumps(mine))

    def read(i: int) -> dict:
        try:
            return json.loads(client.blocking_key_value_get(f"popdyn/preflight/{i}", timeout_s * 1000))
        except jax.errors.JaxRuntimeError:
            raise ValueError(f"process {i} did not answer within {timeout_s} s (docs/distributed.md)") from None

    first = read(0)
    every = [first, *(read(i) for i in range(1, first["count"]))]
    for i, theirs in enumerate(every):
        if theirs["count"] != first["count"]:
            raise ValueError(
                f"num_processes is {first['count']} on process 0 but {theirs['count']} on process {i}: "
                "every process must be given the same"
            )
        for key in sorted(set(first["settings"]) | set(theirs["settings"])):
            a, b = first["settings"].get(key), theirs["settings"].get(key)
            if a != b:
                raise ValueError(
                    f"{key} is {a} on process 0 but {b} on process {i}: every process must run the same "
                    "command on the same inputs (docs/distributed.md)"
                )
    if refused is not None:
        raise refused
    stopped = next(((i, theirs["refused"]) for i, theirs in enumerate(every) if theirs["refused"]), None)
    if stopped:
        raise ValueError(f"process {stopped[0]} stopped: {stopped[1]}")


def _client():
    """(JAX's distributed client, this process's number); the client is None outside a run of several processes.
    Imports nothing: signal handlers call it."""
    return _runtime.global_state.client, _runtime.global_state.process_id


def announce_stop(signum: int) -> None:
    """Tell the other processes of the run that this one stops on signal ``signum`` (``stop_signal`` reads it);
    best effort: nothing happens when the runtime cannot be reached any more."""
    client, me = _client()
    if client is None:
        return
    try:
        client.key_value_set(f"popdyn/stop/{me}", str(int(signum)), allow_overwrite=True)
    except jax.errors.JaxRuntimeError:
        return


def stop_signal() -> int | None:
    """The signal another process of the run announced it stops on (``announce_stop``), or None: none did, or the
    runtime cannot answer."""
    client, me = _client()
    if client is None:
        return None
    try:
        entries = client.key_value_dir_get("popdyn/stop/")
    except jax.errors.JaxRuntimeError:
        return None
    others = [int(value) for key, value in entries if key.rstrip("/").rpartition("/")[2] != str(me)]
    return others[0] if others else None


def leave(timeout_s: float) -> None:
    """Leave the run as JAX's runtime intends (``jax.distributed.shutdown``), waiting at most ``timeout_s`` seconds.

    Each process's client waits at the runtime's shutdown barrier until every process has called it, then stops
    polling the coordinator for errors; process 0 then stops the service it runs for the others. A process that
    merely ended would let its peers' pollers fail first, and JAX's runtime ends such a process natively (SIGABRT,
    a stack trace) before popdyn's handler could. The shutdown runs in a thread of its own so that a process which
    never arrives delays the others by ``timeout_s`` at most; a second call waits for the first. Imports nothing:
    signal handlers call it."""
    global _LEAVING
    if _runtime.global_state.client is None:
        return
    with _LEAVING_LOCK:
        if _LEAVING is None:
            _LEAVING = threading.Thread(target=_shutdown, daemon=True, name="popdyn-leave")
            _LEAVING.start()
    _LEAVING.join(timeout_s)


_LEAVING: threading.Thread | None = None
_LEAVING_LOCK = threading.Lock()


def _shutdown() -> None:
    """``jax.distributed.shutdown`` (the client, then process 0's service); best effort: a runtime that has already
    failed has nothing left to shut down."""
    try:
        _runtime.global_state.shutdown()
    except jax.errors.JaxRuntimeError:
        return


def process_id() -> int:
    """This process's number in the run (0 in a one-process run), as ``initialize`` set it: unlike
    ``jax.process_index()`` it starts no JAX backend, which waits for every process."""
    from jax._src import distributed as runtime

    return runtime.global_state.process_id


def is_writer() -> bool:
    """True on process 0, the one process that writes outputs and checkpoints; True in a one-process run too
    (docs/distributed.md)."""
    return jax.process_index() == 0
