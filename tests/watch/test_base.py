"""The RunWatch seam's one place where a change of verdict is seen: listeners get
(previous, current) once per change of the verdict or of a check's state, never for a poll
that only refreshed ages; a real run on this machine, launched, running, stopped."""

from __future__ import annotations

import asyncio
import time

import pytest

from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch.session import Session
from dflash_tui.watch import HostWatch, changed

from tests.support.runs import standin_profile

pytestmark = pytest.mark.timeout(60)


async def poll_until(watch: HostWatch, verdict: Verdict, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        report = await watch.poll()
        if report.checklist.verdict is verdict or time.monotonic() > deadline:
            return report
        await asyncio.sleep(0.2)


async def test_listeners_hear_each_change_of_verdict_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    profile = standin_profile(tmp_path / "run", "beat", "--interval=0.2", stall_after_s=30.0)
    watch = HostWatch(Session(profile, targets=(LocalTarget(), LocalTarget())), interval=0.2)
    heard: list[tuple[Verdict | None, Verdict]] = []
    watch.add_listener(lambda prev, cur: heard.append((prev and prev.checklist.verdict, cur.checklist.verdict)))
    try:
        first = await watch.poll()
        assert first.checklist.verdict is Verdict.NO_RUN and heard == [(None, Verdict.NO_RUN)]
        await watch.poll()
        assert len(heard) == 1, heard   # the same states again: nothing to tell

        result = await watch.launch()
        assert result.launched and result.report.checklist.verdict in (Verdict.STARTING, Verdict.RUNNING)
        running = await poll_until(watch, Verdict.RUNNING)
        assert running.checklist.verdict is Verdict.RUNNING, running.checklist
        assert heard[1][0] is Verdict.NO_RUN and heard[-1][1] is Verdict.RUNNING, heard
        expected = len(heard)
        for _ in range(5):   # steps advance, ages grow: heard only when a state turned
            again = await watch.poll()
            expected += changed(running, again)
            running = again
        assert len(heard) == expected, heard

        (stopped,) = (await watch.stop()).values()
        assert stopped.ok, stopped.message
        final = await poll_until(watch, Verdict.STOPPED)
        assert final.checklist.verdict is Verdict.STOPPED and heard[-1] == (Verdict.RUNNING, Verdict.STOPPED), heard
        assert watch.last is final
    finally:
        await watch.close()
