"""Each rank's share of time waiting in a collective, counted per beat of the probe: a report
read every few seconds (a run of many ranks read in turns) counts every beat it holds, once."""

from __future__ import annotations

import dataclasses

from dflash_tui.contract.rundir import BeatStack, ProbeReport, ProbeThread
from dflash_tui.run.evidence.activity import ProgressTracker, WaitShare
from dflash_tui.run.evidence.probe_files import ProbeReports

REDUCE = ["/site-packages/torch/distributed/distributed_c10d.py:2501 all_reduce", "/w/train.py:88 step"]
WORK = ["/w/model.py:40 forward", "/w/train.py:80 step"]
HELPER = ["/usr/lib/python3.11/threading.py:320 wait", "/w/loader.py:9 run"]


def report(seq: int, beats: list[list[int]], *, waiting_now: bool = False) -> ProbeReport:
    """A rank's report at `seq`: its main thread where its last beat was, a daemon helper in a
    wait (never counted), and its recent beats over two stacks (0: working, 1: in all_reduce)."""
    return ProbeReport(run_id="r", pid=40, time=float(seq), seq=seq, rank=1, threads=[
        ProbeThread(name="MainThread", ident=1, frames=REDUCE if waiting_now else WORK),
        ProbeThread(name="pin_memory", ident=2, daemon=True, frames=HELPER)],
        beats=beats, beat_stacks=[BeatStack(WORK), BeatStack(REDUCE)])


def share(tracker: ProgressTracker) -> WaitShare:
    return tracker.activity(0.0, None).waits[40]


def test_every_beat_a_report_holds_counts_once_however_rarely_it_is_read():
    tracker = ProgressTracker()
    # Read first at seq 11: its 12 beats, 8 of them in all_reduce.
    tracker.sample_stacks([report(11, [[1], [0], [1], [1], [0], [1], [1], [0], [1], [1], [0], [1]])])
    assert share(tracker) == WaitShare(12, 8, "all_reduce")
    # The same report found again adds nothing; read again 4 beats later: the 4 new beats.
    tracker.sample_stacks([report(11, [[1]] * 12)])
    assert share(tracker).samples == 12
    tracker.sample_stacks([report(15, [[0]] * 12 + [[1], [1], [1], [0]])])
    assert share(tracker) == WaitShare(16, 11, "all_reduce")


def test_a_report_of_an_older_probe_counts_its_own_threads_once():
    tracker = ProgressTracker()
    for seq in (3, 3, 4):
        tracker.sample_stacks([report(seq, [], waiting_now=True)])
    assert share(tracker) == WaitShare(2, 2, "all_reduce")


def test_a_kept_copy_of_a_report_is_no_new_cpu_sample():
    """A report not read this look stands in with its file's newer mtime as its time and the CPU
    of its read: sampled again, the process would look idle for that look."""
    tracker = ProgressTracker()
    base = report(5, [[0]])

    def look(report: ProbeReport, kept: bool = False) -> None:
        probes = ProbeReports([report])
        probes.cached, probes.fresh = (1, set()) if kept else (0, {report.pid})
        tracker.sample_stacks(probes)
    look(dataclasses.replace(base, seq=4, time=100.0, cpu_s=10.0))
    look(dataclasses.replace(base, seq=5, time=101.0, cpu_s=11.0))
    assert not tracker._idle(40)
    look(dataclasses.replace(base, seq=5, time=104.0, cpu_s=11.0), kept=True)
    assert not tracker._idle(40)
    look(dataclasses.replace(base, seq=9, time=105.0, cpu_s=15.0))
    assert not tracker._idle(40)
    look(dataclasses.replace(base, seq=10, time=106.0, cpu_s=15.0))   # idle now
    assert tracker._idle(40)
