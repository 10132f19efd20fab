"""The Metrics tab draws every series from its first point whenever it is opened, on the live
path (WatchSource over a HostWatch through the local agent) with real programs: a TensorBoard
loop that prints nothing, opened late, and an HF Trainer run that has FINISHED."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.panes.metrics import MetricsPane
from dflash_tui.ui.sources.watch_source import WatchSource
from dflash_tui.watch import open_watch
from dflash_tui.watch.session import Session

pytestmark = [pytest.mark.timeout(240)]

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable


async def until(pilot, cond, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached in time"
        await pilot.pause(0.1)


def profile_of(tmp_path: Path, *command: str) -> Profile:
    return Profile(name="prog", run_dir=str(tmp_path / "run"), python=PY, command=(PY, *command),
                   stall_after_s=60.0, stop_grace_s=2.0, min_free_gb=0.0, probe=False)


def drawn(metrics: MetricsPane, name: str):
    """The series a chart on screen was last drawn with (None: no chart of it)."""
    for chart in metrics.charts:
        args = getattr(chart, "_args", None)
        if args and args[0] is not None and args[0].name == name:
            return args[0]
    return None


def newest_step(app, name: str) -> int:
    r = app.run_view.report
    got = r.metrics.latest.get(name) if r is not None and r.metrics is not None else None
    return got[0] if got else 0


async def test_a_tensorboard_curve_opened_late_starts_at_its_first_point(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    profile = profile_of(tmp_path, str(PROGRAMS / "tb_silent.py"))
    async with Session(profile) as s:
        assert (await s.launch(preflight=False)).run_id
    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "prog")
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            # The Log tab is shown while the program writes its points, polls after the first...
            await until(pilot, lambda: newest_step(app, "train/loss") >= 1, 90)
            first_look = newest_step(app, "train/loss")
            await until(pilot, lambda: newest_step(app, "train/loss") >= first_look + 15, 30)
            await pilot.press("4")              # ...and the Metrics tab is opened late.
            metrics = app.query_one(MetricsPane)
            await until(pilot, lambda: drawn(metrics, "train/loss") is not None, 15)
            series = drawn(metrics, "train/loss")
            assert series.steps[0] == 1 and series.values[0] == 5.0, list(series.steps)[:5]
            assert len(series.steps) >= 15
            assert not str(metrics._note).startswith("no steps yet"), metrics._note
    finally:
        async with Session(profile) as s:
            await s.stop()


async def test_a_finished_hf_runs_tab_has_its_curve(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    profile = profile_of(tmp_path, str(PROGRAMS / "hf_trainer.py"), "out", "20", "0.02")
    async with Session(profile) as s:
        assert (await s.launch(preflight=False)).run_id
        for _ in range(360):
            _, cl = await s.check()
            if cl.verdict in (Verdict.FINISHED, Verdict.CRASHED, Verdict.KILLED):
                break
            await asyncio.sleep(0.5)
        assert cl.verdict is Verdict.FINISHED, cl.summary
    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "prog")
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None
                    and app.run_view.report.checklist.verdict is Verdict.FINISHED, 30)
        await pilot.pause(1.5)
        await pilot.press("4")
        metrics = app.query_one(MetricsPane)
        await until(pilot, lambda: drawn(metrics, "loss") is not None, 15)
        loss = drawn(metrics, "loss")
        assert list(loss.steps) == [5, 10, 15, 20], list(loss.steps)
        assert "hf:loss" not in metrics.chart_series()       # one quantity, one series
        assert not str(metrics._note).startswith("no steps yet"), metrics._note
        assert "trainer_state.json" in str(metrics._note), metrics._note
