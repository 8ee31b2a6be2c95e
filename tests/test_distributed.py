"""Two real processes on JAX's distributed runtime (``popdyn.distributed``, docs/distributed.md) split a basin map's
chunks between them and give the one-process basin map bit for bit, with flow and with GD; process 0 alone writes
the checkpoint, a resumed run recomputes only the missing chunks, and disagreements stop both processes. The maps
are of a two-well user model (tests/_tiny_models_d.py): how chunks are shared, written and agreed on is the same for
every problem, and its programs compile in a fraction of a built-in task's time."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _quick_codegen_a import QUICK_CODEGEN

from popdyn import distributed

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 300  # seconds for all processes together; JAX gives up connecting after 300 s on its own

SCRIPT = r"""
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
from popdyn import distributed

process_id, num_processes, coordinator, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
if num_processes > 1:
    distributed.initialize(coordinator, num_processes, process_id)
from pathlib import Path
import numpy as np
import popdyn
from popdyn import _sharding as sharding
from _tiny_models_d import wells

computed = []
place = sharding.place


def counting_place(tree):  # map_chunks places each chunk it computes on this process, once
    computed[-1] += 1
    return place(tree)


def basins(method, **options):
    computed.append(0)
    return popdyn.basin_map(prob, grid, method, steps=300, lr=0.5, chunk_size=30, **options)


def errors(call):
    try:
        call()
    except ValueError as err:
        return str(err)
    return None


sharding.place = counting_place
prob = wells()
grid = popdyn.Grid.square("x", "y", -3.0, 3.0, 12)  # 144 points: 5 chunks of 30
arrays = {}
for method in ("flow", "gd"):
    bm = basins(method)
    arrays |= {f"{method}_labels": bm.labels, f"{method}_status": bm.status, f"{method}_times": bm.times,
               **{f"{method}_final_{k}": np.asarray(v) for k, v in bm.final.items()}}
# a checkpoint per process: only process 0's may fill, and a resumed run must not need the others' files
ck = Path(out).with_name(f"ck-{num_processes}-{process_id}")
basins("flow", checkpoint=ck)
written = sorted(p.name for p in ck.glob("*")) if ck.exists() else []
if distributed.is_writer():
    for i in (1, 3):
        (ck / f"chunk_{i:05d}.npz").unlink()
resumed = basins("flow", checkpoint=ck)
arrays |= {"resumed_labels": resumed.labels, "resumed_times": resumed.times,
           **{f"resumed_final_{k}": np.asarray(v) for k, v in resumed.final.items()}}
report = {"processes": jax.process_count(), "devices": jax.local_device_count(), "computed": computed,
          "written": written}
if num_processes > 1:
    theta0 = {"x": np.full(4, float(process_id)), "y": np.zeros(4)}
    report["disagree"] = errors(lambda: popdyn.gradient_flow(prob, theta0, t1=1.0, chunk_size=2))
    other = wells(1.0 + 0.01 * process_id)  # another problem option on process 1, same starts
    report["other problem"] = errors(lambda: popdyn.basin_map(other, grid, "gd", steps=30, chunk_size=30))
    sizes = popdyn.Grid.square("x", "y", -3.0, 3.0, 12 + 2 * process_id)  # other grids: other chunk counts
    report["other grid"] = errors(lambda: popdyn.basin_map(prob, sizes, "gd", steps=30, chunk_size=30))
    # one input of a user's model run changed on process 1 alone, down to one ulp: every process refuses
    def user(half=0.5, c=0.0):
        return popdyn.Problem.from_loss(
            lambda th, data: half * (th["a"] * th["b"] - 1.0) ** 2 + data["c"] * th["b"] ** 2,
            init={"a": 0.0, "b": 0.0}, data={"c": c})

    starts = {"a": np.linspace(-1.0, 1.0, 8), "b": np.linspace(1.0, -0.5, 8)}
    one_ulp = float(np.nextafter(0.5, 1.0)) if process_id else 0.5
    cases = {"literal": ({"half": one_ulp}, {}), "data leaf": ({"c": 5e-324 * process_id}, {}),
             "lr": ({}, {"lr": 0.1 + 1e-12 * process_id}), "steps": ({}, {"steps": 40 + process_id}),
             "momentum": ({}, {"momentum": 0.5 * process_id}), "noise": ({}, {"noise": 1e-3 * process_id}),
             "chunk": ({}, {"chunk_size": 4 - 2 * process_id}),
             "start": ({}, {"theta0": starts | {"a": starts["a"] + 1e-15 * process_id}})}
    report["perturbed"] = {
        name: errors(lambda made=made, opts=opts: popdyn.gradient_descent(
            user(**made), **({"theta0": starts, "lr": 0.1, "steps": 40, "chunk_size": 4} | opts)))
        for name, (made, opts) in cases.items()}
    if distributed.is_writer():
        (ck / "manifest.json").write_text(json.dumps({"fingerprint": "written for other inputs"}))
    report["refused"] = errors(lambda: basins("flow", checkpoint=ck))
