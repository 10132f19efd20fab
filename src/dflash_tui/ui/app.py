"""The dflash-tui dashboard: the run view (screens/run.py, which composes, feeds and binds the
panes) and the navigation around it: another profile, the fleet, a run's history, help, the
command palette, quit.

The app picks which source the run view shows (a profile's live run, or a history run while the
live one is kept open for Escape); the run view shows it.
"""

from __future__ import annotations

import gc
import shlex
import time
from pathlib import Path
from typing import Callable, Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from ..remote.base import TargetError
from .fmt import one_line
from .input_driver import quiet_driver_class
from .screens.dialogs import HelpScreen, ProfileScreen
from .screens.fleet import FleetScreen
from .screens.history import HistoryScreen, HistorySource
from .screens.run import RUN_ACTIONS, RunScreen
from .sources.source import DashboardSource

GC_THRESHOLD = (7000, 10, 100)   # the collector's generations while the app runs (on_mount)
SourceFactory = Callable[[str], DashboardSource]


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

    def __init__(self, source_factory: SourceFactory, profile: str, profiles: Iterable[str] = (),
                 *, clock: Callable[[], float] = time.time, launch_if_no_run: bool = False,
                 command: str = "dflash-tui", fleet=None, fleet_home: bool = True) -> None:
        """`command`: how the user starts this dashboard again (for the quit message); `fleet`: a
        FleetPoller (fleet/poller.py); with one (and `fleet_home`), the fleet screen is the home
        and the run view opens from it. `launch_if_no_run`: the built-in demo (no config file)."""
        super().__init__()
        self.fleet = fleet
        self.fleet_home = fleet is not None and fleet_home
        self._live_source: DashboardSource | None = None   # while a history run is shown
        self.source_factory = source_factory
        self.profiles = list(profiles) or [profile]
        self.run_view = RunScreen(source_factory(profile), profile, clock=clock, launch_if_no_run=launch_if_no_run,
                                  start=not self.fleet_home, id="_default")
        self._gc_threshold = gc.get_threshold()   # restored on unmount (see on_mount)
        self.quit_message = ""
        self.command = command      # how this user runs dflash-tui (for the commands it prints)
        self.clock = clock

    @property
    def profile(self) -> str:
        return self.run_view.profile

    def get_driver_class(self):
        return quiet_driver_class(super().get_driver_class())   # ui/input_driver.py: why

    def get_default_screen(self) -> Screen:
        return self.run_view

    def on_mount(self) -> None:
        self.sub_title = self.profile
        if self.fleet is not None:
            self.fleet.start()
        if self.fleet_home:
            self.action_fleet()
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
        live, self._live_source = self._live_source, None
        if isinstance(new, HistorySource):
            self._live_source = new.live   # kept open: Escape returns to it
        elif live is not None and live is not new:
            await live.close()
        self.sub_title = subtitle or name
        old = self.run_view.show_source(name, new)
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
        elif not self.run_view.streams.started:
            self.run_view.streams.start()

    def action_history(self) -> None:
        live = self._live_source or self.run_view.source
        self.push_screen(HistoryScreen(self.profile, live, self._open_history))

    def _open_history(self, profile: str, run) -> None:
        """Show history `run` of `profile` read-only in the run view (from a HistoryScreen)."""
        while self.screen is not self.run_view and len(self.screen_stack) > 1:
            self.pop_screen()
        shown = self.run_view.source
        live = self._live_source if self._live_source is not None and profile == self.profile else None
        if live is None:
            live = shown if profile == self.profile and not isinstance(shown, HistorySource) \
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
        r = self.run_view.report
        if r and r.launch and r.pid_alive:
            self.quit_message = (f"dflash-tui: left the dashboard; the run keeps running (pid "
                                 f"{r.launch.pid} in {r.run_dir}). Stop it with: {self.command} "
                                 f"--profile {shlex.quote(self.profile)} --stop")
        else:
            self.quit_message = "dflash-tui: left the dashboard; nothing was stopped."
        self.exit()

    async def on_unmount(self) -> None:
        gc.unfreeze()   # see on_mount
        gc.set_threshold(*self._gc_threshold)
        await self.run_view.source.close()
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
            if name in RUN_ACTIONS and self.run_view.busy:
                continue
            # The view's own actions run on the view (its check_action says when they may).
            target = self if b.action.startswith("app.") else self.run_view
            yield SystemCommand(f"{b.description} ({self.get_key_display(b)})",
                                b.tooltip or b.description,
                                lambda action=b.action, target=target: target.run_action(action))
