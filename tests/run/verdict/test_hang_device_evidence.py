"""The hangs judged on the H200 (benchmarks/device: a GPU kernel that never returns, a stuck NCCL
rank under torchrun), their evidence rebuilt from what the device recorded and judged again by
the real engine, as a one-shot `--check` sees it: a fresh ProgressTracker, two looks at the
probe's reports a second apart.

What the device showed wrong, pinned here: a one-shot look said how long a stack stood from its
own two looks ("for 0 s", "for 1 s" of a thread that had stood 20 s), and torchrun's agent (the
launcher, no rank) was named as a rank "not in" the collective, the rank itself by its thread
name. The probe now says since when each thread's stack stands where it is (`stack_since`); the
device's probe predates that field, so the tests add what today's probe writes: the time of its
first beat after the program's last line of output.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from dflash_tui.contract.rundir import ProbeReport, ProbeThread
from dflash_tui.run.evidence.activity import ProgressTracker
from dflash_tui.run.stacks.records import CollectiveProgress, HangEvidence
from dflash_tui.run.verdict.health import Limits, evaluate
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.words import duration

from tests.run.verdict.test_health import NOW, launch, plain

RESULTS = Path(__file__).parents[3] / "benchmarks" / "device" / "results"
# benchmarks/device/judge.sh's profiles
LIM = Limits(stall_after_s=10, compile_stall_after_s=900, launch_deadline_s=1.0)


class Device:
    """One recorded look: its probe reports and log time, moved onto the tests' clock (NOW is
    the moment the device's evidence was taken)."""

    def __init__(self, name: str) -> None:
        rec = json.loads((RESULTS / name).read_text())["evidence"]
        self.rec = rec
        self.shift = NOW - rec["target_time"]
        checks = {c["id"]: c for c in rec["checklist"]["checks"]}
        self.log_at = checks["progress"]["since"] + self.shift     # the program's last output
        self.seen_at = {(t["pid"], t["name"]): t["since"] + self.shift for t in rec["checklist"]["threads"]}

    def reports(self, *, with_stack_since: bool) -> list[ProbeReport]:
        out = []
        for p in self.rec["probes"]:
            at = NOW - p["age_s"]
            # The probe beats once a second: its first beat after the last output saw the stack.
            first_beat = at - math.floor(at - self.log_at)
            since = {"stack_since": first_beat} if with_stack_since else {}
            threads = [ProbeThread(name=t["name"], ident=i, frames=list(t["frames"]),
                                   compile_state=t["compile_state"], **since)
                       for i, t in enumerate(p["threads"], 1)]
            out.append(ProbeReport(run_id="r1", pid=p["pid"], time=at, ppid=100, rank=p["rank"],
                                   start_time=NOW - 30, threads=threads, cpu_s=p["cpu_s"],
                                   stack_signal=p["stack_signal"]))
        return out

    def one_shot(self, reports: list[ProbeReport], hang: HangEvidence | None = None, *, first_look_s: float = 1.0):
        """Evidence as `--check` gathers it: the reports seen at its first look (`first_look_s`
        before now) and again at its second, a fresh tracker's memory between them."""
        tracker = ProgressTracker()
        tracker.sample_stacks([replace(r, time=NOW - first_look_s) for r in reports])
        tracker.sample_stacks(reports)
        act = replace(tracker.activity(NOW, None), samples=2, log_grew_at=self.log_at, program_output=True,
                      output_polls=1, cpu_s=30.0, cpu_cores=1.01, cpu_window_s=1.0, procs=3, threads=20,
                      states="1 running, 2 sleeping")
        return plain(activity=act, probes=reports, hang=hang or HangEvidence(),
                     launch=launch(start_time=NOW - 30))


