"""The denser views: charts of any series with the previous run overlaid, the nvitop-like GPU
pane, the folded checklist, and what 80x24 and NO_COLOR must still show.

Driven through ReplaySource (real RunReport/GpuSnapshot dataclasses and real events.jsonl
lines); the history reader runs against real files through the real local RemoteOps.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.contract.rundir import make_event, to_json
from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.history import PreviousRun, previous_run
from dflash_tui.run.verdict.series import Point, points_from_events, points_from_status
from dflash_tui.run.verdict.checklist import Check, CheckState
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.main import invocation
from dflash_tui.ui.panes.gpus import GRAPH_CPU_SHARE, GpuPane
from dflash_tui.ui.panes.health import HealthBox, HealthPane
from dflash_tui.ui.panes.metrics import CHART_CPU_SHARE, MetricChart, MetricsPane, ema
from dflash_tui.ui.widgets.charts import CHART_MAX_S, CHART_MIN_S, redraw_interval
from dflash_tui.ui.widgets.part_lines import PartLines
from dflash_tui.ui.widgets.rows import RowTable
from tests.support import scenarios as R

pytestmark = pytest.mark.timeout(60)


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def until(pilot, cond, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached in time"
        await pilot.pause(0.02)


async def shown(pilot, app) -> None:
    """Wait for the first report on screen, as a person sees the first frame before a key."""
    await until(pilot, lambda: app.run_view.report is not None)


def app_with(report=None, gpus=None, events=None, previous=None, **kw):
    src = R.ReplaySource(reports=[report or R.healthy()], gpus=gpus or [R.gpu_snapshot()],
                         logs={"train.log": R.train_log(), "events.jsonl": R.events() if events is None else events},
                         previous=previous, **kw)
    return DashboardApp(lambda name: src, R.PROFILE, [R.PROFILE], clock=lambda: R.T0), src


# -- series and history (headless) -----------------------------------------------------------

def test_every_numeric_field_of_step_and_eval_records_is_a_series():
    lines = [to_json(make_event("step", 1.0, step=10, loss=2.5, acc=0.3, grad_norm=1.25, lr=3e-4,
                                thread="drafter-0", ok=True, note="x")),
             to_json(make_event("eval", 2.0, step=10, tau=2.1, prompts=8)),
             to_json(make_event("heartbeat", 3.0, step=11, loss=9.9)),
             '{"v":1,"kind":"step","step":12,"loss":',     # half-written last line
             '{"v":1,"kind":"step","time":4.0,"step":12,"loss":NaN}']   # NaN: no point
    points, skipped = points_from_events(lines)
    assert skipped == 2   # the half-written line, and the NaN the run-dir contract refuses
    assert sorted(points, key=lambda p: p.name) == [
        Point("accuracy", 10, 0.3), Point("grad_norm", 10, 1.25), Point("loss", 10, 2.5),
        Point("lr", 10, 3e-4), Point("tau", 10, 2.1)]
    assert points_from_status(R.healthy().status) == [
        Point("loss", 1527, 2.184), Point("accuracy", 1527, 0.412), Point("tau", 1527, 3.27),
        Point("tokens_per_s", 1527, 18450.0)]


def test_ema_is_tensorboards_debiased_smoothing():
    assert ema([1.0, 1.0, 1.0], 0.6) == pytest.approx([1.0, 1.0, 1.0])   # no start-up bias
    out = ema([0.0, 10.0], 0.6)
    assert out[0] == 0.0 and out[1] == pytest.approx(10 * 0.4 / (1 - 0.36))
    assert ema([3.0, 1.0], 0.0) == [3.0, 1.0]


@pytest.mark.parametrize("prefer", ["agent", "shell"])
async def test_previous_run_is_the_newest_history_entry_with_events(tmp_path: Path, prefer):
    run_dir = tmp_path / "run"
    (run_dir / "history").mkdir(parents=True)
    for i, run_id in enumerate(("r-old", "r-prev", "r-empty")):
        d = run_dir / "history" / run_id
        d.mkdir()
        if run_id != "r-empty":
            (d / "events.jsonl").write_text("\n".join(R.events(3 + i)) + "\n")
        os.utime(d, (1000 + i, 1000 + i))
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer=prefer)
    try:
        prev = await previous_run(ops, str(run_dir))
        assert prev is not None and prev.run_id == "r-prev" and prev.event_lines == R.events(4)
        assert (await previous_run(ops, str(run_dir), exclude="r-prev")).run_id == "r-old"
        assert await previous_run(ops, str(tmp_path / "no-such-run")) is None
        # A tail read that starts mid-line drops the partial first line.
        tail = await previous_run(ops, str(run_dir), max_bytes=300)
        assert tail.event_lines and all(line.startswith("{") for line in tail.event_lines)
    finally:
        await ops.close()


# -- Metrics ---------------------------------------------------------------------------------

async def test_metrics_charts_overlay_the_previous_run_and_take_new_series():
    prev = PreviousRun("r-before", "/h/r-before", R.events(80))
    extra = [to_json(make_event("step", R.T0, step=1500, loss=2.0, grad_norm=0.8))]
    app, src = app_with(events=R.events() + extra, previous=prev)
    async with app.run_test(size=(120, 40)) as pilot:
        metrics = app.query_one(MetricsPane)
        await shown(pilot, app)
        await pilot.press("4")
        await until(pilot, lambda: metrics.from_events and metrics.previous_id == "r-before")
        metrics.draw()
        await pilot.pause()
        assert set(metrics.series) == {"loss", "accuracy", "tau", "tokens_per_s", "grad_norm"}
        charts = app.query(MetricChart)
        assert len(charts) == 4                  # 2x2 at this size; grad_norm on the next page
        text = screen_text(app)
        assert "loss" in text and "step" in text and "•" in text   # the previous run's dots
        assert "(m: page 1/2)" in text and "dots: previous run r-before" in text
        # New points wait as long as the last drawing cost, over its share of a core.
        assert all(c.render_s > 0 for c in charts)
        cost = sum(c.render_s for c in charts)
        assert metrics.chart_interval() == min(CHART_MAX_S, max(CHART_MIN_S, cost / CHART_CPU_SHARE))
        await pilot.press("m")
        await pilot.pause()
        assert "grad norm" in screen_text(app)
        await pilot.press("o")
        assert metrics.smoothing == 0.6
        await pilot.press("z")
        assert metrics.zoom == 1000
        xs, _ = metrics.series["loss"].window(metrics.zoom, 0.0)
        assert xs[0] >= xs[-1] - 1000


async def test_metrics_without_history_draw_one_line_per_chart():
    app, _ = app_with()
    async with app.run_test(size=(100, 32)) as pilot:
        metrics = app.query_one(MetricsPane)
        await shown(pilot, app)
        await pilot.press("4")
        await until(pilot, lambda: metrics.from_events and app.query(MetricChart))
        metrics.draw()
        await pilot.pause()
        text = screen_text(app)
        assert "previous run" not in text and "•" not in text and "loss" in text


# -- GPUs ------------------------------------------------------------------------------------

async def test_eight_gpus_with_foreign_processes_fit_160x48():
    hist = R.gpu_history(30, foreign=True)
    app, _ = app_with(gpus=hist)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = app.query_one(GpuPane)
        await shown(pilot, app)
        await pilot.press("3")
        await until(pilot, lambda: pane.snapshot is hist[-1])
        pane.draw()
        await pilot.pause()
        text = screen_text(app)
        for i in range(8):
            assert f" {i} H200     util" in text
        assert "throttle sw_power_cap" in text and "! 2 Xid" in text
        procs = app.query_one("#gpu-procs", RowTable)
        rows = [[str(c) for c in procs.get_row_at(i)] for i in range(procs.row_count)]
        assert procs.row_count == 11 and procs.size.height >= 12   # every process on screen
        foreign = [r for r in rows if r[6] == "other"]
        assert {(r[0], r[3], r[4]) for r in foreign} == {("3", "alice", "python"), ("6", "bob", "vllm"),
                                                         ("6", "bob", "nvtop")}
        assert all(r[6] == "● run" and r[3] == "root" for r in rows if r not in foreign)
        assert app.query_one("#gpu-history").display and "seconds ago" in text and "now" in text
        # The graph is rebuilt for new samples only as often as its last build allows, by the
        # charts' rule (a build of 8 lines is tens of ms): new samples before then leave it be.
        graph = app.query_one("#gpu-history")
        assert graph.render_s > 0 and redraw_interval(graph.render_s, CHART_CPU_SHARE) >= CHART_MIN_S
        built = graph.render_s
        graph.render_s = 10 * CHART_MAX_S   # as if it were dear: the longest wait
        pane._graph_at = time.monotonic() - (CHART_MAX_S - 5)   # 5 s short of the wait, from now
        pane.show_snapshot(hist[-2])
        await pilot.pause()
        assert graph.render_s == 10 * CHART_MAX_S           # not rebuilt yet
        pane._graph_at -= 6
        pane.show_snapshot(hist[-1])
        await pilot.pause()
        assert graph.render_s != 10 * CHART_MAX_S and graph.render_s < 10 * built + 1   # rebuilt
        # Its wait is its build over its own share (GRAPH_CPU_SHARE), not the Metrics charts':
        # a 30 ms build waits 12 s here, where the charts' share would make it 24 s.
        graph.render_s = 0.03
        wait = redraw_interval(0.03, GRAPH_CPU_SHARE)
        assert wait == 12.0 and redraw_interval(0.03, CHART_CPU_SHARE) == 24.0
        pane._graph_at = time.monotonic() - wait + 1
        pane.show_snapshot(hist[-2])
        await pilot.pause()
        assert graph.render_s == 0.03                        # not rebuilt yet
        pane._graph_at -= 2
        pane.show_snapshot(hist[-1])
        await pilot.pause()
        assert graph.render_s != 0.03                        # rebuilt at its own pace


async def test_eight_gpus_stay_legible_at_80x24():
    hist = R.gpu_history(5, foreign=True)
    app, _ = app_with(gpus=hist)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GpuPane)
        await shown(pilot, app)
        await pilot.press("3")
        await until(pilot, lambda: pane.snapshot is hist[-1])
        pane.draw()
        await pilot.pause()
        lines = screen_text(app).splitlines()
        cards = [line for line in lines if " H200 " in line]
        assert len(cards) == 8 and all("%" in c and "W/700W" in c for c in cards)
        assert "+2 other" in cards[6] and "● run" in cards[6]
        assert not app.query_one("#gpu-history").display    # no room: the cards and processes win


# -- checklist ---------------------------------------------------------------------------------

async def test_healthy_checks_fold_into_one_line_and_k_expands():
    app, _ = app_with()
    async with app.run_test(size=(100, 32)) as pilot:
        health = app.query_one(HealthPane)
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause()
        assert health.size.height == 2   # the summary, and one line for 8 ok checks
        assert "8 checks ok: Wrapper ran (launch.json), Log (train.log), Process" in screen_text(app)
        await pilot.press("k")
        await pilot.pause()
        assert health.size.height == 9 and "last heartbeat just now" in screen_text(app)
        await pilot.press("k")
        await pilot.pause()
        assert health.size.height == 2


async def test_checklist_and_header_redraw_only_changed_lines_and_match_a_full_redraw(monkeypatch):
    # A second in which an age, the summary or the uptime moved renders those parts only
    # (PartLines), and refreshes only their lines; what is on screen then is, segment for
    # segment, what a full redraw from nothing draws.
    r = R.stalled()
    app, _ = app_with(report=r)
    rendered = []
    visual = PartLines._visual
    monkeypatch.setattr(PartLines, "_visual", lambda self, part, width: rendered.append(part.key) or
                        visual(self, part, width))

    def screen() -> list:
        return [list(strip) for strip in app.screen._compositor.render_strips()]

    async with app.run_test(size=(80, 24)) as pilot:
        health, where = app.query_one(HealthPane), app.query_one("#where")
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause()
        for step, (dt, summary) in enumerate([(1, None), (61, None), (61, "stalled at step 9"), (62, None)]):
            cl = r.checklist if summary is None else dataclasses.replace(r.checklist, summary=summary)
            rendered.clear()
            app.run_view.on_report(dataclasses.replace(r, checklist=cl, time=r.time + dt, uptime_s=(r.uptime_s or 0) + dt))
            await pilot.pause()
            await pilot.pause()
            # The ages of the two failing checks and the uptime move; the folded ok checks do not.
            assert rendered and len(rendered) <= 4 and ("ok", 5) not in {k[:2] for k in rendered}, rendered
            if step == 2:
                assert [k[0] for k in rendered] == ["summary"]   # the same second: only the summary
            shown = screen()
            health._cache.clear()
            where._cache.clear()
            health.refresh(layout=True)
            where.refresh()
            await pilot.pause()
            await pilot.pause()
            assert screen() == shown, f"report {step}: the partial redraw differs from a full one"


async def test_warn_and_fail_checks_show_in_full_at_80x24():
    r = R.stalled()
    hint = ("verify its fingerprint, then accept it: ssh-keyscan gpu1 >> /home/me/.config/dflash-tui/known_hosts "
            "(or `ssh -o UserKnownHostsFile=/home/me/.config/dflash-tui/known_hosts -p 22 gpu1` once and answer yes)")
    checks = [*r.checklist.checks, Check("transport", "Target reachable", CheckState.FAIL,
                                          "root@gpu1: unknown host key for gpu1; refusing to connect", hint,
                                          since=R.T0 - 5)]
    r.checklist = dataclasses.replace(r.checklist, checks=checks)
    app, _ = app_with(report=r)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "drafter1 (cuda:6, compiled) silent 5 min" in text
        assert "(limit 60 s) → the named threads stopped" in text
        assert "heartbeats without steps: a worker is stuck (the threads check names it)" in text   # both fails in full
        # Past its share of the 24 rows the checklist scrolls (the tabs keep theirs): the
        # rest of it, the long hint whole, is there below.
        app.query_one(HealthBox).scroll_end(animate=False)
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "answer yes)" in text and "UserKnownHostsFile=/home/me/.config/dflash-tui/known_hosts" in text
        assert "6 checks ok" in text and "drafter1 (cuda:6" not in text   # scrolled past the first rows


async def test_a_stop_under_way_reads_stopping_in_the_header_and_the_checklist():
    app, _ = app_with(report=R.stopping())
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "STOPPING" in text and "STALLED" not in text and "RUNNING" not in text, text
        assert "stopping: SIGTERM sent by ana@laptop 4 s ago" in text
        assert "Stop requested" in text and "SIGKILL after stop_grace_s (10 s)" in text


async def test_a_launch_in_flight_is_not_called_nothing_launched():
    gate = asyncio.Event()

    async def on_action(name):
        await gate.wait()
        return "launched"
    no_run = R.no_run()
    app, _ = app_with(report=no_run, on_action=on_action)
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        app.run_view.do_run_action("launch")
        await until(pilot, lambda: app.run_view.busy == "launch")
        await pilot.pause()
        assert "launch under way: the checklist fills in as the run starts" in screen_text(app)
        gate.set()
        await until(pilot, lambda: not app.run_view.busy)
        await pilot.pause()
        assert "no run in" in screen_text(app)


# -- the rest of the 80x24 list ----------------------------------------------------------------

async def test_help_shows_every_key_at_80x24():
    app, _ = app_with()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("question_mark")
        await pilot.pause()
        text = screen_text(app)
        for key, what in (("q", "Quit"), ("p", "Profile"), ("g", "Top"), ("G", "End"), ("k", "Checks")):
            assert f"{key} {what}" in text, (key, text)


async def test_footer_keys_are_separate_and_threads_keep_beat_at_80x24():
    app, _ = app_with()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await shown(pilot, app)
        await pilot.press("2")
        await pilot.pause()
        lines = screen_text(app).splitlines()
        assert "palette" not in lines[-1] and "? Help q Quit" in lines[-1]
        header = next(line for line in lines if line.strip().startswith("thread"))
        assert header.split()[:3] == ["thread", "beat", "step"]


async def test_palette_screenshot_goes_to_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app, _ = app_with()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        app.deliver_screenshot("shot.svg")
        await until(pilot, lambda: (tmp_path / "shot.svg").exists() and (tmp_path / "shot.svg").stat().st_size)
        assert "RUNNING" in (tmp_path / "shot.svg").read_text()


def test_printed_commands_work_where_dflash_tui_is_not_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))     # nothing named dflash-tui on it
    assert invocation(".venv/bin/dflash-tui") == ".venv/bin/dflash-tui"
    assert invocation("/opt/my tools/dflash-tui") == "'/opt/my tools/dflash-tui'"
    assert invocation("/x/dflash_tui/__main__.py").endswith(" -m dflash_tui")
    exe = tmp_path / "dflash-tui"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert invocation(str(exe)) == "dflash-tui"


async def test_quit_message_names_a_command_that_runs():
    app, _ = app_with()
    app.command = ".venv/bin/dflash-tui --config cfg.toml"
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("q")
    assert "Stop it with: .venv/bin/dflash-tui --config cfg.toml --profile h200 --stop" in app.quit_message


async def test_no_color_failures_are_reversed_not_dimmed(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app, _ = app_with(report=R.crashed())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause()
        assert app.no_color
        badge = app.query_one("#verdict")
        # The failing badge: light background, dark text, bold (the loudest cell on screen).
        bg, fg = badge.styles.background, badge.styles.color
        assert bg.brightness > 0.5 > fg.brightness and badge.styles.text_style.bold
        strips = app.screen._compositor.render_strips()
        row = next(s for s in strips if "exit code 1" in s.text)
        styles = [seg.style for seg in row if "exit code 1" in seg.text]
        assert styles and styles[0].reverse and styles[0].bold


async def test_metrics_chart_the_progress_a_programs_own_log_shows():
    # A program that writes neither status.json nor events (a tqdm loop): the report's
    # progress, parsed from its log by the engine, is what the charts get.
    from dflash_tui.run.verdict.report import RunProgress
    r1 = dataclasses.replace(R.healthy(), status=None,
                             progress=RunProgress("log", step=450, total=1000, loss=2.1, rate=44.3, rate_unit="it/s"))
    r2 = dataclasses.replace(r1, progress=dataclasses.replace(r1.progress, step=460, loss=2.05, rate=44.9))
    app, src = app_with(report=r1, events=[])
    async with app.run_test(size=(100, 32)) as pilot:
        metrics = app.query_one(MetricsPane)
        await shown(pilot, app)
        await pilot.press("4")
        await until(pilot, lambda: metrics.last_step == 450)
        src.push_report(r2)
        await until(pilot, lambda: metrics.last_step == 460)
        assert list(metrics.series["loss"].values) == [2.1, 2.05]
        assert list(metrics.series["it/s"].steps) == [450, 460]
        metrics.draw()
        await pilot.pause()
        text = screen_text(app)
        assert "2 series from the program's log" in text and "it/s" in text


def test_every_pane_key_is_bound_once_and_handled_by_its_pane():
    from dflash_tui.ui.panes import RUN_PANES
    from dflash_tui.ui.screens.run import RunScreen
    keys = [b.key for b in RunScreen.BINDINGS]
    assert len(keys) == len(set(keys)), "a key bound twice: the second never fires"
    bound = {b.key: b.action for b in RunScreen.BINDINGS}
    for pane in RUN_PANES:
        for k in pane.KEYS:
            assert bound[k.key] == f"pane('{pane.PANE_ID}', '{k.action}')"
            assert callable(getattr(pane, f"action_{k.action}", None)), (pane.__name__, k.action)


async def test_metrics_chart_a_tensorboard_file_and_list_its_source(tmp_path: Path):
    # A program that logs only to TensorBoard: the engine's metric files reader (run through the
    # real agent) hands the pane its points and sources with the report.
    from torch.utils.tensorboard import SummaryWriter

    from dflash_tui.run.evidence.metric_files.reader import MetricFiles
    w = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    for step in range(1, 21):
        w.add_scalar("train/loss", 4.0 / step, step)
    w.close()
    files = MetricFiles()
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    try:
        await files.poll(ops, str(tmp_path), 0.0)
    finally:
        await ops.close()
    report = dataclasses.replace(R.healthy(), status=None, progress=None, metrics=files.view())
    app, _ = app_with(report=report, events=[])
    async with app.run_test(size=(160, 32)) as pilot:
        metrics = app.query_one(MetricsPane)
        await pilot.press("4")
        await until(pilot, lambda: metrics.last_step == 20)
        assert list(metrics.chart_series()["train/loss"].steps) == list(range(1, 21))
        metrics.draw()
        await pilot.pause()
        assert "TensorBoard runs/exp1, 1 tag" in screen_text(app)


async def test_metrics_a_series_that_appears_mid_run_is_charted_at_once():
    # A metric file found after the first charts were drawn (TensorBoard's first flush): its
    # series get their charts with the next report, not after the charts' redraw interval.
    from dflash_tui.run.evidence.metric_files.reader import MetricSource, MetricsView
    from dflash_tui.run.evidence.metric_point import MetricPoint
    from dflash_tui.run.verdict.report import RunProgress
    r1 = dataclasses.replace(R.healthy(), status=None, progress=RunProgress("log", step=10, loss=2.1))
    tb = MetricSource("tensorboard", "/r/tb", "TensorBoard tb, 2 tags", 2, None)
    r2 = dataclasses.replace(r1, progress=RunProgress("log", step=11, loss=2.0), metrics=MetricsView(
        (tb,), points=(MetricPoint("train/lr", 11, 0.1), MetricPoint("train/grad_norm", 11, 1.5)),
        history={"train/lr": ((11,), (0.1,)), "train/grad_norm": ((11,), (1.5,))}, history_version=2))
    app, src = app_with(report=r1, events=[])
    async with app.run_test(size=(160, 40)) as pilot:
        metrics = app.query_one(MetricsPane)
        await shown(pilot, app)
        await pilot.press("4")
        await until(pilot, lambda: len(app.query(MetricChart)) == 1)
        assert metrics.chart_interval() >= CHART_MIN_S
        src.push_report(r2)
        await until(pilot, lambda: "train/lr" in metrics.chart_series())
        await until(pilot, lambda: len(app.query(MetricChart)) == 3, timeout=CHART_MIN_S * 0.6)
        assert "TensorBoard tb, 2 tags" in screen_text(app)


async def test_the_gpus_tab_names_each_gpus_health_fault():
    from dflash_tui.gpu import fake_nvml
    from dflash_tui.gpu.codec import snapshot_from_dict
    from dflash_tui.gpu.nvml_reader import NvmlReader

    fake = fake_nvml.FakeNvml(2)
    fake.fault(0, "remap")
    fake.fault(1, "pcie_x8")
    snap = snapshot_from_dict(NvmlReader(fake_nvml.loader(fake)).sample())
    app, _ = app_with(gpus=[snap])
    async with app.run_test(size=(160, 48)) as pilot:
        pane = app.query_one(GpuPane)
        await shown(pilot, app)
        await pilot.press("3")
        await until(pilot, lambda: pane.snapshot is snap)
        pane.draw()
        await pilot.pause()
        text = screen_text(app)
        assert "! a row remap is pending" in text and "! PCIe link x8 of x16" in text, text
        assert "PCIe 5x8" in text


def test_metrics_note_names_only_the_sources_it_read():
    # A program that writes only TensorBoard: no status.json was read, so it is not named.
    pane = MetricsPane()
    pane.on_mount()
    pane.last_step, pane.metric_sources = 258, ("TensorBoard runs/exp1",)
    note = pane._note_text(3, 1)
    assert note.startswith("step 258 · 3 series from TensorBoard runs/exp1 · "), note
    assert "status.json" not in note
