"""ReplaySource: the test double of the dashboard's `DashboardSource`.

Fed by the caller with real RunReports, GpuSnapshots and log lines (tests/support/scenarios.py
builds them through the real engine), so Pilot and snapshot tests, the README screenshots and
the dashboard benchmark drive the code paths the live Session does. Items pushed while the app
runs arrive exactly as the live monitor's would.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable

from dflash_tui.gpu.sample import GpuSnapshot
from dflash_tui.run.history import PreviousRun
from dflash_tui.run.launch.request import LaunchRequest
from dflash_tui.run.verdict.report import RunReport
from dflash_tui.ui.sources.source import EVENTS_LOG, TRAIN_LOG, ActionError

PROFILE = "h200"


class ReplayFollower:
    def __init__(self, exists: bool = True) -> None:
        self._pending: list[str] = []
        self.exists = exists
        self.partial = ""

    def feed(self, lines: list[str]) -> None:
        self._pending.extend(lines)
        self.exists = True

    async def poll(self) -> list[str]:
        lines, self._pending = self._pending, []
        return lines


class ReplaySource:
    """A DashboardSource fed by the caller. Actions are recorded and answered by `on_action`."""

    def __init__(self, profile: str = PROFILE, *, reports: list[RunReport] = (),
                 gpus: list[GpuSnapshot] = (), logs: dict[str, list[str]] | None = None,
                 missing: tuple[str, ...] = (), previous: PreviousRun | None = None,
                 on_action: Callable[[str], Awaitable[str]] | None = None) -> None:
        self.profile = profile
        self.read_only = False
        self.resumable = False
        self._reports: asyncio.Queue[RunReport] = asyncio.Queue()
        self._gpus: asyncio.Queue[GpuSnapshot] = asyncio.Queue()
        self._followers: dict[str, list[ReplayFollower]] = {}
        self._logs: dict[str, list[str]] = {TRAIN_LOG: [], EVENTS_LOG: []}
        for name, lines in (logs or {}).items():
            self._logs.setdefault(name, []).extend(lines)
        for r in reports:
            self._reports.put_nowait(r)
        for g in gpus:
            self._gpus.put_nowait(g)
        self.on_action = on_action
        self.calls: list[str] = []
        self.closed = False
        self.missing = set(missing)      # files that do not exist on the "target" (yet)
        self.previous = previous         # the run dir's history/ entry, if any

    # -- feeding ----------------------------------------------------------------------------
    def push_report(self, report: RunReport) -> None:
        self._reports.put_nowait(report)

    def push_gpu(self, snap: GpuSnapshot) -> None:
        self._gpus.put_nowait(snap)

    def push_log(self, name: str, lines: list[str]) -> None:
        self.missing.discard(name)
        self._logs.setdefault(name, []).extend(lines)
        for f in self._followers.get(name, []):
            f.feed(lines)

    # -- DashboardSource --------------------------------------------------------------------
    async def reports(self) -> AsyncIterator[RunReport]:
        while True:
            yield await self._reports.get()

    async def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        while True:
            yield await self._gpus.get()

    def follow(self, name: str) -> ReplayFollower:
        f = ReplayFollower(exists=name not in self.missing)
        if self._logs.get(name):
            f.feed(list(self._logs[name]))   # a new follower starts with the file's tail
        self._followers.setdefault(name, []).append(f)
        return f

    async def previous_run(self, exclude: str | None) -> PreviousRun | None:
        p = self.previous
        return None if p is None or p.run_id == exclude else p

    async def _act(self, name: str) -> str:
        self.calls.append(name)
        if self.on_action is None:
            raise ActionError(f"{name}: this replay has no actions")
        return await self.on_action(name)

    async def launch(self, request: LaunchRequest) -> str:
        return await self._act("relaunch" if request.relaunch else "launch")

    async def stop(self) -> str:
        return await self._act("stop")

    async def history(self) -> None:
        return None

    async def newest_checkpoint(self) -> None:
        return None

    async def canary(self) -> str:
        return await self._act("canary")

    async def bundle(self) -> str:
        return await self._act("bundle")

    async def close(self) -> None:
        self.closed = True
