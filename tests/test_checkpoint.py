"""Resumable long runs: ``basin_map(checkpoint=DIR)`` / ``popdyn basins --checkpoint DIR`` save each finished
chunk, resume after Ctrl-C or SIGTERM with the uninterrupted run's results bit for bit, and refuse a
directory written for other inputs or holding a corrupt chunk."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from _props import examples
from _tiny_models_d import wells
from hypothesis import given, settings
from hypothesis import strategies as st

import popdyn
from popdyn import _checkpoint as checkpoint
from popdyn.dynamics import _descent as descent

REPO = Path(__file__).resolve().parents[1]

# the two-well user model of tests/_tiny_models_d.py (what is checked, saving and resuming chunks on a signal, is
# the same for every problem, and its programs compile in a fraction of a built-in task's time): 256 points in 8
# chunks of 32; 500 000 GD steps make a chunk take ~0.15 s on a CPU core, and the labelling and figure after the
# last chunk take a second more: time enough to stop a run mid-way
ARGV = [
    "basins",
    "_tiny_models_d:wells",
    "--grid",
    "16",
    "--chunk",
    "32",
    "--method",
    "gd",
    "--steps",
    "500000",
    "--quiet",
]
SIGNALS = {"SIGINT": (signal.SIGINT, 130), "SIGTERM": (signal.SIGTERM, 143)}


def _popen(argv: list, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen(
        [sys.executable, "-m", "popdyn._cli", *map(str, argv)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
    stdout, stderr = proc.communicate(timeout=timeout)
    return proc.returncode, stdout, stderr


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """An uninterrupted run, then per signal: a run stopped by it after its first chunk, then the same command
    again. The uninterrupted run goes first, alone: the others, the same command, find its compiled programs in the
    test session's compilation cache instead of compiling them at the same time. The stopped runs run concurrently
    from this (main) thread, and so do the resumed ones."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored in this process, so its children would ignore Ctrl-C too")
    base = tmp_path_factory.mktemp("checkpoint-cli")
    argv = {name: ARGV + ["--checkpoint", base / f"ck-{name}", "--out", base / f"out-{name}"] for name in SIGNALS}
    code, _, stderr = _finish(_popen(ARGV + ["--out", base / "reference"], base), 300)
    assert code == 0, stderr
    running = {name: _popen(argv[name], base) for name in SIGNALS}
    waiting, deadline = dict(running), time.monotonic() + 240
    while waiting and time.monotonic() < deadline:
        for name, proc in list(waiting.items()):
            if (base / f"ck-{name}" / "chunk_00000.npz").exists() or proc.poll() is not None:
                if proc.poll() is None:
                    proc.send_signal(SIGNALS[name][0])
                del waiting[name]
        time.sleep(0.01)
    stopped = {name: _finish(proc, 120) for name, proc in running.items()}
    chunks = {name: sorted(p.name for p in (base / f"ck-{name}").iterdir()) for name in SIGNALS}
    outputs = {name: sorted(p.name for p in base.iterdir() if "out-" + name in p.name) for name in SIGNALS}
    resumed = {name: _popen(argv[name], base) for name in SIGNALS}
    resumed = {name: _finish(proc, 300) for name, proc in resumed.items()}
    return base, stopped, chunks, outputs, resumed


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIGNALS))
def test_signal_stops_cleanly_and_keeps_finished_chunks(cli, name):
    base, stopped, chunks, outputs, _ = cli
    code, stdout, stderr = stopped[name]
    assert code == SIGNALS[name][1], stderr
    assert "Traceback" not in stderr and stdout == ""
    assert stderr.splitlines() == [
        f"popdyn: interrupted; finished chunks are in {base / f'ck-{name}'}, run the same command again to resume"
    ]
    assert outputs[name] == []  # neither --out nor a temporary folder for it
    assert chunks[name][-1] == "manifest.json"
    assert 1 <= len(chunks[name][:-1]) < 8, chunks[name]  # stopped mid-run, with a chunk to resume from
    assert all(p.startswith("chunk_") and p.endswith(".npz") for p in chunks[name][:-1])  # no temporary file


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIGNALS))
def test_resumed_run_equals_the_uninterrupted_one_bit_for_bit(cli, name):
    base, *_, resumed = cli
    code, _, stderr = resumed[name]
    assert code == 0, stderr
    assert len(list((base / f"ck-{name}").glob("chunk_*.npz"))) == 8
    ref, got = np.load(base / "reference" / "basins.npz"), np.load(base / f"out-{name}" / "basins.npz")
    assert sorted(ref.files) == sorted(got.files)
    for k in ref.files:
        assert np.array_equal(ref[k], got[k], equal_nan=k == "times"), k  # times: NaN where unresolved
    assert len(np.unique(ref["labels"])) >= 2


