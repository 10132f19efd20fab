"""1,024 ranks' probe reports: every rank reaches the grouping at a bounded cost per look (the
newest, the never read, a rotating window; a kept copy for the rest), and a kept copy whose file
is newer never makes its process stale."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import pytest

from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.memory import LookMemory
from dflash_tui.run.evidence.probe_files import FIRST_LOOK_REPORTS, MAX_REPORTS, NEWEST, gather_probes
from dflash_tui.run.verdict.hang import STALE_AFTER_S
from dflash_tui.run.verdict.health import evaluate
from tests.support import scenarios as R
from tests.support.probe import write_reports

pytestmark = pytest.mark.timeout(60)
N, HUNG = 1024, 777


def poll_files(run_dir, t: float, hung: bool) -> None:
    """Every rank's probe rewrote its report at `t` (rank 777's first, so the newest reports are
    never its); from `hung` on, rank 777 waits on a queue."""
    reports = [dataclasses.replace(p, time=t, seq=int(t)) for p in R.rank_probes(N, stuck=HUNG if hung else None)]
    write_reports(run_dir, reports, [t + (0 if p.rank == HUNG else 1e-3 * (1 + p.rank % 500)) for p in reports])



@pytest.fixture
def run_dir(tmp_path):
    """A run dir in memory where the machine has a tmpfs: 1,024 reports rewritten a look for 22
    looks are 22,000 file writes, seconds on a shared disk."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or not os.access(shm, os.W_OK):
        yield tmp_path / "run"
        return
    with tempfile.TemporaryDirectory(dir=shm) as d:
        yield Path(d) / "run"


async def test_a_hung_rank_among_1024_is_read_and_grouped_first(run_dir):
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    memory = LookMemory()
    try:
        t = R.T0 - 60
        poll_files(run_dir, t, hung=False)
        first = await gather_probes(ops, str(run_dir), R.RUN_ID, memory)
        assert len(first) == N and len(first.read) == N <= FIRST_LOOK_REPORTS   # a watch's first look: all
        # Rank 777 hangs; each second every probe rewrites its report. Within a full turn of the
        # window every report is read again, each look reading at most MAX_REPORTS.
        turn = -(-(N - NEWEST) // (MAX_REPORTS - NEWEST)) + 1
        read_hung = False
        for _ in range(turn):
            t += 1.0
            poll_files(run_dir, t, hung=True)
            got = await gather_probes(ops, str(run_dir), R.RUN_ID, memory)
            assert len(got.read) <= MAX_REPORTS and len(got) == N and got.skipped == 0
            # honest ages: a kept copy of a report rewritten since is as fresh as its file
            assert all(t + 1 - r.time <= STALE_AFTER_S for r in got), "a kept copy made a rank stale"
            read_hung = read_hung or 60_000 + HUNG in got.fresh
        assert read_hung, "rank 777's report was never read again"
        ev = dataclasses.replace(R._running_evidence(), status=None, probes=list(got), now=t + 1)
        groups = evaluate(ev).rank_groups
        assert groups[0].ranks == (HUNG,), [g.words() for g in groups][:3]
        assert groups[0].where == "next_batch (data.py:40)"
    finally:
        await ops.close()


async def test_without_memory_a_look_reads_the_newest_only(run_dir):
    poll_files(run_dir, R.T0, hung=True)
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    try:
        got = await gather_probes(ops, str(run_dir), R.RUN_ID)
        assert len(got) == MAX_REPORTS and got.skipped == N - MAX_REPORTS
        assert all(p.rank != HUNG for p in got)   # the miss: why a watch keeps memory
    finally:
        await ops.close()
