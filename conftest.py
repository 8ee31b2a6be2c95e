"""Tests run in float64 (exactness is the product); the library itself never flips this on import."""

import os

os.environ.setdefault("POPDYN_NOTEBOOK_SMALL", "1")
# the command line's persistent compilation cache stays off in tests (its own test turns it on in a temporary folder)
os.environ.setdefault("POPDYN_CACHE_DIR", "off")


def _session_compilation_cache() -> None:
    """One JAX persistent compilation cache for the whole test session, in a temporary folder made by the first
    process (the pytest controller) and removed when it exits: the xdist workers, the command lines the tests start
    as subprocesses and the notebooks' kernels inherit it, so a program compiled in one of them is loaded, not
    compiled again, in the others (the suite is compile-bound on 2 cores). JAX's cache size limit is set so that
    every read and write holds its file lock (processes share the folder). A hit still counts as a compilation in
    JAX's logs and events, which tests that count compilations read. POPDYN_TEST_JAX_CACHE=off turns it off."""
    if os.environ.get("POPDYN_TEST_JAX_CACHE") == "off" or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="popdyn-tests-jax-cache-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(8 << 30)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"


_session_compilation_cache()

TEST_CODEGEN = "--xla_cpu_use_fusion_emitters=false"
"""XLA_FLAGS setting the test session compiles with (``_test_codegen``)."""


def _test_codegen() -> None:
    """XLA's loop emitters for fused operations instead of its newer fusion emitters, in this session and every
    process it starts (the command lines, the notebooks' kernels). The suite spends about half its time in XLA's
    code generation on 2 CPU cores, and these emitters generate code a quarter faster at about the same run time
    (measured on the suite). Both compute the same operations: values may move at rounding level, so results that
    tests compare bit for bit are compared within one session's settings, and the recorded golden values name the
    flags they were recorded with (tests/test_golden.py). Only for the jaxlib releases it was measured on (0.10),
    whose XLA knows the flag; POPDYN_TEST_CODEGEN=default keeps XLA's default code generation."""
    from popdyn._xla import jaxlib_version

    if os.environ.get("POPDYN_TEST_CODEGEN") == "default" or jaxlib_version()[:2] != (0, 10):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if TEST_CODEGEN not in flags.split():
        os.environ["XLA_FLAGS"] = f"{flags} {TEST_CODEGEN}".strip()


_test_codegen()

# XLA's flags stay as a Python user has them (popdyn leaves them alone in Python): the command line's guard against
# a miscompile of jaxlib 0.10.2 (popdyn/_xla.py) is off in this session and the programs it starts, so results and
# compilation-cache keys are the library's; tests/test_xla_canary.py runs the guard in new interpreters.
# POPDYN_XLA_GUARD=on runs the whole session under the guard instead.
os.environ.setdefault("POPDYN_XLA_GUARD", "off")

from popdyn._xla import guard_xla  # noqa: E402

guard_xla()

import jax  # noqa: E402
from hypothesis import settings  # noqa: E402

jax.config.update("jax_enable_x64", True)

# Property suites are deterministic in CI: derandomised, no example database, no per-example deadline (a first
# example may include a compilation). POPDYN_HYPOTHESIS_PROFILE=explore searches randomly instead.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("POPDYN_HYPOTHESIS_PROFILE", "ci"))
