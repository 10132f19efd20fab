"""The live DashboardSource: any RunWatch (one host or several nodes), as the run view takes it.

Nothing here decides anything, and nothing reaches under the watch: reports, the run's files,
its history and its GPUs are the RunWatch's verbs (watch/base.py), the verdict the same
evaluation `--check` prints. This module only adapts them to what the app subscribes to, and
turns each action's result into the line the dashboard shows (the watch's own words for it).
"""

from __future__ import annotations

import asyncio
import os
from typing import AsyncIterator, Awaitable, Callable

from ...bundle import default_bundle_path, take_bundle
from ...bundle.member import Member
from ...config import ConfigError
from ...gpu.sample import GpuSnapshot
from ...recording.recovery.stop_cancel import PersonStop
from ...run.history import HistoryRun, PreviousRun
from ...run.launch.launch import LaunchRefused
from ...run.verdict.report import RunReport
from ...watch import ActionInFlight, LaunchRequest, LineFollower, RunWatch, canary_words, stop_words
from .source import ActionError


class WatchSource:
    def __init__(self, watch: RunWatch, *, owned: bool = True,
                 bundle_extras: Callable[[], tuple[tuple[str, ...], tuple[Member, ...]]] | None = None,
                 stop: Callable[[RunWatch], Awaitable[PersonStop]] | None = None,
                 max_restarts: int = 0) -> None:
        """`watch`: the run's RunWatch; `owned=False`: the fleet's, borrowed (the run view and the
        fleet then guard one action at a time on the same object, and closing this source
        leaves the watch to the fleet). `bundle_extras`: the notify URLs and this machine's
        members (the timeline) an evidence bundle takes (recording/recovery/outside.py; blocking);
        `stop`: how a person's stop is made where the profile has a [recover] policy
        (recording/recovery/stop_cancel.py: it cancels a pending restart)."""
        self.watch = watch
        self.bundle_extras = bundle_extras
        self._person_stop = stop
        self._max_restarts = max_restarts
        self.owned = owned
        self.profile = watch.profile.name
        self.read_only = False
        self.resumable = watch.profile.uses_bundled_trainer   # a program of its own has no --resume of ours
        self.label = watch.label

    # -- streams ----------------------------------------------------------------------------
    def reports(self) -> AsyncIterator[RunReport]:
        return self.watch.reports()

    def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        return self.watch.gpu_snapshots()

    def follow(self, name: str) -> LineFollower:
        return self.watch.follow(name)

    def follow_path(self, path: str) -> LineFollower:
        return self.watch.follow_path(path)

    async def previous_run(self, exclude: str | None) -> PreviousRun | None:
        return await self.watch.previous_run(exclude)

    async def history(self) -> list[HistoryRun] | None:
        return await self.watch.history()

    async def newest_checkpoint(self) -> str | None:
        """How the relaunch dialog names what a resume continues from (None: nothing, or a
        profile that runs its own command, which has no --resume of ours)."""
        if not self.resumable:
            return None
        ref = await self.watch.newest_checkpoint()
        if ref is None:
            return None
        return f"rank 0's {ref.words()}" if len(self.watch.host_watches()) > 1 else ref.words()

    # -- actions ----------------------------------------------------------------------------
    async def _act(self, action):
        try:
            return await action()
        except (LaunchRefused, ActionInFlight, ConfigError) as exc:
            raise ActionError(str(exc)) from None

    async def launch(self, request: LaunchRequest) -> str:
        return self._said(*(await self._act(lambda: self.watch.launch(request))).words())

    async def stop(self) -> str:
        if self._person_stop is None:
            return self._said(*stop_words(await self._act(self.watch.stop)))
        done = await self._act(lambda: self._person_stop(self.watch))
        ok, text = stop_words(done.results)
        line = done.recovery_line(self._max_restarts)
        return self._said(ok, f"{text}; {line}" if line else text)

    async def canary(self) -> str:
        return self._said(*canary_words(await self._act(self.watch.canary)))

    async def bundle(self) -> str:
        """An evidence bundle of the run in the current folder (bundle/take.py: it signals
        nothing, so it waits for no action); one line naming the file."""
        urls, extra = await asyncio.to_thread(self.bundle_extras) if self.bundle_extras else ((), ())
        path = os.path.abspath(default_bundle_path(self.profile))
        try:
            result = await take_bundle(self.watch, path, profile=self.watch.profile, notify_urls=urls, extra=extra)
        except OSError as exc:
            raise ActionError(f"bundle not written to {path}: {exc.strerror or exc}") from None
        return result.words()

    @staticmethod
    def _said(ok: bool, text: str) -> str:
        if not ok:
            raise ActionError(text)
        return text

    async def close(self) -> None:
        """What the run view started (the GPU stream); the watch itself when it is this source's."""
        await (self.watch.close() if self.owned else self.watch.stop_gpu_stream())
