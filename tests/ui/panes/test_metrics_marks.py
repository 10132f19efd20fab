"""The Metrics tab marks the verdict engine's loss finding on its series' chart, on the live path
(WatchSource over a HostWatch through the local agent) with real programs: where a loss turned
NaN (DIVERGED: a red line and "✗ NaN at step 20" in the chart's title) and a lone spike of a
TensorBoard curve (a warn: "! spike at step 30 (8.0x)"). The pane draws what the engine found;
the words it renders are the finding's."""

from __future__ import annotations

import pytest

from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.panes.metrics import MetricsPane
from dflash_tui.ui.sources.watch_source import WatchSource
from dflash_tui.watch import open_watch
from dflash_tui.watch.session import Session
from tests.ui.panes.test_metrics_history import PROGRAMS, drawn, profile_of, until

pytestmark = [pytest.mark.timeout(180)]


def rendered(metrics: MetricsPane, name: str) -> str:
    """The text of the chart of `name` as plotext built it for the screen."""
    for chart in metrics.charts:
        args = getattr(chart, "_args", None)
        if args and args[0] is not None and args[0].name == name:
            return chart.plt.build()
    return ""


async def watch_metrics(tmp_path, monkeypatch, command: tuple[str, ...], name: str, want: str,
                        verdict: Verdict | None) -> str:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    profile = profile_of(tmp_path, *command)
    async with Session(profile) as s:
        assert (await s.launch(preflight=False)).run_id
    app = DashboardApp(lambda _: WatchSource(open_watch(profile)), "prog")
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.press("4")
            metrics = app.query_one(MetricsPane)
            try:
                await until(pilot, lambda: want in rendered(metrics, name), 60)
            except AssertionError:
                r = app.run_view.report
                finding = r.activity.loss_finding if r is not None and r.activity is not None else None
                raise AssertionError((finding, metrics.marks, sorted(metrics.chart_series()),
                                      rendered(metrics, name)[:600])) from None
            if verdict is not None:
                assert app.run_view.report.checklist.verdict is verdict
            return rendered(metrics, name)
    finally:
        async with Session(profile) as s:
            await s.stop()


async def test_a_nan_is_marked_where_the_loss_diverged(tmp_path, monkeypatch):
    text = await watch_metrics(tmp_path, monkeypatch, (str(PROGRAMS / "nan_loss.py"), "steps", "20", "400", "0.05"),
                               "loss", "✗ NaN at step 20", Verdict.DIVERGED)
    assert "spike" not in text


async def test_a_lone_spike_is_marked_as_a_warn(tmp_path, monkeypatch):
    text = await watch_metrics(tmp_path, monkeypatch, (str(PROGRAMS / "tb_spike.py"), "lone", "30"),
                               "train/loss", "! spike at step 30 (", None)
    assert "✗" not in text
