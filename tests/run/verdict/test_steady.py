"""A steady run (its probe reports read in turns): RUNNING and silent for less than half its limit."""

from __future__ import annotations

import dataclasses

from dflash_tui.run.evidence.activity import Activity
from dflash_tui.run.verdict.checklist import Checklist, Verdict
from dflash_tui.run.verdict.steady import steady
from tests.support import scenarios as R


def judged(silent_s: float | None, verdict: Verdict = Verdict.RUNNING, limit: float | None = 10.0):
    act = Activity(samples=5, step_at=None if silent_s is None else R.T0 - silent_s)
    ev = dataclasses.replace(R._running_evidence(), activity=act)
    return ev, Checklist(verdict, [], "", stall_limit_s=limit)


def test_running_and_silent_for_less_than_half_its_limit_is_steady():
    assert steady(*judged(2.0))
    assert not steady(*judged(5.0))          # half the 10 s limit: every report read again
    assert steady(*judged(20.0, limit=60.0))  # no cadence yet: stall_after_s is the limit


def test_anything_but_running_or_a_run_with_no_progress_yet_is_not_steady():
    assert not steady(*judged(None))
    for verdict in (Verdict.STALLED, Verdict.STARTING, Verdict.CRASHED):
        assert not steady(*judged(1.0, verdict))
    assert not steady(*judged(1.0, limit=None))
