"""The Metrics pane: a chart per numeric series of the run, the previous run overlaid.

Two kinds of series. The step and eval records of events.jsonl (every numeric field they
carry), read from the file's tail window while the tab is shown, or, when the program writes no
events, status.json's values. And the history the engine keeps of everything else
(report.metrics.history, run/evidence/metric_history.py): the step/loss/rate a program's own
log shows, its metric lines (TorchTitan, Megatron and Trainer lines) and files (TensorBoard,
metrics.csv, trainer_state.json, MLflow, trackio), each series from its first point whenever
the tab is opened, whose sources the note above the charts lists; the pane draws it and keeps
none of it. The verdict engine's loss finding (report.activity.loss_finding, as
run/verdict/series.py `loss_marks`) is marked on its series' chart: where it diverged (red, ✗)
and each lone spike (orange, !), a vertical line at the step and its words in the title. Each chart is a textual-plotext PlotextPlot: step on x, the value on y, both with
ticks; the previous run is drawn under it in a second, dimmer line, so a relaunch compares at a
glance: the same run dir's last run (RUN_DIR/history/, read by run/history.py) and the metric
files written before this run's launch (report.metrics.previous).

Keys (KEYS, bound by the run screen): o cycles the smoothing (TensorBoard's debiased EMA, 0 / 0.6 / 0.9),
z zooms to the last N steps, m shows the next page of charts when there are more series
than fit.

Cost: a chart is rebuilt only when its points, size or settings changed, and new points are
drawn only as often as keeps the charts within CHART_CPU_SHARE of a core (a training curve
gains nothing from 1 Hz); the note's step counter follows every poll.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Iterable, Mapping, Sequence

from rich.text import Text
from textual.containers import Grid, Vertical
from textual.widgets import Static

from ...run.verdict.report import RunReport

from ...run.verdict.series import (ChartMark, Point, loss_marks, points_from_events, points_from_progress,
                                   points_from_status)
from .base import Pane, PaneKey
from ..widgets.charts import TimedPlot, redraw_interval
from ..widgets.tables import OnScreenOnly

HISTORY = 5000                 # points kept per series
# New points reach the charts when their last drawing has been paid off: a plotext chart costs
# 10-30 ms to build and paint (four redrawn each second would be 4-12% of a core), so the
# charts are redrawn no more often than keeps them within their share of one core, between
# CHART_MIN_S and CHART_MAX_S apart (TensorBoard reloads every 30 s). The step counter above
# them is live; keys and resizes redraw at once.
# render_s times plotext's build; laying the result out and painting it costs about as much
# again (measured: benchmarks/dashboard_cost.py, Metrics tab, with and without redraws), so
# this is half the share the charts may take in all: 0.25% of a core, an eighth of the whole
# dashboard's 2% (four charts of ~5 ms each are redrawn about every 15 s; the GPUs tab's one
# graph has a share of its own, gpus.GRAPH_CPU_SHARE).
CHART_CPU_SHARE = 0.00125
SMOOTHING = (0.0, 0.6, 0.9)    # o cycles; 0.6 is TensorBoard's default
ZOOMS = (None, 1000, 200)      # z cycles: all steps, then the last N
# Known series first, in this order; any other series follows by name.
ORDER = ("loss", "accuracy", "tau", "tokens_per_s")
LABELS = {"loss": "loss", "accuracy": "accuracy", "tau": "τ (accept len)", "tokens_per_s": "tokens/s"}
CURRENT_COLOR, PREVIOUS_COLOR = "cyan", "gray"
CURRENT_MARKER, PREVIOUS_MARKER = "braille", "dot"   # tell the lines apart without colour
# The verdict engine's loss finding marked on its series' chart: a vertical line at the step and
# its words in the title (the sign tells them apart without colour).
MARK_STYLE = {True: ("red", "✗"), False: ("orange", "!")}


def label_of(name: str) -> str:
    return LABELS.get(name, name.replace("_", " "))


def ema(values: Sequence[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average with its start-up bias removed."""
    if weight <= 0:
        return list(values)
    out, last, n = [], 0.0, 0
    for v in values:
        last = last * weight + (1 - weight) * v
        n += 1
        out.append(last / (1 - weight ** n))
    return out


