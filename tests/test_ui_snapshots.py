"""SVG snapshots of the dashboard in the states a user must tell apart at a glance.

States built from evidence through the real engine (tests/support/scenarios.py) on a fixed
clock, so no wall-clock age reaches an image.
Update after an intended change with:
    .venv/bin/python -m pytest tests/test_ui_snapshots.py --snapshot-update
and look at the SVGs under tests/__snapshots__/test_ui_snapshots/ before committing them.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support import scenarios as R
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.gpus import GpuPane
from dflash_tui.ui.metrics import MetricsPane

pytestmark = pytest.mark.timeout(60)


def app_for(report, gpu=None, *, crash_log: bool = False, started: bool = True) -> DashboardApp:
    def factory(name: str) -> R.ReplaySource:
        if not started:   # nothing ran: no train.log, no events
            return R.ReplaySource(name, reports=[report], gpus=[gpu or R.gpu_snapshot()],
                                  missing=("train.log", "events.jsonl"))
        return R.ReplaySource(name, reports=[report], gpus=[gpu or R.gpu_snapshot()],
                              logs={"train.log": R.train_log(crash=crash_log), "events.jsonl": R.events()})
    return DashboardApp(factory, R.PROFILE, [R.PROFILE, "local"], clock=lambda: R.T0)


def settled(*keys: str, started: bool = True):
    """run_before: wait until every stream delivered its first data, then press keys."""
    async def run_before(pilot) -> None:
        app = pilot.app
        loop = asyncio.get_running_loop()
        end = loop.time() + 5
        while not (app.report is not None and app.query_one(GpuPane).snapshot is not None
                   and (app.log_pane.lines.line_count > 0 if started else app.log_pane.missing)):
            assert loop.time() < end, "streams did not deliver"
            await pilot.pause(0.02)
        if keys:
            await pilot.press(*keys)
        if "4" in keys:   # events.jsonl is read once the Metrics tab is shown
            while not app.query_one(MetricsPane).from_events:
                assert loop.time() < end, "events did not arrive"
                await pilot.pause(0.02)
        await pilot.pause()
    return run_before


def test_healthy_run(snap_compare):
    assert snap_compare(app_for(R.healthy()), terminal_size=(100, 32), run_before=settled())


def test_healthy_run_80x24(snap_compare):
    assert snap_compare(app_for(R.healthy()), terminal_size=(80, 24), run_before=settled())


def test_never_started(snap_compare):
    app = app_for(R.never_started(), R.gpu_snapshot(run_gpus=0, util=0.0), started=False)
    assert snap_compare(app, terminal_size=(100, 32), run_before=settled(started=False))


def test_crashed_with_traceback(snap_compare):
    app = app_for(R.crashed(), crash_log=True)
    assert snap_compare(app, terminal_size=(100, 32), run_before=settled("e"))


def test_stalled_thread(snap_compare):
    assert snap_compare(app_for(R.stalled()), terminal_size=(100, 32), run_before=settled("2"))


def test_nvml_unavailable(snap_compare):
    app = app_for(R.nvml_report(), R.nvml_unavailable())
    assert snap_compare(app, terminal_size=(100, 32), run_before=settled("3"))


def test_stale_connection(snap_compare):
    assert snap_compare(app_for(R.stale()), terminal_size=(100, 32), run_before=settled())


def test_gpus_healthy(snap_compare):
    assert snap_compare(app_for(R.healthy()), terminal_size=(100, 32), run_before=settled("3"))


def test_metrics(snap_compare):
    assert snap_compare(app_for(R.healthy()), terminal_size=(100, 32), run_before=settled("4"))
