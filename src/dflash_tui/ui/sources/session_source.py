"""The live DashboardSource of a run on one host: its HostWatch, log followers and GPU stream.

Nothing here decides anything: reports come from the RunWatch (the same evaluation `--check`
prints), lines from run/logtail.LogFollower, GPU samples from gpu/stream.GpuStream. This
module only adapts them to what the app subscribes to, and turns the outcome of each
action into the one line the dashboard shows.
"""

from __future__ import annotations

import asyncio
import posixpath
from typing import AsyncIterator

from ...config import ConfigError, Profile
from ...gpu.sample import GpuError, GpuErrorKind, GpuSnapshot
from ...remote.base import TargetError
from ...run.history import PreviousRun, previous_run
from ...run.evidence.logtail import LogFollower
from ...gpu.sources import open_gpu_source, run_ref_from_launch
from ...gpu.stream import GpuStream
from ...run.launch.launch import LaunchRefused
from ...run.verdict.report import RunReport
from ...watch.session import Session
from ...watch import ActionInFlight, HostWatch
from .source import ActionError

GPU_RETRY_MAX_S = 30.0


class SessionFollower:
    """A LogFollower that rides along when the session reconnects (new transport, same file).
    train.log and events.jsonl are read by the session's progress tracker too, at every look:
    both record and take bytes through the tracker's memo of recent reads (LogFollower's
    `shared`), so a byte of the file is asked of the target once."""

    def __init__(self, session: Session, path: str) -> None:
        self.session = session
        self.path = path
        self._follower: LogFollower | None = None

    @property
    def exists(self) -> bool:
        return self._follower is not None and self._follower.exists

    @property
    def partial(self) -> str:
        return self._follower.partial if self._follower is not None else ""

    async def poll(self) -> list[str]:
        ops = await self.session.ops()
        if self._follower is None:
            self._follower = LogFollower(ops, self.path, shared=self.session.progress.reads)
        elif self._follower.ops is not ops:
            self._follower.set_ops(ops)
        return await self._follower.poll()


class SessionSource:
    def __init__(self, profile: Profile, *, watch: HostWatch | None = None,
                 gpu_interval: float = 1.0, monitor_interval: float = 1.0) -> None:
        """`watch`: a HostWatch shared with the fleet poller (or a node's, of a NodesWatch), so
        the run view and the fleet guard one action at a time on the same object."""
        self.profile = profile.name
        self.read_only = False
        self.resumable = profile.uses_bundled_trainer   # a program of its own has no --resume of ours
        self.watch = watch if watch is not None else HostWatch(Session(profile), interval=monitor_interval)
        self.session = self.watch.session
        self._fleet_gpu_snapshot = self.watch.gpu_snapshot
        self.gpu_interval = gpu_interval
        self._gpu_stream = None
        self._run_ref = None

    # -- streams ----------------------------------------------------------------------------
    async def reports(self) -> AsyncIterator[RunReport]:
        async for report in self.watch.reports():
            self.follow_run_on_gpus(report)
            yield report

    def follow_run_on_gpus(self, report: RunReport) -> None:
        ref = run_ref_from_launch(report.launch) if report.pid_alive else None
        if ref != self._run_ref:
            self._run_ref = ref
            if self._gpu_stream is not None:
                self._gpu_stream.set_run(ref)   # mark this run's processes on the GPUs

    async def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        delay = 1.0
        while self._gpu_stream is None:
            try:
                source = await open_gpu_source(self.session.host, python=self.session.profile.python)
            except (TargetError, OSError) as exc:
                # No GPU data is a state the pane shows, not a reason to stop the dashboard.
                yield GpuSnapshot(time=0.0, source="none", error=GpuError(
                    GpuErrorKind.PROBE_FAILED, f"cannot start GPU sampling on "
                    f"{self.session.host.label}: {exc}; retrying in {delay:.0f} s"))
                await asyncio.sleep(delay)
                delay = min(delay * 2, GPU_RETRY_MAX_S)
                continue
            self._gpu_stream = GpuStream(source, interval=self.gpu_interval, run=self._run_ref)
            self._gpu_stream.start()
            # The checklist's "gpus" check reads the same snapshots the GPU pane shows.
            self.watch.gpu_snapshot = self._latest_gpu_snapshot
        async for snap in self._gpu_stream:
            yield snap

    def _latest_gpu_snapshot(self) -> GpuSnapshot | None:
        return self._gpu_stream.latest if self._gpu_stream is not None else None

    def follow(self, name: str) -> SessionFollower:
        return SessionFollower(self.session, posixpath.join(self.session.profile.run_dir, name))

    async def previous_run(self, exclude: str | None) -> PreviousRun | None:
        return await previous_run(await self.session.ops(), self.session.profile.run_dir, exclude=exclude)

    # -- actions ----------------------------------------------------------------------------
    async def launch(self) -> str:
        return await self._launch(relaunch=False)

    async def relaunch(self, resume: bool = False) -> str:
        return await self._launch(relaunch=True, resume=resume)

    async def _launch(self, relaunch: bool, resume: bool = False) -> str:
        try:
            result = await (self.watch.relaunch(resume=resume) if relaunch else self.watch.launch())
        except (LaunchRefused, ActionInFlight, ConfigError) as exc:
            raise ActionError(str(exc)) from None
        (outcome,) = result.outcomes.values()
        cl = outcome.checklist
        if outcome.unreachable or not outcome.run_id:
            raise ActionError(cl.summary or f"not launched: {cl.verdict.value}")
        parts = []
        if outcome.stopped is not None:
            parts.append(outcome.stopped.message)
        parts.append(f"launched run {outcome.run_id} in {outcome.seconds:.1f} s: {cl.verdict.value}"
                     + (f", resuming from checkpoint {outcome.resume_from}" if outcome.resume_from else ""))
        if cl.verdict.failing:
            raise ActionError("; ".join(parts) + (f" ({cl.summary})" if cl.summary else ""))
        return "; ".join(parts)

    async def stop(self) -> str:
        try:
            (res,) = (await self.watch.stop()).values()
        except ActionInFlight as exc:
            raise ActionError(str(exc)) from None
        if not res.ok:
            raise ActionError(res.message)
        return res.message

    async def canary(self) -> str:
        try:
            (res,) = (await self.watch.canary()).values()
        except ActionInFlight as exc:
            raise ActionError(str(exc)) from None
        if not res.ok:
            raise ActionError(f"canary FAILED: {res.message}")
        return f"canary passed: {res.message}"

    # -- history ----------------------------------------------------------------------------
    async def newest_checkpoint(self) -> str | None:
        """How the relaunch dialog names what a resume continues from (None: nothing, or a
        profile that runs its own command, which has no --resume of ours)."""
        if not self.resumable:
            return None
        ref = await self.session.newest_checkpoint()
        return None if ref is None else ref.words()

    async def history(self):
        return await self.session.history()

    def follow_path(self, path: str) -> SessionFollower:
        return SessionFollower(self.session, path)

    async def close(self) -> None:
        if self.watch.gpu_snapshot == self._latest_gpu_snapshot:
            self.watch.gpu_snapshot = self._fleet_gpu_snapshot   # the fleet's samples again
        stream, self._gpu_stream = self._gpu_stream, None
        if stream is not None:
            await stream.stop()
        await self.session.close()
