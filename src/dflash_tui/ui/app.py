"""The dflash-tui dashboard: renders what the headless core reports, live.

Everything arrives through a `DashboardSource` (see sources/source.py) and is consumed by the stream
workers of ui/streams.py, so no call that waits on a target ever runs on Textual's event loop:

- reports (1 Hz, from the RunWatch) -> header, Health, Threads
- GPU snapshots (1 Hz, GpuStream)  -> GPUs
- the selected log file, polled every 0.5 s -> Log (so it never lags the file by a second)
- events.jsonl, polled every second while the Metrics tab is shown -> Metrics

Keys act through the source's launch/stop/relaunch/canary; while one is in flight the
others are disabled (check_action), and the checklist shows the new run fill in by itself.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, TabbedContent, TabPane

from ..fleet.poller import FleetPoller
from ..gpu.sample import GpuSnapshot
from ..recording.store import store_path
from ..remote.base import TargetError
from ..run.report import RunReport
from ..run.verdict import Verdict
from .fmt import one_line
from .input_driver import quiet_driver_class
from .panes import RUN_PANES, TAB_PANES, GpuPane, HealthPane, LogPane, MetricsPane, Pane, RunHeader
from .panes.health import HealthBox
from .screens.dialogs import ConfirmScreen, HelpScreen, ProfileScreen
from .screens.fleet import FleetScreen
from .screens.history import HistoryScreen, HistorySource
from .screens.relaunch import RESUME, RelaunchScreen, relaunch_detail, stop_detail
from .screens.run import RunScreen
from .sources.nodes_source import NodesSource
from .sources.session_source import SessionSource
from .sources.source import LOG_NAMES, TRAIN_LOG, ActionError, DashboardSource, run_action
from .streams import RunStreams

RUN_ACTIONS = ("relaunch", "stop", "canary")
# The run view's own actions: its keys are its screen's, but the palette offers them on every
# screen, so they are off while the fleet or a history list is on top of the run view.
RUN_VIEW_ACTIONS = frozenset({*RUN_ACTIONS, "switch_log", "toggle_follow", "search", "search_next",
                              "search_prev", "first_error", "show_tab", "log_top", "log_bottom",
                              "switch_profile", "fleet", "history", "back"})

HEADER_TICK_S = 1.0           # the header's ages tick each second while no report draws it
HEADER_AFTER_REPORT_S = 1.5   # after a report: the next one is due in a little over a second
GC_THRESHOLD = (7000, 10, 100)   # the collector's generations while the app runs (on_mount)
SourceFactory = Callable[[str], DashboardSource]
PaneT = TypeVar("PaneT", bound=Pane)


class DashboardApp(App[None]):
    # Absolute, so subclasses defined elsewhere (benchmarks, embedders) find the styles too.
    CSS_PATH = Path(__file__).with_name("dflash.tcss")
    TITLE = "dflash-tui"
    ENABLE_COMMAND_PALETTE = True

    # The run view's keys are its screen's (screens/run.py). These two answer on every screen
    # that does not bind them itself (the fleet's footer shows ? Help from here).
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit", tooltip="leave the dashboard; the run keeps running"),
    ]

    busy: reactive[str] = reactive("")   # the run action in flight ("" when none)

    def __init__(self, source_factory: SourceFactory, profile: str, profiles: Iterable[str] = (),
                 *, clock: Callable[[], float] = time.time, launch_if_no_run: bool = False,
                 command: str = "dflash-tui", fleet=None, fleet_home: bool = True) -> None:
        """`command`: how the user starts this dashboard again (for the quit message); `fleet`: a
        FleetPoller (fleet/poller.py); with one (and `fleet_home`), the fleet screen is the home
        and the run view opens from it."""
        super().__init__()
        self.fleet = fleet
        self.fleet_home = fleet is not None and fleet_home
        self._live_source: DashboardSource | None = None   # while a history run is shown
        self.source_factory = source_factory
        self.profile = profile
        self.profiles = list(profiles) or [profile]
        self.clock = clock
        self.source: DashboardSource = source_factory(profile)
        self.report: RunReport | None = None
        self.received_at: float | None = None
        self.log_name = TRAIN_LOG
        self.run_id: str | None = None
        self.streams = RunStreams(self)   # the workers that feed the panes (ui/streams.py)
        self._header_tick: asyncio.TimerHandle | None = None   # see _tick_header_in
        self._gc_threshold = gc.get_threshold()   # restored on unmount (see on_mount)
        self._tab_labels: dict[str, str] = {}     # each tab's label as last set (_label_tabs)
        # The built-in demo (no config file): launch the local run if there is none yet, so
        # the first screen shows a real run start, compile and train.
        self.launch_if_no_run = launch_if_no_run
        self.quit_message = ""
        self.command = command      # how this user runs dflash-tui (for the commands it prints)

    def get_driver_class(self):
        return quiet_driver_class(super().get_driver_class())   # ui/input_driver.py: why

    # -- layout -----------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        return RunScreen(id="_default")   # the run view: composed below, keys its own

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
        # Held references, not queries: App.query_one searches the *active* screen, and the
        # streams keep updating these panes while a modal (confirm, help) is on top.
        self.main_screen = self.screen
        self.panes: list[Pane] = [self.query_one(f"#{p.PANE_ID}", p) for p in RUN_PANES]
        self.tabs = self.query_one(TabbedContent)
        self.query_one(HealthBox).fit(self.size.height)
        self.sub_title = self.profile
        self._render_header()
        self._tick_header_in(HEADER_TICK_S)
        self.log_pane.lines.focus()
        if self.fleet is not None:
            self.fleet.start()
        if self.fleet_home:
            self.action_fleet()
        else:
            self.streams.start()
        # What is built by now lives as long as the app (modules, the widget tree, styles):
        # frozen out of the cyclic collector's reach, its full passes walk only what came after
        # (at 1,000 log lines a second they were a tenth of the dashboard's CPU). Thawed on
        # unmount, so a process that runs apps one after another (tests) collects each one's cycles.
        gc.freeze()
        # And the young generation is collected every 7,000 net allocations, not 700: what
        # a frame and a report leave alive until the next (strips, cells) ran ~5 young passes
        # a second on the Log tab at 1,000 lines a second and a full one every 20 s
        # (~0.15 % of a core; benchmarks/RESULTS.md).
        self._gc_threshold = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLD)

    def on_resize(self, event: events.Resize) -> None:
        if getattr(self, "panes", None):   # the first Resize comes before on_mount, which fits it
            self.query_one(HealthBox).fit(event.size.height)   # the tabs keep their share at any height

    # The panes with a feed or keys of their own (the rest only take reports, through the list).
    def _pane(self, kind: type[PaneT]) -> PaneT:
        return next(p for p in self.panes if isinstance(p, kind))

    @property
    def header_bar(self) -> RunHeader:
        return self._pane(RunHeader)

    @property
    def health_pane(self) -> HealthPane:
        return self._pane(HealthPane)

    @property
    def log_pane(self) -> LogPane:
        return self._pane(LogPane)

    @property
    def gpu_pane(self) -> GpuPane:
        return self._pane(GpuPane)

    @property
    def metrics_pane(self) -> MetricsPane:
        return self._pane(MetricsPane)

    def _label_tabs(self) -> None:
        # At every report and GPU sample: the tab is looked up (a DOM query) only to change it.
        for pane in self.panes:
            if pane.TITLE is not None:
                label = pane.tab_label()
                if self._tab_labels.get(pane.PANE_ID, pane.TITLE) != label:
                    self.tabs.get_tab(f"tab-{pane.PANE_ID}").label = label
                    self._tab_labels[pane.PANE_ID] = label

    # -- streams (ui/streams.py) --------------------------------------------------------------
    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "tab-metrics":
            self.streams.restart_metrics()
        else:
            self.streams.stop_events()

    def on_report(self, report: RunReport) -> None:
        self.report = report
        if self.launch_if_no_run and report.connected:
            self.launch_if_no_run = False   # once: a later NO RUN is the user's choice
            if report.checklist.verdict is Verdict.NO_RUN and not self.busy:
                self.notify("no config file: launching the built-in local run (CPU trainer). "
                            "s stops it, q leaves it running.", title="local demo", timeout=8)
                self.do_run_action("launch")
        self.received_at = self.clock()
        run_id = report.launch.run_id if report.launch else None
        if run_id != self.run_id:
            if self.run_id is not None and run_id is not None:
                for pane in self.panes:
                    pane.new_run(run_id)
                if self.tabs.active == "tab-metrics":
                    self.streams.load_previous_run()   # the run before this one is now in history/
            self.run_id = run_id
        for pane in self.panes:
            pane.show(report)
        self._label_tabs()
        self._render_header()
        self._tick_header_in(HEADER_AFTER_REPORT_S)

    def on_gpu_snapshot(self, snap: GpuSnapshot) -> None:
        self.gpu_pane.show_snapshot(snap)
        self._label_tabs()

    def _tick_header_in(self, delay: float) -> None:
        """The header's own tick, which keeps its ages moving while no report comes: a report
        draws the header and puts the tick off past the next report's due time, so while reports
        flow (each a little over a second apart) the tick never wakes the loop."""
        if self._header_tick is not None:
            self._header_tick.cancel()
        self._header_tick = asyncio.get_running_loop().call_later(delay, self._header_ticked)

    def _header_ticked(self) -> None:
        self._header_tick = None
        if self.is_running:
            self._render_header()
            self._tick_header_in(HEADER_TICK_S)

    def _render_header(self) -> None:
        header = self.header_bar
        header.tick(profile=self.profile, now=self.clock(), received_at=self.received_at,
                    busy=self.busy)
        stale = header.badge.has_class("-stale")
        self.main_screen.set_class(stale, "-stale")

    # -- run actions ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in RUN_VIEW_ACTIONS and any(isinstance(s, (FleetScreen, HistoryScreen))
                                              for s in self.screen_stack):
            return False
        if action in RUN_ACTIONS and (self.busy or self.source.read_only):
            return None  # shown disabled in the Footer while a launch or stop is in flight
        return True

    def watch_busy(self) -> None:
        self.refresh_bindings()
        if self.is_mounted:
            self.health_pane.launching = self.busy if self.busy in ("launch", "relaunch") else ""
            self.health_pane.show()
            self._render_header()

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
            self.push_screen(ConfirmScreen("Relaunch the run?", detail),
                             lambda yes: self.do_run_action("relaunch") if yes else None)
            return
        self.push_screen(RelaunchScreen(detail, checkpoint),
                         lambda answer: (self.do_run_action("relaunch", resume=answer == RESUME)
                                         if answer else None))

    @work(exclusive=True, group="ask")
    async def _ask_relaunch(self) -> None:
        try:
            checkpoint = await self.source.newest_checkpoint()
        except (TargetError, OSError):   # no answer about checkpoints: the plain question
            checkpoint = None
        self._confirm_relaunch(checkpoint)

    def action_stop(self) -> None:
        self.push_screen(ConfirmScreen("Stop the run?", stop_detail(self.profile, self._pid_text())),
                         lambda yes: self.do_run_action("stop") if yes else None)

    def action_canary(self) -> None:
        self.do_run_action("canary")

    @work(exclusive=True, group="action")
    async def do_run_action(self, name: str, resume: bool = False) -> None:
        self.busy = name
        try:
            outcome = await run_action(self.source, name, resume=resume)
        except (ActionError, TargetError, OSError) as exc:
            self.notify(one_line(str(exc), 300), title=f"{name} failed", severity="error", timeout=10)
        else:
            self.notify(one_line(outcome, 300), title=name, timeout=6)
        finally:
            self.busy = ""

    # -- log keys ---------------------------------------------------------------------------
    def action_switch_log(self) -> None:
        i = LOG_NAMES.index(self.log_name)
        self.log_name = LOG_NAMES[(i + 1) % len(LOG_NAMES)]
        pane = self.log_pane
        pane.lines.clear()
        pane.log_name = self.log_name
        self.streams.follow_log()   # exclusive: replaces the previous follower
        self.action_show_tab("tab-log")

    def action_toggle_follow(self) -> None:
        lines = self.log_pane.lines
        lines.follow = not lines.follow

    def action_search(self) -> None:
        self.action_show_tab("tab-log")
        self.log_pane.open_search()

    def _search_again(self, backwards: bool) -> None:
        pane = self.log_pane
        term = pane.lines.search_term
        if not term:
            self.action_search()
        elif not pane.search(term, backwards=backwards):
            self.notify(f"no line contains {term!r}", severity="warning", timeout=3)

    def action_search_next(self) -> None:
        self._search_again(False)

    def action_search_prev(self) -> None:
        self._search_again(True)

    def action_first_error(self) -> None:
        self.action_show_tab("tab-log")
        if self.log_pane.lines.first_error() is None:
            kept = self.log_pane.lines.max_lines
            self.notify(f"no traceback or error line in the last {kept} lines", timeout=3)

    def action_log_top(self) -> None:
        self.log_pane.lines.go_top()

    def action_log_bottom(self) -> None:
        self.log_pane.lines.go_bottom()

    def action_show_tab(self, tab: str) -> None:
        self.tabs.active = tab

    # -- checklist and metrics keys ---------------------------------------------------------
    def action_toggle_checks(self) -> None:
        self.health_pane.toggle()

    def action_metrics_smoothing(self) -> None:
        self.action_show_tab("tab-metrics")
        w = self.metrics_pane.cycle_smoothing()
        self.notify(f"smoothing {w:g}" if w else "smoothing off", timeout=2)

    def action_metrics_zoom(self) -> None:
        self.action_show_tab("tab-metrics")
        n = self.metrics_pane.cycle_zoom()
        self.notify("all steps" if n is None else f"the last {n} steps", timeout=2)

    def action_metrics_page(self) -> None:
        self.action_show_tab("tab-metrics")
        self.metrics_pane.next_page()

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The palette's Screenshot: into the current directory (the default, ~/Downloads,
        may not exist); the notification names the file."""
        return super().deliver_screenshot(filename, path or str(Path.cwd()), time_format)

    # -- profile, help, quit ----------------------------------------------------------------
    def action_switch_profile(self) -> None:
        if len(self.profiles) < 2:
            self.notify(f"only one profile ({self.profile}); add more in the config file",
                        timeout=4)
            return
        self.push_screen(ProfileScreen(self.profiles, self.profile), self._switch_profile)

    async def _switch_profile(self, name: str | None) -> None:
        if not name or (name == self.profile and self._live_source is None):
            return
        try:
            new = self.source_factory(name)
        except (ValueError, TargetError, OSError) as exc:
            self.notify(one_line(str(exc), 300), title=f"profile {name}", severity="error")
            return
        await self._use_source(name, new)

    async def _use_source(self, name: str, new: DashboardSource, subtitle: str | None = None) -> None:
        """Show `new` (a profile's live source, or a history run's) in the run view."""
        self.streams.stop()
        old, self.source, self.profile = self.source, new, name
        live, self._live_source = self._live_source, None
        if isinstance(new, HistorySource):
            self._live_source = new.live   # kept open: Escape returns to it
        elif live is not None and live is not new:
            await live.close()
        self.sub_title = subtitle or name
        self.report, self.received_at, self.run_id = None, None, None
        for pane in self.panes:
            pane.reset()
        self._render_header()
        self.streams.start()
        if old is not new and old is not self._live_source:
            await old.close()

    # -- fleet and history --------------------------------------------------------------------
    def action_fleet(self) -> None:
        if self.fleet is None:
            self.notify("one profile only: the fleet screen shows several (add profiles to the "
                        "config file)", timeout=4)
            return
        if isinstance(self.screen, FleetScreen):
            return
        if not self.is_screen_installed("fleet"):
            # One fleet screen for the app's life: its filter, sort and cursor survive a visit
            # to a run view, and its rows keep refreshing meanwhile.
            self.install_screen(FleetScreen(self.fleet, self.source_factory, self._open_from_fleet,
                                            self._history_from_fleet, clock=self.clock), "fleet")
        self.push_screen("fleet")

    def _open_from_fleet(self, name: str) -> None:
        self.pop_screen()
        self.run_worker(self.open_profile(name), group="open", exclusive=True)

    def _history_from_fleet(self, name: str) -> None:
        self.push_screen(HistoryScreen(name, self.source_factory(name), self._open_history))

    async def open_profile(self, name: str) -> None:
        """The single-run view of `name`, live."""
        if name != self.profile or self._live_source is not None:
            await self._switch_profile(name)
        elif not self.streams.started:
            self.streams.start()

    def action_history(self) -> None:
        live = self._live_source or self.source
        self.push_screen(HistoryScreen(self.profile, live, self._open_history))

    def _open_history(self, profile: str, run) -> None:
        """Show history `run` of `profile` read-only in the run view (from a HistoryScreen)."""
        while not self.screen is self.main_screen and len(self.screen_stack) > 1:
            self.pop_screen()
        live = self._live_source if self._live_source is not None and profile == self.profile else None
        if live is None:
            live = self.source if profile == self.profile and not isinstance(self.source, HistorySource) \
                else self.source_factory(profile)
        source = HistorySource(live, run)
        self.run_worker(self._use_source(profile, source, f"{profile} · {source.label}"),
                        group="open", exclusive=True)

    def action_back(self) -> None:
        if self._live_source is not None:
            live = self._live_source
            self.run_worker(self._use_source(self.profile, live), group="open", exclusive=True)
        elif self.fleet is not None:
            self.action_fleet()

    def action_help(self) -> None:
        rows = [(b.key_display or self.get_key_display(b), b.description, b.tooltip)
                for b in RunScreen.BINDINGS if isinstance(b, Binding)]
        self.push_screen(HelpScreen(rows))

    async def action_quit(self) -> None:
        r = self.report
        if r and r.launch and r.pid_alive:
            self.quit_message = (f"dflash-tui: left the dashboard; the run keeps running (pid "
                                 f"{r.launch.pid} in {r.run_dir}). Stop it with: {self.command} "
                                 f"--profile {shlex.quote(self.profile)} --stop")
        else:
            self.quit_message = "dflash-tui: left the dashboard; nothing was stopped."
        self.exit()

    async def on_unmount(self) -> None:
        if self._header_tick is not None:
            self._header_tick.cancel()
        gc.unfreeze()   # see on_mount
        gc.set_threshold(*self._gc_threshold)
        await self.source.close()
        if self._live_source is not None:
            await self._live_source.close()
        if self.fleet is not None:
            await self.fleet.close()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for b in RunScreen.BINDINGS:
            if not isinstance(b, Binding) or b.action == "app.quit":
                continue
            name = b.action.removeprefix("app.").split("(")[0]
            if name in RUN_ACTIONS and self.busy:
                continue
            yield SystemCommand(f"{b.description} ({self.get_key_display(b)})",
                                b.tooltip or b.description,
                                lambda action=b.action: self.run_action(action))


