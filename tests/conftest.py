"""Shared test fixtures: the ``popdyn`` command line run in-process."""

from __future__ import annotations

from typing import NamedTuple

import pytest


class CliRun(NamedTuple):
    """What a ``popdyn`` invocation returned, like ``subprocess.CompletedProcess``."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*argv)`` runs ``popdyn.cli.main(argv)`` in this process (the function the console script
    calls): no new interpreter to start, and programs compiled by other tests of the module are reused.
    The real console script as a subprocess is tested in test_cli.py, test_demo.py and test_checkpoint.py."""
    from popdyn.cli import main

    def run(*argv) -> CliRun:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return CliRun(code, captured.out, captured.err)

    return run
