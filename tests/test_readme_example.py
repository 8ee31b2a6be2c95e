"""The README's "Your own model" example runs as printed: the fenced python block under that heading is extracted
and executed in a fresh working directory, and what it claims in its comments holds."""

import math
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from _quick_codegen_a import run_in_quick_process

pytestmark = pytest.mark.slow  # every test here runs end-to-end jobs or large instances

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example(heading: str = "Your own model") -> str:
    """The first ```python block after the heading ``## {heading}`` and before the next ``## `` heading."""
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## )", text, flags=re.M | re.S)
    assert m, f"README.md has no '## {heading}' section"
    blocks = re.findall(r"^```python\n(.*?)^```", m.group(1), flags=re.M | re.S)
    assert blocks, f"the '## {heading}' section has no python block"
    return blocks[0]


def run_readme_example() -> None:
    """Run the example in the current folder (its figure is written there) and check what its comments say."""
    code = readme_example()
    assert 15 <= len([line for line in code.splitlines() if line.strip()]) <= 25
    jax.config.update("jax_enable_x64", True)
    ns: dict = {"__name__": "readme_example"}
    exec(compile(code, "README.md (Your own model)", "exec"), ns)

    png = Path("basins.png")
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # what its comments say
    bf = ns["bf"]
    assert bf.fractions["unresolved"] == 0.0
    for name in ("a+b>0", "a+b<0"):
        assert abs(bf.fractions[name] - 0.5) <= 4 * math.sqrt(0.25 / bf.n)
    a0, s = ns["a0"], ns["s"]
    np.testing.assert_allclose(ns["ht"].times, 0.5 * np.log((1 / a0**2 - 1) / (1 / s - 1)), rtol=1e-6)
    assert list(ns["audit"].verdicts()) == ["held", "between", "edge of stability", "diverged"]
    assert "saddle(1) L=0.5" in ns["bm"].attractors


def test_the_readme_example_runs_and_writes_its_figure(tmp_path):
    """In a new process with cheaper code generation (tests/_quick_codegen_a.py): the example is compile-bound."""
    run_in_quick_process("test_readme_example", "run_readme_example", tmp_path)
    assert (tmp_path / "basins.png").is_file()
