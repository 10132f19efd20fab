"""Numeric series of a run: (name, step, value) points from whatever the run reports.

Every source reduces to the same points, so the dashboard's charts take any of them:
- events.jsonl "step" and "eval" records: every numeric field except the bookkeeping ones
  (a trainer that adds a field gets a chart for it without a change here);
- status.json: its numeric fields at its step, for a trainer that writes no events;
- the report's progress (run/report.RunProgress): the step, loss and rate a program that
  knows nothing of dflash prints to its own log (tqdm, Lightning, transformers, "step N").

Names are normalised through ALIASES so `acc` and `accuracy` are one series.
"""

from __future__ import annotations


from ...contract.rundir import TrainStatus, finite_number
from ..evidence.event_points import ALIASES, Point, points_from_events
from .report import RunProgress

__all__ = ["ALIASES", "Point", "points_from_events", "points_from_status", "points_from_progress"]

_STATUS_FIELDS = ("loss", "accuracy", "tau", "tokens_per_s")


def points_from_status(status: TrainStatus | None) -> list[Point]:
    """status.json's measurements at its step (none before the first step)."""
    if status is None or status.step <= 0:
        return []
    out = []
    for name in _STATUS_FIELDS:
        value = finite_number(getattr(status, name, None))
        if value is not None:
            out.append(Point(name, status.step, value))
    return out


def points_from_progress(progress: RunProgress | None) -> list[Point]:
    """The loss and rate a program's own output gave at its step (none without a step)."""
    if progress is None or progress.step is None:
        return []
    out = []
    loss = finite_number(progress.loss)
    if loss is not None:
        out.append(Point("loss", progress.step, loss))
    rate = finite_number(progress.rate)
    if rate is not None and progress.rate_unit:
        out.append(Point(ALIASES.get(progress.rate_unit, progress.rate_unit), progress.step, rate))
    return out