def thin(xs: Sequence[int], ys: Sequence[float], limit: int) -> tuple[list[int], list[float]]:
    """At most `limit` points, evenly strided, the last one kept (what a chart `limit` cells
    wide can show anyway)."""
    n = len(xs)
    if n <= limit or limit < 2:
        return list(xs), list(ys)
    stride = n / (limit - 1)
    idx = sorted({min(n - 1, int(i * stride)) for i in range(limit - 1)} | {n - 1})
    return [xs[i] for i in idx], [ys[i] for i in idx]


class Series:
    """One named series: (step, value) in step order, bounded."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps: deque[int] = deque(maxlen=HISTORY)
        self.values: deque[float] = deque(maxlen=HISTORY)

    @classmethod
    def of(cls, name: str, steps: Sequence[int], values: Sequence[float]) -> "Series":
        """A series the engine's history holds (already bounded and in step order)."""
        s = cls(name)
        s.steps.extend(steps)
        s.values.extend(values)
        return s

    def add(self, step: int, value: float) -> None:
        if self.steps and step <= self.steps[-1]:
            if step == self.steps[-1]:
                self.values[-1] = value   # the same step again (status.json re-read): latest wins
                return
            self.steps.clear()            # steps went back: a new run wrote into the same file
            self.values.clear()
        self.steps.append(step)
        self.values.append(value)

    def window(self, last_steps: int | None, smoothing: float) -> tuple[list[int], list[float]]:
        xs, ys = list(self.steps), ema(list(self.values), smoothing)
        if last_steps is not None and xs:
            lo = xs[-1] - last_steps
            start = next((i for i, s in enumerate(xs) if s >= lo), len(xs))
            xs, ys = xs[start:], ys[start:]
        return xs, ys


def series_from(points: Iterable[Point], into: dict[str, Series] | None = None) -> dict[str, Series]:
    out = {} if into is None else into
    for name, step, value in points:
        s = out.get(name)
        if s is None:
            s = out[name] = Series(name)
        s.add(step, value)
    return out


def ordered(names: Iterable[str]) -> list[str]:
    rank = {n: i for i, n in enumerate(ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(ORDER)), n))


