"""Tests run in float64 (exactness is the product); the library itself never flips this on import."""

import os

os.environ.setdefault("POPDYN_NOTEBOOK_SMALL", "1")
# the command line's persistent compilation cache stays off in tests (its own test turns it on in a temporary folder)
os.environ.setdefault("POPDYN_CACHE_DIR", "off")

import jax  # noqa: E402
from hypothesis import settings  # noqa: E402

jax.config.update("jax_enable_x64", True)

# Property suites are deterministic in CI: derandomised, no example database, no per-example deadline (a first
# example may include a compilation). POPDYN_HYPOTHESIS_PROFILE=explore searches randomly instead.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("POPDYN_HYPOTHESIS_PROFILE", "ci"))
