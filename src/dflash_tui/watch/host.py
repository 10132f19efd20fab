"""HostWatch: the RunWatch of a run on one host, over a Session, through connection drops.

Each poll gathers evidence, evaluates the checklist and keeps each check's `since` across polls
(HealthTracker); what advanced between polls (CPU time, the log, steps) is the session's
ProgressTracker's memory (run/evidence/activity.py), which `session.evidence()` feeds. When the
transport fails, the report repeats the last known data with `connected=False` and
`stale_since` set, and the next polls reconnect with capped exponential backoff; the run on
the target is not touched by any of it.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from typing import AsyncIterator

from ..remote.base import TargetError
from ..remote.ops import ExitWatch
from ..run.launch.canary import CanaryResult
from ..run.verdict.health import HealthTracker, with_gpu_check
from ..run.launch.launch import LaunchOutcome
from ..run.launch.request import LaunchRequest
from ..run.evidence.observe import Evidence, current_run_id
from ..run.verdict.report import RunReport, report_from
from ..run.launch.stop import StopResult
from ..run.verdict.checklist import Checklist
from ..run.verdict.steady import steady
from .session import Session
from ..gpu.sample import GpuSnapshot
from ..run.history import CheckpointRef, HistoryRun, PreviousRun, previous_run
from .base import LaunchResult, Pid, RunWatch, running_pid, unreachable_report
from .files import RunFileFollower
from .gpu_feed import GpuFeed

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
# A steady run is looked at this often, by the run view and the fleet alike; any other run every
# interval. Its end still shows at once (the exit watch), a run gone quiet is looked at every
# interval again at half its silence limit, the log and the GPUs follow on their own: what waits
# is the header's step and loss. Each look at 64 ranks is ~15 ms of CPU (app and agent).
STEADY_INTERVAL_S = 3.0
EXIT_WATCH_S = 30.0   # one wait_exit's longest wait; the next one follows at once
EXIT_WATCH_RETRY_S = 30.0   # after a failed exit watch, a steady run is looked at every interval this long


class HostWatch(RunWatch):
    def __init__(self, session: Session, interval: float = 1.0, poll_timeout: float | None = None,
                 steady_interval: float | None = None) -> None:
        """`poll_timeout`: the longest one observation may take; past it the poll reports the
        target as not answering (stale, with a retry), like any other transport failure.
        `steady_interval`: `reports` looks this often instead while the run is steady and an
        exit watch on the target's agent guards its wrapper (None: every `interval`)."""
        super().__init__(interval)
        self.steady_interval = max(interval, steady_interval) if steady_interval is not None else None
        self._steady = False                       # the last judged look found the run steady
        self._exit_watch: asyncio.Task | None = None
        self._exit_watched: Pid | None = None      # the wrapper that exit watch waits on
        self._watch_again_at = 0.0                 # after a failed exit watch: `interval` till then
        self.session = session
        self.profile = session.profile
        self.limits = session.limits
        self.poll_timeout = poll_timeout
        self.tracker = HealthTracker()
        self._backoff = 0.0
        self._next_try = 0.0
        # The host's GPU samples, the fleet's lent one or a stream of its own: while either
        # runs, every polled checklist carries the "gpus" check (GPU LOST).
        self.gpus = GpuFeed(session)

    def search_checkpoints_now(self, at_or_before: int | None = None) -> None:
        self.session.progress.checkpoints.expire(at_or_before)

    @property
    def label(self) -> str:
        return self.session.label

    def host_watches(self) -> list[tuple[str, "HostWatch"]]:
        return [("", self)]

    @property
    def places_nodes(self) -> bool:
        return self.session.launcher.PLACES_NODES

    @property
    def retry_in(self) -> float | None:
        if self.last is None or self.last.connected:
            return None
        return max(0.0, self._next_try - time.monotonic())

    def settle(self, ev: Evidence, checklist: Checklist) -> RunReport:
        """the launcher's checklist (the "gpus" check added) -> each check's `since` -> the report."""
        checklist = self.tracker.update(checklist, ev.now, current_run_id(ev))
        report = report_from(ev, checklist, profile=self.profile.name, target_label=self.label,
                             vouched=self.session.launcher.vouches(ev))
        return self.session.with_energy(report)

    async def _judge(self, ev: Evidence, gpus: bool) -> RunReport:
        checklist = self.session.launcher.judge(ev, self.limits, self.session.progress.looks)
        if gpus:
            checklist = await self.session.with_gpus(ev, checklist)   # one bounded sample
        elif self.gpus.known:
            snap = self.gpus.latest()
            self.session.note_gpus(ev, snap)
            checklist = with_gpu_check(checklist, ev, snap)
        report = self.settle(ev, checklist)
        self.gpus.follow(report)
        # A steady run's probe reports are read in turns by the next looks, until it is not.
        self._steady = self.session.progress.looks.steady = steady(ev, report.checklist)
        return report

    async def _pause_s(self) -> float:
        """`steady_interval` while the run is steady (run/verdict/steady.py: RUNNING, silent for
        less than half its limit, so the next look still comes well before any limit) and an
        exit watch guards its wrapper, so that its end wakes the next look at once, as at
        `interval`; else `interval`."""
        pid = running_pid(self.last) if self.steady_interval is not None and self._steady else None
        if pid is None or time.monotonic() < self._watch_again_at:
            self._end_exit_watch()
            return self.interval
        if self._exit_watched != pid or self._exit_watch is None or self._exit_watch.done():
            self._end_exit_watch()
            try:
                ops = await self.session.ops()
            except (TargetError, OSError):
                return self.interval   # the next look says what is wrong
            if not isinstance(ops, ExitWatch):   # ShellOps: no way to wait on the target
                self._watch_again_at = time.monotonic() + EXIT_WATCH_RETRY_S
                return self.interval
            self._exit_watched = pid
            self._exit_watch = asyncio.create_task(self._watch_exit(ops, pid))
        return self.steady_interval

    async def _watch_exit(self, ops: ExitWatch, pid: Pid) -> None:
        """Wake the next look the moment the steady run's wrapper ends."""
        try:
            while not await ops.wait_exit([pid], EXIT_WATCH_S):
                pass
        except (TargetError, OSError, ValueError, TypeError):
            # The looks report what is wrong with the target; every `interval` meanwhile.
            self._watch_again_at = time.monotonic() + EXIT_WATCH_RETRY_S
        self._wake.set()

    def _end_exit_watch(self) -> None:
        if self._exit_watch is not None:
            self._exit_watch.cancel()
        self._exit_watch, self._exit_watched = None, None

    async def _check(self, gpus: bool) -> RunReport:
        return await self._judge(await self.session.evidence(), gpus)

    async def look(self, *, gpus: bool = True) -> tuple[Evidence, RunReport]:
        """One observation with the evidence its verdict was judged from (the stacks, the Flight
        Recorder tables, the probe reports), for whoever must carry both (an evidence bundle).
        Raises TargetError like `check`."""
        ev = await self.session.evidence()
        return ev, self._publish(await self._judge(ev, gpus))

    async def _poll(self) -> RunReport:
        disconnected = self.last is not None and not self.last.connected
        if disconnected and time.monotonic() < self._next_try:
            return self.last
        try:
            if disconnected:
                await asyncio.wait_for(self.session.reopen(), self.poll_timeout)   # a fresh connection and agent
            # A deadline on this task rather than wait_for's task per look (most of a steady
            # look runs without waiting at all: run/eager.py).
            async with asyncio.timeout(self.poll_timeout):
                ev = await self.session.evidence()
        except asyncio.TimeoutError:
            return self._stale(TargetError(f"{self.label} did not answer within {self.poll_timeout:.0f} s"))
        except (TargetError, OSError) as exc:
            return self._stale(exc)
        self._backoff = 0.0
        return await self._judge(ev, gpus=False)

    def _stale(self, exc: BaseException) -> RunReport:
        msg = str(exc) or type(exc).__name__
        self._backoff = min(BACKOFF_MAX_S, self._backoff * 2 if self._backoff else BACKOFF_START_S)
        self._next_try = time.monotonic() + self._backoff
        retry = f"retrying in {self._backoff:.0f} s"
        return unreachable_report(self.last, profile=self.profile.name, target_label=self.label,
                                  run_dir=self.profile.run_dir, why=msg, hint=retry,
                                  error=msg if self.last is None else f"{msg} ({retry})")

    def unreachable(self, why: str, hint: str) -> RunReport:
        """This host's report when it cannot be reached now (a node of several: NodesWatch)."""
        return self._publish(unreachable_report(self.last, profile=self.profile.name, target_label=self.label,
                                                run_dir=self.profile.run_dir, why=why, hint=hint))

    # -- actions ------------------------------------------------------------------------------

    async def _launch(self, request: LaunchRequest) -> LaunchResult:
        self.tracker.reset()
        outcome = await self.session.launch(request)
        return LaunchResult(await self.launched(outcome, request.gpus), {self.profile.name: outcome},
                            {self.profile.name: outcome.stopped} if outcome.stopped else {},
                            outcome.seconds)

    async def launched(self, outcome: LaunchOutcome, gpus: bool = False) -> RunReport:
        """The report of a launch's outcome: its evidence settled like a poll's; without
        evidence (not launched, unreachable) the outcome's own checklist."""
        ev = outcome.evidence
        if ev is not None:
            cl = await self.session.with_gpus(ev, outcome.checklist) if gpus else outcome.checklist
            return self.settle(ev, cl)
        return RunReport(time=time.time(), profile=self.profile.name, target_label=self.label,
                         run_dir=self.profile.run_dir, checklist=outcome.checklist,
                         connected=not outcome.unreachable,
                         error=outcome.checklist.summary if outcome.unreachable else None)

    async def _stop(self, requested_by: str | None = None) -> dict[str, StopResult]:
        return {self.profile.name: await self.session.stop(requested_by=requested_by)}

    async def _canary(self, sleep_s: int) -> dict[str, CanaryResult]:
        return {self.profile.name: await self.session.canary(sleep_s)}

    async def newest_checkpoint(self) -> CheckpointRef | None:
        return await self.session.newest_checkpoint()

    # -- files and GPUs -------------------------------------------------------------------------

    def follow(self, name: str) -> RunFileFollower:
        return RunFileFollower(self.session, posixpath.join(self.profile.run_dir, name))

    def follow_path(self, path: str) -> RunFileFollower:
        return RunFileFollower(self.session, path)

    async def previous_run(self, exclude: str | None) -> PreviousRun | None:
        return await previous_run(await self.session.ops(), self.profile.run_dir, exclude=exclude)

    async def history(self) -> list[HistoryRun]:
        return await self.session.history()

    def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        return self.gpus.snapshots()

    async def stop_gpu_stream(self) -> None:
        await self.gpus.close()

    async def close(self) -> None:
        self._end_exit_watch()
        await self.gpus.close()
        await self.session.close()
