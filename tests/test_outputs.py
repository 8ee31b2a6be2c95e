"""Output folders (docs/jobs.md, "Outputs"): a folder is replaced only where every file in it is one popdyn wrote
(its summary lists them), whatever the suffix of the others; --out and --checkpoint never overlap; a symbolic link
to a folder is followed; one popdyn at a time writes a folder, and a killed run's lock blocks nobody."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _props import no_compilation

from popdyn import io

ARGV = ["stepsize", "markov", "--steps", "5", "--quiet"]
FILES = ["stepsize.npz", "stepsize.png", "summary.json"]


def _result(name: str) -> io.Result:
    return io.Result(inputs={"task": "t"}, results={}, arrays={name: {"x": np.arange(3)}})


def _written(out, command: str, name: str) -> None:
    io.prepare_out(out, command, "t")
    _result(name).write(out, command, 0.0)


@pytest.mark.parametrize("suffix", [".json", ".npz", ".png", ".txt", ""])
def test_no_run_removes_or_overwrites_a_file_it_did_not_write(tmp_path, suffix):
    """Before, a rerun into its own --out removed every .json, .npz and .png there, the user's included."""
    out = tmp_path / "out"
    _written(out, "basins", "a")
    for mine in (out / f"mine{suffix}", out / f"a{suffix}.npz" if suffix else out / "folder"):
        mine.mkdir() if mine.name == "folder" else mine.write_bytes(b"the user's")
        for replace in (False, True):
            with pytest.raises(ValueError, match=f"holds files popdyn did not write \\({mine.name}"):
                io.prepare_out(out, "basins", "t", replace)
        with pytest.raises(ValueError, match="did not write"):  # the writer checks again, at the last moment
            _result("a").write(out, "basins", 0.0)
        assert mine.is_dir() or mine.read_bytes() == b"the user's"
        assert sorted(p.name for p in out.iterdir()) == sorted(["a.npz", "summary.json", mine.name])
        mine.rmdir() if mine.is_dir() else mine.unlink()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary folder left


def test_replace_removes_only_the_outputs_popdyn_listed(tmp_path):
    out = tmp_path / "out"
    _written(out, "basins", "a")
    with pytest.raises(ValueError, match="holds the results of another command \\(basins t\\)"):
        io.prepare_out(out, "converge", "t")
    io.prepare_out(out, "converge", "t", replace=True)
    _result("b").write(out, "converge", 0.0)
    assert sorted(p.name for p in out.iterdir()) == ["b.npz", "summary.json"]
    assert json.loads((out / "summary.json").read_text())["files"] == ["summary.json", "b.npz"]


def test_results_without_a_file_list_are_not_popdyns(tmp_path):
    """A summary.json that lists no files (someone else's, or an older popdyn's) protects every file there."""
    out = tmp_path / "out"
    io.write_results(out, {"command": "basins", "inputs": {"task": "t"}}, {"a": {"x": np.arange(2)}}, {})
    with pytest.raises(ValueError, match="did not write \\(a.npz, summary.json\\)"):
        io.prepare_out(out, "basins", "t", replace=True)


@pytest.mark.parametrize("where", ["equal", "checkpoint inside out", "out inside checkpoint"])
def test_overlapping_out_and_checkpoint_are_refused_before_computing(tmp_path, run_cli, where):
    """Before, --out equal to --checkpoint deleted the checkpoint on a rerun, and a checkpoint inside --out could
    not be resumed as the interrupt's message says (the next run refused the folder holding it)."""
    out, ck = {
        "equal": (tmp_path / "a", tmp_path / "a"),
        "checkpoint inside out": (tmp_path / "a", tmp_path / "a" / "ck"),
        "out inside checkpoint": (tmp_path / "a" / "out", tmp_path / "a"),
    }[where]
    with no_compilation("JAX compiled before overlapping folders were refused"):
        code, _, err = run_cli("basins", "markov", "--grid", "4", "--out", out, "--checkpoint", ck)
    assert code == 2 and err.count("\n") == 1 and "overlaps out=" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_out_that_is_a_link_to_a_folder_takes_the_results(tmp_path, run_cli):
    """Before, every check passed, the job ran, and the final rename raised NotADirectoryError."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for _ in range(2):  # into the empty folder, then replacing its own results
        code, _, err = run_cli(*ARGV, "--out", tmp_path / "link")
        assert code == 0, err
        assert (tmp_path / "link").is_symlink() and sorted(p.name for p in (tmp_path / "real").iterdir()) == FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


@pytest.mark.parametrize("option", ["--out", "--checkpoint"])
def test_a_folder_another_run_writes_is_refused(tmp_path, run_cli, option):
    """Before, two commands started together into one --out both passed the checks and the later one removed the
    earlier one's files; two runs sharing a --checkpoint lost each other's digests."""
    target = tmp_path / "busy"
    folders = {"--out": tmp_path / "out", "--checkpoint": tmp_path / "ck"} | {option: target}
    with io.lock(option[2:], target):  # another run, as far as the kernel's locks go
        with no_compilation("JAX compiled before the busy folder was refused"):
            code, _, err = run_cli("basins", "markov", "--grid", "4", *(str(x) for kv in folders.items() for x in kv))
    assert code == 2 and err.count("\n") == 1
    assert f"{option[2:]}={str(target)!r} is in use by another popdyn run" in err
    assert list(tmp_path.iterdir()) == []  # the lock file went with the lock


def test_a_killed_runs_lock_file_blocks_nobody(tmp_path):
    out = tmp_path / "out"
    script = f"from popdyn import io\nimport os\nwith io.lock('out', {str(out)!r}):\n    os._exit(9)\n"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    assert subprocess.run([sys.executable, "-c", script], env=env).returncode == 9
    assert (tmp_path / ".out.popdyn-lock").exists()
    with io.lock("out", out) as folder:
        assert folder == out
    assert list(tmp_path.iterdir()) == []


def test_a_lock_removes_the_parent_folders_it_made(tmp_path):
    with io.lock("out", tmp_path / "a" / "b" / "out"):
        assert (tmp_path / "a" / "b" / ".out.popdyn-lock").exists()
    assert list(tmp_path.iterdir()) == []
