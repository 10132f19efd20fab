"""Pilot tests: every key of the dashboard and every state change it renders.

The app is driven through `ReplaySource`, which plays real RunReport / GpuSnapshot
dataclasses and real log lines through the same interface the live Session uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re

import pytest
from textual.widgets import Input, TabbedContent

from dflash_tui.run.verdict.checklist import Check, CheckState, Checklist, Verdict
from tests.support import scenarios as R
from dflash_tui.ui.widgets.rows import RowTable
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.panes.gpus import GpuPane
from dflash_tui.ui.panes.header import RunHeader
from dflash_tui.ui.panes.health import HealthBox, HealthPane
from dflash_tui.ui.panes.metrics import MetricsPane
from dflash_tui.ui.screens.dialogs import ConfirmScreen, HelpScreen, ProfileScreen
from dflash_tui.ui.sources.source import ActionError
from dflash_tui.ui.panes.threads import ThreadsPane

pytestmark = pytest.mark.timeout(60)

SIZE = (100, 32)


class Clock:
    def __init__(self, t: float = R.T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(report=None, gpu=None, *, crash_log=False, on_action=None, profiles=("h200",), clock=None):
    sources: dict[str, R.ReplaySource] = {}

    def factory(name: str) -> R.ReplaySource:
        src = R.ReplaySource(name, reports=[report or R.healthy()], gpus=[gpu or R.gpu_snapshot()],
                             logs={"train.log": R.train_log(crash=crash_log), "events.jsonl": R.events()},
                             on_action=on_action)
        sources[name] = src
        return src

    app = DashboardApp(factory, profiles[0], profiles, clock=clock or Clock())
    return app, sources


async def until(pilot, cond, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)


def text_of(widget) -> str:
    """What a Static shows, as plain text."""
    from rich.console import Console
    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


def header_text(app) -> str:
    h = app.query_one(RunHeader)
    return text_of(h.query_one("#verdict")) + text_of(h.query_one("#where"))


# -- rendering the states --------------------------------------------------------------------

async def test_healthy_run_shows_running_checks_and_log():
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None and app.run_view.log_pane.lines.line_count > 0)
        head = header_text(app)
        assert "RUNNING" in head and "h200" in head and "root@gpu1 · pct:200" in head
        assert "48211" in head and "12m34s" in head and "/srv/runs/dflash-8b" in head
        assert app.query_one("#verdict").has_class("-ok")
        health = text_of(app.query_one(HealthPane))
        assert "✓ ok" in health and "launch.json" in health and "✗" not in health


async def test_never_started_is_red_at_the_first_poll():
    app, _ = make(R.never_started())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        assert app.query_one("#verdict").has_class("-fail")
        assert "NEVER STARTED" in header_text(app)
        health = text_of(app.query_one(HealthPane))
        assert "✗ fail" in health and "launch shell never ran" in health


async def test_a_slurm_jobs_words_from_the_scheduler_reach_the_header_inert():
    # squeue's partition, node list and reason as a hostile scheduler prints them: the header
    # shows their escapes as text (an OSC would set the terminal's title), and the wrapper's
    # pid on a compute node this host cannot see is not "gone".
    from dflash_tui.backends.slurm.job import parse_squeue
    from dflash_tui.backends.slurm.verdict import headline
    from dflash_tui.run.verdict.checklist import SchedulerFacts
    esc = "\x1b]2;pwned\x07"
    job = parse_squeue("77", f"77|PENDING|Prio{esc}rity|n{esc}1|gp\x9bu{esc}|x|1:00|0:00", 0)
    healthy = R.healthy()
    facts = {**job.to_dict(), "pending_reason": job.reason, "pending_words": None}
    report = dataclasses.replace(healthy, pid_alive=None, checklist=dataclasses.replace(
        healthy.checklist, scheduler=SchedulerFacts("slurm", facts, headline(facts))))
    app, _ = make(report)
    async with app.run_test(size=(220, 32)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        head = header_text(app)
        assert "job 77" in head and "\\x1b]2;pwned\\x07" in head and "(gone)" not in head, head
        assert "\x1b" not in head and "\x07" not in head and "\x9b" not in head


async def test_crashed_shows_traceback_and_e_jumps_to_it():
    app, _ = make(R.crashed(), crash_log=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None and app.run_view.log_pane.lines.line_count > 0)
        health = text_of(app.query_one(HealthPane))
        assert "ValueError: drafter1: loss is nan" in health and "last traceback" in health.lower()
        assert "(gone)" in header_text(app)
        lines = app.run_view.log_pane.lines
        await pilot.press("e")
        tb_row = lines.lines().index("Traceback (most recent call last):")
        assert lines.cursor == tb_row and lines.follow is False


async def test_stalled_thread_stands_out_in_threads_pane():
    app, _ = make(R.stalled())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        assert app.query_one(TabbedContent).active == "tab-threads"
        table = app.query_one("#threads-table", RowTable)
        await until(pilot, lambda: table.row_count > 0)
        first = [str(c) for c in table.get_row_at(0)]
        assert first[0] == "drafter1 STUCK" and first[4] == "compiled" and first[1] == "5m05s"
        assert app.query_one(ThreadsPane).trouble_count() == 1
        assert "Threads (1 !)" in str(app.query_one(TabbedContent).get_tab("tab-threads").label)


async def test_failed_thread_is_marked_failed():
    app, _ = make(R.failed_thread("drafter2"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        table = app.query_one("#threads-table", RowTable)
        await until(pilot, lambda: table.row_count > 0)
        row = [str(c) for c in table.get_row_at(0)]
        assert row[0] == "drafter2 FAILED" and row[4].startswith("FAILED: RuntimeError")


async def test_a_host_without_a_gpu_is_said_once_as_information():
    """A user program on a host with no NVIDIA GPU: the GPUs tab says so plainly (no alarm
    banner, "GPUs (none)"), and the checklist carries no warning about it."""
    report = R.report_of(dataclasses.replace(R._running_evidence(), status=None), R.no_gpu())
    gpus = next(c for c in report.checklist.checks if c.id == "gpus")
    assert gpus.state is CheckState.OK and gpus.cause == "no NVIDIA GPU on gpu1", gpus
    app, _ = make(report, gpu=R.no_gpu())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        pane = app.query_one(GpuPane)
        await until(pilot, lambda: pane.snapshot is not None)
        banner = app.query_one("#gpu-banner")
        assert banner.display and text_of(banner).strip() == "no NVIDIA GPU on gpu1"
        assert not banner.has_class("-error")
        assert str(app.query_one(TabbedContent).get_tab("tab-gpus").label) == "GPUs (none)"


async def test_nvml_unavailable_banner_and_lost_gpu():
    app, sources = make(gpu=R.nvml_unavailable())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        pane = app.query_one(GpuPane)
        await until(pilot, lambda: pane.snapshot is not None)
        banner = app.query_one("#gpu-banner")
        assert banner.display and "libnvidia-ml.so.1 not found" in text_of(banner)
        assert pane.unavailable and "GPUs (n/a)" in str(app.query_one(TabbedContent).get_tab("tab-gpus").label)
        # NVML comes back, then one GPU falls off the bus.
        snap = R.gpu_snapshot()
        gpus = list(snap.gpus)
        gpus[3] = dataclasses.replace(gpus[3], lost=True, util_sm_pct=None)
        sources["h200"].push_gpu(dataclasses.replace(snap, gpus=tuple(gpus)))
        await until(pilot, lambda: not banner.display)
        cards = text_of(app.query_one("#gpu-cards")).splitlines()
        assert cards[3].split()[:3] == ["3", "H200", "LOST:"] and "fell off the bus" in cards[3]
        assert "● run 71.0G" in cards[0]
        table = app.query_one("#gpu-procs", RowTable)
        first = [str(c) for c in table.get_row_at(0)]
        assert first[:4] == ["0", "2000000", "48213", "root"] and first[6] == "● run"
        assert "GPUs (1 lost)" in str(app.query_one(TabbedContent).get_tab("tab-gpus").label)


async def test_unsupported_gpu_fields_read_na():
    snap = R.gpu_snapshot(1)
    g = dataclasses.replace(snap.gpus[0], temperature_c=None, power_w=None, power_limit_w=None,
                            sm_clock_mhz=None)
    app, _ = make(gpu=dataclasses.replace(snap, gpus=(g,)))
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(GpuPane)
        await until(pilot, lambda: pane.snapshot is not None)
        assert app.query_one("#gpu-procs", RowTable).row_count == 0   # hidden tab: not drawn yet
        await pilot.press("3")
        await until(pilot, lambda: app.query_one("#gpu-procs", RowTable).row_count == 1)
        card = text_of(app.query_one("#gpu-cards"))
        # temperature, then power (and its limit): n/a, never 0
        assert re.search(r"\b0 H200 .* 51%\s+n/a\s+n/a ● run 71\.0G", card), card


async def test_a_gpu_busy_on_too_little_power_is_marked_as_spinning():
    snap = R.gpu_snapshot(2)
    spin = dataclasses.replace(snap.gpus[0], util_sm_pct=100.0, power_w=80.0, sm_clock_mhz=1980,
                               sm_clock_max_mhz=1980)
    work = dataclasses.replace(snap.gpus[1], util_sm_pct=100.0, power_w=690.0, sm_clock_mhz=1755,
                               sm_clock_max_mhz=1980)
    app, _ = make(gpu=dataclasses.replace(snap, gpus=(spin, work)))
    async with app.run_test(size=(160, 48)) as pilot:
        pane = app.query_one(GpuPane)
        await pilot.press("3")
        await until(pilot, lambda: pane.snapshot is not None and "SM" in text_of(app.query_one("#gpu-cards")))
        cards = [ln for ln in text_of(app.query_one("#gpu-cards")).splitlines() if ln.strip()]
        # Both read 100 % busy; the one drawing 11 % of its power spins, the other computes.
        assert "80W/700W" in cards[0] and "SM 1980/1980 MEM" in cards[1] and "spins (11 % power)" in cards[1]
        assert "690W/700W" in cards[2] and "SM 1755/1980 MEM" in cards[3] and "spins" not in cards[2] + cards[3]


async def test_stale_connection_shows_age_and_keeps_ticking():
    clock = Clock()
    app, sources = make(clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        assert "STALE" not in header_text(app)
        sources["h200"].push_report(R.stale())
        await until(pilot, lambda: not app.run_view.report.connected)
        assert "connection lost, data 42s old" in header_text(app)
        assert app.screen.has_class("-stale")
        # The data stays (last checks still listed) and its age keeps counting without new reports.
        assert "launch.json" in text_of(app.query_one(HealthPane))
        clock.t += 30
        await until(pilot, lambda: "data 1m12s old" in header_text(app))
        # Reconnected: fresh report clears the stale marking.
        sources["h200"].push_report(R.healthy())
        await until(pilot, lambda: app.run_view.report.connected)
        await until(pilot, lambda: "STALE" not in header_text(app))
        assert not app.screen.has_class("-stale")


async def test_silent_monitor_is_called_stale_too():
    clock = Clock()
    app, _ = make(clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        clock.t += 10     # no report for 10 s although the monitor polls at 1 Hz
        await until(pilot, lambda: "no new report, data 10s old" in header_text(app))


async def test_metrics_from_status_until_step_events_arrive():
    report = R.healthy()
    sources: dict[str, R.ReplaySource] = {}

    def factory(name):
        src = R.ReplaySource(name, reports=[report], gpus=[R.gpu_snapshot()])
        sources[name] = src
        return src
    app = DashboardApp(factory, "h200", clock=Clock())
    async with app.run_test(size=SIZE) as pilot:
        metrics = app.query_one(MetricsPane)
        await pilot.press("4")
        await until(pilot, lambda: metrics.last_step == 1527)
        assert list(metrics.series["tau"].values) == [3.27] and not metrics.from_events
        later = R.healthy()
        later.status.step, later.status.tau = 1528, 3.3
        sources["h200"].push_report(later)
        await until(pilot, lambda: metrics.last_step == 1528)
        assert list(metrics.series["tau"].values) == [3.27, 3.3]
        sources["h200"].push_log("events.jsonl", R.events(5) + ['{"v":1,"kind":"step",'])
        await until(pilot, lambda: metrics.from_events)
        assert len(metrics.series["loss"].steps) == 5 and metrics.skipped == 1 and metrics.last_step == 100
        sources["h200"].push_report(R.healthy())          # status no longer adds points
        await pilot.pause(0.2)
        assert len(metrics.series["loss"].steps) == 5


async def test_missing_log_is_named():
    def factory(name):
        return R.ReplaySource(name, reports=[R.never_started()], missing=("train.log",))
    app = DashboardApp(factory, "h200", clock=Clock())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.log_pane.missing)
        assert "train.log (not found)" in text_of(app.query_one("#log-title"))


async def test_new_run_resets_metrics_and_marks_log():
    app, sources = make()
    async with app.run_test(size=SIZE) as pilot:
        metrics = app.query_one(MetricsPane)
        await until(pilot, lambda: app.run_view.report is not None and metrics.last_step is not None)
        r = R.healthy()
        r.launch = dataclasses.replace(r.launch, run_id="r-next", pid=50001)
        sources["h200"].push_report(r)
        await until(pilot, lambda: app.run_view.report.launch.run_id == "r-next")
        # Fresh history: only the new run's own status.json point, until its step events arrive.
        assert not metrics.from_events and list(metrics.series["loss"].values) == [r.status.loss]
        assert app.run_view.log_pane.lines.lines()[-1] == "── new run r-next ──"


# -- run actions -----------------------------------------------------------------------------

async def test_relaunch_confirm_disables_actions_while_in_flight():
    gate = asyncio.Event()

    async def act(name: str) -> str:
        await gate.wait()
        return f"{name}: new pid 50001 running, old pid 48211 gone"

    app, sources = make(on_action=act)
    async with app.run_test(size=SIZE) as pilot:
        src = sources["h200"]
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")                       # cancelled: nothing happens
        assert not isinstance(app.screen, ConfirmScreen) and src.calls == []
        await pilot.press("r")
        await pilot.press("y")
        await until(pilot, lambda: app.run_view.busy == "relaunch")
        assert src.calls == ["relaunch"]
        assert "relaunch…" in header_text(app)
        for action in ("relaunch", "stop", "canary"):
            assert app.run_view.check_action(action, ()) is None   # disabled (shown dimmed in the Footer)
        await pilot.press("r")
        await pilot.press("s")
        await pilot.press("c")
        assert not isinstance(app.screen, ConfirmScreen) and src.calls == ["relaunch"]
        gate.set()
        await until(pilot, lambda: app.run_view.busy == "")
        assert app.run_view.check_action("relaunch", ()) is True
        assert any("new pid 50001" in n.message for n in app._notifications)


async def test_stop_asks_then_stops():
    async def act(name: str) -> str:
        return "stopped pid 48211 with SIGTERM after 1.2 s"

    app, sources = make(on_action=act)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        assert sources["h200"].calls == []
        await pilot.press("s", "y")
        await until(pilot, lambda: sources["h200"].calls == ["stop"] and not app.run_view.busy)


async def test_canary_runs_without_confirm_and_failure_is_reported():
    async def act(name: str) -> str:
        raise ActionError("canary: sleep died with the channel (SIGHUP): the launch is not detached")

    app, sources = make(on_action=act)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("c")
        await until(pilot, lambda: sources["h200"].calls == ["canary"] and not app.run_view.busy)
        errors = [n for n in app._notifications if n.severity == "error"]
        assert errors and "not detached" in errors[-1].message


# -- log keys --------------------------------------------------------------------------------

async def test_switch_log_follow_top_bottom():
    app, sources = make()
    async with app.run_test(size=SIZE) as pilot:
        lines = app.run_view.log_pane.lines
        extra = [f"step {2000 + i} loss 2.0" for i in range(50)]
        sources["h200"].push_log("train.log", extra)
        n = len(R.train_log()) + len(extra)
        await until(pilot, lambda: lines.line_count == n)
        assert lines.follow and lines.scroll_y == lines.max_scroll_y > 0
        await pilot.press("g")
        assert not lines.follow and lines.scroll_y == 0
        sources["h200"].push_log("train.log", ["step 1600 loss 2.1"])
        await until(pilot, lambda: lines.lines()[-1] == "step 1600 loss 2.1")
        assert lines.scroll_y == 0                    # not following: the view stays put
        await pilot.press("G")
        assert lines.follow and lines.scroll_y == lines.max_scroll_y
        await pilot.press("f")
        assert not lines.follow
        await pilot.press("f")
        assert lines.follow
        await pilot.press("l")
        assert app.run_view.log_pane.log_name == "events.jsonl"
        await until(pilot, lambda: lines.line_count == len(R.events()))
        assert lines.lines()[0].startswith('{"accuracy":')
        await pilot.press("l")
        assert app.run_view.log_pane.log_name == "train.log"
        await until(pilot, lambda: lines.line_count == n + 1)


async def test_search_next_previous_and_escape():
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        lines = app.run_view.log_pane.lines
        await until(pilot, lambda: lines.line_count > 0)
        await pilot.press("slash")
        box = app.query_one("#log-search", Input)
        assert box.display and box.has_focus
        await pilot.press(*"LOSS 2.7", "enter")     # case-insensitive; typing 'l' must not switch logs
        assert app.run_view.log_pane.log_name == "train.log"
        first = lines.cursor
        assert "loss 2.7" in lines.lines()[first] and not lines.follow
        await pilot.press("escape")
        assert not box.display
        await pilot.press("n")
        assert lines.cursor > first and "loss 2.7" in lines.lines()[lines.cursor]
        await pilot.press("N")
        assert lines.cursor == first
        await pilot.press("slash", *"no such text", "enter")
        assert any("no line contains" in n.message for n in app._notifications)


# -- profile, help, palette, quit -------------------------------------------------------------

async def test_profile_switch_closes_old_source_and_follows_new():
    app, sources = make(profiles=("h200", "local"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("p")
        assert isinstance(app.screen, ProfileScreen)
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.profile == "local" and "local" in sources)
        assert sources["h200"].closed
        await until(pilot, lambda: app.run_view.report is not None)
        assert app.run_view.source is sources["local"]


async def test_single_profile_says_so():
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        assert not isinstance(app.screen, ProfileScreen)
        assert any("only one profile" in n.message for n in app._notifications)


async def test_help_lists_every_key():
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = {row[0] for row in app.screen.rows}
        assert {"r", "s", "c", "l", "f", "/", "g", "G", "p", "q", "?", "e"} <= keys
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_a_stalled_checklist_leaves_the_tabs_their_share_at_80x24():
    """The longest STALLED checklist (a user program hung, its helper thread waiting, NVML
    missing) at 80x24: the checklist is capped and scrolls, the Threads tab keeps 12 rows
    (its note, header and every stuck thread)."""
    app, _ = make(R.stalled_program(), gpu=R.nvml_unavailable())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        await pilot.pause()
        health, threads = app.query_one(HealthBox), app.query_one(ThreadsPane)
        assert health.region.height <= 9 and threads.region.height >= 10, (health.region, threads.region)
        assert health.max_scroll_y > 0   # the rest of the checklist is a scroll away
        table = app.query_one("#probe-table", RowTable)
        await until(pilot, lambda: table.row_count == 2)
        assert table.region.height >= 3 and table.region.bottom <= threads.region.bottom
        # A tall terminal gives the checklist all it needs (60 % at most).
        await pilot.resize_terminal(100, 48)
        await pilot.pause()
        assert health.max_scroll_y == 0 and health.region.height <= 28, health.region


@pytest.mark.parametrize("size", [(80, 40), (100, 32), (80, 24)])
async def test_help_draws_every_key_whole(size):
    """No key is cut to "…" (esc is three cells wide), whether the help has one column with
    what each key does or two with the short names."""
    app, _ = make()
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        text = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
        assert re.search(r"\besc +Back\b", text), text
        for key, description, _ in app.screen.rows:
            assert re.search(rf"(^|\s){re.escape(key)} +{re.escape(description)}", text, re.M), (key, text)


async def test_tabs_by_number():
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        tabs = app.query_one(TabbedContent)
        for key, tab in (("4", "tab-metrics"), ("3", "tab-gpus"), ("2", "tab-threads"), ("1", "tab-log")):
            await pilot.press(key)
            assert tabs.active == tab


async def test_palette_offers_the_actions_unless_in_flight():
    app, _ = make()
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Relaunch (r)" in titles and "Search (/)" in titles
        app.run_view.busy = "stop"
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Relaunch (r)" not in titles and "Follow (f)" in titles


async def test_quit_says_the_run_keeps_running():
    app, sources = make()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("q")
    assert "the run keeps running (pid 48211" in app.quit_message
    assert sources["h200"].closed and sources["h200"].calls == []


async def test_no_color_is_honoured(monkeypatch):
    from textual.filter import Monochrome, NoColor
    monkeypatch.setenv("NO_COLOR", "1")
    app, _ = make()
    assert app.no_color
    assert any(isinstance(f, (Monochrome, NoColor)) for f in app._filters)


async def test_poll_error_is_shown_in_health():
    r = R.healthy()
    r.error = "stat /srv/runs/dflash-8b: Permission denied"
    app, _ = make(r)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        assert "poll error: stat /srv/runs/dflash-8b: Permission denied" in text_of(app.query_one(HealthPane))


async def test_checklist_age_uses_the_report_clock():
    r = R.healthy()
    r.checklist = Checklist(Verdict.STARTING, [Check("heartbeat", "heartbeat", CheckState.PENDING,
                                                     "no heartbeat yet", "", since=R.T0 - 3)])
    app, _ = make(r)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        assert app.query_one("#verdict").has_class("-wait")
        health = text_of(app.query_one(HealthPane))
        assert "… pending" in health and health.rstrip().endswith("3s")


async def test_streams_keep_updating_under_a_modal():
    app, sources = make()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("question_mark")
        sources["h200"].push_report(R.crashed())
        sources["h200"].push_log("train.log", ["Traceback (most recent call last):"])
        await pilot.pause(1.3)                       # the 1 s header tick fires under the modal
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert "CRASHED" in header_text(app)
        assert app.run_view.log_pane.lines.lines()[-1] == "Traceback (most recent call last):"


async def test_reports_render_even_when_the_log_poll_hangs():
    class HangingFollower:
        exists = True
        partial = ""

        async def poll(self):
            await asyncio.Event().wait()   # a transport that never answers

    class Source(R.ReplaySource):
        def follow(self, name):
            return HangingFollower()

    src = Source(reports=[R.healthy()])
    app = DashboardApp(lambda name: src, "h200", clock=Clock())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None, timeout=2)
        src.push_report(R.crashed())
        await until(pilot, lambda: "CRASHED" in header_text(app), timeout=2)


@pytest.mark.parametrize("verdict, launches", [(Verdict.NO_RUN, ["launch"]), (Verdict.RUNNING, [])])
async def test_builtin_demo_launches_only_when_there_is_no_run(verdict, launches):
    async def act(name: str) -> str:
        return "launched run r-1 in 0.4 s: STARTING"

    report = R.healthy() if verdict is Verdict.RUNNING else R.no_run()
    src = R.ReplaySource(reports=[report], on_action=act)
    app = DashboardApp(lambda name: src, "local", clock=Clock(), launch_if_no_run=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause(0.3)
        src.push_report(report)                  # a second NO RUN later is the user's business
        await pilot.pause(0.3)
        assert src.calls == launches


async def test_log_behind_another_tab_keeps_lines_and_shows_the_end_on_return():
    app, sources = make()
    async with app.run_test(size=SIZE) as pilot:
        lines = app.run_view.log_pane.lines
        await until(pilot, lambda: lines.line_count == len(R.train_log()))
        await pilot.press("4")
        await until(pilot, lambda: lines._hidden)
        extra = [f"step {2000 + i} loss 2.0" for i in range(60)]
        sources["h200"].push_log("train.log", extra)
        await until(pilot, lambda: lines.last_line() == extra[-1])
        # Hidden: the data is in, but it was neither sized (a layout), scrolled nor painted.
        scrolled = lines.scroll_y
        assert lines.virtual_size.height < lines.line_count
        await pilot.press("1")
        await until(pilot, lambda: not lines._hidden)
        await pilot.pause()
        assert lines.follow and lines.scroll_y == lines.max_scroll_y > scrolled
        rows = [lines.render_line(y).text.strip() for y in range(lines.scrollable_content_region.height)]
        assert extra[-1] in rows


def test_checklist_signature_follows_the_drawn_age():
    from dflash_tui.ui.panes.health import signature
    r = R.healthy()
    checks = tuple(dataclasses.replace(c, since=r.time - 2 * 3600 - 60) for c in r.checklist.checks)
    hours = dataclasses.replace(r, checklist=dataclasses.replace(r.checklist, checks=checks))
    # 2h01m and 2h01m+10s read the same: no repaint; a minute later they read 2h02m.
    assert signature(hours) == signature(dataclasses.replace(hours, time=hours.time + 10))
    assert signature(hours) != signature(dataclasses.replace(hours, time=hours.time + 60))
    # Under an hour the age reads in seconds ("11m34s"): every second is a change.
    assert signature(r) != signature(dataclasses.replace(r, time=r.time + 1))


def test_threads_of_an_ended_run_are_silent_not_stuck():
    # A finished run's threads stopped beating because the process ended: the Threads pane must
    # not call them STUCK (the checklist's STALLED, too, needs a live pid).
    from dataclasses import replace

    from dflash_tui.contract.rundir import ThreadStatus, TrainStatus
    from dflash_tui.run.verdict.health import Limits, thread_states

    t = ThreadStatus(name="drafter0", role="drafter", device="cpu", compile_state="compiled",
                     last_beat_time=1000.0)
    st = TrainStatus(run_id="r", pid=1, time=5000.0, phase="training", threads=[t])
    (judged,) = thread_states(st, 5000.0, Limits(), live=True)
    assert judged.state.value == "STUCK"
    (judged,) = thread_states(st, 5000.0, Limits(), live=False)
    assert judged.state.value == "ended" and not judged.trouble
    st.threads = [replace(t, compile_state="failed")]
    (judged,) = thread_states(st, 5000.0, Limits(), live=False)
    assert judged.state.value == "FAILED"


async def test_the_log_is_polled_twice_a_report_never_twice_at_once():
    # Reports come each second, a little over (a poll takes time): the log poll that a report
    # triggers and the one its timer makes must not fall together (two repaints of every log
    # row within milliseconds), and no gap may leave the log a second behind the file.
    polls: list[float] = []
    loop = asyncio.get_running_loop()

    class TimedFollower(R.ReplayFollower):
        async def poll(self):
            polls.append(loop.time())
            return await super().poll()

    class Source(R.ReplaySource):
        def follow(self, name):
            return TimedFollower()

    src = Source(reports=[R.healthy()])
    app = DashboardApp(lambda name: src, "h200", clock=Clock())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None, timeout=2)
        start = len(polls)
        for _ in range(6):
            await asyncio.sleep(1.03)
            src.push_report(R.healthy())
        await pilot.pause(0.3)
    gaps = [b - a for a, b in zip(polls[start:], polls[start + 1:])]
    assert len(gaps) >= 10, gaps
    assert min(gaps) > 0.25, [round(g, 3) for g in gaps]
    assert max(gaps) < 0.8, [round(g, 3) for g in gaps]


async def test_a_report_held_for_the_log_poll_is_dropped_once_the_app_closes():
    """A report still held for its log poll (or a poll that comes back) when the app closes
    finds its widgets gone: it is dropped, never an error in the app's last frame."""
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        streams, held = app.run_view.streams, app.run_view.report
    streams._pending_report = held
    streams.apply_pending_report()   # after the close: must not reach the removed tabs
    assert streams._pending_report is None