def test_the_gpu_wait_says_how_long_from_the_probe_not_from_the_check_s_own_looks():
    d = Device("gpu_hang.m.json")
    reports = d.reports(with_stack_since=True)
    stood = NOW - reports[0].threads[0].stack_since
    assert stood > 15          # the device's check said "for 0 s" (and "for 1 s") of this
    cl = evaluate(d.one_shot(reports), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith(f"waiting on the GPU: MainThread in torch.cuda.synchronize (gpu_hang.py:12) for "
                                 f"{duration(stood)}; no step, no log output for {duration(NOW - d.log_at)}"), \
        cl.summary
    (view,) = [t for t in cl.threads if t.cls == "gpu"]
    assert view.since == reports[0].threads[0].stack_since, view


def test_an_older_probe_s_report_never_reads_for_0_s():
    # A report without stack_since: the check knows only its own looks, a moment apart. It says
    # nothing of how long, and the silence stands for it.
    d = Device("gpu_hang.m.json")
    reports = d.reports(with_stack_since=False)
    for first_look_s in (0.3, 1.0):
        cl = evaluate(d.one_shot(reports, first_look_s=first_look_s), LIM)
        assert cl.verdict is Verdict.STALLED, cl
        assert " for 0 s" not in cl.summary, cl.summary
    cl = evaluate(d.one_shot(reports, first_look_s=0.3), LIM)
    assert cl.summary.startswith("waiting on the GPU: MainThread in torch.cuda.synchronize (gpu_hang.py:12); "
                                 f"no step, no log output for {duration(NOW - d.log_at)}"), cl.summary


def test_a_probe_s_stack_since_it_cannot_have_seen_is_not_believed():
    # After its own report, or before the probe started in the process: a corrupt or hostile
    # report; the check's own looks are what is known then.
    d = Device("gpu_hang.m.json")
    for bad in (NOW + 60, NOW - 3600):
        reports = [replace(r, threads=[replace(t, stack_since=bad) for t in r.threads])
                   for r in d.reports(with_stack_since=False)]
        cl = evaluate(d.one_shot(reports), LIM)
        assert cl.summary.startswith("waiting on the GPU: MainThread in torch.cuda.synchronize (gpu_hang.py:12) "
                                     "for 1 s; no step"), cl.summary


def test_a_single_nccl_rank_under_torchrun_is_named_by_rank_and_the_agent_is_no_rank():
    d = Device("nccl.m.json")
    reports = d.reports(with_stack_since=False)
    assert {r.rank for r in reports} == {0, None}        # rank 0 and torchrun's agent
    cl = evaluate(d.one_shot(reports), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith("hung in a collective: rank 0 waits in barrier (nccl_stuck.py:21)"), cl.summary
    assert "not in it" not in cl.summary and "_invoke_run" not in cl.summary and "MainThread" not in cl.summary
    # With the probe's word on how long the rank has stood there:
    reports = d.reports(with_stack_since=True)
    (rank0,) = [r for r in reports if r.rank == 0]
    stood = NOW - rank0.threads[0].stack_since
    cl = evaluate(d.one_shot(reports), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.startswith(f"hung in a collective: rank 0 waits in barrier (nccl_stuck.py:21) for "
                                 f"{duration(stood)}; no step, no log output for {duration(NOW - d.log_at)}"), \
        cl.summary
    assert "not in it" not in cl.summary and "_invoke_run" not in cl.summary and "MainThread" not in cl.summary


def test_the_flight_recorder_s_sequence_numbers_follow_the_one_rank():
    # The same program's Flight Recorder as an earlier device run dumped it (nccl.d.json):
    # the barrier is collective #6, pending behind the kernel that never returns; #5 completed.
    d = Device("nccl.m.json")
    fr = json.loads((RESULTS / "nccl.d.json").read_text())["evidence"]["hang"]["collectives"]
    colls = [CollectiveProgress(rank=c["rank"], time=NOW - 1, pid=c["pid"], process_group=c["process_group"],
                                last_enqueued_seq=c["last_enqueued_seq"], last_started_seq=c["last_started_seq"],
                                last_completed_seq=c["last_completed_seq"], pending_op=c["pending_op"],
                                pending_seq=c["pending_seq"], pending_since=NOW - 20) for c in fr]
    cl = evaluate(d.one_shot(d.reports(with_stack_since=True), HangEvidence(collectives=colls)), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    head, _, rest = cl.summary.partition("; ")
    assert head.startswith("hung in a collective: rank 0 waits in barrier (nccl_stuck.py:21) for "), cl.summary
    assert rest.startswith("collectives reached: rank 0 #6 (all_reduce_barrier #6 pending); no step"), cl.summary
    assert "not in it" not in cl.summary, cl.summary
