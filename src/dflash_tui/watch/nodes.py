"""NodesWatch: the RunWatch of a run on several nodes, one HostWatch per node, one verdict.

Each node is watched exactly as one host is (its own HostWatch: tracker, stale report, backoff,
"gpus" check from whoever samples that node's GPUs); run/verdict/combine.py `combine` gives the run its
verdict and `RunOfNodes.report` the one report the panes and the CLI show, with every node's own
report in `RunReport.nodes`. The verbs are watch/nodes_session.py's NodesSession's: all or nothing.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from ..config import Profile
from .nodes_session import NodesSession
from ..remote.base import TargetError
from ..run.launch.canary import CanaryResult
from ..run.launch.request import LaunchRequest
from ..contract.rundir import EVENTS_JSONL
from ..gpu.sample import GpuSnapshot
from ..run.verdict.combine import NodeReport, combine, merge_gpu_snapshots
from ..run.verdict.report import RunReport
from ..run.launch.stop import StopResult
from ..run.history import CheckpointRef, PreviousRun
from .base import LaunchResult, RunWatch
from .files import LineFollower, PrefixedFollower, merged
from .host import HostWatch

UNREACHABLE_HINT = "check the host and its ssh config"


class NodesWatch(RunWatch):
    launch_mixes_runs = True   # a relaunch moves and starts the nodes one after another

    def __init__(self, profile: Profile, *, interval: float = 1.0, poll_timeout: float | None = None,
                 ops_kind: str = "auto") -> None:
        super().__init__(interval)
        self.profile = profile
        self.nodes = NodesSession(profile, ops_kind=ops_kind)
        self.limits = self.nodes.limits
        self.plans = self.nodes.plans
        self.watches = [HostWatch(s, interval=interval, poll_timeout=poll_timeout) for s in self.nodes.sessions]

    @property
    def label(self) -> str:
        return self.profile.where()

    def search_checkpoints_now(self, at_or_before: int | None = None) -> None:
        for w in self.watches:
            w.search_checkpoints_now(at_or_before)

    def host_watches(self) -> list[tuple[str, HostWatch]]:
        return [(plan.node, w) for plan, w in zip(self.plans, self.watches)]

    @property
    def places_nodes(self) -> bool:
        return False   # the profile's `nodes` are where the run goes: no launch picks or avoids one

    @property
    def retry_in(self) -> float | None:
        waits = [w.retry_in for w in self.watches if w.retry_in is not None]
        return min(waits) if waits else None

    def combined(self, reports: list[RunReport]) -> RunReport:
        """The run's report from its nodes' (the verdict: run/verdict/combine.py)."""
        run = combine([NodeReport(p.node, p.rank, r) for p, r in zip(self.plans, reports)])
        return run.report(self.profile.name, self.profile.where(), self.profile.run_dir)

    async def _poll(self) -> RunReport:
        return self.combined(list(await asyncio.gather(*(w.poll() for w in self.watches))))

    async def _node_check(self, watch: HostWatch, gpus: bool) -> RunReport:
        try:
            return await watch.check(gpus=gpus)
        except (TargetError, OSError, asyncio.TimeoutError) as exc:
            return watch.unreachable(str(exc) or type(exc).__name__, UNREACHABLE_HINT)

    async def _check(self, gpus: bool) -> RunReport:
        """Every node observed once (concurrently); a node that cannot be reached is stale in it."""
        return self.combined(list(await asyncio.gather(*(self._node_check(w, gpus) for w in self.watches))))

    async def _launch(self, request: LaunchRequest) -> LaunchResult:
        for w in self.watches:
            w.tracker.reset()
        out = await self.nodes.launch(request)
        reports = []
        for plan, w in zip(self.plans, self.watches):
            report = await w.launched(out.outcomes[plan.node], request.gpus)
            if out.outcomes[plan.node].evidence is not None:
                w.last = report   # a node that later cannot be reached repeats this report
            reports.append(report)
        return LaunchResult(self.combined(reports), out.outcomes, out.stopped, out.seconds)

    async def _stop(self, requested_by: str | None = None) -> dict[str, StopResult]:
        return await self.nodes.stop(requested_by)

    async def _canary(self, sleep_s: int) -> dict[str, CanaryResult]:
        return await self.nodes.canary(sleep_s)

    async def newest_checkpoint(self) -> CheckpointRef | None:
        return await self.nodes.sessions[0].newest_checkpoint()

    # -- files and GPUs: every node's, merged; the run's own record (events, history) rank 0's --

    def follow(self, name: str) -> LineFollower:
        if name == EVENTS_JSONL:
            return self.watches[0].follow(name)   # rank 0 logs the run's steps and evals
        return PrefixedFollower([(p.node, w.follow(name)) for p, w in zip(self.plans, self.watches)])

    def follow_path(self, path: str) -> LineFollower:
        return self.watches[0].follow_path(path)

    async def previous_run(self, exclude: str | None) -> PreviousRun | None:
        return await self.watches[0].previous_run(exclude)

    async def history(self) -> None:
        return None   # one history/ per node: no one list of the run's history yet

    def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]:
        latest: list[GpuSnapshot | None] = [None] * len(self.watches)
        nodes = [p.node for p in self.plans]

        def on_snapshot(i: int, snap: GpuSnapshot) -> GpuSnapshot:
            latest[i] = snap
            return merge_gpu_snapshots([(n, s) for n, s in zip(nodes, latest) if s is not None])
        return merged([w.gpu_snapshots() for w in self.watches], on_snapshot)

    async def stop_gpu_stream(self) -> None:
        await asyncio.gather(*(w.stop_gpu_stream() for w in self.watches))

    async def close(self) -> None:
        await self.stop_gpu_stream()
        await self.nodes.close()