if distributed.is_writer():
    np.savez(out, **arrays)
print(json.dumps(report))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _run_all(tmp_path: Path, runs: dict[str, list[str]], script_text: str = SCRIPT) -> dict[str, tuple[int, str, str]]:
    """Start every run (name → script arguments) at once and wait for all; when one fails, stop the others so a
    partner waiting on it cannot hang. Returns name → (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device per process
    # compile-bound: cheaper code generation (tests/_quick_codegen_a.py), the same in every process compared
    env["XLA_FLAGS"] = QUICK_CODEGEN
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["JAX_PLATFORMS"] = "cpu"
    script = tmp_path / "basins.py"
    script.write_text(script_text)
    procs, logs = {}, {}
    for name, args in runs.items():
        logs[name] = (tmp_path / f"{name}.out", tmp_path / f"{name}.err")
        with open(logs[name][0], "w") as out, open(logs[name][1], "w") as err:
            procs[name] = subprocess.Popen(
                [sys.executable, str(script), *args], env=env, cwd=tmp_path, stdout=out, stderr=err
            )
    deadline = time.monotonic() + TIMEOUT
    try:
        while any(p.poll() is None for p in procs.values()):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs.values()):
                break
            time.sleep(0.2)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
    results = {name: (p.returncode, logs[name][0].read_text(), logs[name][1].read_text()) for name, p in procs.items()}
    if any(code != 0 for code, _, _ in results.values()):
        timed_out = time.monotonic() > deadline
        pytest.fail(
            (f"timed out after {TIMEOUT} s" if timed_out else "a process failed")
            + "".join(
                f"\n--- {name}: exit code {code}, stderr:\n{err[-4000:]}" for name, (code, _, err) in results.items()
            )
        )
    return results


@pytest.mark.slow  # three interpreters each compile flow and GD: ~50 s on two shared cores
def test_two_processes_give_the_one_process_basin_map_bit_for_bit(tmp_path):
    coordinator = f"localhost:{_free_port()}"
    results = _run_all(
        tmp_path,
        {
            "one": ["0", "1", "-", str(tmp_path / "one.npz")],
            "p0": ["0", "2", coordinator, str(tmp_path / "two.npz")],
            "p1": ["1", "2", coordinator, str(tmp_path / "unused.npz")],
        },
    )
    report = {name: json.loads(out.strip().splitlines()[-1]) for name, (_, out, _) in results.items()}
    assert [(r["processes"], r["devices"]) for r in report.values()] == [(1, 1), (2, 1), (2, 1)]
    # 5 chunks per map: one process computes all; two take turns (chunks 0, 2, 4 and 1, 3). The checkpointed
    # run saves all 5 on process 0; its resumption recomputes the 2 removed chunks, one on each process.
    assert report["one"]["computed"] == [5, 5, 5, 2]
    assert report["p0"]["computed"][:4] == [3, 3, 3, 1]
    assert report["p1"]["computed"][:4] == [2, 2, 2, 1]
    chunks = [f"chunk_{i:05d}.npz" for i in range(5)]
    assert report["p0"]["written"] == report["one"]["written"] == chunks + ["manifest.json"]
    assert report["p1"]["written"] == []
    assert not (tmp_path / "unused.npz").exists() and not (tmp_path / "ck-2-1").exists()

    one, two = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert sorted(one.files) == sorted(two.files)
    for k in one.files:
        # times are NaN exactly where a point is unresolved (label −1): equal_nan compares NaN positions
        assert one[k].dtype == two[k].dtype and np.array_equal(one[k], two[k], equal_nan=True), k
        assert one[k].tobytes() == two[k].tobytes(), k  # signed zeros and NaN payloads too
        assert np.array_equal(one[k], one[k.replace("resumed", "flow")], equal_nan=True), k
    assert {-1, 0, 1} <= set(np.unique(one["gd_labels"])) and len(np.unique(one["flow_labels"])) >= 2
    assert np.isnan(one["gd_times"]).any()

    # different initialisations on the two processes, and a checkpoint only process 0 can see is foreign:
    # both processes stop with a ValueError instead of one of them waiting on the other for ever
    # the maps above ran on both processes, so the two interpreters (each with its own random hash seed) computed
    # the same run identities. Another problem option or another grid on one process: the identities differ, and
    # every process refuses before any work (another grid used to abort inside the collective library)
    for name in ("p0", "p1"):
        for case in ("disagree", "other problem", "other grid"):
            assert "the processes were given different runs" in report[name][case], (name, case)
        for case, err in report[name]["perturbed"].items():
            assert err is not None and "the processes were given different runs" in err, (name, case, err)
    assert "different inputs" in report["p0"]["refused"]
    assert "process 0 could not use the checkpoint" in report["p1"]["refused"]


def test_initialize_names_the_bad_parameter_and_its_range():
    for kwargs, words in [
        ({"coordinator": "localhost"}, "coordinator='localhost' is invalid: must be 'HOST:PORT'"),
        ({"coordinator": "localhost:0"}, "port in [1, 65535]"),
        ({"coordinator": ":1234"}, "coordinator=':1234' is invalid"),
        ({"coordinator": 1234}, "coordinator=1234 is invalid"),
        ({"num_processes": 0}, "num_processes=0 is out of range: must be an integer >= 1"),
        ({"num_processes": 2.0}, "num_processes=2.0 is out of range"),
        ({"process_id": -1}, "process_id=-1 is out of range: must be an integer >= 0"),
        ({"num_processes": 2, "process_id": 2}, "process_id=2 is out of range: must be an integer in [0, 1]"),
    ]:
        with pytest.raises(ValueError) as err:
            distributed.initialize(**kwargs)
        assert words in str(err.value), (kwargs, str(err.value))


LEAVING = r"""
import os, sys, time
from popdyn import distributed