# ---- the API: basin_map(checkpoint=…) -----------------------------------------------------------------
# the two-well user model of tests/_tiny_models_d.py: saving, checking and resuming chunks is the same for every
# problem, and its programs compile in a fraction of a built-in task's time
PROB = wells()
GRID = popdyn.Grid.square("x", "y", -3.0, 3.0, 6)  # 36 points: 5 chunks of 8, the last one padded
SETTINGS = {"method": "gd", "lr": 0.5, "steps": 50, "chunk_size": 8}


def _same(a: popdyn.BasinMap, b: popdyn.BasinMap) -> None:
    assert a.attractors == b.attractors
    for x, y in [
        (a.labels, b.labels),
        (a.status, b.status),
        (a.final["x"], b.final["x"]),
        (a.final["y"], b.final["y"]),
    ]:
        assert np.array_equal(x, y)
    assert np.array_equal(a.times, b.times, equal_nan=True)


@pytest.fixture
def done(tmp_path):
    """A finished checkpoint of the small GD map, and the map."""
    ck = tmp_path / "ck"
    return ck, popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)


@pytest.mark.slow
def test_checkpoint_layout_and_result(done):
    ck, bm = done
    assert sorted(p.name for p in ck.iterdir()) == [f"chunk_{i:05d}.npz" for i in range(5)] + ["manifest.json"]
    manifest = json.loads((ck / "manifest.json").read_text())
    assert len(manifest["fingerprint"]) == 64
    assert (manifest["n_points"], manifest["chunk_size"], manifest["n_chunks"]) == (36, 8, 5)
    assert manifest["versions"]["popdyn"] is not None
    _same(bm, popdyn.basin_map(PROB, GRID, **SETTINGS))  # checkpointing does not change the result


def test_complete_checkpoint_computes_nothing(done, monkeypatch):
    ck, bm = done
    real = descent._descend_batch

    def traced_only(prob, batch, *args):  # shapes may be traced, but no chunk may run
        if not isinstance(jax.tree_util.tree_leaves(batch)[0], jax.core.Tracer):
            raise AssertionError("a chunk was computed although the checkpoint holds every chunk")
        return real(prob, batch, *args)

    monkeypatch.setattr(descent, "_descend_batch", traced_only)
    _same(bm, popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS))


def test_missing_chunks_are_recomputed_bit_for_bit(done, capsys):
    ck, bm = done
    (ck / "chunk_00002.npz").unlink()
    _same(bm, popdyn.basin_map(PROB, GRID, checkpoint=ck, progress=True, **SETTINGS))
    assert "4/5" in capsys.readouterr().err  # the progress bar counts resumed chunks as done
    assert (ck / "chunk_00002.npz").exists()


def test_a_run_stopped_between_a_digest_and_its_chunk_resumes(done, tmp_path, monkeypatch):
    """A signal ends the process at once (os._exit): it may fall between recording a chunk's digest and writing
    the chunk. The rerun recomputes that chunk instead of refusing a chunk without a digest."""
    _, bm = done
    ck, real = tmp_path / "stopped", checkpoint._atomic_write

    def stop_at_chunk_2(path, write):
        if path.name == "chunk_00002.npz":
            raise KeyboardInterrupt
        real(path, write)

    monkeypatch.setattr(checkpoint, "_atomic_write", stop_at_chunk_2)
    with pytest.raises(KeyboardInterrupt):
        popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)
    monkeypatch.setattr(checkpoint, "_atomic_write", real)
    assert not (ck / "chunk_00002.npz").exists()
    _same(bm, popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS))


