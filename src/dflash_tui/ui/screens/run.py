"""The single-run view: its screen composes the panes, holds the source they show, feeds them
through ui/streams.py, and owns the view's keys and actions.

What arrives, from a `DashboardSource` (sources/source.py), through the stream workers, so no
call that waits on a target ever runs on Textual's event loop:

- reports (1 Hz, from the RunWatch) -> every pane's `show` (header, Health, Threads, ...)
- GPU snapshots (1 Hz, GpuStream)  -> the pane whose STREAM is "gpus"
- the selected log file, polled every 0.5 s -> the pane whose STREAM is "log"
- events.jsonl, polled every second while its tab is shown -> the pane whose STREAM is "events"

The run keys act through the source's launch/stop/relaunch/canary; while one is in flight the
others are disabled (check_action), and the checklist shows the new run fill in by itself. A
pane's own keys (Pane.KEYS) are bound here for the whole view. Textual offers a screen's
bindings only while that screen is on top, so the fleet, a history list and the dialogs (each
with keys of their own) never see these; navigation (profiles, fleet, history, help, quit)
stays the app's (`app.` prefix).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, TypeVar

from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, TabbedContent, TabPane

from ...gpu.sample import GpuSnapshot
from ...remote.base import TargetError
from ...run.launch.request import LaunchRequest
from ...run.verdict.checklist import Verdict
from ...run.verdict.report import RunReport
from ..fmt import one_line
from ..panes import RUN_PANES, TAB_PANES, GpuPane, HealthPane, LogPane, MetricsPane, Pane, RunHeader
from ..panes.health import HealthBox
from ..sources.source import ActionError, DashboardSource, run_action
from ..streams import RunStreams
from .compositor import changed_only
from .dialogs import ConfirmScreen
from .fleet import FleetScreen
from .history import HistoryScreen
from .relaunch import RESUME, RelaunchScreen, relaunch_detail, stop_detail

RUN_ACTIONS = ("relaunch", "stop", "canary")
RECOVERY_READ_S = 2.0         # how often the header reads the watcher's recovery state
HEADER_TICK_S = 1.0           # the header's ages tick each second while no report draws it
HEADER_AFTER_REPORT_S = 1.5   # after a report: the next one is due in a little over a second
PaneT = TypeVar("PaneT", bound=Pane)


def _pane_bindings(late: bool) -> list[Binding]:
    return [Binding(k.key, f"pane('{pane.PANE_ID}', '{k.action}')", k.description, show=k.show,
                    tooltip=k.tooltip)
            for pane in RUN_PANES for k in pane.KEYS if k.late == late]


class RunScreen(Screen):
    BINDINGS = [
        Binding("r", "relaunch", "Relaunch", tooltip="stop this run by pid (verified) and launch it again"),
        Binding("s", "stop", "Stop", tooltip="stop this run by pid: SIGTERM, grace period, SIGKILL"),
        Binding("c", "canary", "Canary", tooltip="launch `sleep` through the same wrapper and check it outlives the channel"),
        *_pane_bindings(late=False),
        Binding("b", "bundle", "Bundle", show=False,
                tooltip="the run's evidence in one tar.gz, secrets masked"),
        *(Binding(str(n), f"show_tab('tab-{pane.PANE_ID}')", pane.TITLE, show=False)
          for n, pane in enumerate(TAB_PANES, 1)),
        Binding("question_mark", "app.help", "Help"),
        Binding("q", "app.quit", "Quit", tooltip="leave the dashboard; the run keeps running"),
        # Last: in the footer from 100 columns (it scrolls), always in ? help and the palette.
        Binding("p", "app.switch_profile", "Profile", tooltip="watch another profile (this run keeps running)"),
        *_pane_bindings(late=True),
        # Not in the footer (full from 100 columns already); in ? help and the palette.
        Binding("a", "app.fleet", "Fleet", show=False, tooltip="every profile at once (the fleet screen)"),
        Binding("h", "app.history", "History", show=False,
                tooltip="this profile's earlier runs, openable read-only"),
        Binding("escape", "app.back", "Back", show=False,
                tooltip="from a history run: the live run; else the fleet screen"),
    ]

    busy: reactive[str] = reactive("")   # the run action in flight ("" when none)

    def __init__(self, source: DashboardSource, profile: str, *, clock: Callable[[], float] = time.time,
                 launch_if_no_run: bool = False, start: bool = True, **kwargs) -> None:
        """`launch_if_no_run`: the built-in demo (no config file) launches the local run if there
        is none yet, so the first screen shows a real run start, compile and train. `start`: feed
        the panes from the first mount (else from the first `show_source`, or `streams.start()`)."""
        super().__init__(**kwargs)
        changed_only(self)   # a log frame draws the log's rows, not the whole screen's
        self.start_on_mount = start
        self.source = source
        self.profile = profile
        self.clock = clock
        self.launch_if_no_run = launch_if_no_run
        self.report: RunReport | None = None
        self.received_at: float | None = None
        self.run_id: str | None = None
        self.streams = RunStreams(self)   # the workers that feed the panes (ui/streams.py)
        self._header_tick: asyncio.TimerHandle | None = None   # see _tick_header_in
        self._tab_labels: dict[str, str] = {}     # each tab's label as last set (_label_tabs)
        # (profile, run id) -> the watcher's recovery in words, read from its store (blocking:
        # called in a thread); None when no profile has a [recover] policy.
        self.recovery_words: Callable[[str, str], str] | None = None

    # -- layout -----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        for pane in RUN_PANES:
            if pane is HealthPane:
                with HealthBox(id="health-box"):
                    yield pane(id=pane.PANE_ID)
            elif pane.TITLE is None:
                yield pane(id=pane.PANE_ID)
        with TabbedContent(id="tabs", initial=f"tab-{TAB_PANES[0].PANE_ID}"):
            for pane in TAB_PANES:
                with TabPane(pane.TITLE, id=f"tab-{pane.PANE_ID}"):
                    yield pane(id=pane.PANE_ID)
        # Single-spaced, without the palette item (it ran into the keys at 80 columns; ? help
        # names ctrl+p): r s c l f / e ? q fit in 80 columns.
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        # Held references, not queries: a query searches the *active* screen, and the streams
        # keep updating these panes while a modal (confirm, help) is on top.
        self.panes: list[Pane] = [self.query_one(f"#{p.PANE_ID}", p) for p in RUN_PANES]
        self.tabs = self.query_one(TabbedContent)
        self.query_one(HealthBox).fit(self.app.size.height)
        self.render_header()
        self._tick_header_in(HEADER_TICK_S)
        if self.recovery_words is not None:
            self.set_interval(RECOVERY_READ_S, self._read_recovery)
            self.call_later(self._read_recovery)
        self.log_pane.lines.focus()
        if self.start_on_mount:
            self.streams.start()

    def on_resize(self, event: events.Resize) -> None:
        if getattr(self, "panes", None):   # the first Resize comes before on_mount, which fits it
            self.query_one(HealthBox).fit(event.size.height)   # the tabs keep their share at any height

    def on_unmount(self) -> None:
        if self._header_tick is not None:
            self._header_tick.cancel()

    # The panes with a feed of their own (the rest only take reports, through the list).
    def pane(self, kind: type[PaneT]) -> PaneT:
        return next(p for p in self.panes if isinstance(p, kind))

    @property
    def header_bar(self) -> RunHeader:
        return self.pane(RunHeader)

    @property
    def health_pane(self) -> HealthPane:
        return self.pane(HealthPane)

    @property
    def log_pane(self) -> LogPane:
        return self.pane(LogPane)

    @property
    def gpu_pane(self) -> GpuPane:
        return self.pane(GpuPane)

    @property
    def metrics_pane(self) -> MetricsPane:
        return self.pane(MetricsPane)

    def shown_pane(self) -> Pane | None:
        """The pane of the tab on screen."""
        return self._pane_of_tab(self.tabs.active)

    def _pane_of_tab(self, tab_id: str | None) -> Pane | None:
        return next((p for p in self.panes if p.TITLE is not None and f"tab-{p.PANE_ID}" == tab_id), None)

    def _label_tabs(self) -> None:
        # At every report and GPU sample: the tab is looked up (a DOM query) only to change it.
        for pane in self.panes:
            if pane.TITLE is not None:
                label = pane.tab_label()
                if self._tab_labels.get(pane.PANE_ID, pane.TITLE) != label:
                    self.tabs.get_tab(f"tab-{pane.PANE_ID}").label = label
                    self._tab_labels[pane.PANE_ID] = label

    # -- the source and its streams (ui/streams.py) -------------------------------------------
    def show_source(self, name: str, source: DashboardSource) -> DashboardSource:
        """Show `source` (a profile's live source, or a history run's) from now on; returns the
        one shown before (the caller decides whether to close it)."""
        self.streams.stop()
        old, self.source, self.profile = self.source, source, name
        self.report, self.received_at, self.run_id = None, None, None
        for pane in self.panes:
            pane.reset()
        self.render_header()
        self.streams.start()
        return old

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # The event's own tab: by the time it is handled, another key may have moved `active` on.
        shown = self._pane_of_tab(event.pane.id)
        if shown is not None and shown.STREAM == "events":
            self.streams.restart_metrics()
        else:
            self.streams.stop_events()

    def on_log_pane_file_chosen(self, event: LogPane.FileChosen) -> None:
        self.streams.follow_log()   # exclusive: replaces the previous follower

    def on_report(self, report: RunReport) -> None:
        self.report = report
        if self.launch_if_no_run and report.connected:
            self.launch_if_no_run = False   # once: a later NO RUN is the user's choice
            if report.checklist.verdict is Verdict.NO_RUN and not self.busy:
                self.app.notify("no config file: launching the built-in local run (CPU trainer). "
                                "s stops it, q leaves it running.", title="local demo", timeout=8)
                self.do_run_action("launch")
        self.received_at = self.clock()
        run_id = report.launch.run_id if report.launch else None
        if run_id != self.run_id:
            if self.run_id is not None and run_id is not None:
                for pane in self.panes:
                    pane.new_run(run_id)
                shown = self.shown_pane()
                if shown is not None and shown.STREAM == "events":
                    self.streams.load_previous_run()   # the run before this one is now in history/
            self.run_id = run_id
        for pane in self.panes:
            pane.show(report)
        self._label_tabs()
        self.render_header()
        self._tick_header_in(HEADER_AFTER_REPORT_S)

    def on_gpu_snapshot(self, snap: GpuSnapshot) -> None:
        self.gpu_pane.show_snapshot(snap)
        self._label_tabs()

    # -- the header's clock -------------------------------------------------------------------
    def _tick_header_in(self, delay: float) -> None:
        """The header's own tick, which keeps its ages moving while no report comes: a report
        draws the header and puts the tick off past the next report's due time, so while reports
        flow (each a little over a second apart) the tick never wakes the loop."""
        if self._header_tick is not None:
            self._header_tick.cancel()
        self._header_tick = asyncio.get_running_loop().call_later(delay, self._header_ticked)

    def _header_ticked(self) -> None:
        self._header_tick = None
        if self.is_attached and self.app.is_running:
            self.render_header()
            self._tick_header_in(HEADER_TICK_S)

    async def _read_recovery(self) -> None:
        if self.recovery_words is None:
            return
        words = await asyncio.to_thread(self.recovery_words, self.profile, self.run_id or "")
        if self.is_attached and words != self.header_bar.recovery:
            self.header_bar.recovery = words
            self.render_header()

    def render_header(self) -> None:
        header = self.header_bar
        header.tick(profile=self.profile, now=self.clock(), received_at=self.received_at, busy=self.busy)
        self.set_class(header.badge.has_class("-stale"), "-stale")

    # -- keys: the panes' own, the tabs ---------------------------------------------------------
    def action_pane(self, pane_id: str, action: str) -> None:
        pane = next(p for p in self.panes if p.PANE_ID == pane_id)
        if any(k.action == action and k.reveal for k in pane.KEYS):
            self.action_show_tab(f"tab-{pane_id}")
        getattr(pane, f"action_{action}")()

    def action_show_tab(self, tab: str) -> None:
        self.tabs.active = tab

    # -- run actions ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The palette offers the view's actions on every screen: off while the fleet or a
        # history list is on top of the run view.
        if any(isinstance(s, (FleetScreen, HistoryScreen)) for s in self.app.screen_stack):
            return False
        if action in RUN_ACTIONS and (self.busy or self.source.read_only):
            return None  # shown disabled in the Footer while a launch or stop is in flight
        if action == "bundle" and self.source.read_only:
            return None  # a history run's evidence is its files: no live look to bundle
        return True

    def watch_busy(self) -> None:
        self.refresh_bindings()
        if self.is_mounted:
            self.health_pane.launching = self.busy if self.busy in ("launch", "relaunch") else ""
            self.health_pane.show()
            self.render_header()

    def _pid_text(self) -> str:
        r = self.report
        if r and r.launch and r.pid_alive:
            return f"pid {r.launch.pid}"
        return ""

    def action_relaunch(self) -> None:
        if not self.source.resumable:
            self._confirm_relaunch(None)   # nothing could be resumed: the plain question, now
        else:
            self._ask_relaunch()

    def _confirm_relaunch(self, checkpoint: str | None) -> None:
        run_dir = self.report.run_dir if self.report else "the profile's run dir"
        detail = relaunch_detail(self.profile, self._pid_text(), run_dir)
        if checkpoint is None:
            self.app.push_screen(ConfirmScreen("Relaunch the run?", detail),
                                 lambda yes: self.do_run_action("relaunch") if yes else None)
            return
        self.app.push_screen(RelaunchScreen(detail, checkpoint),
                             lambda answer: (self.do_run_action("relaunch", LaunchRequest(
                                                 relaunch=True, resume=answer == RESUME)) if answer else None))

    @work(exclusive=True, group="ask")
    async def _ask_relaunch(self) -> None:
        try:
            checkpoint = await self.source.newest_checkpoint()
        except (TargetError, OSError):   # no answer about checkpoints: the plain question
            checkpoint = None
        self._confirm_relaunch(checkpoint)

    def action_stop(self) -> None:
        self.app.push_screen(ConfirmScreen("Stop the run?", stop_detail(self.profile, self._pid_text())),
                             lambda yes: self.do_run_action("stop") if yes else None)

    def action_canary(self) -> None:
        self.do_run_action("canary")

    @work(exclusive=True, group="bundle")
    async def action_bundle(self) -> None:
        """The headless bundle (the source's), the file it wrote named in a notification."""
        self.app.notify("taking an evidence bundle (at most 30 s)...", title="bundle", timeout=4)
        try:
            words = await self.source.bundle()
        except (ActionError, TargetError, OSError) as exc:
            self.app.notify(one_line(str(exc), 300), title="bundle failed", severity="error", timeout=10)
        else:
            self.app.notify(one_line(words, 300), title="bundle", timeout=12)

    @work(exclusive=True, group="action")
    async def do_run_action(self, name: str, request: LaunchRequest | None = None) -> None:
        """`name`'s action; a launch or relaunch as `request` asks (else a plain one)."""
        self.busy = name
        try:
            outcome = await run_action(self.source, name, request)
        except (ActionError, TargetError, OSError) as exc:
            self.app.notify(one_line(str(exc), 300), title=f"{name} failed", severity="error", timeout=10)
        else:
            self.app.notify(one_line(outcome, 300), title=name, timeout=6)
        finally:
            self.busy = ""
