"""Task names used on the command line (DESIGN.md: markov, decision-list, scan-snap, scb, teacher)."""

from __future__ import annotations

TASKS = ("markov", "decision-list", "scan-snap", "scb", "teacher")
AVAILABLE = ("markov", "decision-list", "scb", "teacher")


def check_task(name: str) -> str:
    """Validate a task name: unknown names and tasks not yet built raise ValueError."""
    if name not in TASKS:
        raise ValueError(f"task={name!r} is unknown: must be one of {', '.join(TASKS)}")
    if name not in AVAILABLE:
        raise ValueError(f"task={name!r} is not implemented yet: available tasks are {', '.join(AVAILABLE)}")
    return name
