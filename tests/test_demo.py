"""``popdyn demo`` end to end (small grid): every part written, numbers consistent with the closed
forms of docs/models/markov.md (§4.4 basins, §4.6 local rates and step sizes)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from _quick_codegen_a import quick_codegen_env

pytestmark = pytest.mark.slow  # every test here runs end-to-end jobs or large instances


def test_demo_writes_every_part(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "popdyn._cli", "demo", "--grid", "12", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=quick_codegen_env(),  # compile-bound: cheaper code generation (tests/_quick_codegen_a.py)
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    parts = {
        "basins-pq-lt-1": ("basins.npz", "basins.png"),
        "basins-pq-gt-1": ("basins.npz", "basins.png"),
        "converge": ("convergence.npz", "convergence.png"),
        "stepsize": ("stepsize.npz", "stepsize.png"),
    }
    for part, files in parts.items():
        assert sorted(p.name for p in (out / part).iterdir()) == sorted(("summary.json", *files))
    for part in ("basins-pq-lt-1", "basins-pq-gt-1"):
        res = json.loads((out / part / "summary.json").read_text())["results"]
        assert res["agreement_with_theory"] >= 0.99
        labels = np.load(out / part / "basins.npz")["labels"]
        assert labels.shape == (12, 12) and (labels >= 0).all()
    conv = json.loads((out / "converge" / "summary.json").read_text())["results"]["rows"]
    assert all(abs(r["rate_measured"] / r["rate_predicted"] - 1) < 2e-3 for r in conv)
    runs = json.loads((out / "stepsize" / "summary.json").read_text())["results"]["runs"]
    assert [r["past_stability_edge"] for r in runs] == [False, True, True]
    assert runs[0]["status"] == "converged" and runs[-1]["status"] == "diverged"
    assert "agreement with the closed-form basins" in proc.stdout
