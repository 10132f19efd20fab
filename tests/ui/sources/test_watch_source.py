"""The dashboard on the live path (WatchSource over a HostWatch: LogFollower over the agent, real
asyncssh to the loopback sshd), through an SSH drop: the panes keep their last data marked
stale, the app reconnects and resumes, and the run on the target is not touched."""

from __future__ import annotations

import asyncio
import sys

import pytest

from dflash_tui.config import Profile
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch.session import Session
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.panes.header import RunHeader
from dflash_tui.ui.panes.logview import MARKER
from dflash_tui.ui.sources.watch_source import WatchSource
from dflash_tui.watch import open_watch

from tests.support.run_standins import PROGRAM
from tests.support.runs import alive

pytestmark = [pytest.mark.timeout(120)]


async def until(pilot, cond, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached in time"
        await pilot.pause(0.1)


def header(app) -> str:
    from rich.console import Console
    console = Console(width=200, record=True, color_system=None)
    h = app.query_one(RunHeader)
    console.print(h.query_one("#verdict").content)
    console.print(h.query_one("#where").content)
    return console.export_text()


@pytest.mark.sshd
@pytest.mark.slow
async def test_ssh_drop_marks_stale_then_resumes_and_the_run_lives(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    profile = Profile(name="drop", run_dir=str(tmp_path / "run"), host=sshd.host, port=sshd.port,
                      user=sshd.user, identity_file=str(sshd.client_key), known_hosts=str(sshd.known_hosts),
                      python=sys.executable, command=(sys.executable, PROGRAM, "beat"),
                      train_args=("--interval=0.2",), stall_after_s=30.0, stop_grace_s=3.0, min_free_gb=0.0)
    async with Session(profile) as s:
        out = await s.launch()
        assert out.run_id, out.checklist
    pid = out.evidence.launch.pid if out.evidence and out.evidence.launch else None

    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "drop")
    try:
        async with app.run_test(size=(100, 32)) as pilot:
            await until(pilot, lambda: app.run_view.report is not None
                        and app.run_view.report.checklist.verdict is Verdict.RUNNING, 30)
            pid = app.run_view.report.launch.pid
            await until(pilot, lambda: app.run_view.log_pane.lines.line_count > 0, 10)
            lines_before = app.run_view.log_pane.lines.line_count

            sshd.kill_sessions()        # the network cut: every connection dies...
            sshd.stop()                 # ...and the host stays unreachable for a while
            try:
                await until(pilot, lambda: not app.run_view.report.connected, 20)
                await until(pilot, lambda: "STALE: connection lost" in header(app), 5)
                assert app.screen.has_class("-stale")
                # Last data kept: the checklist and the log are still there.
                assert app.run_view.report.checklist.checks and app.run_view.log_pane.lines.line_count >= lines_before
                assert alive(pid), "the SSH drop must not touch the run"
            finally:
                sshd.start()
            await until(pilot, lambda: app.run_view.report.connected
                        and app.run_view.report.checklist.verdict is Verdict.RUNNING, 60)
            await until(pilot, lambda: "STALE" not in header(app), 5)
            assert app.run_view.report.launch.pid == pid and alive(pid)
            n = app.run_view.log_pane.lines.line_count
            await until(pilot, lambda: app.run_view.log_pane.lines.line_count > n, 10)   # the log flows again
    finally:
        async with Session(profile) as s:
            await s.stop()


async def test_log_pane_survives_truncation_and_rotation_on_the_live_path(tmp_path, monkeypatch):
    """The real LogFollower (through the local agent) behind the pane: a truncated and then a
    rotated train.log keep flowing, and the follower's notes are shown as such."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = run_dir / "train.log"
    log.write_text("".join(f"old {i}\n" for i in range(50)))
    profile = Profile(name="logs", run_dir=str(run_dir), python=sys.executable)
    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "logs")
    async with app.run_test(size=(100, 32)) as pilot:
        lines = app.run_view.log_pane.lines
        await until(pilot, lambda: lines.last_line() == "old 49", 15)

        log.write_text("after truncate 1\n")            # truncated (smaller than our offset)
        await until(pilot, lambda: lines.last_line() == "after truncate 1", 10)
        assert any("was truncated" in line for line in lines.lines())

        # A launch sets the previous run's log aside (history/<run id>/) and the new run's
        # wrapper writes a new one: a new file, a new inode, said as a new run.
        (run_dir / "history" / "r-old").mkdir(parents=True)
        log.rename(run_dir / "history" / "r-old" / "train.log")
        log.write_text("new run 1\nnew run 2\n")
        await until(pilot, lambda: lines.last_line() == "new run 2", 10)
        notes = [(line, kind) for line, kind in zip(lines.lines(), lines.kinds()) if "dflash-tui:" in line]
        assert any("new run: the previous run's train.log was set aside (history/)" in line for line, _ in notes), notes
        assert not any("rotated" in line for line, _ in notes), notes
        assert all(kind == MARKER for _, kind in notes)
