"""The points of events.jsonl's "step" and "eval" records: every numeric field but the
bookkeeping ones (a trainer that adds a field gets a series for it without a change here).
Read by the Metrics pane's charts (run/verdict/series.py) and by the look (the newest values
and the divergence watch: run/evidence/activity.py)."""

from __future__ import annotations

from typing import Iterable

from ...contract.rundir import EventKind, finite_number, parse_events
from .metric_point import MetricPoint as Point

# Fields of a record that are not measurements of the run.
_NOT_SERIES = frozenset({"v", "kind", "time", "step", "epoch", "pid", "thread", "device", "rank",
                         "total_steps", "prompts", "new_tokens", "heartbeat_time", "peak_tflops"})
ALIASES = {"acc": "accuracy", "tok_s": "tokens_per_s", "tokens/s": "tokens_per_s"}
_KINDS = (EventKind.STEP.value, EventKind.EVAL.value)
STEP_KINDS = (EventKind.STEP.value,)   # the training's own records (an eval's loss is no training loss)



def points_from_events(lines: Iterable[str], kinds: tuple[str, ...] = _KINDS) -> tuple[list[Point], int]:
    """The points of events.jsonl lines of `kinds`, and how many lines could not be parsed."""
    batch = parse_events(lines)
    out: list[Point] = []
    for ev in batch.events:
        step = ev.get("step")
        if ev.get("kind") not in kinds or isinstance(step, bool) or not isinstance(step, int):
            continue
        for key, raw in ev.items():
            if key in _NOT_SERIES:
                continue
            value = finite_number(raw)
            if value is not None:
                out.append(Point(ALIASES.get(key, key), step, value))
    return out, batch.skipped


