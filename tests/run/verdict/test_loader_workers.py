"""DataLoader workers that end with their loader are not silent processes: a healthy loop
whose workers are shut down every epoch, some while they prefetch (tests/programs/
loader_workers_end.py), never has a worker named silent, and its threads are free of ended
workers."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.run.verdict.checklist import CheckState, Verdict

from tests.run.verdict.test_verdicts_programs import program_profile

pytestmark = pytest.mark.timeout(180)
PROGRAM = str(Path(__file__).resolve().parents[2] / "programs" / "loader_workers_end.py")


async def test_workers_ended_by_their_loader_are_not_silent_processes(sessions, tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    s = sessions(program_profile(tmp_path / "run", (sys.executable, PROGRAM), stall_after_s=6.0))
    await s.launch(preflight=False)
    looks = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 50:
        ev, cl = await s.check()
        probe = next((c for c in cl.checks if c.id == "probe"), None)
        if probe is not None:
            progress = next(c for c in cl.checks if c.id == "progress")
            looks.append((round(time.monotonic() - t0, 1), cl.verdict, probe.state, probe.cause, progress.cause))
            # On a loaded machine the loop itself may run no Python past the limit: then it is
            # named silent. A worker never is: it ended with its loader.
            pids = {p.pid for p in ev.probes}
            loop = {p.pid for p in ev.probes if p.ppid not in pids}
            silent = {int(pid) for pid in re.findall(r"pid (\d+)", probe.cause.partition("silent: ")[2])}
            assert silent <= loop, looks
        await asyncio.sleep(1.0)
    warned = [x for x in looks if x[2] is not CheckState.OK]
    assert len(warned) <= len(looks) // 4, looks
    ended = [x for x in looks if "DataLoader worker(s) ended" in x[3]]
    assert len(ended) >= 3, looks            # workers did end, look after look
    # The ended workers never make the run anything but RUNNING; on a loaded machine the loop
    # itself may print nothing past the 6 s limit (its own silence, STALLED by the progress check).
    others = [x for x in ended if x[1] is not Verdict.RUNNING]
    assert all(v is Verdict.STALLED and words.startswith("no output for") for _, v, _, _, words in others), others
    assert len(ended) - len(others) >= 3, looks
