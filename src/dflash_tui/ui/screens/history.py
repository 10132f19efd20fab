"""A profile's history (RUN_DIR/history/<id>/), and one history run opened read-only.

`HistoryScreen` lists the runs that run/history.py reads and judges (the real gather ->
evaluate over the archived files): run id, start, end, verdict, steps, last loss and tau, and
who stopped it. Enter opens one in the single-run view through a `HistorySource`: its report
is the checklist as the run ended, its log and metrics are the archived train.log and
events.jsonl, and every action is refused (nothing of a history run is live).
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from typing import AsyncIterator, Callable

from rich.text import Text
from textual import work
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from ...gpu.sample import GpuError, GpuErrorKind, GpuSnapshot
from ...remote.base import TargetError
from ...run.history import HistoryRun
from ...run.launch.request import LaunchRequest
from ...run.verdict.report import RunReport
from ..fmt import NA, num, one_line, verdict_class
from ..sources.source import ActionError

_VERDICT_STYLE = {"-ok": "bold green", "-fail": "bold red", "-wait": "bold yellow"}


def _when(t: float | None) -> str:
    return NA if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


class HistorySource:
    """A DashboardSource over one history run: read-only, nothing polled but its files."""

    read_only = True
    resumable = False

    def __init__(self, live, run: HistoryRun) -> None:
        """`live`: the profile's live source (its watch reads the archived files)."""
        self.live = live
        self.run = run
        self.profile = live.profile
        self.label = f"history {run.run_id} (read-only)"

    async def reports(self) -> AsyncIterator[RunReport]:
        yield self.run.report(self.profile, self.live.label)
        await asyncio.Event().wait()   # an ended run does not change

    async def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        yield GpuSnapshot(time=0.0, source="none", error=GpuError(
            GpuErrorKind.PROBE_FAILED, f"run {self.run.run_id} is history: it uses no GPU now"))
        await asyncio.Event().wait()

    def follow(self, name: str):
        return self.live.follow_path(posixpath.join(self.run.path, name))

    async def previous_run(self, exclude: str | None) -> None:
        return None   # the charts of a history run are its own

    async def history(self) -> None:
        return None

    async def newest_checkpoint(self) -> None:
        return None

    def _refuse(self):
        raise ActionError(f"run {self.run.run_id} is history (read-only); Escape returns to "
                          f"the live run of {self.profile}")

    async def launch(self, request: LaunchRequest) -> str:
        self._refuse()

    async def stop(self) -> str:
        self._refuse()

    async def bundle(self) -> str:
        self._refuse()

    async def canary(self) -> str:
        self._refuse()

    async def close(self) -> None:
        """The session is the live source's; nothing of its own to close."""


class HistoryScreen(Screen[None]):
    """The runs of one profile's history/, newest first. Enter opens one read-only."""

    CSS_PATH = "fleet.tcss"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("enter", "open", "Open", show=True),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, profile: str, source, on_open: Callable[[str, HistoryRun], object]) -> None:
        """`source`: the profile's live source; `on_open(profile, run)` shows a run."""
        super().__init__()
        self.profile = profile
        self.source = source
        self.on_open = on_open
        self.runs: list[HistoryRun] = []
        self.loaded = False

    def compose(self):
        yield Static(Text(f"History of {self.profile} · reading…", style="bold"), id="history-title")
        table = DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("Run", "Start", "End", "Verdict", "Steps", "Loss", "τ", "Stopped by")
        yield table
        yield Static("", id="history-detail")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.load()

    @work(exclusive=True, group="history")
    async def load(self) -> None:
        title = self.query_one("#history-title", Static)
        try:
            runs = await self.source.history()
        except (TargetError, OSError) as exc:
            title.update(Text(f"History of {self.profile} · cannot read: {one_line(str(exc), 160)}",
                              style="bold red"))
            self.loaded = True
            return
        if runs is None:
            title.update(Text(f"History of {self.profile} · not available from this source", style="bold"))
            self.loaded = True
            return
        self.runs = runs
        table = self.query_one(DataTable)
        table.clear()
        for r in self.runs:
            steps = NA if r.steps is None else (f"{r.steps}/{r.total_steps}" if r.total_steps else str(r.steps))
            table.add_row(r.run_id, _when(r.start_time), _when(r.end_time),
                          Text(r.verdict.value, style=_VERDICT_STYLE[verdict_class(r.verdict)]),
                          steps, num(r.loss, "{:.3f}"), num(r.tau, "{:.2f}"), r.stopped_by or "-",
                          key=r.run_id)
        n = len(self.runs)
        title.update(Text(f"History of {self.profile} · {n} run{'s' if n != 1 else ''} "
                          f"(newest first) · Enter opens one read-only", style="bold"))
        self._show_detail()
        self.loaded = True

    def _selected(self) -> HistoryRun | None:
        table = self.query_one(DataTable)
        if not self.runs or not 0 <= table.cursor_row < len(self.runs):
            return None
        return self.runs[table.cursor_row]

    def _show_detail(self) -> None:
        run = self._selected()
        detail = self.query_one("#history-detail", Static)
        detail.update("" if run is None else Text(f"{run.verdict.value}: {one_line(run.summary, 300)}",
                                                  no_wrap=True, overflow="ellipsis"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_open(self) -> None:
        run = self._selected()
        if run is not None:
            self.on_open(self.profile, run)