async def test_header_draws_a_report_again_after_a_reset():
    """The header's tick skips a report it drew already; a reset in between (another source
    shown) must not leave CONNECTING on screen when that same report comes back."""
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        assert "RUNNING" in header_text(app)
        header = app.query_one(RunHeader)
        header.reset()
        app.run_view.render_header()
        assert "CONNECTING" in header_text(app)
        header.show(app.run_view.report)   # the very same report object again
        app.run_view.render_header()
        assert "RUNNING" in header_text(app) and "CONNECTING" not in header_text(app)


async def test_header_shows_the_watchers_recovery_from_its_store(tmp_path):
    """The header reads the watcher's recovery log (display only): a planned restart is
    "recovery 1/3, next in N s"; a give-up is "gave up: why"."""
    import time as _time

    from dflash_tui.config_file import parse_config
    from dflash_tui.recording.recovery.recovery_log import Action, RecoveryLog
    from dflash_tui.recording.recovery.recovery_state import recovery_words

    store = tmp_path / "watch.sqlite3"
    config = parse_config(f'[profile.h200]\nrun_dir = "/tmp/x"\n[watch]\nstore = "{store}"\n'
                          '[recover]\nmax_restarts = 3\n', "c.toml")
    app, _ = make()
    app.run_view.recovery_words = recovery_words(config)
    with RecoveryLog(store) as rl:
        rl.record(Action("h200", _time.time(), "planned", "r0", 1, {"at": _time.time() + 24}))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "recovery 1/3, next in 2" in header_text(app))
            rl.record(Action("h200", _time.time(), "gave_up", app.run_view.run_id or "", 1, {"reason": "the same failure came back"}))
            await until(pilot, lambda: "gave up: the same failure came back" in header_text(app), timeout=6)