process_id, coordinator = int(sys.argv[1]), sys.argv[2]
distributed.initialize(coordinator, 2, process_id)
distributed.leave(20.0)
if process_id == 1:
    time.sleep(1.0)  # descheduled after leaving, while process 0 has already gone
os._exit(0)
"""


def test_processes_that_leave_together_survive_the_coordinator_going_first(tmp_path):
    """``distributed.leave`` as a stopped run calls it: process 0 ends at once after leaving, and process 1 is slow to
    end after leaving. Process 1 must still end by itself, silently: before, process 0 waited only for a key
    process 1 wrote just before ending, so process 0's server could vanish first, and JAX's runtime then ended
    process 1 natively (SIGABRT, "Polled an error from coordination service")."""
    port = _free_port()
    runs = {f"p{i}": [str(i), f"localhost:{port}"] for i in (0, 1)}
    done = _run_all(tmp_path, runs, LEAVING)
    assert {name: (code, err) for name, (code, _, err) in done.items()} == {"p0": (0, ""), "p1": (0, "")}


def test_one_process_is_the_writer():
    assert distributed.is_writer()


@pytest.mark.slow  # three command-line runs at once: ~40 s on two shared cores
def test_the_command_line_on_two_processes_writes_once_the_one_process_result(tmp_path):
    """``popdyn basins MODEL … --coordinator --num-processes --process-id``: process 0 alone writes --out, and its
    arrays are the one-process command's bit for bit (MODEL: the two-well user model of tests/_tiny_models_d.py; the
    GD map of the test above, whose compiled programs each process finds in the test session's compilation cache)."""
    cli = "import sys\nfrom popdyn._cli import main\nsys.exit(main())\n"
    argv = ["basins", "_tiny_models_d:wells", "--grid", "12", "--method", "gd", "--lr", "0.5", "--steps", "300"]
    argv += ["--chunk", "30", "--quiet"]
    port = str(_free_port())
    runs = {"one": [*argv, "--out", str(tmp_path / "one")]}
    runs |= {
        f"p{i}": [
            *argv,
            "--out",
            str(tmp_path / f"p{i}"),
            "--coordinator",
            f"localhost:{port}",
            "--num-processes",
            "2",
            "--process-id",
            str(i),
        ]
        for i in (0, 1)
    }
    _run_all(tmp_path, runs, cli)
    assert not (tmp_path / "p1").exists()
    one, two = (np.load(tmp_path / name / "basins.npz") for name in ("one", "p0"))
    for key in ("labels", "times", "status"):
        assert np.array_equal(one[key], two[key], equal_nan=True), key


# ---- the command line: signals and misuse stop every process with one line ------------------------------------
CLI = [sys.executable, "-m", "popdyn._cli"]


