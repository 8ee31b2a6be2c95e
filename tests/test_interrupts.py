"""Interrupts at any moment (docs/jobs.md, "Interrupts"): SIGINT sent to a real ``popdyn`` process at random
moments after its entry point has started (parsing, imports, tracing, compiling, running, drawing) ends it with
exit code 130, one line on stderr and nothing in ``--out``. Before, an interrupt while compiling crashed the
process at exit (code -11) or was swallowed by a garbage-collector callback, and the run went on to exit 0."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ARGV = ["basins", "markov", "--grid", "16", "--method", "gd", "--steps", "300", "--quiet"]
RUNS, AT_ONCE, LATEST = 20, 4, 4.0  # an uninterrupted run takes ~7 s here, compiling included


def _start(out: Path) -> subprocess.Popen:
    env = dict(os.environ, POPDYN_CACHE_DIR="off")  # every run compiles: the moment that used to crash
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the test session's shared cache (conftest.py) too
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen(
        [sys.executable, "-m", "popdyn._cli", *ARGV, "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _entered(proc: subprocess.Popen) -> bool:
    """Whether ``popdyn._cli.main`` has set its handlers: the process catches SIGTERM (Python itself does not)."""
    with open(f"/proc/{proc.pid}/status") as f:
        caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def _wait_until_entered(proc: subprocess.Popen) -> float:
    deadline = time.monotonic() + 60
    while not _entered(proc):
        assert proc.poll() is None and time.monotonic() < deadline, "popdyn._cli.main never started"
        time.sleep(0.001)
    return time.monotonic()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads signal dispositions from /proc")
def test_sigint_at_random_moments_exits_130_with_nothing_written(tmp_path):
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored in this process, so its children would ignore Ctrl-C too")
    moments = random.Random(20261124).sample([LATEST * i / RUNS for i in range(RUNS)], RUNS)
    outcomes = []
    for first in range(0, RUNS, AT_ONCE):
        batch = [(tmp_path / f"out{i}", moments[i]) for i in range(first, min(first + AT_ONCE, RUNS))]
        procs = [(_start(out), out, at) for out, at in batch]
        entered = [_wait_until_entered(proc) for proc, _, _ in procs]
        for (proc, out, at), start in sorted(zip(procs, entered, strict=False), key=lambda x: x[0][2]):
            time.sleep(max(0.0, start + at - time.monotonic()))
            signalled = proc.poll() is None
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=120)
            outcomes.append((at, signalled, proc.returncode, stdout, stderr, out.exists()))
    for at, signalled, code, stdout, stderr, written in outcomes:
        assert (code, stdout, stderr.splitlines(), written) == (130, "", ["popdyn: interrupted"], False), (at, stderr)
        assert signalled, f"the run signalled at {at} s had finished: lower LATEST"
    assert not [p.name for p in tmp_path.iterdir()]  # no temporary folders either
