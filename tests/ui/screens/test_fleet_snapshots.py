"""SVG snapshots of the fleet screen and of a profile's history, in the states a user must tell
apart at a glance: mixed verdicts with one host down, the attention view, a filter, and the
history list. Recorded rows (tests/support/fleet_replay.py, made by the real row_from_report) on a fixed
clock; the history is real archived run files read by run/history.py.

Update after an intended change with:
    .venv/bin/python -m pytest tests/ui/screens/test_fleet_snapshots.py --snapshot-update
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from dflash_tui.contract.rundir import (ExitRecord, LaunchRecord, StopRecord, TrainStatus, to_json)
from tests.support import fleet_replay as FR
from tests.support import scenarios as R
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.screens.fleet import FleetScreen
from dflash_tui.ui.screens.history import HistoryScreen

pytestmark = pytest.mark.timeout(60)


def fleet_app(fleet=None) -> DashboardApp:
    fleet = fleet or FR.mixed()
    return DashboardApp(lambda name: R.ReplaySource(name, reports=[R.healthy()]), "h200-main",
                        list(fleet.profiles), clock=lambda: R.T0, fleet=fleet)


def on_fleet(*keys: str):
    async def run_before(pilot) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + 5
        while not isinstance(pilot.app.screen, FleetScreen) or not pilot.app.screen.shown:
            assert loop.time() < end, "the fleet screen did not show its rows"
            await pilot.pause(0.02)
        if keys:
            await pilot.press(*keys)
        await pilot.pause()
    return run_before


def test_fleet_mixed_verdicts_one_host_down(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(130, 20), run_before=on_fleet())


def test_fleet_attention_only(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(130, 20), run_before=on_fleet("exclamation_mark"))


def test_fleet_filter(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(130, 20), run_before=on_fleet("slash", "g", "p", "u", "2"))


def test_fleet_narrow_80x24(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(80, 24), run_before=on_fleet())


# -- history --------------------------------------------------------------------------------

def archived(root, run_id: str, start: float, *, steps: int, loss: float, tau: float,
             exit_code: int | None, signal: int | None = None, stop_by: str | None = None,
             log: str = "step 1\n") -> None:
    d = root / "history" / run_id
    d.mkdir(parents=True)
    # pid 1 is never the wrapper of an archived run: its start time does not match.
    (d / "launch.sh").write_text(f"#!/bin/sh\n# dflash-run-id: {run_id}\n")
    (d / "launch.json").write_text(to_json(LaunchRecord(run_id=run_id, pid=1, pgid=1, start_ticks=1,
                                                        start_time=start, argv=["python3", "-m", "dflash_train"],
                                                        host="gpu1", user="root")))
    (d / "train.log").write_text(log)
    (d / "status.json").write_text(to_json(TrainStatus(run_id=run_id, pid=2, time=start + 600, phase="training",
                                                       step=steps, total_steps=20000, loss=loss, tau=tau)))
    if stop_by:
        (d / "stop.json").write_text(to_json(StopRecord(run_id=run_id, pid=1, requested_time=start + 590,
                                                        requested_by=stop_by, signal_sent="SIGTERM")))
    if exit_code is not None or signal is not None:
        (d / "exit.json").write_text(to_json(ExitRecord(run_id=run_id, exit_code=exit_code, signal=signal,
                                                        end_time=start + 600)))
    for p in d.iterdir():
        os.utime(p, (start + 600, start + 600))
    os.utime(d, (start + 600, start + 600))


@pytest.fixture
def history_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    root = tmp_path / "run"
    t = R.T0 - 3 * 86400
    archived(root, "r-20260525-0900", t, steps=20000, loss=1.204, tau=4.81, exit_code=0)
    archived(root, "r-20260526-1100", t + 86400, steps=212, loss=float("nan") if False else 3.9, tau=1.02,
             exit_code=1, log="Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                              "ValueError: drafter-1: loss is nan at step 212\n")
    archived(root, "r-20260527-0800", t + 2 * 86400, steps=8800, loss=1.71, tau=3.9, exit_code=None, signal=15,
             stop_by="ana@laptop")
    yield root
    monkeypatch.delenv("TZ")
    time.tzset()


class LocalHistory:
    """The history half of WatchSource, over this machine (a real Session and agent)."""

    def __init__(self, run_dir) -> None:
        from dflash_tui.config import Profile
        from dflash_tui.watch.session import Session
        self.session = Session(Profile(name="h200-main", run_dir=str(run_dir)))

    async def history(self):
        return await self.session.history()


def test_history_list(snap_compare, history_dir):
    app = fleet_app()
    src = LocalHistory(history_dir)

    async def run_before(pilot) -> None:
        await on_fleet()(pilot)
        screen = HistoryScreen("h200-main", src, lambda p, r: None)
        await pilot.app.push_screen(screen)
        loop = asyncio.get_running_loop()
        end = loop.time() + 15
        while not screen.loaded:
            assert loop.time() < end, "history did not load"
            await pilot.pause(0.05)
        await pilot.press("down")
        await pilot.pause()
        await src.session.close()

    assert snap_compare(app, terminal_size=(120, 14), run_before=run_before)
