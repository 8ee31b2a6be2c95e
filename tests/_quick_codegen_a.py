"""Compile-bound end-to-end code (a command, a documented example) run in a new Python process with cheaper CPU code
generation: no LLVM optimisation passes, and XLA's loop emitters for fused operations instead of its newer fusion
emitters. Such runs spend almost all their time generating code; these two settings cut that by about a third. XLA
computes the same operations, so values change at rounding level at most, and every printed digit checked stays
as it was. The flags are read once, when JAX starts its CPU backend, hence the new process."""

import os
import subprocess
import sys
from pathlib import Path

QUICK_CODEGEN = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
"""XLA_FLAGS for cheaper CPU code generation."""

TESTS = Path(__file__).resolve().parent


def quick_codegen_env() -> dict[str, str]:
    """This process's environment with QUICK_CODEGEN added to XLA_FLAGS (the test session's compilation cache and
    everything else inherited)."""
    return os.environ | {"XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {QUICK_CODEGEN}".strip()}


def run_in_quick_process(module: str, function: str, cwd: Path) -> None:
    """Call ``module.function()`` (a module of tests/) in a new Python process in ``cwd``, with the run-time type
    checks of tests/conftest.py installed first, as in the test session, and fail with its output if it fails."""
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "import conftest  # tests/conftest.py: the public API's run-time type checks, before popdyn is imported\n"
        f"import {module}\n"
        f"{module}.{function}()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=quick_codegen_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{module}.{function}() failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
