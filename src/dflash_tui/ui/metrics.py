"""The Metrics pane: loss, accuracy, τ and tokens/s over the steps of this run.

Fed by the "step" records of events.jsonl (loss, accuracy, tokens/s) and its "eval" records
(τ, measured by block verification every few hundred steps) (parsed with the run-dir contract, so a half-written
last line is skipped, never fatal). A trainer that writes no step events still gets a curve:
then each new step seen in status.json adds a point. History is bounded; a new run id starts
a fresh history.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from rich.text import Text
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from ..contract.rundir import EventKind, TrainStatus, parse_events

from .tables import OnScreenOnly

HISTORY = 600

# (event field(s), label, format): the first field present in a step event is used; the
# first name is also the TrainStatus attribute.
SERIES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("loss",), "loss", "{:.4f}"),
    (("accuracy",), "accuracy", "{:.3f}"),
    (("tau",), "τ (accept len)", "{:.2f}"),
    (("tokens_per_s",), "tokens/s", "{:,.0f}"),
)


@dataclass
class StepPoint:
    step: int
    values: dict[str, float]
    kind: str = EventKind.STEP.value


def step_points(lines: Iterable[str]) -> tuple[list[StepPoint], int]:
    """Step and eval records from events.jsonl lines, and how many lines could not be parsed."""
    batch = parse_events(lines)
    points = []
    for ev in batch.events:
        if ev.get("kind") not in (EventKind.STEP.value, EventKind.EVAL.value):
            continue
        values: dict[str, float] = {}
        for names, label, _ in SERIES:
            v = _first(ev, names)
            if v is not None:
                values[label] = v
        step = ev.get("step")
        points.append(StepPoint(step if isinstance(step, int) else -1, values, ev["kind"]))
    return points, batch.skipped


def _first(ev: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for n in names:
        v = ev.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


class MetricRow(Horizontal):
    def __init__(self, label: str, fmt: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.label, self.fmt = label, fmt

    def compose(self):
        self.value = Static(self.label, classes="metric-value")
        self.spark = Sparkline([], classes="metric-spark")
        yield self.value
        yield self.spark


class MetricsPane(OnScreenOnly, Vertical):
    def compose(self):
        self.note = Static("no step events yet", id="metrics-note")
        self.rows = [MetricRow(label, fmt, id=f"metric-{i}") for i, (_, label, fmt) in enumerate(SERIES)]
        yield self.note
        yield from self.rows

    def on_mount(self) -> None:
        self.history: dict[str, deque[float]] = {label: deque(maxlen=HISTORY) for _, label, _ in SERIES}
        self.last_step: int | None = None
        self.skipped = 0
        self.from_events = False     # once step events arrive, status.json points are not added
        self.dirty = False           # new points not drawn yet (see flush)
        self._shown: dict[object, object] = {}   # widget -> what it shows: unchanged, not redrawn

    def reset(self) -> None:
        for h in self.history.values():
            h.clear()
        self.last_step = None
        self.skipped = 0
        self.from_events = False
        self._redraw()

    def add_status(self, status: TrainStatus | None) -> None:
        if self.from_events or status is None or status.step == self.last_step:
            return
        values = {label: float(v) for names, label, _ in SERIES
                  if isinstance(v := getattr(status, names[0], None), (int, float))}
        if not values:
            return
        for label, v in values.items():
            self.history[label].append(v)
        self.last_step = status.step
        self.dirty = True

    def add_lines(self, lines: list[str]) -> None:
        points, skipped = step_points(lines)
        self.skipped += skipped
        if not points and not skipped:
            return
        if not self.from_events and any(p.kind == EventKind.STEP.value for p in points):
            # Step events are the full record: they replace what status.json sampled.
            self.from_events = True
            self.last_step = None
            for h in self.history.values():
                h.clear()
        for p in points:
            for label, v in p.values.items():
                self.history[label].append(v)
            self.last_step = max(p.step, self.last_step or -1)
        self.dirty = True

    def flush(self) -> None:
        """Draw the points added since the last draw. The app calls this in the same
        synchronous block as the log and checklist updates, so new points share their frame
        instead of costing a frame (and a compositor pass) of their own."""
        if self.dirty:
            self._redraw()

    def _redraw(self) -> None:
        self.dirty = False
        if self.on_screen:
            self.draw()

    def draw(self) -> None:
        self.dirty = False
        note = self.note
        extra = f" · {self.skipped} unparsable lines of events.jsonl skipped" if self.skipped else ""
        if self.last_step is None:
            self._set(note, "no steps yet" + extra)
        else:
            where = "events.jsonl" if self.from_events else "status.json (no step events)"
            self._set(note, f"step {self.last_step} · up to {HISTORY} points from {where}{extra}")
        for i, (_, label, fmt) in enumerate(SERIES):
            row = self.rows[i]
            h = self.history[label]
            self._set(row.value, fmt.format(h[-1]) if h else "n/a", bold=label + " ")  # fixed 26 cells
            spark = row.spark
            show = len(h) > 1              # a flat baseline for no data would read as "zero"
            if spark.display != show:      # (setting it, even unchanged, costs a relayout)
                spark.display = show
            data = list(h)
            if self._shown.get(spark) != data:   # a steady series draws the same bars
                self._shown[spark] = data
                spark.data = data

    def _set(self, static: Static, text: str, bold: str = "") -> None:
        """Update a one-line Static only when its text changed: an update costs a repaint."""
        if self._shown.get(static) == (bold, text):
            return
        self._shown[static] = (bold, text)
        if bold:
            content = Text(bold, style="bold")
            content.append(text)
            static.update(content, layout=False)
        else:
            static.update(text, layout=False)