class MetricChart(TimedPlot):
    """One series' chart; rebuilt only when what it would draw changed."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.drawn: tuple | None = None
        self._args: tuple | None = None

    def on_resize(self) -> None:
        if self._args is not None:
            self.draw(*self._args)   # the points are thinned to the width

    def draw(self, current: Series | None, previous: Series | None, previous_id: str,
             zoom: int | None, smoothing: float, marks: tuple[ChartMark, ...] = ()) -> None:
        self._args = (current, previous, previous_id, zoom, smoothing, marks)
        width = max(10, self.size.width)
        last = (current.steps[-1], current.values[-1]) if current and current.steps else None
        key = (current.name if current else None, width, self.size.height, zoom, smoothing,
               last, len(current.steps) if current else 0, previous_id if previous else "", marks)
        if key == self.drawn:
            return
        self.drawn = key
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if current is None:
            self.refresh()
            return
        xs, ys = current.window(zoom, smoothing)
        title = label_of(current.name)
        if ys:
            title += f"  {ys[-1]:.4g}" + (f" (smoothed {smoothing:g})" if smoothing else "")
        # The divergence first, then the newest spike: the title has room for one or two.
        for m in sorted(marks, key=lambda m: (not m.failing, -m.step))[:2]:
            title += f"  {MARK_STYLE[m.failing][1]} {m.words}"
        plt.title(title)
        plt.xlabel("step")
        if previous is not None and xs:
            pxs, pys = previous.window(None, smoothing)
            keep = [i for i, s in enumerate(pxs) if xs[0] <= s <= xs[-1]]   # same step range
            if keep:
                pxs, pys = thin([pxs[i] for i in keep], [pys[i] for i in keep], width)
                # No legend: plotext draws it over the plot's top-left corner, where a falling
                # loss starts. The note above the charts says which line is which.
                plt.plot(pxs, pys, marker=PREVIOUS_MARKER, color=PREVIOUS_COLOR)
        if xs:
            xs, ys = thin(xs, ys, width)   # a point per column: plotext joins them with lines
            plt.plot(xs, ys, marker=CURRENT_MARKER, color=CURRENT_COLOR)
            for m in marks:
                if m.step >= xs[0]:        # a zoom may start after it
                    plt.vline(m.step, MARK_STYLE[m.failing][0])
        self.refresh()


class MetricsPane(Pane, OnScreenOnly, Vertical):
    PANE_ID = "metrics"
    TITLE = "Metrics"
    STREAM = "events"
    KEYS = (
        PaneKey("o", "metrics_smoothing", "Smooth", "Metrics: cycle the smoothing (TensorBoard's debiased EMA: off, 0.6, 0.9)",
                show=False, reveal=True),
        PaneKey("z", "metrics_zoom", "Zoom", "Metrics: all steps, the last 1000, the last 200", show=False, reveal=True),
        PaneKey("m", "metrics_page", "More charts", "Metrics: the next page of charts when the run reports more series "
                "than fit", show=False, reveal=True),
    )

    def compose(self):
        self.note = Static("no steps yet", id="metrics-note")
        self.grid = Grid(id="metrics-grid")
        yield self.note
        yield self.grid

    def on_mount(self) -> None:
        self.series: dict[str, Series] = {}          # events.jsonl's (or status.json's): the pane's own
        self.history: Mapping = {}                   # report.metrics.history: the engine's
        self.history_version: int | None = None
        self.history_from_log = False                # the engine's series include the log's own
        self.charted: dict[str, Series] = {}         # what the charts draw: both, events first
        self.marks: tuple[ChartMark, ...] = ()       # the engine's loss finding, as chart marks
        self.previous: dict[str, Series] = {}        # history/'s previous run
        self.previous_files: Mapping = {}            # metric files older than this run's launch
        self.previous_file_sources: tuple[str, ...] = ()
        self.previous_id = ""
        self.last_step: int | None = None
        self.skipped = 0
        self.from_events = False     # once step events arrive, report points are not added
        self.point_source: str | None = None   # where report points came from (status or a log), if any
        self.metric_sources: tuple[str, ...] = ()   # metric files read: "TensorBoard runs/exp1, 3 tags"
        self.dirty = False           # new points not drawn yet (see flush)
        self.smoothing = SMOOTHING[0]
        self.zoom = ZOOMS[0]
        self.page = 0
        self.charts: list[MetricChart] = []
        self._drawn_at = 0.0
        self._note: str | None = None

    # -- data -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.series.clear()
        self.history, self.history_version, self.charted = {}, None, {}
        self.marks = ()
        self.previous_files, self.previous_file_sources = {}, ()
        self.last_step = None
        self.skipped = 0
        self.from_events = False
        self._drawn_at = 0.0
        self._redraw(force=True)

    def set_previous(self, run_id: str, event_lines: list[str]) -> None:
        """The previous run of this run dir, drawn under the current one."""
        points, _ = points_from_events(event_lines)
        self.previous = series_from(points)
        self.previous_id = run_id if self.previous else ""
        self.dirty = True
        self._drawn_at = 0.0

    def new_run(self, run_id: str) -> None:
        self.reset()

    def show(self, report: RunReport) -> None:
        """A point per new step from the report: status.json's values, else the progress the
        program's own log showed. Unused once events.jsonl has step records. The points of
        metric lines and metric files (report.metrics: TensorBoard, CSV, trainer_state.json,
        MLflow, each poll's new ones) are added whatever else there is."""
        act = report.activity
        marks = loss_marks(act.loss_finding if act is not None else None)
        if marks != self.marks:
            self.marks, self.dirty = marks, True
        m = report.metrics
        if m is not None:
            sources = tuple(s.label + (f" ({s.note})" if s.note else "") for s in m.sources)
            if sources != self.metric_sources:
                self.metric_sources, self.dirty = sources, True
            if m.history_version != self.history_version:
                self._take_history(m)
            if m.previous_sources != self.previous_file_sources:
                self.previous_files, self.previous_file_sources = m.previous, m.previous_sources
                self.dirty = True
        if self.from_events:
            return
        points = points_from_status(report.status)
        source = "status.json"
        if not points and m is None:
            # A source that keeps no history (a replay): the progress of each report.
            points = points_from_progress(report.progress)
            source = f"{report.progress.source} progress" if points else source
        if points and points[0].step != self.last_step:
            self.point_source = source
            self._add(points)

    def _take_history(self, m) -> None:
        before = len(self.charted)
        self.history, self.history_version = m.history, m.history_version
        self.history_from_log = any(src == "log" for _, _, src in m.latest.values())
        self.charted = {}                      # made again at the next draw
        ends = [steps[-1] for steps, _ in m.history.values() if steps]
        if ends:
            self.last_step = max(max(ends), self.last_step or 0)
        self.dirty = True
        if len(m.history) > before and before < self._per_page():
            self._drawn_at = 0.0   # a series where the page has room (a file found mid-run): the next frame

    def chart_series(self) -> dict[str, Series]:
        """Every series the charts draw: events.jsonl's (or status.json's), then the engine's
        history for the names those do not have."""
        if not self.charted or self.series.keys() - self.charted.keys():
            out = dict(self.series)
            for name, (steps, values) in self.history.items():
                if name not in out:
                    out[name] = Series.of(name, steps, values)
            self.charted = out
        return self.charted

    def previous_series(self, name: str) -> Series | None:
        got = self.previous.get(name)
        if got is None and name in self.previous_files:
            got = Series.of(name, *self.previous_files[name])
        return got

    def add_lines(self, lines: list[str]) -> None:
        points, skipped = points_from_events(lines)
        self.skipped += skipped
        if not points:
            self.dirty = self.dirty or bool(skipped)
            return
        if not self.from_events:
            # Events are the full record: they replace what status.json sampled.
            self.from_events = True
            self.series.clear()
            self.last_step = None
            self._drawn_at = 0.0   # a new source: drawn with the next frame, not the next interval
        self._add(points)

    def _add(self, points: list[Point]) -> None:
        before = len(self.series)
        series_from(points, self.series)
        self.charted = {}
        self.last_step = max(max(p.step for p in points), self.last_step or 0)
        self.dirty = True
        if len(self.series) > before and len(self.charts) < self._per_page():
            # A series where the page has room for its chart (a metric file found mid-run):
            # drawn with the next frame, not after the charts' interval (up to 30 s).
            self._drawn_at = 0.0

    def _per_page(self) -> int:
        cols, rows = self._layout()
        return cols * rows

    # -- settings (app keys) ----------------------------------------------------------------
    def cycle_smoothing(self) -> float:
        self.smoothing = SMOOTHING[(SMOOTHING.index(self.smoothing) + 1) % len(SMOOTHING)]
        self._redraw(force=True)
        return self.smoothing

    def cycle_zoom(self) -> int | None:
        self.zoom = ZOOMS[(ZOOMS.index(self.zoom) + 1) % len(ZOOMS)]
        self._redraw(force=True)
        return self.zoom

    def next_page(self) -> None:
        self.page += 1
        self._redraw(force=True)

    def action_metrics_smoothing(self) -> None:
        w = self.cycle_smoothing()
        self.app.notify(f"smoothing {w:g}" if w else "smoothing off", timeout=2)

    def action_metrics_zoom(self) -> None:
        n = self.cycle_zoom()
        self.app.notify("all steps" if n is None else f"the last {n} steps", timeout=2)

    def action_metrics_page(self) -> None:
        self.next_page()

    # -- drawing ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Draw the points added since the last draw, at most every chart_interval(). The app
        calls this in the same synchronous block as the log and checklist updates, so new
        points share their frame instead of costing one of their own."""
        if not self.dirty or not self.on_screen:
            return
        if time.monotonic() - self._drawn_at >= self.chart_interval():
            self._redraw()
        else:
            names = len(self.series.keys() | self.history.keys())
            cols, rows = self._layout()
            self._set_note(self._note_text(names, max(1, -(-names // (cols * rows)))))

    def chart_interval(self) -> float:
        """Seconds between redraws for new points: the charts' last cost over their share."""
        return redraw_interval(sum(c.render_s for c in self.charts), CHART_CPU_SHARE)

    def _redraw(self, force: bool = False) -> None:
        if self.on_screen:
            self.draw()
        elif force:
            self.dirty = True

    def on_resize(self) -> None:
        if self.on_screen:
            self.draw()

    def _layout(self) -> tuple[int, int]:
        """(columns, rows) of charts: two side by side, two rows when there is height."""
        h = self.size.height - 1
        w = self.size.width
        cols = 2 if w >= 60 else 1
        rows = 2 if h >= 16 else 1
        return cols, rows

    def draw(self) -> None:
        self.dirty = False
        self._drawn_at = time.monotonic()
        series = self.chart_series()
        names = ordered(series)
        cols, rows = self._layout()
        per_page = cols * rows
        pages = max(1, -(-len(names) // per_page))
        self.page %= pages
        shown = names[self.page * per_page:(self.page + 1) * per_page]
        self._set_note(self._note_text(len(names), pages))
        grid = self.grid
        grid.styles.grid_size_columns = cols
        grid.styles.grid_size_rows = rows
        want = max(1, len(shown)) if names else 0
        while len(self.charts) < want:
            chart = MetricChart(classes="metric-chart")
            self.charts.append(chart)
            grid.mount(chart)
        while len(self.charts) > want:
            self.charts.pop().remove()
        for chart, name in zip(self.charts, shown):
            chart.draw(series[name], self.previous_series(name), self.previous_id or "files",
                       self.zoom, self.smoothing, tuple(m for m in self.marks if m.on(name)))

    def _note_text(self, n_series: int, pages: int) -> str:
        extra = f" · {self.skipped} unparsable lines of events.jsonl skipped" if self.skipped else ""
        if self.last_step is None:
            return "no steps yet" + extra
        froms = []
        if self.from_events:
            where = "events.jsonl"
        elif self.point_source is None:               # metric files only (a TensorBoard-only program)
            where = ""
        elif self.point_source == "log progress":   # a program of the user's: its own words
            where = "the program's log"
        else:
            where = f"{self.point_source} (no step events)"
        if self.history_from_log and where != "the program's log":
            where = "; ".join(w for w in (where, "the program's log") if w)
        froms = [w for w in (where, "; ".join(self.metric_sources)) if w]
        parts = [f"step {self.last_step}", f"{n_series} series" + (f" from {' and '.join(froms)}" if froms else "")]
        if pages > 1:
            parts[-1] += f" (m: page {self.page + 1}/{pages})"
        if self.previous_id:
            parts.append(f"dots: previous run {self.previous_id}")
        elif self.previous_file_sources:
            parts.append("dots: the previous run's " + "; ".join(self.previous_file_sources))
        parts.append(f"o smoothing {self.smoothing:g}" if self.smoothing else "o smoothing off")
        parts.append("z all steps" if self.zoom is None else f"z last {self.zoom} steps")
        return " · ".join(parts) + extra

    def _set_note(self, text: str) -> None:
        if text != self._note:
            self._note = text
            self.note.update(Text(text, no_wrap=True, overflow="ellipsis"), layout=False)
