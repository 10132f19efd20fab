"""Whether a watched run is steady: what lets its watch read the ranks' probe reports in turns.

A run of many ranks rewrites a probe report per process every second. While the run is steady,
a watch reads a few of them a look, in turns (run/evidence/probe_files.py): each report is then
some seconds old, its freshness still known from its file's mtime and every beat's wait sample
still counted (ProbeReport.beats). The moment the run is not steady, every report is read at
each look again, so the verdict that follows judges fresh stacks. Steady: RUNNING, and silent
for less than half its silence limit in force, so every report is read afresh long before the
limit can be reached (a report is at most a few looks old: run/evidence/probe_files.py). Pure.
"""

from __future__ import annotations

from ..evidence.observe import Evidence
from .checklist import Checklist, Verdict
from .checks.progress import last_progress

# Of the silence limit in force, how much of it a steady run may have been silent.
SILENT_SHARE = 0.5


def steady(ev: Evidence, checklist: Checklist) -> bool:
    if checklist.verdict is not Verdict.RUNNING or checklist.stall_limit_s is None:
        return False
    last = last_progress(ev)
    return last is not None and ev.now - last < SILENT_SHARE * checklist.stall_limit_s
