"""Typed results of runs (docs/jobs.md, "Outputs"): frozen dataclasses whose plain fields are the run's JSON
summary and whose ``internal`` fields (trajectories, problems, recorded arrays) are kept out of it."""

from __future__ import annotations

import dataclasses
from typing import Any


def internal() -> Any:
    """A field of a run record that is no part of its JSON summary (a trajectory, a problem)."""
    return dataclasses.field(repr=False, compare=False, metadata={"summary": False})


def summary(record: Any) -> dict[str, Any]:
    """The JSON part of a run record: its fields in declaration order, ``internal`` ones left out."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.metadata.get("summary", True)}
