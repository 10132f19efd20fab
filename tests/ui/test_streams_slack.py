"""The log poll waits a little longer only for a report that is about to come: at one report a
second its timer poll and the report's own poll are one frame, not two; between a steady run's
reports 2 s apart the log still follows every half second."""

from __future__ import annotations

import time

from dflash_tui.ui.streams import LOG_POLL_S, REPORT_SLACK_S, RunStreams


def slack_after(*ago: float) -> float:
    streams = RunStreams(view=None)
    now = time.monotonic()
    streams._report_times.extend(now - a for a in ago)
    return streams._slack(LOG_POLL_S)


def test_the_log_poll_waits_for_a_report_due_about_then_and_for_no_other():
    assert slack_after(1.5, 0.5) == REPORT_SLACK_S     # reports each second: the next in 0.5 s
    assert slack_after(1.4, 0.45) == REPORT_SLACK_S    # a little over a second apart
    assert slack_after(2.5, 0.5) == 0.0                # a steady run's: the next in 1.5 s
    assert slack_after(3.5, 1.5) == REPORT_SLACK_S     # ... until it is about due
    assert slack_after(0.5) == REPORT_SLACK_S          # one report yet: as before
