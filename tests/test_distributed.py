"""Two real processes on JAX's distributed runtime (``popdyn.distributed``, docs/distributed.md) split a basin map's
chunks between them and give the one-process basin map bit for bit, with flow and with GD; process 0 alone writes
the checkpoint, a resumed run recomputes only the missing chunks, and disagreements stop both processes."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

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
from popdyn import sharding
from popdyn.tasks.markov import Canonical

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
prob = Canonical(0.9, 0.9)
grid = popdyn.Grid.square("w", "e", -3.0, 3.0, 12)  # 144 points: 5 chunks of 30
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
    theta0 = {"w": np.full(4, float(process_id)), "e": np.zeros(4)}
    report["disagree"] = errors(lambda: popdyn.gradient_flow(prob, theta0, t1=1.0, chunk_size=2))
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
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
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
    for name in ("p0", "p1"):
        assert "same program on the same inputs" in report[name]["disagree"]
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


def test_one_process_is_the_writer():
    assert distributed.is_writer()


@pytest.mark.slow  # three command-line runs at once: ~40 s on two shared cores
def test_the_command_line_on_two_processes_writes_once_the_one_process_result(tmp_path):
    """``popdyn basins markov … --coordinator --num-processes --process-id``: process 0 alone writes --out, and its
    arrays are the one-process command's bit for bit."""
    cli = "import sys\nfrom popdyn.cli import main\nsys.exit(main())\n"
    argv = [
        "basins",
        "markov",
        "--p",
        "0.9",
        "--q",
        "0.9",
        "--grid",
        "12",
        "--method",
        "gd",
        "--steps",
        "200",
        "--chunk",
        "40",
        "--quiet",
    ]
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
