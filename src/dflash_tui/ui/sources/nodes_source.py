"""The DashboardSource of a run on several nodes: its NodesWatch, and one SessionSource per node
for that node's GPU stream and files.

Reports are the NodesWatch's (every node's HostWatch, the verdict `combine`d there, never here);
each node's GPU stream feeds that node's "gpus" check. This module only merges the rest: GPU
snapshots through `merge_gpu_snapshots`, train.log as every node's lines prefixed with
"[NODE] ", and events.jsonl from the first node (rank 0 logs the run's steps and evals). The
actions are the watch's: all or nothing, on every node, one at a time.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from ...config import ConfigError, Profile
from ...gpu.sample import GpuSnapshot
from ...run.launch.launch import LaunchRefused
from ...run.verdict.combine import merge_gpu_snapshots
from ...run.history import PreviousRun
from ...run.verdict.report import RunReport
from ...watch import ActionInFlight, NodesWatch
from .session_source import SessionFollower, SessionSource
from .source import EVENTS_LOG, ActionError


class PrefixedFollower:
    """Every node's follower of one file, its lines prefixed with the node's name."""

    def __init__(self, followers: list[tuple[str, SessionFollower]]) -> None:
        self.followers = followers

    @property
    def exists(self) -> bool:
        return any(f.exists for _, f in self.followers)

    @property
    def partial(self) -> str:
        """The line each node is still writing, one per node that has one."""
        return " ".join(f"[{node}] {f.partial}" for node, f in self.followers if f.partial)

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
        self.read_only = False
        self.resumable = False   # every node relaunches from the start (NodesSession has no resume)
        self.watch = NodesWatch(profile, interval=monitor_interval)
        self.nodes = [node for node, _ in self.watch.host_watches()]
        self.sources = [SessionSource(w.profile, watch=w, gpu_interval=gpu_interval)
                        for _, w in self.watch.host_watches()]

    # -- streams ----------------------------------------------------------------------------
    async def reports(self) -> AsyncIterator[RunReport]:
        async for report in self.watch.reports():
            for source, node in zip(self.sources, report.nodes):
                source.follow_run_on_gpus(node.report)   # mark each node's run processes on its GPUs
            yield report

    def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        latest: list[GpuSnapshot | None] = [None] * len(self.sources)

        def on_snapshot(i: int, snap: GpuSnapshot) -> GpuSnapshot:
            latest[i] = snap
            return merge_gpu_snapshots([(n, s) for n, s in zip(self.nodes, latest) if s is not None])
        return _merged([s.gpu_snapshots() for s in self.sources], on_snapshot)

    def follow(self, name: str):
        if name == EVENTS_LOG:
            return self.sources[0].follow(name)
        return PrefixedFollower([(n, s.follow(name)) for n, s in zip(self.nodes, self.sources)])

    async def previous_run(self, exclude: str | None) -> PreviousRun | None:
        """The first node's (rank 0 writes the run's step and eval events)."""
        return await self.sources[0].previous_run(exclude)

    async def history(self) -> None:
        return None   # one history/ per node: no list of the run's history yet

    async def newest_checkpoint(self) -> str | None:
        """What a resume continues from on every node: rank 0's newest checkpoint (the trainer
        sends it to the other ranks); None for a program of the user's own."""
        if not self.watch.profile.uses_bundled_trainer:
            return None
        ref = await self.watch.nodes.sessions[0].newest_checkpoint()
        return None if ref is None else f"rank 0's {ref.words()}"

    # -- actions ----------------------------------------------------------------------------
    async def _act(self, action):
        try:
            return await action()
        except (LaunchRefused, ActionInFlight, ConfigError) as exc:
            raise ActionError(str(exc)) from None

    async def launch(self) -> str:
        return await self._launch(self.watch.launch)

    async def relaunch(self, resume: bool = False) -> str:
        return await self._launch(lambda: self.watch.relaunch(resume=resume))

    async def _launch(self, action) -> str:
        out = await self._act(action)
        run = out.report.checklist
        if not out.launched or run.verdict.failing:
            raise ActionError(f"{run.verdict.value}: {run.summary}")
        ids = ", ".join(f"{n} {o.run_id}" for n, o in out.outcomes.items())
        return f"launched {len(out.outcomes)} nodes in {out.seconds:.1f} s ({ids}): {run.verdict.value}"

    async def stop(self) -> str:
        results = await self._act(self.watch.stop)
        text = "; ".join(f"node {n}: {r.message}" for n, r in results.items())
        if not all(r.ok for r in results.values()):
            raise ActionError(text)
        return text

    async def canary(self) -> str:
        results = await self._act(self.watch.canary)
        text = "; ".join(f"node {n}: {'passed' if r.ok else 'FAILED'}: {r.message}" for n, r in results.items())
        if not all(r.ok for r in results.values()):
            raise ActionError(f"canary FAILED: {text}")
        return f"canary passed: {text}"

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sources))
