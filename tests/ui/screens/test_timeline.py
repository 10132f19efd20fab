"""The Timeline screen: a profile's recorded verdicts as bands over time, opened from the fleet
screen's row (T), read from a real store file. Fixed clock and time zone for the snapshot.

Update the snapshot after an intended change with:
    .venv/bin/python -m pytest tests/ui/screens/test_timeline.py --snapshot-update
"""

from __future__ import annotations

import asyncio
import time

import pytest

from dflash_tui.recording.store.change import Evidence, VerdictChange
from dflash_tui.recording.goodput.goodput import goodput
from dflash_tui.recording.store.store import ChangeStore
from dflash_tui.recording.goodput.timeline import bands
from dflash_tui.ui.screens.fleet import FleetScreen
from dflash_tui.ui.screens.timeline import TimelineScreen, strip
from dflash_tui.ui.app import DashboardApp
from tests.support import fleet_replay as FR
from tests.support import scenarios as R

pytestmark = pytest.mark.timeout(60)

PROFILE = "h200-abl"      # the first row of the fleet replay (worst first): the one T opens


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "watch.sqlite3"
    T = R.T0
    with ChangeStore(path) as s:
        for t, run, state, prev, cause, check, ev in [
            (T - 7200, "run-a", "STARTING", "", "pid 4242 started, no step yet", "progress", Evidence()),
            (T - 7100, "run-a", "RUNNING", "STARTING", "step 10, loss 4.2", "progress", Evidence(step=10, loss=4.2)),
            (T - 5000, "run-a", "CRASHED", "RUNNING", "exit code 1: RuntimeError: CUDA error: out of memory",
             "process", Evidence(step=2100, loss=1.9, traceback=("  File \"train.py\", line 88, in step",
                                                                 "RuntimeError: CUDA error: out of memory"))),
            (T - 3000, "run-b", "RUNNING", "CRASHED", "step 1, loss 4.4", "progress", Evidence(step=1)),
            (T - 1800, "run-b", "STALLED", "RUNNING", "idle hang: no step for 60 s", "progress",
             Evidence(step=900, stuck_at="loader.py:41 get_batch")),
            (T - 1500, "run-b", "RUNNING", "STALLED", "step 901, loss 2.0", "progress", Evidence(step=901)),
            (T - 600, "run-b", "UNREACHABLE", "RUNNING", "root@gpu1: connection lost", "transport", Evidence()),
            (T - 420, "run-b", "RUNNING", "UNREACHABLE", "step 1290, loss 1.7", "progress", Evidence(step=1290)),
        ]:
            s.record(VerdictChange(PROFILE, run, t, state, prev, cause, check, ev))
    return path


def fleet_app() -> DashboardApp:
    fleet = FR.mixed()
    return DashboardApp(lambda name: R.ReplaySource(name, reports=[R.healthy()]), "h200-main",
                        list(fleet.profiles), clock=lambda: R.T0, fleet=fleet)


def on_fleet(*keys: str):
    async def run_before(pilot) -> None:
        end = asyncio.get_running_loop().time() + 5
        while not isinstance(pilot.app.screen, FleetScreen) or not pilot.app.screen.shown:
            assert asyncio.get_running_loop().time() < end, "the fleet screen did not show its rows"
            await pilot.pause(0.02)
        await pilot.press(*keys)
        await pilot.pause()
    return run_before


def app_with(store):
    app = fleet_app()
    app.timeline_store = store
    return app


def on_timeline():
    async def run_before(pilot) -> None:
        await on_fleet("T")(pilot)
        end = asyncio.get_running_loop().time() + 5
        while not (isinstance(pilot.app.screen, TimelineScreen) and pilot.app.screen.bands):
            assert asyncio.get_running_loop().time() < end, "the timeline did not load"
            await pilot.pause(0.02)
        await pilot.pause()
    return run_before


async def test_t_on_a_fleet_row_opens_its_timeline_and_escape_comes_back(store, utc):
    app = app_with(store)
    async with app.run_test(size=(130, 30)) as pilot:
        await on_timeline()(pilot)
        screen = pilot.app.screen
        assert screen.profile == PROFILE and [b.state for b in screen.bands] == [
            "STARTING", "RUNNING", "CRASHED", "RUNNING", "STALLED", "RUNNING", "UNREACHABLE", "RUNNING"]
        assert screen.bands[-1].open and screen.bands[-1].end == R.T0
        cause = str(screen.query_one("#tl-cause").render())
        assert "step 1290" in cause
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(pilot.app.screen, FleetScreen)


async def test_the_goodput_line_shows_goodputs_result_for_the_profile(store, utc):
    app = app_with(store)
    async with app.run_test(size=(130, 30)) as pilot:
        await on_timeline()(pilot)
        screen = pilot.app.screen
        line = str(screen.query_one("#tl-goodput").render())
        assert screen.stall_after_s == app.fleet.profiles[PROFILE].stall_after_s
    with ChangeStore(store, readonly=True) as s:
        expected = goodput(s.changes(PROFILE), R.T0, screen.stall_after_s)
    assert line == expected.words(), line
    # run-a crashed after 2,100 s of RUNNING; run-b stalled, was unreachable: all named.
    assert line.startswith(f"goodput {expected.percent:.0f} % of 2.0 h since the first launch; lost ")
    assert "stalled" in line and "down" in line and "unreachable" in line and "lost progress" in line


async def test_a_profile_with_nothing_recorded_says_how_to_start_the_watcher(tmp_path, utc):
    app = app_with(tmp_path / "absent.sqlite3")
    async with app.run_test(size=(130, 30)) as pilot:
        await on_fleet("T")(pilot)
        await pilot.pause(0.2)
        assert "start the watcher: dflash-tui --watch" in str(pilot.app.screen.query_one("#tl-title").render())


def test_every_band_keeps_a_cell_however_short():
    with_short = bands([VerdictChange("p", "r", t, s, "", "") for t, s in
                        ((0.0, "RUNNING"), (1000.0, "STALLED"), (1000.5, "RUNNING"), (2000.0, "CRASHED"))],
                       now=2000.0)
    line = strip(with_short, 0.0, 2000.0, 40)
    assert len(line.plain) == 40
    styles = [str(span.style) for span in line.spans]
    assert len(styles) == 4 and "white on red" in styles[1]


def test_timeline_snapshot(snap_compare, store, utc):
    assert snap_compare(app_with(store), terminal_size=(130, 30), run_before=on_timeline())
