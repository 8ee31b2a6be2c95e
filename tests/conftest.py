"""Shared test fixtures: the ``popdyn`` command line run in-process. Also: the jaxtyping annotations of the public
API are checked at run time (beartype) in the tests."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import NamedTuple

import pytest

# The public API's engine, which every model runs on (popdyn/__init__.py re-exports Problem and popdyn.analysis and
# popdyn.dynamics; popdyn.exact is a public subpackage; popdyn.curvature and popdyn._batching hold what analysis
# re-exports and what both run on): every function and equinox Module there has its jaxtyping annotations (dtypes
# and shapes) checked by beartype on each call while the tests run, so an annotation that does not say what the
# code does fails a test. The models (popdyn.tasks) and jobs (popdyn.jobs) are not checked.
RUNTIME_CHECKED = (
    "popdyn.problem",
    "popdyn._batching",
    "popdyn.curvature",
    "popdyn.analysis",
    "popdyn.dynamics",
    "popdyn.exact",
)

# beartype comes with the test extra; POPDYN_RUNTIME_TYPES=0 turns the checks off (e.g. to time the tests without them)
RUNTIME_TYPES = importlib.util.find_spec("beartype") is not None and os.environ.get("POPDYN_RUNTIME_TYPES") != "0"

if RUNTIME_TYPES:
    from jaxtyping import install_import_hook

    # the hook rewrites modules as they are first imported: none of them may be imported yet
    _early = sorted(m for m in sys.modules if m.startswith(RUNTIME_CHECKED))
    if _early:
        raise RuntimeError(f"{_early} imported before tests/conftest.py installed the jaxtyping import hook")
    install_import_hook(RUNTIME_CHECKED, "beartype.beartype")


@pytest.fixture(autouse=True)
def _validation_unchecked(request):
    """Run-time type checks are off in tests marked ``validation``: they give the library input it rejects, to test
    its own checks (ValueError, naming the parameter), which a type check would otherwise pre-empt."""
    if request.node.get_closest_marker("validation") is None or not RUNTIME_TYPES:
        yield
        return
    from jaxtyping import config

    before = config.jaxtyping_disable
    config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        config.update("jaxtyping_disable", before)


class CliRun(NamedTuple):
    """What a ``popdyn`` invocation returned, like ``subprocess.CompletedProcess``."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*argv)`` runs ``popdyn._cli.main(argv)`` in this process (the function the console script
    calls): no new interpreter to start, and programs compiled by other tests of the module are reused.
    The real console script as a subprocess is tested in test_cli.py, test_demo.py and test_checkpoint.py."""
    from popdyn._cli import main

    def run(*argv) -> CliRun:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return CliRun(code, captured.out, captured.err)

    return run


def _mappings() -> tuple[int, int]:
    """(memory mappings of this process, the kernel's limit on them); (0, 1) where /proc cannot tell."""
    try:
        with open("/proc/self/maps") as maps, open("/proc/sys/vm/max_map_count") as limit:
            return sum(1 for _ in maps), int(limit.read())
    except (OSError, ValueError):
        return 0, 1


@pytest.fixture(autouse=True, scope="module")
def _compiled_programs_freed():
    """Drop JAX's caches of traced and compiled programs after a test module once this worker holds half the
    kernel's limit on memory mappings (vm.max_map_count, 65 530 by default). Every compiled CPU program keeps its
    machine code in mappings of its own (about 100 more a second while a worker compiles), and at the limit the next
    compilation crashes the worker (a segmentation fault inside XLA); below it, programs stay cached for the next
    modules."""
    yield
    count, limit = _mappings()
    if count > limit // 2:
        import jax

        jax.clear_caches()
