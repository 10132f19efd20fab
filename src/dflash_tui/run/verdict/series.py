"""Numeric series of a run: (name, step, value) points from whatever the run reports.

Every source reduces to the same points, so the dashboard's charts take any of them:
- events.jsonl "step" and "eval" records: every numeric field except the bookkeeping ones
  (a trainer that adds a field gets a chart for it without a change here);
- status.json: its numeric fields at its step, for a trainer that writes no events;
- the report's progress (run/report.RunProgress): the step, loss and rate a program that
  knows nothing of dflash prints to its own log (tqdm, Lightning, transformers, "step N").

Names are normalised through ALIASES so `acc` and `accuracy` are one series.

`loss_marks`: the points of a chart the divergence watch's finding names (where a watched
series diverged, failing; a lone spike, a warn), for the Metrics pane to draw as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...contract.rundir import TrainStatus, finite_number
from ..evidence.divergence import LossFinding, same_series
from ..evidence.event_points import ALIASES, Point, points_from_events
from .report import RunProgress

__all__ = ["ALIASES", "ChartMark", "Point", "loss_marks", "points_from_events", "points_from_status",
           "points_from_progress"]


@dataclass(frozen=True)
class ChartMark:
    """A step of a series marked on its chart, with the finding's words."""

    series: str
    step: int
    failing: bool           # the divergence (the `loss` check failing); else a lone spike's warn
    words: str              # short, for a chart's title: "NaN at step 20", "spike at step 4,210 (8.2x)"

    def on(self, name: str) -> bool:
        return same_series(self.series, name)


def loss_marks(finding: LossFinding | None) -> tuple[ChartMark, ...]:
    """The divergence's first bad step and the lone spikes of the finding, as marks."""
    if finding is None:
        return ()
    marks = [ChartMark(s.series, s.step, False, f"spike at step {s.step:,} ({s.ratio:.1f}x)") for s in finding.spikes]
    d = finding.divergence
    if d is not None:
        marks.append(ChartMark(d.series, d.step, True, f"{d.what()} at step {d.step:,}"))
    return tuple(marks)

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
