"""The fleet's cadence rule (fleet/cadence.py) on the reports a poll makes: when a target may be
polled every steady_interval, and everything that keeps it at interval. The poller with real
runs on a real sshd is tests/fleet/test_poller.py; this is the rule's table, row by row."""

from __future__ import annotations

import pytest

from dflash_tui.contract.rundir import LaunchRecord
from dflash_tui.fleet.cadence import TargetCadence
from dflash_tui.run.verdict.report import RunProgress, RunReport
from dflash_tui.run.verdict.checklist import Check, CheckState, Checklist, Verdict

NOW = 1_800_000_000.0
PID = (4242, 987654)


def report(verdict=Verdict.RUNNING, *, alive=True, progress_age=0.5, start_ticks=PID[1], connected=True,
           check_state=CheckState.OK) -> RunReport:
    launch = LaunchRecord(run_id="r1", pid=PID[0], pgid=PID[0], start_ticks=start_ticks, start_time=NOW - 60,
                          argv=["python", "train.py"])
    progress = None if progress_age is None else RunProgress("status.json", step=10, time=NOW - progress_age)
    checks = [Check("process", "Process", check_state, "pid 4242")]
    return RunReport(time=NOW, profile="p", target_label="t", run_dir="/r",
                     checklist=Checklist(verdict, checks, verdict.value), launch=launch,
                     pid_alive=alive, connected=connected, progress=progress)


def cadence(*, can_watch=True, watched=True, polls=5) -> TargetCadence:
    c = TargetCadence(["p"], interval=1.0, steady_interval=3.0, steady_after=5)
    c.can_watch = can_watch
    for _ in range(polls + 1):   # the first poll is a change from nothing
        c.polled("p", report())
    if watched:
        c.watched = c.to_watch()
    return c


def test_a_running_run_watched_and_progressing_is_steady_after_steady_after_unchanged_polls():
    assert cadence().pause() == 3.0
    assert cadence(polls=4).pause() == 1.0           # one poll short
    assert cadence(watched=False).pause() == 1.0     # its wrapper not covered by an exit watch yet
    assert cadence(watched=False).to_watch() == {PID}
    assert cadence(can_watch=None).pause() == 1.0    # the target's ops not known yet
    assert cadence(can_watch=False).to_watch() == frozenset() and cadence(can_watch=False).pause() == 1.0


@pytest.mark.parametrize("why, last", [
    ("progress older than steady_interval: a run going quiet", report(progress_age=3.5)),
    ("no progress known", report(progress_age=None)),
    ("no start time: an exit watch cannot prove the process", report(start_ticks=None)),
    ("not answering", report(connected=False)),
])
def test_what_keeps_a_running_run_at_interval(why, last):
    c = cadence()
    c.last["p"] = last
    assert c.pause() == 1.0, why


@pytest.mark.parametrize("verdict", [Verdict.KILLED, Verdict.CRASHED, Verdict.FINISHED, Verdict.STOPPED,
                                     Verdict.NO_RUN, Verdict.NEVER_STARTED, Verdict.LOG_MISSING])
def test_an_ended_run_with_no_process_is_steady_and_one_still_exiting_is_not(verdict):
    c = TargetCadence(["p"], interval=1.0, steady_interval=3.0, steady_after=5)
    c.can_watch = True
    for _ in range(6):
        c.polled("p", report(verdict, alive=False, progress_age=None))
    assert c.pause() == 3.0 and c.to_watch() == frozenset()
    c.polled("p", report(verdict, alive=True, progress_age=None))   # its wrapper still exiting
    assert c.pause() == 1.0


@pytest.mark.parametrize("verdict", [Verdict.STARTING, Verdict.STALLED, Verdict.GPU_LOST, Verdict.QUEUED])
def test_a_run_that_is_not_running_nor_ended_keeps_interval(verdict):
    c = TargetCadence(["p"], interval=1.0, steady_interval=3.0, steady_after=5)
    c.can_watch = True
    for _ in range(8):
        c.polled("p", report(verdict))
    assert c.pause() == 1.0 and c.to_watch() == frozenset()


def test_a_change_a_poke_an_action_and_an_exit_bring_back_interval():
    c = cadence()
    c.polled("p", report(check_state=CheckState.WARN))    # a check in another state
    assert c.pause() == 1.0 and c.unchanged["p"] == 0
    c = cadence()
    c.poked()
    assert c.pause() == 1.0
    c = cadence()
    assert c.pause(busy=["p"]) == 1.0
    c = cadence()
    c.exited([PID])
    assert c.pause() == 1.0 and c.to_watch() == frozenset()   # never watched again


def test_steady_interval_is_never_below_interval():
    c = TargetCadence(["p"], interval=5.0, steady_interval=3.0)
    assert c.steady_interval == 5.0
