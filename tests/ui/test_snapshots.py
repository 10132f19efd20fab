"""SVG snapshots of the dashboard in the states a user must tell apart at a glance.

States built from evidence through the real engine (tests/support/scenarios.py) on a fixed
clock, so no wall-clock age reaches an image.
Update after an intended change with:
    .venv/bin/python -m pytest tests/ui/test_snapshots.py --snapshot-update
and look at the SVGs under tests/ui/__snapshots__/test_snapshots/ before committing them.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support import scenarios as R
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.panes.gpus import GpuPane
from dflash_tui.ui.panes.metrics import MetricsPane

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
        while not (app.run_view.report is not None and app.query_one(GpuPane).snapshot is not None
                   and (app.run_view.log_pane.lines.line_count > 0 if started else app.run_view.log_pane.missing)):
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
    assert snap_compare(app_for(R.healthy()), terminal_size=(100, 32), run_before=drawn("4"))


# -- the denser views -------------------------------------------------------------------------

def _with(report, gpus, previous=None) -> DashboardApp:
    from dflash_tui.run.history import PreviousRun
    prev = PreviousRun(*previous) if previous else None
    src = R.ReplaySource(R.PROFILE, reports=[report], gpus=gpus, previous=prev,
                         logs={"train.log": R.train_log(), "events.jsonl": R.events()})
    return DashboardApp(lambda name: src, R.PROFILE, [R.PROFILE], clock=lambda: R.T0)


def drawn(*keys: str, wait_previous: bool = False):
    async def run_before(pilot) -> None:
        await settled(*keys)(pilot)
        app = pilot.app
        loop = asyncio.get_running_loop()
        end = loop.time() + 5
        if wait_previous:
            while not app.query_one(MetricsPane).previous_id:
                assert loop.time() < end, "the previous run did not arrive"
                await pilot.pause(0.02)
        for pane in (app.query_one(MetricsPane), app.query_one(GpuPane)):
            if pane.on_screen:
                pane.draw()
        await pilot.pause(0.1)
    return run_before


def test_metrics_with_previous_run(snap_compare):
    app = _with(R.healthy(), [R.gpu_snapshot()], previous=(R.PREVIOUS_RUN_ID, "/h", R.previous_events()))
    assert snap_compare(app, terminal_size=(120, 36), run_before=drawn("4", wait_previous=True))


def test_gpus_eight_with_foreign_processes_160x48(snap_compare):
    app = _with(R.healthy(), R.gpu_history(40, foreign=True))
    assert snap_compare(app, terminal_size=(160, 48), run_before=drawn("3"))


def test_gpus_eight_with_foreign_processes_80x24(snap_compare):
    app = _with(R.healthy(), R.gpu_history(40, foreign=True))
    assert snap_compare(app, terminal_size=(80, 24), run_before=drawn("3"))


def test_checklist_expanded(snap_compare):
    assert snap_compare(app_for(R.healthy()), terminal_size=(100, 32), run_before=settled("k"))


def test_stalled_80x24_no_color(snap_compare, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(app_for(R.stalled()), terminal_size=(80, 24), run_before=settled())


def test_crashed_80x24_no_color(snap_compare, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(app_for(R.crashed(), crash_log=True), terminal_size=(80, 24), run_before=settled())


def test_help_80x24(snap_compare):
    assert snap_compare(app_for(R.healthy()), terminal_size=(80, 24), run_before=settled("question_mark"))


def test_stalled_program_threads_80x24(snap_compare):
    """A STALLED user program's checklist in full at 80x24 (two failures and a warning, each
    wrapped) is capped: the Threads tab keeps its rows, the checklist scrolls."""
    assert snap_compare(app_for(R.stalled_program(), R.nvml_unavailable()), terminal_size=(80, 24),
                        run_before=settled("2"))


def test_help_80x40(snap_compare):
    """Tall enough for one row per key with what it does: every key whole (esc too)."""
    assert snap_compare(app_for(R.healthy()), terminal_size=(80, 40), run_before=settled("question_mark"))


# -- many ranks ---------------------------------------------------------------------------------

def test_ranks_stalled_1024_80x24(snap_compare):
    assert snap_compare(app_for(R.ranks(1024, stuck=777)), terminal_size=(80, 24), run_before=settled("5"))


def test_ranks_straggler_160x48(snap_compare):
    assert snap_compare(app_for(R.ranks(64, slow=9)), terminal_size=(160, 48), run_before=settled("5"))


def test_threads_rank_groups_expanded_160x48(snap_compare):
    assert snap_compare(app_for(R.ranks(64, stuck=7)), terminal_size=(160, 48), run_before=settled("2", "x"))
