"""NodesSession: a profile with `nodes`, as one Session per node and the run's verbs over all.

Each node is an ordinary single-host Session (watch/node_plan.py `plan_nodes` gives its profile and
argv), so every node is launched through the same verified wrapper, observed by the same
`gather` -> `evaluate` (watch/nodes.py), and stopped by its own recorded pid. SSH
connections are shared per host by the pool, as for any two sessions. What is added here is only what makes them one
run: the launch is all or nothing (every node's preflight passes, or no node is started), and a
relaunch stops every node before any starts again. Watching the run (each node's report, the
`combine`d verdict) is watch/nodes.py's NodesWatch.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

from ..config import ConfigError, Profile
from ..remote.base import TargetError
from ..run.launch.canary import CanaryResult
from ..run.launch.launch import LaunchOutcome, LaunchRefused, not_launched
from .node_plan import NodePlan, plan_nodes
from ..run.launch.preflight import PreflightResult
from ..run.launch.request import LaunchRequest
from ..run.launch.stop import StopResult
from ..run.verdict.checklist import Check, CheckId, CheckState, Checklist, Verdict
from .session import Session, resume_refused


SIGNAL_TOGETHER_WAIT_S = 5.0   # the longest a proven node waits for the others to be proven


class SignalTogether:
    """The nodes of one run send their SIGTERM at the same moment: each node's stop proves its
    pid and writes stop.json at its own pace (a remote node takes a few SSH round trips more),
    and a program that stops every rank together (each step's collective carries a stop flag)
    would otherwise end a slower node's rank before its own signal, outside its SIGTERM
    handler. A node that ends its stop without a signal (nothing running, a mismatch, an
    error) no longer holds the others; a node still unproven after SIGNAL_TOGETHER_WAIT_S does
    not hold them either."""

    def __init__(self, nodes: int, wait_s: float = SIGNAL_TOGETHER_WAIT_S) -> None:
        self._left = nodes
        self._all_ready = asyncio.Event()
        self.wait_s = wait_s
        if nodes <= 0:
            self._all_ready.set()

    def _arrived(self) -> None:
        self._left -= 1
        if self._left <= 0:
            self._all_ready.set()

    async def stop(self, session: Session, requested_by: str | None = None) -> StopResult:
        """`session.stop()`, its SIGTERM held until every node is ready to send its own."""
        waited = False

        async def ready() -> None:
            nonlocal waited
            waited = True
            self._arrived()
            try:
                await asyncio.wait_for(self._all_ready.wait(), self.wait_s)
            except asyncio.TimeoutError:
                pass   # a node that cannot be proven in time does not keep the others running

        try:
            return await session.stop(before_signal=ready, requested_by=requested_by)
        finally:
            if not waited:
                self._arrived()


@dataclass
class NodesLaunch:
    outcomes: dict[str, LaunchOutcome]  # per node
    stopped: dict[str, StopResult] = field(default_factory=dict)   # relaunch: the old run's stops
    seconds: float = 0.0

    @property
    def launched(self) -> bool:
        return all(o.run_id for o in self.outcomes.values())


class NodesSession:
    def __init__(self, profile: Profile, *, ops_kind: str = "auto") -> None:
        if not profile.nodes:
            raise ConfigError(f"{profile.source}: [profile.{profile.name}] has no nodes")
        self.profile = profile
        self.limits = profile.limits
        self.plans: list[NodePlan] = plan_nodes(profile)
        self.sessions: list[Session] = [Session(p.profile, ops_kind=ops_kind, argv=p.argv, rank=p.rank) for p in self.plans]

    def _each(self, fn):
        return asyncio.gather(*(fn(i, plan, s) for i, (plan, s) in enumerate(zip(self.plans, self.sessions))))

    # -- launching ----------------------------------------------------------------------------

    async def _preflight(self, i: int, plan: NodePlan, s: Session, relaunch: bool) -> PreflightResult:
        try:
            ops = await s.ops()
        except TargetError:
            ops = None   # the preflight says which (host down, container stopped), as checks
        return await s.launcher.preflight(ops, check_live_run=not relaunch, gpu_sample=s.host_gpus)

    async def _live(self, i: int, plan: NodePlan, s: Session) -> str | None:
        ev = await s.evidence()
        if s.launcher.alive(ev) and ev.exit is None:
            return f"node {plan.node}: run {ev.launch.run_id} (pid {ev.launch.pid}) is still running"
        return None

    async def _launch_node(self, i: int, plan: NodePlan, s: Session, request: LaunchRequest) -> LaunchOutcome:
        try:
            # A resumed node other than rank 0 resumes from rank 0's checkpoint (the trainer
            # sends it), found before any node was stopped or started; every node's preflight
            # ran, and a relaunch stopped every node, before any node is launched.
            return await s.launch(replace(request, preflight=False, relaunch=False), checkpoint_found=request.resume)
        except TargetError as exc:
            check = Check.of(CheckId.LAUNCH_CMD, CheckState.FAIL, str(exc),
                          "check the host, then relaunch every node", time.time())
            return LaunchOutcome(Checklist(Verdict.NOT_LAUNCHED, [check], str(exc)), unreachable=True)

    async def _resume_check(self) -> None:
        """A resume continues on every node from rank 0's newest checkpoint (only rank 0 writes
        them; the trainer sends it to the others), so that checkpoint must exist; else the
        launch is refused, before any node is stopped: never a silent start from step 0."""
        first, session = self.plans[0], self.sessions[0]
        if await session.newest_checkpoint() is None:
            raise LaunchRefused(f"no checkpoint in {first.profile.run_dir}/checkpoints (node {first.node}, "
                                "rank 0, whose checkpoint every node resumes from); relaunch without resume")

    async def launch(self, request: LaunchRequest) -> NodesLaunch:
        """Start every node, or none, as `request` asks. Raises LaunchRefused when a node still
        runs (not a relaunch), with `resume` when rank 0 has no checkpoint to resume from, and
        for a placement (the nodes are the profile's own list, none is picked), before any node
        is stopped or started."""
        t0 = time.monotonic()
        refused = request.refused_placement(False)
        if refused is not None:
            raise LaunchRefused(refused)
        if request.resume and not self.profile.uses_bundled_trainer:
            raise ConfigError(resume_refused(self.profile.name))
        pres: list[PreflightResult | None] = [None] * len(self.plans)
        if request.preflight:
            pres = await self._each(lambda i, p, s: self._preflight(i, p, s, request.relaunch))
            refused = [p.node for p, pre in zip(self.plans, pres) if not pre.ok]
            if refused:
                outcomes = {}
                for plan, pre in zip(self.plans, pres):
                    if pre.ok:
                        why = Check.of(CheckId.PRE_NODES, CheckState.FAIL,
                                    f"not launched: the preflight of node {', '.join(refused)} failed",
                                    "fix that node, then launch again")
                        outcomes[plan.node] = LaunchOutcome(Checklist(Verdict.NOT_LAUNCHED, [*pre.checks, why],
                                                                      why.cause), preflight=pre)
                    else:
                        outcomes[plan.node] = not_launched(pre)
                return NodesLaunch(outcomes, seconds=time.monotonic() - t0)
        if request.resume:
            try:
                await self._resume_check()
            except TargetError as exc:
                raise LaunchRefused(f"node {self.plans[0].node}: cannot look for its checkpoint ({exc}); "
                                    "check the host, then relaunch") from None
        stopped: dict[str, StopResult] = {}
        if request.relaunch:
            together = SignalTogether(len(self.sessions))
            results = await self._each(lambda i, p, s: together.stop(s))
            stopped = {p.node: r for p, r in zip(self.plans, results)}
            failed = [f"node {n}: {r.message}" for n, r in stopped.items() if not r.ok]
            if failed:
                raise LaunchRefused("; ".join(failed) + "; stop it by hand, then launch")
        else:
            live = [x for x in await self._each(self._live) if x]
            if live:
                raise LaunchRefused("; ".join(live) + "; stop the run first, or relaunch")
        results = await self._each(lambda i, p, s: self._launch_node(i, p, s, request))
        for out, pre in zip(results, pres):
            out.preflight = out.preflight or pre
        outcomes = {p.node: o for p, o in zip(self.plans, results)}
        return NodesLaunch(outcomes, stopped, time.monotonic() - t0)

    # -- stopping and the canary ------------------------------------------------------------

    async def stop(self, requested_by: str | None = None) -> dict[str, StopResult]:
        """Every node stopped by its own recorded pid, at the same time (so no node is left
        waiting in a collective for one already gone)."""
        together = SignalTogether(len(self.sessions))
        results = await self._each(lambda i, p, s: together.stop(s, requested_by))
        return {p.node: r for p, r in zip(self.plans, results)}

    async def canary(self, sleep_s: int = 30) -> dict[str, CanaryResult]:
        results = await self._each(lambda i, p, s: s.canary(sleep_s))
        return {p.node: r for p, r in zip(self.plans, results)}

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sessions))

    async def __aenter__(self) -> "NodesSession":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
