"""Timing benchmarks of popdyn against its baselines: `python -m benchmarks.<name>`, results in RESULTS.md.

Like the command line, every benchmark process runs under popdyn's XLA guard (docs/jobs.md, "A guarded XLA"): the
package sets XLA's flags here, before any benchmark starts JAX, so that what is timed is what the CLI computes."""

from popdyn._xla import guard_xla

guard_xla()