def _start_cli(tmp_path: Path, name: str, argv: list, **environ: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["XLA_FLAGS"] = QUICK_CODEGEN  # as in _run_all
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env |= {"JAX_PLATFORMS": "cpu", "POPDYN_CACHE_DIR": "off", **environ}
    with open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen([*CLI, *map(str, argv)], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)


def _finish_all(tmp_path: Path, procs: dict[str, subprocess.Popen], timeout: float) -> dict[str, tuple[int, list]]:
    """Wait for every process (killing those still running after ``timeout`` s); name → (exit code, stderr lines)."""
    deadline = time.monotonic() + timeout
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return {name: (p.returncode, (tmp_path / f"{name}.err").read_text().splitlines()) for name, p in procs.items()}


def _processes(port: int, count: int, i: int, *more) -> list:
    return ["--coordinator", f"localhost:{port}", "--num-processes", count, "--process-id", i, *more]


@pytest.mark.slow  # two command-line processes, stopped after their first chunk: ~20 s on two shared cores
@pytest.mark.parametrize(
    "sent,codes",
    [
        ({"p0": signal.SIGINT, "p1": signal.SIGTERM}, {"p0": 130, "p1": 143}),
        ({"p1": signal.SIGTERM}, {"p0": 143, "p1": 143}),
    ],
    ids=["each-its-own", "one-stops-all"],
)
def test_signals_stop_every_process_of_a_command_line_run(tmp_path, sent, codes):
    """A signal to each process (as a cluster scheduler cancels a job), or to one of them only: every process stops
    with the one line and exit code of the signal, nothing is written to --out, the finished chunks stay. Before,
    ``jax.distributed.initialize`` replaced popdyn's SIGTERM handler by JAX's preemption notifier (a cancelled run
    went on computing, wrote --out and exited 0); then, when process 0 left first, JAX's runtime could abort
    process 1 (SIGABRT) before its handler ran; and a process that was not signalled waited for the runtime's
    heartbeat timeout (100 s) before it ended natively."""
    # the two-well user model of tests/_tiny_models_d.py: 500 000 GD steps make a chunk of 32 starts take ~0.15 s
    # on a CPU core, time enough to signal the processes after their first chunk and before their last
    argv = ["basins", "_tiny_models_d:wells", "--grid", "16", "--chunk", "32", "--method", "gd"]
    argv += ["--steps", "500000", "--quiet", "--out", "out", "--checkpoint", "ck"]
    port = _free_port()
    procs = {f"p{i}": _start_cli(tmp_path, f"p{i}", [*argv, *_processes(port, 2, i)]) for i in (0, 1)}
    deadline = time.monotonic() + 240
    while not (tmp_path / "ck" / "chunk_00000.npz").exists() and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs.values()), _finish_all(tmp_path, procs, 1)
        time.sleep(0.01)
    started = time.monotonic()
    for name, signum in sent.items():
        procs[name].send_signal(signum)
    done = _finish_all(tmp_path, procs, 60)
    assert time.monotonic() - started < 30
    resume = "popdyn: interrupted; finished chunks are in ck, run the same command again to resume"
    assert done == {name: (code, [resume]) for name, code in codes.items()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "p0.err", "p1.err"]  # no --out, no lock file


@pytest.mark.slow  # seven command-line processes at once: ~25 s on two shared cores
def test_misuse_of_several_processes_is_one_line_and_exit_2_on_every_process(tmp_path):
    """Before: another --num-processes was ignored, another grid aborted inside the collective library, a taken
    coordinator port gave a traceback and a 300 s wait, and two processes 0 waited, then aborted natively."""
    argv = ["basins", "markov", "--grid", "4", "--method", "gd", "--steps", "5", "--quiet"]
    ports = [_free_port() for _ in range(4)]
    runs = {
        "count-0": [*argv, *_processes(ports[0], 2, 0)],
        "count-1": [*argv, *_processes(ports[0], 3, 1)],
        "grid-0": [*argv, *_processes(ports[1], 2, 0)],
        "grid-1": [*argv, *_processes(ports[1], 2, 1, "--grid", "6")],
        "twice-a": [*argv, *_processes(ports[2], 2, 0)],
        "twice-b": [*argv, *_processes(ports[2], 2, 0)],
        "taken-0": [*argv, *_processes(ports[3], 2, 0)],
    }
    with socket.socket() as server:  # another server on the coordinator's port
        server.bind(("localhost", ports[3]))
        server.listen()
        started = time.monotonic()
        procs = {name: _start_cli(tmp_path, name, a, POPDYN_CONNECT_TIMEOUT="10") for name, a in runs.items()}
        done = _finish_all(tmp_path, procs, 120)
    assert time.monotonic() - started < 100
    for name, (code, lines) in done.items():
        assert code == 2 and len(lines) == 1 and lines[0].startswith("popdyn: error: "), (name, code, lines)
    expect = {
        "count": "num_processes is 2 on process 0 but 3 on process 1",
        "grid": "grid is 4 on process 0 but 6 on process 1",
        "taken": f"port {ports[3]} is taken on this machine",
    }
    for name, words in expect.items():
        assert all(words in done[k][1][0] for k in done if k.startswith(name)), (name, done)
    twice = sorted(done[k][1][0] for k in ("twice-a", "twice-b"))
    assert "another process 0 already serves port" in " ".join(twice)
    assert "did not all join within POPDYN_CONNECT_TIMEOUT=10 s" in " ".join(twice)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{name}.err" for name in runs)