def invocation(argv0: str | None = None) -> str:
    """A command that runs this dflash-tui again from the user's shell: `dflash-tui` when that
    is on PATH and is this one, else the path it was started by (`make run` starts
    .venv/bin/dflash-tui, which is not on PATH), or `python -m dflash_tui`."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if not argv0 or argv0.endswith("__main__.py") or argv0 == "-c":
        return f"{shlex.quote(sys.executable)} -m dflash_tui"
    on_path = shutil.which("dflash-tui")
    try:
        if on_path and os.path.samefile(on_path, argv0):
            return "dflash-tui"
    except OSError:
        pass
    return shlex.quote(argv0)


def build_app(config, profile_name: str, *, fleet_home: bool = True) -> DashboardApp:
    """The live dashboard for a loaded config (dflash_tui.config.Config): with several profiles
    in the file, a FleetPoller behind the fleet screen, whose RunWatch each run view on one host
    borrows (one connection and one agent per target, one action at a time per run)."""
    fleet = None
    file_profiles = config.file_profiles()
    if len(file_profiles) > 1:
        fleet = FleetPoller(file_profiles)

    def source_for(name: str) -> DashboardSource:
        profile = config.profile(name)
        if profile.is_multinode:
            return NodesSource(profile)
        watch = fleet.watches.get(name) if fleet is not None else None
        if watch is not None:   # a run on one host: the fleet's HostWatch
            return SessionSource(profile, watch=watch)
        return SessionSource(profile)

    builtin = config.path is None   # no config file at all: the embedded `local` demo
    command = invocation()
    if config.path is not None:
        command += f" --config {shlex.quote(str(config.path))}"
    app = DashboardApp(source_for, profile_name, sorted(config.profiles), launch_if_no_run=builtin,
                       command=command, fleet=fleet, fleet_home=fleet_home)
    app.timeline_store = store_path(config.watch)   # the watcher's store: the fleet's Timeline (T)
    return app


def run_app(config, profile_name: str, *, fleet_home: bool = True) -> int:
    """Start the dashboard on `profile_name` of a loaded config (dflash_tui.config.Config).

    Returns the process exit code. Leaving the dashboard never touches the run; the last line
    printed says so, with the command that would stop it.
    """
    app = build_app(config, profile_name, fleet_home=fleet_home)
    app.run()
    if app.quit_message:
        print(app.quit_message)
    return 0
