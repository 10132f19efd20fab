"""The DashboardSource of a run on several nodes: one SessionSource per node, shown as one run.

Each node keeps its own RunMonitor and GPU stream (so each node's checklist carries its own
"gpus" check). This module only merges the streams: reports through run/combine.py `combine`
and `RunOfNodes.report` (the verdict is decided there, never here), GPU snapshots through
`merge_gpu_snapshots`, train.log as every node's lines prefixed with "[NODE] ", and
events.jsonl from the first node (rank 0 logs the run's steps and evals). The actions are
NodesSession's: all or nothing, on every node.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from ..config import Profile
from ..gpu.sample import GpuSnapshot
from ..multinode import NodesSession
from ..run.launch import LaunchRefused
from ..run.combine import NodeReport, combine, merge_gpu_snapshots
from ..run.report import RunReport
from .session_source import SessionFollower, SessionSource
from .source import EVENTS_LOG, ActionError


class PrefixedFollower:
    """Every node's follower of one file, its lines prefixed with the node's name."""

    def __init__(self, followers: list[tuple[str, SessionFollower]]) -> None:
        self.followers = followers

    @property
    def exists(self) -> bool:
        return any(f.exists for _, f in self.followers)

    async def poll(self) -> list[str]:
        batches = await asyncio.gather(*(f.poll() for _, f in self.followers))
        return [f"[{node}] {line}" for (node, _), lines in zip(self.followers, batches) for line in lines]


async def _merged(streams: list[AsyncIterator], on_item) -> AsyncIterator:
    """Items from every stream as they come; `on_item(i, item)` returns what to yield (or None)."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, stream: AsyncIterator) -> None:
        async for item in stream:
            await queue.put((i, item))
    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        while True:
            i, item = await queue.get()
            out = on_item(i, item)
            if out is not None:
                yield out
    finally:
        for t in tasks:
            t.cancel()


class NodesSource:
    def __init__(self, profile: Profile, *, gpu_interval: float = 1.0, monitor_interval: float = 1.0) -> None:
        self.profile = profile.name
        self._profile = profile
        self.nodes = NodesSession(profile)
        self.limits = self.nodes.limits
        self.sources = [SessionSource(plan.profile, session=session, gpu_interval=gpu_interval,
                                      monitor_interval=monitor_interval)
                        for plan, session in zip(self.nodes.plans, self.nodes.sessions)]
        self._action = asyncio.Lock()

    # -- streams ----------------------------------------------------------------------------
    def reports(self) -> AsyncIterator[RunReport]:
        latest: list[RunReport | None] = [None] * len(self.sources)
        plans = self.nodes.plans

        def on_report(i: int, report: RunReport) -> RunReport | None:
            latest[i] = report
            if any(r is None for r in latest):
                return None   # one verdict for the run needs every node's first report
            run = combine([NodeReport(p.node, p.rank, r) for p, r in zip(plans, latest)])
            return run.report(self.profile, self._profile.where(), self._profile.run_dir)
        return _merged([s.reports() for s in self.sources], on_report)

    def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        latest: list[GpuSnapshot | None] = [None] * len(self.sources)
        names = [p.node for p in self.nodes.plans]

        def on_snapshot(i: int, snap: GpuSnapshot) -> GpuSnapshot:
            latest[i] = snap
            return merge_gpu_snapshots([(n, s) for n, s in zip(names, latest) if s is not None])
        return _merged([s.gpu_snapshots() for s in self.sources], on_snapshot)

    def follow(self, name: str):
        if name == EVENTS_LOG:
            return self.sources[0].follow(name)
        return PrefixedFollower([(p.node, s.follow(name)) for p, s in zip(self.nodes.plans, self.sources)])

    # -- actions ----------------------------------------------------------------------------
    async def _act(self, coro_fn):
        if self._action.locked():
            raise ActionError("a launch, stop or canary is already in flight")
        async with self._action:
            return await coro_fn()

    async def launch(self) -> str:
        return await self._launch(relaunch=False)

    async def relaunch(self) -> str:
        return await self._launch(relaunch=True)

    async def _launch(self, relaunch: bool) -> str:
        try:
            out = await self._act(lambda: self.nodes.launch(relaunch=relaunch))
        except LaunchRefused as exc:
            raise ActionError(str(exc)) from None
        if not out.launched or out.run.verdict.failing:
            raise ActionError(f"{out.run.verdict.value}: {out.run.summary}")
        ids = ", ".join(f"{n} {o.run_id}" for n, o in out.outcomes.items())
        return f"launched {len(out.outcomes)} nodes in {out.seconds:.1f} s ({ids}): {out.run.verdict.value}"

    async def stop(self) -> str:
        results = await self._act(self.nodes.stop)
        text = "; ".join(f"node {n}: {r.message}" for n, r in results.items())
        if not all(r.ok for r in results.values()):
            raise ActionError(text)
        return text

    async def canary(self) -> str:
        results = await self._act(self.nodes.canary)
        text = "; ".join(f"node {n}: {'passed' if r.ok else 'FAILED'}: {r.message}" for n, r in results.items())
        if not all(r.ok for r in results.values()):
            raise ActionError(f"canary FAILED: {text}")
        return f"canary passed: {text}"

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sources))
