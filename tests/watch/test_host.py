"""HostWatch over the loopback sshd: reports once per interval, stale (not frozen, not raising)
when the connection is cut and sshd is down, resumed after it comes back; the run is untouched.
Actions are serialized."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from dflash_tui.config import Profile
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch.session import Session
from dflash_tui.watch import ActionInFlight, HostWatch

from tests.support.run_standins import PROGRAM

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]


def profile(sshd, run_dir) -> Profile:
    return Profile(name="mon", run_dir=str(run_dir), host=sshd.host, port=sshd.port, user=sshd.user,
                   identity_file=str(sshd.client_key), known_hosts=str(sshd.known_hosts),
                   command=(sys.executable, PROGRAM, "beat"), stall_after_s=5, stop_grace_s=2, min_free_gb=0)


async def until(mon, pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        rep = await mon.poll()
        if pred(rep) or time.monotonic() > deadline:
            return rep
        await asyncio.sleep(0.2)


async def test_watch_survives_a_connection_drop(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    session = Session(profile(sshd, tmp_path / "run"))
    mon = HostWatch(session, interval=0.2)
    try:
        first = await mon.poll()
        assert first.connected and first.checklist.verdict is Verdict.NO_RUN

        launch_task = asyncio.ensure_future(mon.launch())
        await asyncio.sleep(0)
        assert mon.busy
        with pytest.raises(ActionInFlight):
            await mon.stop()
        await launch_task

        rep = await until(mon, lambda r: r.checklist.verdict is Verdict.RUNNING)
        assert rep.checklist.verdict is Verdict.RUNNING and rep.pid_alive and rep.uptime_s is not None
        pid = rep.launch.pid
        hb_since = {c.id: c.since for c in rep.checklist.checks}["launch_json"]

        sshd.kill_sessions()
        sshd.stop()
        try:
            stale = await until(mon, lambda r: not r.connected, timeout=20)
            assert not stale.connected and stale.stale_since is not None and stale.error
            assert stale.checklist.verdict is Verdict.RUNNING        # last known data, marked stale
            assert stale.launch.pid == pid
        finally:
            sshd.start()
        back = await until(mon, lambda r: r.connected, timeout=40)
        assert back.connected and back.stale_since is None
        assert back.checklist.verdict is Verdict.RUNNING and back.launch.pid == pid   # the run never noticed
        assert {c.id: c.since for c in back.checklist.checks}["launch_json"] == hb_since

        await mon.stop()
        rep = await mon.poll()
        assert rep.checklist.verdict is Verdict.STOPPED and rep.stop is not None
    finally:
        await session.close()


async def test_reports_iterator_ticks(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    session = Session(profile(sshd, tmp_path / "run"))
    mon = HostWatch(session, interval=0.1)
    try:
        got = []
        t0 = time.monotonic()
        async for rep in mon.reports():
            got.append(rep)
            if len(got) == 4:
                break
        assert time.monotonic() - t0 < 3
        assert all(r.connected and r.checklist.verdict is Verdict.NO_RUN for r in got)
    finally:
        await session.close()
