"""Tests run in float64 (exactness is the product); the library itself never flips this on import."""

import os

os.environ.setdefault("POPDYN_NOTEBOOK_SMALL", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
