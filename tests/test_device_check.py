"""``python -m benchmarks.device_check``: the accelerator check runs on the CPU at its --quick sizes, writes its
section and JSON file, names the device and passes its checks; a CPU run never replaces an accelerator's section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _quick_codegen_a import quick_codegen_env

from benchmarks import device_check as dc
from benchmarks._common import write_section

REPO = Path(__file__).resolve().parent.parent
CPU = {"kind": "cpu", "platform": "cpu", "count": 1, "jax": "0.10.2", "jaxlib": "0.10.2"}
GPU = {**CPU, "kind": "NVIDIA H100 80GB HBM3", "platform": "gpu"}


def _section(dev: dict, quick: bool) -> str:
    return "\n".join([dc.HEADING, "", *dc.device_lines(dev, quick), ""])


def test_a_cpu_run_never_replaces_an_accelerator_section(tmp_path):
    path = tmp_path / "R.md"
    assert not dc.writable(None, CPU)
    assert dc.writable(path, CPU)  # no file yet
    write_section(path, dc.HEADING, _section(CPU, quick=True))
    assert "No GPU figure exists yet" in path.read_text() and dc.writable(path, CPU)
    write_section(path, dc.HEADING, _section(GPU, quick=False))
    text = path.read_text()
    assert "No GPU figure exists yet" not in text and "NVIDIA H100 80GB HBM3" in text
    assert not dc.writable(path, CPU) and dc.writable(path, GPU)
    assert dc.device_slug(GPU["kind"]) == "nvidia_h100_80gb_hbm3" and dc.device_slug("cpu") == "cpu"


@pytest.mark.slow
def test_quick_run_on_the_cpu_writes_its_section_and_passes(tmp_path):
    """The whole --quick run in a subprocess, compile-bound (the basin maps and SGD programs), hence with cheaper CPU
    code generation (tests/_quick_codegen_a.py); its SGD runs inherit the environment."""
    results = tmp_path / "R.md"
    cmd = [sys.executable, "-m", "benchmarks.device_check", "--quick", "--results", str(results)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900, env=quick_codegen_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    section = dc.section_text(results.read_text())
    assert "`cpu` (platform cpu" in section and "No GPU figure exists yet" in section
    assert "**FAIL**" not in section and section.count("- PASS") == 10, section
    head = json.loads((tmp_path / "results" / "device_check_cpu.json").read_text())
    assert head["device"]["platform"] == "cpu" and head["quick"] and not head["incomplete"]
    assert len(head["checks"]) == 10 and all(c["ok"] for c in head["checks"])
    assert set(head["sgd"]) == {"table", "teacher"}
    assert set(head["maps"]) == {"flow", "gd"} and head["baseline"]["agree_flow"] >= 0.99
