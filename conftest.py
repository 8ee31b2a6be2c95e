"""Tests run in float64 (exactness is the product); the library itself never flips this on import."""

import os
import tempfile

os.environ.setdefault("POPDYN_NOTEBOOK_SMALL", "1")
# One persistent XLA compilation cache for every process of a test run — the xdist workers, the notebooks'
# kernels and the CLI subprocesses, which inherit the variable — so a program that several of them compile (a
# job run in-process and again by its CLI test, a notebook repeating a test's setting) is compiled once. JAX
# keys entries on the program, the compile options and the versions: a hit is the same executable.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"popdyn-xla-cache-{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
