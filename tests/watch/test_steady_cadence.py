"""The run view's cadence: a steady run is looked at every `steady_interval`, any other every
`interval`, and a steady run's end shows at once (the agent's exit watch wakes the next look)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch import HostWatch
from dflash_tui.watch.session import Session

pytestmark = pytest.mark.timeout(90)
PRINT_LOOP = str(Path(__file__).resolve().parents[1] / "programs" / "print_loop.py")
STEADY_S = 3.0


async def test_a_steady_run_is_looked_at_less_often_and_its_end_shows_at_once(tmp_path):
    profile = Profile(name="steady", run_dir=str(tmp_path / "run"), python=sys.executable,
                      command=(sys.executable, PRINT_LOOP, "100000", "0.2"), stop_grace_s=2.0, min_free_gb=0.0)
    watch = HostWatch(Session(profile), interval=0.25, steady_interval=STEADY_S)
    try:
        await watch.launch(preflight=False)
        reports = watch.reports()
        at = []
        deadline = time.monotonic() + 40
        steady_looks = 0
        async for report in reports:
            at.append((time.monotonic(), report))
            steady_looks += watch.session.progress.looks.steady
            if steady_looks >= 3 or time.monotonic() > deadline:
                break
        running = [(t, r) for t, r in at if r.checklist.verdict is Verdict.RUNNING]
        assert running and watch.session.progress.looks.steady, [r.checklist.summary for _, r in at][-3:]
        # Before the run was steady (starting): every interval; steady: every STEADY_S.
        assert at[1][0] - at[0][0] < 1.0
        gaps = [round(b - a, 2) for (a, _), (b, _) in zip(at, at[1:])]
        assert min(gaps[-2:]) >= STEADY_S - 0.2, gaps
        last = at[-1][1]
        os.killpg(last.launch.pgid, signal.SIGKILL)
        killed_at = time.monotonic()
        async for report in reports:
            if report.checklist.verdict is not Verdict.RUNNING:
                break
        # The exit watch woke the look: well before the steady pause would have ended.
        assert time.monotonic() - killed_at < STEADY_S / 2, report.checklist.summary
        assert report.checklist.verdict in (Verdict.KILLED, Verdict.CRASHED), report.checklist.summary
        assert not watch.session.progress.looks.steady
    finally:
        await watch.close()


async def test_without_an_exit_watch_a_steady_run_is_still_looked_at_every_interval(tmp_path):
    """ShellOps cannot wait on a process on the target: a steady look every STEADY_S would see
    the run's end up to STEADY_S late, so the looks stay every `interval`."""
    profile = Profile(name="shell", run_dir=str(tmp_path / "run"), python=sys.executable,
                      command=(sys.executable, PRINT_LOOP, "100000", "0.2"), stop_grace_s=2.0, min_free_gb=0.0)
    watch = HostWatch(Session(profile, ops_kind="shell"), interval=0.25, steady_interval=STEADY_S)
    try:
        await watch.launch(preflight=False)
        at, steady_looks = [], 0
        deadline = time.monotonic() + 40
        async for _ in watch.reports():
            at.append(time.monotonic())
            steady_looks += watch.session.progress.looks.steady
            if steady_looks >= 4 or time.monotonic() > deadline:
                break
        assert steady_looks >= 4 and max(b - a for a, b in zip(at[-4:], at[-3:])) < 1.5, at
    finally:
        await watch.stop()
        await watch.close()
