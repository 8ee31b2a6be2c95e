"""Markov-chain command-line jobs: basin maps, convergence against the local rate, step-size audits (docs/jobs.md)."""
