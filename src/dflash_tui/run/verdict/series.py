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

from typing import Iterable, NamedTuple

from ...contract.rundir import EventKind, TrainStatus, finite_number, parse_events
from .report import RunProgress

# Fields of a record that are not measurements of the run.
_NOT_SERIES = frozenset({"v", "kind", "time", "step", "epoch", "pid", "thread", "device", "rank",
                         "total_steps", "prompts", "new_tokens", "heartbeat_time", "peak_tflops"})
ALIASES = {"acc": "accuracy", "tok_s": "tokens_per_s", "tokens/s": "tokens_per_s"}
_STATUS_FIELDS = ("loss", "accuracy", "tau", "tokens_per_s")
_KINDS = (EventKind.STEP.value, EventKind.EVAL.value)


class Point(NamedTuple):   # a tuple: a hundred a second are made while Metrics is shown
    name: str
    step: int
    value: float



def points_from_events(lines: Iterable[str]) -> tuple[list[Point], int]:
    """The points of events.jsonl lines, and how many lines could not be parsed."""
    batch = parse_events(lines)
    out: list[Point] = []
    for ev in batch.events:
        step = ev.get("step")
        if ev.get("kind") not in _KINDS or isinstance(step, bool) or not isinstance(step, int):
            continue
        for key, raw in ev.items():
            if key in _NOT_SERIES:
                continue
            value = finite_number(raw)
            if value is not None:
                out.append(Point(ALIASES.get(key, key), step, value))
    return out, batch.skipped


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
