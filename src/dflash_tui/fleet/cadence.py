"""How often the fleet polls one target: `interval`, or `steady_interval` while every run there
stands still and an exit watch on the target's agent guards the live ones.

The rule (fleet/README.md): a target is polled every
`steady_interval` while each of its profiles is steady, else every `interval`. A profile is
steady when its last `steady_after` polls changed nothing in its checklist (watch/base.py
`changed`: the verdict and every check's state), no action is in flight on it, and its run is
either
- RUNNING, its wrapper alive with a recorded start time, watched by the target's exit watch,
  and its last progress (a step, a log line) younger than `steady_interval`: a run that went
  quiet is polled every `interval` again before its silence can reach a stall limit that is at
  least twice `steady_interval`, so STALLED comes no later than before; or
- settled (`Verdict.settled`: FINISHED, CRASHED, KILLED, STOPPED, NO RUN, ...) with no live process.
Anything else (STARTING, STALLED, GPU LOST, unreachable, a Slurm job, a run on several nodes,
a target whose ops cannot wait on a process) keeps `interval`. A poke and any change of the
checklist start the count again, so they return the target to `interval` at once.

Nothing here judges a run: the verdicts are the reports' (run/verdict/health.py `evaluate`); this only
decides when to look again.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

from ..run.verdict.report import RunReport
from ..watch import changed
from ..watch.base import Pid, running_pid

STEADY_AFTER_POLLS = 5

def progressing(report: RunReport, within_s: float) -> bool:
    """Whether the run's last progress (target clock) is younger than `within_s`."""
    p = report.progress
    return p is not None and p.time is not None and report.time - p.time < within_s


class TargetCadence:
    """One target's pace: each profile's run of unchanged polls, and the pids its exit watch covers."""

    def __init__(self, names: Iterable[str], *, interval: float, steady_interval: float,
                 steady_after: int = STEADY_AFTER_POLLS, watchable: bool = True) -> None:
        """`watchable`: whether the target's runs can be watched at all (one host, no scheduler);
        whether its ops can (the agent, not the shell) is learnt later: `can_watch`."""
        self.names = list(names)
        self.interval = interval
        self.steady_interval = max(interval, steady_interval)
        self.steady_after = steady_after
        # None until the target's ops are known; False for good where they cannot wait.
        self.can_watch: bool | None = None if watchable else False
        self.last: dict[str, RunReport | None] = {n: None for n in self.names}
        self.unchanged: dict[str, int] = {n: 0 for n in self.names}
        self.watched: frozenset[Pid] = frozenset()   # what the newest exit watch covers
        self.ended: set[Pid] = set()                  # what an exit watch saw end
        self.rearm = asyncio.Event()                  # the exit watch's pids to cover changed

    def polled(self, name: str, report: RunReport) -> None:
        previous, self.last[name] = self.last[name], report
        same = previous is not None and report.connected and previous.connected and not changed(previous, report)
        self.unchanged[name] = self.unchanged[name] + 1 if same else 0

    def poked(self) -> None:
        """Someone wants this target looked at now (an action, a relaunch): `interval` again."""
        for n in self.names:
            self.unchanged[n] = 0

    def exited(self, gone: Iterable[Pid]) -> None:
        """The exit watch saw these end: never steady on them again."""
        gone = set(gone)
        self.ended |= gone
        self.watched = self.watched - gone

    def to_watch(self) -> frozenset[Pid]:
        """The live pids of the profiles that would be steady once watched."""
        if not self.can_watch:
            return frozenset()
        pids = (running_pid(self.last[n]) for n in self.names if self.unchanged[n] >= self.steady_after)
        return frozenset(p for p in pids if p is not None and p not in self.ended)

    def _steady(self, name: str, busy: bool) -> bool:
        report = self.last[name]
        if busy or report is None or not report.connected or self.unchanged[name] < self.steady_after:
            return False
        pid = running_pid(report)
        if pid is not None:
            return pid in self.watched and progressing(report, self.steady_interval)
        return report.checklist.verdict.settled and not report.pid_alive

    def pause(self, busy: Iterable[str] = ()) -> float:
        """Seconds from the start of one poll of the target to the next."""
        busy = set(busy)
        if self.can_watch and all(self._steady(n, n in busy) for n in self.names):
            return self.steady_interval
        return self.interval
