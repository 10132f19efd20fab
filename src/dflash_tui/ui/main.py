"""The dashboard for a loaded config: its sources (one per profile, borrowing the fleet's watches),
the app, and how the user starts it again (for the commands it prints)."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sys

from ..fleet.poller import FleetPoller
from ..recording.recovery.outside import bundle_extras
from ..recording.recovery.recovery_state import recovery_words
from ..recording.recovery.settings import RECOVER_SECTION
from ..recording.recovery.stop_cancel import stop_as_person
from ..recording.store.settings import WATCH_SECTION
from ..recording.store.store import store_path
from .app import DashboardApp
from ..watch import STEADY_INTERVAL_S, open_watch
from .sources.watch_source import WatchSource
from .sources.source import DashboardSource


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
        policy = RECOVER_SECTION.of(config).for_profile(name)
        # A person's `s` under [recover]: the pending restart cancelled (recording/recovery/stop_cancel.py).
        stop = dict(stop=lambda w: stop_as_person(config, w), max_restarts=policy.max_restarts) if policy else {}
        watch = fleet.watches.get(name) if fleet is not None and not profile.is_multinode else None
        extras = functools.partial(bundle_extras, config, profile)   # what `b`'s bundle takes from here
        if watch is not None:   # a run on one host: the fleet's HostWatch
            return WatchSource(watch, owned=False, bundle_extras=extras, **stop)
        return WatchSource(open_watch(profile, steady_interval=STEADY_INTERVAL_S), bundle_extras=extras, **stop)

    builtin = config.path is None   # no config file at all: the embedded `local` demo
    command = invocation()
    if config.path is not None:
        command += f" --config {shlex.quote(str(config.path))}"
    app = DashboardApp(source_for, profile_name, sorted(config.profiles), launch_if_no_run=builtin,
                       command=command, fleet=fleet, fleet_home=fleet_home)
    app.timeline_store = store_path(WATCH_SECTION.of(config))   # the watcher's store: the fleet's Timeline (T)
    if any(RECOVER_SECTION.of(config).for_profile(p.name) is not None for p in file_profiles):
        app.run_view.recovery_words = recovery_words(config)
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