@pytest.mark.slow
@pytest.mark.parametrize("change", ["c", "grid", "steps", "method", "chunk_size"])
def test_a_checkpoint_for_other_inputs_is_refused(done, change):
    ck, _ = done
    prob, grid, settings = PROB, GRID, dict(SETTINGS)
    if change == "c":
        prob = wells(1.01)
    elif change == "grid":
        grid = popdyn.Grid.square("x", "y", -3.0, 3.5, 6)
    elif change == "method":
        settings["method"] = "flow"
    else:
        settings[change] += 1
    with pytest.raises(ValueError, match=r"checkpoint .*ck holds chunks for different inputs \(fingerprint .*≠"):
        popdyn.basin_map(prob, grid, checkpoint=ck, **settings)
    assert len(list(ck.glob("chunk_*.npz"))) == 5  # nothing overwritten or mixed in


@pytest.mark.parametrize("damage", ["truncated", "wrong arrays"])
def test_a_corrupt_chunk_is_refused_by_name(done, damage):
    ck, _ = done
    path = ck / "chunk_00003.npz"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        np.savez(path, leaf_0=np.zeros(3))
    with pytest.raises(ValueError, match="chunk_00003.npz"):
        popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)


def test_chunks_without_a_manifest_are_refused(done):
    ck, _ = done
    (ck / "manifest.json").unlink()
    with pytest.raises(ValueError, match="no manifest.json"):
        popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)


def _other_run(tmp_path) -> Path:
    """A finished checkpoint of the same grid at another c (chunks of the same shapes, other contents)."""
    ck = tmp_path / "other"
    popdyn.basin_map(wells(1.25), GRID, checkpoint=ck, **SETTINGS)
    return ck


def _edit(path: Path) -> None:
    """Rewrite a chunk as a valid archive of the same arrays with its first output NaN-filled."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    first = next(k for k in sorted(arrays) if k.startswith("leaf_") and arrays[k].dtype.kind == "f")
    arrays[first] = np.full_like(arrays[first], np.nan)
    np.savez(path, **arrays)


@pytest.mark.parametrize("fault", ["copied from another run", "moved to the next index", "edited"])
def test_a_chunk_that_is_not_this_runs_is_refused_by_name(done, tmp_path, fault):
    ck, _ = done
    target = ck / "chunk_00002.npz"
    if fault == "copied from another run":
        target.write_bytes((_other_run(tmp_path) / "chunk_00002.npz").read_bytes())
    elif fault == "moved to the next index":
        target.write_bytes((ck / "chunk_00001.npz").read_bytes())
    else:
        _edit(target)
    with pytest.raises(ValueError, match="chunk_00002.npz"):
        popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)


def test_an_oversize_chunk_is_refused_from_its_headers_before_loading(done):
    ck, _ = done
    path = ck / "chunk_00001.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["leaf_0"] = np.zeros((4_000_000,) + arrays["leaf_0"].shape[1:], arrays["leaf_0"].dtype)  # compresses to KB
    np.savez_compressed(path, **arrays)
    with pytest.raises(ValueError, match="chunk_00001.npz does not hold this run's outputs"):
        popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)


@pytest.mark.slow
@settings(max_examples=examples(12), deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["swap", "copy", "other", "edit", "delete"]), st.integers(0, 4), st.integers(0, 4)),
        min_size=1,
        max_size=3,
    )
)
def test_a_resumed_run_is_bit_identical_or_refused(tmp_path_factory, ops):
    """Random swaps, copies, foreign chunks, edits and deletions of chunk files: resuming either refuses, naming a
    chunk, or gives the uninterrupted run's map bit for bit."""
    base = tmp_path_factory.mktemp("random")
    ck = base / "ck"
    reference = popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)
    other = _other_run(base) if any(op == "other" for op, _, _ in ops) else None
    for op, i, j in ops:
        a, b = ck / f"chunk_{i:05d}.npz", ck / f"chunk_{j:05d}.npz"
        if not a.exists():
            continue
        if op == "swap" and b.exists():
            ta, tb = a.read_bytes(), b.read_bytes()
            a.write_bytes(tb), b.write_bytes(ta)
        elif op == "copy":
            b.write_bytes(a.read_bytes())
        elif op == "other":
            a.write_bytes((other / a.name).read_bytes())
        elif op == "edit":
            _edit(a)
        elif op == "delete":
            a.unlink()
    try:
        resumed = popdyn.basin_map(PROB, GRID, checkpoint=ck, **SETTINGS)
    except ValueError as err:
        assert re.search(r"chunk_0000\d\.npz", str(err)), err
        return
    _same(resumed, reference)


