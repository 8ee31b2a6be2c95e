"""Bilinear-teacher runs: GD against the rate theory and the command-line jobs (docs/jobs.md)."""
