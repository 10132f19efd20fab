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

from dflash_tui.contract.rundir import BEAT_HISTORY
from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.memory import LookMemory
from dflash_tui.run.evidence.probe_files import (FIRST_LOOK_REPORTS, MAX_REPORTS, NEWEST, REPORT_MAX_BYTES,
                                              STEADY_REPORTS, gather_probes)
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


async def test_a_look_at_a_few_dozen_ranks_asks_for_every_report_in_its_first_request(run_dir):
    """Up to MAX_REPORTS + NEWEST reports, the next look's first request asks for all of them
    (which ones it reads depends on whose beat came first), and the agent sends none of those
    held as they are: no report is left to a request of its own."""
    n = MAX_REPORTS + NEWEST - 10
    reports = R.rank_probes(n)

    def beat(t: float) -> None:
        write_reports(run_dir, [dataclasses.replace(p, time=t, seq=int(t)) for p in reports],
                      [t + 1e-3 * ((p.rank * 7 + int(t)) % n) for p in reports])   # a new order each beat
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    memory = LookMemory()
    try:
        for t in (R.T0, R.T0 + 1, R.T0 + 2):
            beat(t)
            got = await gather_probes(ops, str(run_dir), R.RUN_ID, memory)
            assert len(got) == n
        paths = sorted(str(run_dir / "probe" / f"{p.pid}.json") for p in reports)
        assert sorted(memory.reports) == paths
        # nothing rewritten since: the agent sends only the reports the last look did not read
        known = {p: memory.known[p] for p in memory.reports if p in memory.known}
        answer = await ops.observe([], reads={p: REPORT_MAX_BYTES for p in memory.reports}, known=known)
        assert sorted(answer["reads"]) == sorted(set(paths) - set(got.read))
        assert len(got.read) == MAX_REPORTS
    finally:
        await ops.close()


async def test_a_steady_run_s_reports_are_read_in_turns_each_within_a_few_looks(run_dir):
    """While the watch finds the run steady, a look reads STEADY_REPORTS of 64 ranks' reports,
    in turns by path: each one read again within ceil(64 / STEADY_REPORTS) looks, the next turn
    asked for up front, a kept copy as fresh as its file. Not steady: every changed one again."""
    n = 64
    reports = R.rank_probes(n)

    def beat(t: float) -> None:
        write_reports(run_dir, [dataclasses.replace(p, time=t, seq=int(t)) for p in reports],
                      [t + 1e-3 * p.rank for p in reports])
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    memory = LookMemory()
    try:
        t = R.T0
        beat(t)
        assert len((await gather_probes(ops, str(run_dir), R.RUN_ID, memory)).read) == n
        memory.steady = True
        last_read: dict[str, float] = {}
        looks = -(-n // STEADY_REPORTS)
        for _ in range(2 * looks):
            t += 1.0
            beat(t)
            asked = list(memory.reports)
            got = await gather_probes(ops, str(run_dir), R.RUN_ID, memory)
            assert len(got) == n and len(got.read) == STEADY_REPORTS and got.cached == n - STEADY_REPORTS
            assert set(got.read) <= set(asked) or asked == []
            assert all(t + 1 - r.time <= STALE_AFTER_S for r in got)   # copies as fresh as their files
            last_read.update((path, t) for path in got.read)
        assert len(last_read) == n and min(last_read.values()) >= t - looks + 1
        memory.steady = False
        t += 1.0
        beat(t)
        assert len((await gather_probes(ops, str(run_dir), R.RUN_ID, memory)).read) == n
    finally:
        await ops.close()


async def test_a_steady_run_of_1024_ranks_reads_each_report_within_its_beat_history(run_dir):
    """At 1,024 ranks a turn is 64 reports: each one read again within BEAT_HISTORY looks, so
    no beat's wait sample is lost between two reads."""
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    memory = LookMemory()
    try:
        t = R.T0 - 60
        poll_files(run_dir, t, hung=False)
        await gather_probes(ops, str(run_dir), R.RUN_ID, memory)
        memory.steady = True
        seen: set[str] = set()
        for _ in range(BEAT_HISTORY):
            t += 1.0
            poll_files(run_dir, t, hung=False)
            got = await gather_probes(ops, str(run_dir), R.RUN_ID, memory)
            assert len(got.read) == N // BEAT_HISTORY
            seen.update(got.read)
        assert len(seen) == N
    finally:
        await ops.close()