# ---- damaged files: one ValueError naming the file, never a traceback ------------------------------------------
EXPECTED = {"a": jax.ShapeDtypeStruct((8, 3), np.float64), "b": jax.ShapeDtypeStruct((8,), np.int32)}
OUTS = {"a": np.arange(15.0).reshape(5, 3), "b": np.arange(5, dtype=np.int32)}


def _store(tmp_path) -> checkpoint.ChunkStore:
    store = checkpoint.ChunkStore(tmp_path / "ck", "f" * 64, EXPECTED, {})
    store.save(0, OUTS)
    return store


def _loads_exactly_or_names(store: checkpoint.ChunkStore, path: Path, what: str) -> None:
    try:
        got = store.load(0, 5)
    except ValueError as err:
        assert str(path) in str(err) and "\n" not in str(err), (what, err)
        return
    assert all(got[k].tobytes() == OUTS[k].tobytes() for k in OUTS), what


def test_every_damaged_byte_or_length_of_a_chunk_is_refused_by_name_or_harmless(tmp_path):
    """A flipped byte anywhere (local headers, array headers, data, the zip's central directory) or a truncation:
    the chunk loads bit for bit or is refused naming it. Before, a flip in the central directory raised
    NotImplementedError or OSError as a traceback."""
    store = _store(tmp_path)
    path = store.path(0)
    good = path.read_bytes()
    for k in range(0, len(good), 3):
        path.write_bytes(good[:k] + bytes([good[k] ^ 0xFF]) + good[k + 1 :])
        _loads_exactly_or_names(store, path, f"byte {k} flipped")
    for n in range(0, len(good), 7):
        path.write_bytes(good[:n])
        _loads_exactly_or_names(store, path, f"truncated to {n} bytes")


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        '"text"',
        "{}",
        '{"fingerprint": 1}',
        '{"fingerprint": "FP", "chunks": []}',
        '{"fingerprint": "FP", "chunks": "0"}',
        '{"fingerprint": "FP", "chunks": {"0": 1}}',
        '{"fingerprint": "FP", "chunks": {"0": null}}',
        "{",
        "\udcff",
    ],
)
def test_a_manifest_of_the_wrong_shape_is_refused_by_name(tmp_path, content):
    """Before, ``chunks`` as a list (or another type) raised AttributeError or TypeError."""
    store = _store(tmp_path)
    manifest = store.directory / "manifest.json"
    manifest.write_bytes(content.replace("FP", "f" * 64).encode("utf-8", "surrogateescape"))
    calls = [
        lambda: checkpoint.ChunkStore(store.directory, "f" * 64, EXPECTED, {}),
        lambda: store.load(0, 5),
        lambda: store.save(1, OUTS),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=f"checkpoint manifest {re.escape(str(manifest))} is unreadable"):
            call()


@pytest.mark.slow  # four command-line runs
def test_the_command_line_refuses_a_damaged_checkpoint_in_one_line_and_its_advice_works(tmp_path, run_cli):
    """A damaged chunk: exit 2 and one line naming it; deleting it, as the line says, lets the rerun finish.
    A damaged manifest: likewise, deleting the directory. (The two-well user model of tests/_tiny_models_d.py: the
    checkpoint's checks and advice are the same for every task.)"""
    argv = ["basins", "_tiny_models_d:wells", "--grid", "4", "--chunk", "8", "--method", "gd", "--steps", "5"]
    argv += ["--quiet"]
    argv += ["--out", tmp_path / "out", "--checkpoint", tmp_path / "ck"]
    assert run_cli(*argv).returncode == 0
    chunk, manifest = tmp_path / "ck" / "chunk_00001.npz", tmp_path / "ck" / "manifest.json"
    data = bytearray(chunk.read_bytes())
    central = data.rfind(b"PK\x01\x02")  # the zip's central directory: its compression-method field
    data[central + 10] ^= 0x01
    chunk.write_bytes(bytes(data))
    code, _, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1 and f"{chunk} is unreadable" in err and "delete it" in err
    chunk.unlink()
    assert run_cli(*argv).returncode == 0
    manifest.write_text(json.dumps({"fingerprint": "x", "chunks": []}))
    code, _, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1 and f"manifest {manifest} is unreadable" in err
    assert "delete the directory" in err
    for p in (tmp_path / "ck").iterdir():
        p.unlink()
    (tmp_path / "ck").rmdir()
    assert run_cli(*argv).returncode == 0
