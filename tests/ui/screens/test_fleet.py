"""The fleet screen on the live path (a real FleetPoller over real local runs and a host that
refuses), driven with Pilot like a user: mixed verdicts, the unreachable row, the attention
toggle, a filter, sorting, Enter into the single-run view and Escape back, s on a row with
its confirmation, and a history run opened read-only."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

import pytest

from dflash_tui.config import Config
from dflash_tui.fleet.row import UNREACHABLE, FleetRow
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch.session import Session
from dflash_tui.ui.main import build_app
from dflash_tui.ui.screens.fleet import FleetScreen, row_cells
from dflash_tui.ui.screens.history import HistoryScreen, HistorySource
from dflash_tui.ui.screens.relaunch import RelaunchScreen
from dflash_tui.ui.screens.dialogs import ConfirmScreen
from dflash_tui.config import Profile

from tests.support.runs import alive, standin_profile

pytestmark = [pytest.mark.timeout(150)]


async def until(pilot, cond, timeout: float, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, f"not reached in {timeout:.0f} s: {what}"
        await pilot.pause(0.1)


def shown(app) -> list[str]:
    return [r.profile for r in app.screen.shown]


async def test_fleet_screen_live(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    beat = standin_profile(tmp_path / "beat", "beat", "--interval=0.2", name="beat", source="cfg")
    crash = standin_profile(tmp_path / "crash", "crash", name="crash", source="cfg")
    other = standin_profile(tmp_path / "other", "beat", "--interval=0.2", name="other", source="cfg",
                            stall_after_s=30.0)
    down = Profile(name="down", host="127.0.0.1", port=1, run_dir="/nowhere", source="cfg")
    pids = {}
    for p in (beat, crash, other):
        async with Session(p) as s:
            out = await s.launch()
            assert out.run_id, out.checklist
            pids[p.name] = out.evidence.launch.pid if out.evidence and out.evidence.launch else None
    config = Config(path="cfg", profiles={p.name: p for p in (beat, crash, other, down)})
    app = build_app(config, "beat")
    try:
        async with app.run_test(size=(130, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), 10, "the fleet is the home")
            fleet = app.fleet
            rows = fleet.rows
            await until(pilot, lambda: rows["beat"].verdict is Verdict.RUNNING
                        and rows["other"].verdict is Verdict.RUNNING
                        and rows["crash"].verdict is Verdict.CRASHED and rows["down"].state == UNREACHABLE,
                        30, "mixed verdicts")
            screen = app.screen
            # Worst first: the crash, then the unreachable host, then the healthy ones (drawn
            # with the next coalesced redraw).
            await until(pilot, lambda: shown(app)[:2] == ["crash", "down"], 5, "the screen shows the worst first")
            assert set(shown(app)[2:]) == {"beat", "other"}
            assert "connection refused" in rows["down"].cause and rows["down"].verdict is None

            await pilot.press("exclamation_mark")
            await pilot.pause(0.2)
            assert shown(app) == ["crash", "down"]
            await pilot.press("exclamation_mark")
            await pilot.press("slash", "o", "t", "h")
            await pilot.pause(0.2)
            assert shown(app) == ["other"]
            await pilot.press("enter")           # keeps the filter, back to the table
            await pilot.press("escape")          # clears it
            await pilot.pause(0.2)
            assert len(shown(app)) == 4
            await pilot.press("o")               # sort by the next column: Step, missing last
            await pilot.pause(0.2)
            assert set(shown(app)[2:]) == {"crash", "down"} and screen.sort_key == "step"
            steps = [rows[n].step for n in shown(app)[:2]]
            assert steps == sorted(steps)
            screen.sort_key = "profile"
            screen.render_rows()
            assert shown(app) == ["beat", "crash", "down", "other"]

            # Enter: beat's single-run view; Escape: back to the fleet.
            screen.table.move_cursor(row=0)
            await pilot.press("enter")
            await until(pilot, lambda: not isinstance(app.screen, FleetScreen), 5, "left the fleet")
            await until(pilot, lambda: app.run_view.report is not None and app.profile == "beat"
                        and app.run_view.report.checklist.verdict is Verdict.RUNNING, 20, "beat's run view")
            assert app.run_view.source.watch is fleet.watches["beat"]     # borrowed, not a second agent
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), 5, "back on the fleet")
            screen = app.screen

            # s on the 'other' row asks first, with the run view's words, then stops it by pid.
            screen.table.move_cursor(row=shown(app).index("other"))
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "stop asks")
            await pilot.press("y")
            await until(pilot, lambda: rows["other"].verdict not in (Verdict.RUNNING, None), 30,
                        "the stopped run's row changes")
            assert not alive(pids["other"])
            assert alive(pids["beat"]), "stopping one row touched another run"

            # r on the crashed row: relaunch (asked first); its old run goes to history/.
            screen = app.screen
            screen.table.move_cursor(row=shown(app).index("crash"))
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RelaunchScreen), 10, "relaunch asks")
            await pilot.press("y")
            await until(pilot, lambda: (tmp_path / "crash" / "history").is_dir()
                        and rows["crash"].verdict is Verdict.CRASHED, 30, "relaunched")

            # h: the crash profile's history; Enter opens the old run read-only.
            screen = app.screen
            screen.table.move_cursor(row=shown(app).index("crash"))
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, HistoryScreen) and app.screen.loaded, 15, "history")
            hist = app.screen
            assert len(hist.runs) == 1 and hist.runs[0].verdict is Verdict.CRASHED
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.run_view.source, HistorySource) and app.run_view.report is not None
                        and "history" in app.run_view.report.run_dir, 10, "the history run in the run view")
            assert app.run_view.report.checklist.verdict is Verdict.CRASHED and app.run_view.report.pid_alive is False
            await until(pilot, lambda: app.run_view.log_pane.lines.line_count > 0, 10, "its archived log")
            assert app.run_view.check_action("relaunch", ()) is None and app.run_view.check_action("stop", ()) is None
            await pilot.press("escape")          # the live run of the same profile
            await until(pilot, lambda: not isinstance(app.run_view.source, HistorySource)
                        and app.run_view.report is not None and "history" not in app.run_view.report.run_dir, 10, "live again")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), 5, "fleet again")
    finally:
        for p in (beat, other, crash):
            async with Session(p) as s:
                await s.stop()


async def test_relaunch_dialog_offers_resume_only_with_a_checkpoint():
    from textual.app import App

    answers = []

    class Host(App):
        pass

    app = Host()
    async with app.run_test(size=(100, 30)) as pilot:
        for checkpoint, keys in (("step 120 (step-00000120)", ("u",)), ("step 120 (step-00000120)", ("y",)),
                                 (None, ("u", "y")), (None, ("n",))):
            app.push_screen(RelaunchScreen("Stops pid 1 …", checkpoint), answers.append)
            await pilot.pause()
            text = " ".join(str(w.render()) for w in app.screen.query("Static"))
            assert ("step 120" in text) == (checkpoint is not None)
            await pilot.press(*keys)
            await pilot.pause()
    # u resumes only when there is something to resume from; without, u does nothing.
    assert answers == ["resume", "fresh", "fresh", None]


async def test_a_run_gone_quiet_turns_stalled_at_its_limit_while_nothing_on_disk_changes(tmp_path, monkeypatch):
    # No probe, and the stand-in sleeps in silence after its beats: status.json, train.log and
    # every other file of the run dir stop changing. The row must still turn STALLED by the
    # clock alone, when the heartbeat's age passes stall_after_s: not before, nor a poll late.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    limit = 3.0
    quiet = standin_profile(tmp_path / "quiet", "stall", "--interval=0.2", "--beats=4", name="quiet",
                            source="cfg", probe=False, stall_after_s=limit, compile_stall_after_s=limit)
    beat = standin_profile(tmp_path / "beat", "beat", "--interval=0.2", name="beat", source="cfg",
                           probe=False, stall_after_s=limit)
    pids = {}
    for p in (quiet, beat):
        async with Session(p) as s:
            out = await s.launch()
            assert out.run_id, out.checklist
            pids[p.name] = out.evidence.launch.pid
    config = Config(path="cfg", profiles={p.name: p for p in (quiet, beat)})
    app = build_app(config, "quiet")
    status = tmp_path / "quiet" / "status.json"
    try:
        async with app.run_test(size=(130, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FleetScreen), 10, "the fleet is the home")
            loop = asyncio.get_running_loop()

            def state() -> str | None:
                row = next((r for r in app.screen.shown if r.profile == "quiet"), None)
                return row.state if row is not None else None

            await until(pilot, lambda: state() == Verdict.RUNNING.value, 30, "the quiet run seen RUNNING")
            # Its last beat: the status file stops changing.
            last, still_since = status.stat().st_mtime_ns, loop.time()
            while loop.time() - still_since < 1.0:
                await pilot.pause(0.05)
                if status.stat().st_mtime_ns != last:
                    last, still_since = status.stat().st_mtime_ns, loop.time()
            heartbeat = json.loads(status.read_text())["heartbeat_time"]
            before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "quiet").iterdir()}
            seen: list[tuple[float, str | None]] = []
            while state() != Verdict.STALLED.value:
                assert time.time() - heartbeat < limit + 6, f"never STALLED: {seen[-3:]}"
                seen.append((time.time() - heartbeat, state()))
                await pilot.pause(0.05)
            stalled_at = time.time() - heartbeat
            assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "quiet").iterdir()} == before, \
                "the run dir changed: this test needs a run that is silent on disk"
            # RUNNING on screen until the limit, STALLED within a poll (1 s) and a redraw of it.
            assert all(s == Verdict.RUNNING.value for age, s in seen if age < limit - 0.05), seen
            assert limit <= stalled_at < limit + 2.0, stalled_at
            row = next(r for r in app.screen.shown if r.profile == "quiet")
            assert "stopped" in row.cause, row.cause
            assert next(r for r in app.screen.shown if r.profile == "beat").state == Verdict.RUNNING.value
    finally:
        for p in (quiet, beat):
            async with Session(p) as s:
                await s.stop()


def test_the_age_cell_is_fresh_for_as_long_as_its_targets_poll_pause():
    """A row's data is "<2s" fresh at 1 s polls, "<4s" at a steady target's 3 s, and its age in
    seconds once older than that: between two steady polls the cell does not change."""
    base = FleetRow(profile="p", host="h", container="", state="RUNNING", verdict=Verdict.RUNNING,
                    cause="", fresh_at=100.0)
    age_cell = lambda row, now: row_cells(row, now)[-1][0]   # noqa: E731
    assert [age_cell(base, 100.0 + t) for t in (0.5, 1.9, 2.5)] == ["<2s", "<2s", "2s"]
    steady = replace(base, polled_every_s=3.0)
    assert [age_cell(steady, 100.0 + t) for t in (0.5, 2.5, 3.9)] == ["<4s"] * 3
    assert age_cell(steady, 105.0) == "5s"
    assert age_cell(replace(base, fresh_at=None), 100.0) == "never"


def test_the_rate_cell_says_its_unit():
    row = FleetRow(profile="p", host="local", container="", state="RUNNING", verdict=Verdict.RUNNING, cause="")
    cell = lambda **kw: row_cells(replace(row, **kw), 0.0)[7][0]
    assert cell(rate=18450.4, rate_unit="tok/s") == "18450 tok/s"
    assert cell(rate=8.234, rate_unit="it/s") == "8.23 it/s" and cell(rate=2.5, rate_unit="s/it") == "2.5 s/it"
    assert cell() == "n/a" and row_cells(replace(row, step=30, total_steps=30), 0.0)[4][0] == "30/30"
