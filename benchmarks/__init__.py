"""Timing benchmarks of popdyn against its baselines: `python -m benchmarks.<name>`, results in RESULTS.md."""
