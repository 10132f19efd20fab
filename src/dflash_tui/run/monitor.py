"""RunMonitor: one RunReport per interval for the dashboard, through connection drops.

Each poll gathers evidence, evaluates the checklist and keeps each check's `since` across polls
(HealthTracker); what advanced between polls (CPU time, the log, steps) is the session's
ProgressTracker's memory (run/activity.py), which `session.evidence()` feeds. When the
transport fails, the report repeats the last known data with `connected=False` and
`stale_since` set, and the next polls reconnect with capped exponential backoff; the run on
the target is not touched by any of it.

The actions the dashboard's keys call (launch, relaunch, stop, canary) are here too, serialized:
`busy` says one is in flight, and a second one is refused rather than interleaved.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from ..remote.base import TargetError
from ..session import Session
from .health import HealthTracker, evaluate, with_gpu_check
from .observe import current_run_id
from .report import RunReport, report_from
from .verdict import Check, CheckState, Checklist, Verdict

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0


class ActionInFlight(RuntimeError):
    """Another launch/stop/canary is running; the caller should wait for it."""


class RunMonitor:
    def __init__(self, session: Session, interval: float = 1.0,
                 poll_timeout: float | None = None) -> None:
        """`poll_timeout`: the longest one observation may take; past it the poll reports the
        target as not answering (stale, with a retry), like any other transport failure."""
        self.session = session
        self.interval = interval
        self.poll_timeout = poll_timeout
        self.tracker = HealthTracker()
        self.last: RunReport | None = None
        self._action = asyncio.Lock()
        self._backoff = 0.0
        self._next_try = 0.0
        self._wake = asyncio.Event()
        # Set by whoever runs a GpuStream (the dashboard): a callable returning its latest
        # GpuSnapshot. Then every report's checklist carries the "gpus" check (gpu/health.py).
        self.gpu_snapshot = None

    @property
    def busy(self) -> bool:
        return self._action.locked()

    @property
    def retry_in(self) -> float | None:
        """Seconds until the next reconnect attempt while disconnected (None when connected)."""
        if self.last is None or self.last.connected:
            return None
        return max(0.0, self._next_try - time.monotonic())

    # -- polling ----------------------------------------------------------------------------

    async def poll(self) -> RunReport:
        """One observation; never raises for transport trouble (it is in the report)."""
        disconnected = self.last is not None and not self.last.connected
        if disconnected and time.monotonic() < self._next_try:
            return self.last
        try:
            if disconnected:
                await asyncio.wait_for(self.session.reopen(), self.poll_timeout)   # a fresh connection and agent
            ev = await asyncio.wait_for(self.session.evidence(), self.poll_timeout)
        except asyncio.TimeoutError:
            return self._stale(TargetError(f"{self.session.label} did not answer within "
                                           f"{self.poll_timeout:.0f} s"))
        except (TargetError, OSError) as exc:
            return self._stale(exc)
        self._backoff = 0.0
        checklist = evaluate(ev, self.session.limits)
        if self.gpu_snapshot is not None:
            checklist = with_gpu_check(checklist, ev, self.gpu_snapshot())
        checklist = self.tracker.update(checklist, ev.now, current_run_id(ev))
        report = report_from(ev, checklist, profile=self.session.profile.name,
                             target_label=self.session.label)
        self.last = report
        return report

    def _stale(self, exc: BaseException) -> RunReport:
        now = time.time()
        msg = str(exc) or type(exc).__name__
        self._backoff = min(BACKOFF_MAX_S, self._backoff * 2 if self._backoff else BACKOFF_START_S)
        self._next_try = time.monotonic() + self._backoff
        if self.last is not None:
            prev = self.last
            stale = RunReport(**{**prev.__dict__, "connected": False,
                                 "stale_since": prev.stale_since or now,
                                 "error": f"{msg} (retrying in {self._backoff:.0f} s)"})
        else:
            check = Check("transport", "Target reachable", CheckState.FAIL, msg,
                          f"retrying in {self._backoff:.0f} s", now)
            stale = RunReport(time=now, profile=self.session.profile.name, target_label=self.session.label,
                              run_dir=self.session.profile.run_dir,
                              checklist=Checklist(Verdict.NO_RUN, [check], f"cannot reach {self.session.label}"),
                              connected=False, stale_since=now, error=msg)
        self.last = stale
        return stale

    async def reports(self) -> AsyncIterator[RunReport]:
        """Forever: a report now, then one per interval (sooner after an action)."""
        while True:
            yield await self.poll()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    # -- actions ----------------------------------------------------------------------------

    async def _run_action(self, coro_fn):
        if self._action.locked():
            raise ActionInFlight("a launch, stop or canary is already in flight")
        async with self._action:
            try:
                return await coro_fn()
            finally:
                self._wake.set()

    async def launch(self):
        self.tracker.reset()
        return await self._run_action(lambda: self.session.launch())

    async def relaunch(self, resume: bool = False):
        self.tracker.reset()
        return await self._run_action(lambda: self.session.launch(relaunch=True, resume=resume))

    async def stop(self):
        return await self._run_action(lambda: self.session.stop())

    async def canary(self):
        return await self._run_action(lambda: self.session.canary())
