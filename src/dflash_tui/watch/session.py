"""Session: one profile's targets and ops, the one place the CLI and the dashboard both use.

It builds the profile's Launcher (backends/: where and how the run is started, found alive,
stopped and observed, with its host and run targets), opens RemoteOps on the run target (the persistent agent, or one-shot shell commands where there is no python3), and
offers the run's verbs: check, launch, relaunch, stop, canary (watch/host.py's HostWatch
watches a run through a Session).
`check(gpus=True)` adds the dashboard's "gpus" check from one bounded GPU sample of the HOST
(NVML runs there, not in the container), for the headless modes.

With `transport=` (watch/transport.py) the targets, the agent and the GPU probe are borrowed
from a SharedTransport, so profiles on one host share one connection and one agent; such a
session closes nothing it borrowed, and `reopen()` keeps them (the agent restarts itself on
the next request and the connection reconnects with backoff, for every profile at once).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Awaitable, Callable, Sequence

from ..backends import launcher_for
from ..config import ConfigError, Profile
from ..gpu.oneshot import OneShotGpuProbe
from ..gpu.sample import GpuSnapshot
from ..gpu.sources import RunRef, run_ref_from_launch
from ..remote.agent import open_ops
from ..remote.base import Target, TargetError
from ..remote.ops import RemoteOps
from ..run.evidence.activity import ProgressTracker
from ..run.evidence.divergence import DivergenceRules
from ..run.evidence.memory_runway import run_step
from ..run.attempts import LaunchAttempt, load_attempt, load_local_stop, save_attempt, save_local_stop
from ..run.launch.canary import CanaryResult, run_canary
from ..run.verdict.health import with_gpu_check
from ..run.history import CheckpointRef, HistoryRun, list_runs, newest_checkpoint, open_run
from ..run.launch.launch import LaunchOutcome, LaunchRefused, launch_run, not_launched
from ..run.launch.launcher import Launcher
from ..run.launch.request import LaunchRequest, as_request
from ..run.evidence.observe import Evidence, current_run_id
from ..run.launch.stop import StopResult
from ..run.verdict.checklist import Checklist
from ..run.verdict.energy import priced_energy
from ..run.verdict.report import RunReport
from .memory_state import load_memory_series, save_memory_series
from .transport import SharedTransport


def resume_refused(profile: str) -> str:
    return (f"profile {profile} runs its own command; resume works with the bundled trainer "
            "(add your program's own flag to train_args instead, or read DFLASH_RESTART)")


class Session:
    def __init__(self, profile: Profile, *, targets: tuple[Target, Target] | None = None,
                 ops_kind: str = "auto", argv: Sequence[str] | None = None, rank: int = 0,
                 transport: SharedTransport | None = None) -> None:
        """`ops_kind`: "auto" (the agent where python3 runs, else shell), "agent" or "shell".
        `argv`: what launches run instead of the profile's trainer_argv (one node of a run on
        several hosts: watch/node_plan.py); `rank`: that node's torch.distributed rank, whose status
        file the run dir holds. `transport`: borrow the targets and agent from a SharedTransport."""
        self.profile = profile
        self.argv = list(argv) if argv is not None else None
        self.rank = rank
        self.ops_kind = ops_kind
        self.limits = profile.limits
        self.transport = transport
        self._given_targets = targets is not None or transport is not None
        self.launcher: Launcher = (transport.launcher(profile) if transport is not None
                                   else launcher_for(profile, targets=targets))
        self._ops: RemoteOps | None = None
        self._ops_lock = asyncio.Lock()
        self._gpu = None   # OneShotGpuProbe, opened by the first gpu_snapshot()
        self.attempt: LaunchAttempt | None = load_attempt(profile)
        self._attempt_read_for: str | None = None   # the run id the record was last read again for
        self.local_stop = load_local_stop(profile)
        # What advanced between this session's looks (CPU, log, steps): memory across polls.
        self.progress = ProgressTracker(profile.progress_regex, metric_paths=profile.metrics,
                                        divergence=DivergenceRules(profile.watch_series, profile.nan_patience,
                                                                   profile.spike_patience),
                                        checkpoint_paths=profile.checkpoints,
                                        memory_limit_bytes=profile.memory_limit_bytes)
        self.progress.memory.restore(load_memory_series(profile))

    @property
    def host(self) -> Target:
        """The machine (commands, NVML)."""
        return self.launcher.host

    @property
    def target(self) -> Target:
        """Where the run dir lives (the machine, or a container on it)."""
        return self.launcher.target

    @property
    def label(self) -> str:
        return self.target.label

    async def ops(self) -> RemoteOps:
        """RemoteOps on the run target, opened on first use. Raises TargetError."""
        async with self._ops_lock:
            if self._ops is None:
                if self.transport is not None:
                    self._ops = await self.transport.ops(self.profile)
                else:
                    self._ops = await open_ops(self.target, prefer=self.ops_kind)
            return self._ops

    async def reopen(self) -> tuple[Launcher, RemoteOps]:
        """Drop the transport (every channel and the connection) and open fresh ops over a new one."""
        if self.transport is not None:
            return self.launcher, await self.ops()
        async with self._ops_lock:
            await self._close_quietly()
            if not self._given_targets:
                self.launcher = launcher_for(self.profile)
            self._ops = await open_ops(self.target, prefer=self.ops_kind)
            return self.launcher, self._ops

    async def _close_quietly(self) -> None:
        if self.transport is not None:
            self._ops = None   # borrowed: the transport's owner closes it
            return
        gpu, self._gpu = self._gpu, None
        if gpu is not None:
            await gpu.close()   # before the host's transport it rides on
        for thing in (self._ops, self.target, self.host):
            if thing is None:
                continue
            try:
                await thing.close()
            except (TargetError, OSError):
                pass   # it is being thrown away; a failing close changes nothing
        self._ops = None

    async def close(self) -> None:
        async with self._ops_lock:
            await self._close_quietly()

    def _remember(self, attempt: LaunchAttempt) -> None:
        self.attempt = attempt
        save_attempt(self.profile, attempt)

    # -- the verbs --------------------------------------------------------------------------

    async def evidence(self) -> Evidence:
        ev = await self.launcher.observe(await self.ops(), self.profile.run_dir, attempt=self.attempt,
                                         tracker=self.progress, rank=self.rank, local_stop=self.local_stop)
        self._keep_memory()
        return ev

    def note_gpus(self, ev: Evidence, snap: GpuSnapshot | None) -> None:
        """The run's memory on each GPU of `snap` into its memory runway (`ev.memory`), while
        the run's host memory is looked at (a live run's look)."""
        if snap is None or ev.memory is None:
            return
        mem = self.progress.memory
        mem.note_gpus(ev.now, run_step(ev), current_run_id(ev), snap)
        ev.memory = mem.runway()
        self._keep_memory()

    def _keep_memory(self) -> None:
        mem = self.progress.memory
        if mem.dirty:
            mem.dirty = False
            save_memory_series(self.profile, mem.to_json())

    async def check(self, *, gpus: bool = False) -> tuple[Evidence, Checklist]:
        """The checklist for the run now; with `gpus`, the "gpus" check too (`with_gpus`)."""
        ev = await self.evidence()
        cl = self.launcher.judge(ev, self.limits, self.progress.looks)
        return ev, (await self.with_gpus(ev, cl) if gpus else cl)

    async def gpu_snapshot(self, ev: Evidence):
        """One GPU snapshot of the profile's host, the run's processes marked. Never raises and
        never takes more than a few seconds: a hung or missing NVML is the snapshot's error."""
        return await self._gpu_sample(run_ref_from_launch(ev.launch))

    async def host_gpus(self) -> GpuSnapshot:
        """One GPU snapshot of the profile's host, no process marked (the preflight's
        "gpu_health"), bounded in time as `gpu_snapshot`."""
        return await self._gpu_sample(None)

    async def _gpu_sample(self, run: RunRef | None) -> GpuSnapshot:
        if self.transport is not None:
            return await self.transport.gpu_sample(self.profile, run)
        async with self._ops_lock:
            if self._gpu is None:
                self._gpu = OneShotGpuProbe(self.host, python=self.profile.python)
            gpu = self._gpu
        return await gpu.sample(run)

    async def with_gpus(self, ev: Evidence, checklist: Checklist) -> Checklist:
        """`checklist` plus the "gpus" check, combined exactly as the dashboard combines it."""
        snap = await self.gpu_snapshot(ev)
        self.note_gpus(ev, snap)
        return with_gpu_check(checklist, ev, snap)

    def with_energy(self, report: RunReport) -> RunReport:
        """`report` with its run's energy since the launch and its cost (run/verdict/energy.py),
        where its checklist holds the GPUs' sample; the launch's counter readings are this
        machine's record of the launch (run/attempts.py), used only for the run it launched."""
        launch, p = report.launch, self.profile
        if launch is None or not report.checklist.gpus:
            return report
        attempt = self.attempt
        if (attempt is None or attempt.run_id != launch.run_id) and launch.run_id != self._attempt_read_for:
            # Launched by another process of this machine (the dashboard, the watcher's
            # recovery) since this one read the record: read it again, once per run.
            self._attempt_read_for = launch.run_id
            attempt = self.attempt = load_attempt(self.profile) or attempt
        baseline = attempt.gpu_energy_mj if attempt is not None and attempt.run_id == launch.run_id else None
        progress = report.progress
        energy, cost = priced_energy(
            facts=report.checklist.gpus, baseline_mj=baseline, run_s=max(0.0, report.time - launch.start_time),
            step=progress.step if progress is not None else None,
            tokens_per_s=report.status.tokens_per_s if report.status is not None else None,
            eta_s=progress.eta_s if progress is not None else None,
            per_gpu_hour=p.cost_per_gpu_hour, per_kwh=p.cost_per_kwh)
        return replace(report, energy=energy, cost=cost)

    async def launch(self, request: LaunchRequest | None = None, /, *, checkpoint_found: bool = False,
                     **fields) -> LaunchOutcome:
        """Launch as `request` asks (or its fields as keywords: `launch(preflight=False)`).
        `request.resume`: the bundled trainer continues from the newest checkpoint in the run
        dir (checkpoints/ stays where it is when the last run is moved to history/);
        `checkpoint_found`: the caller found the checkpoint already (a node of several resumes
        from rank 0's, which its own run dir does not hold)."""
        request = as_request(request, fields)
        argv = request.argv if request.argv is not None else self.argv
        if request.resume:
            if not self.profile.uses_bundled_trainer:
                raise ConfigError(resume_refused(self.profile.name))
            argv = [*(argv if argv is not None else self.profile.trainer_argv), "--resume"]
        if argv is not None:
            request = replace(request, argv=tuple(argv))
        try:
            ops = await self.ops()
        except TargetError:
            if not request.preflight:
                raise
            # No ops (host down, container stopped): the preflight says which, as checks.
            pre = await self.launcher.preflight(None)
            if not pre.ok:
                return not_launched(pre)
            raise
        resume = request.resume and not checkpoint_found
        ref = await newest_checkpoint(ops, self.profile.run_dir) if resume else None
        if resume and ref is None:
            raise LaunchRefused(f"no checkpoint in {self.profile.run_dir}/checkpoints to resume "
                                "from; relaunch without resume")
        outcome = await launch_run(self.profile, self.launcher, ops, request, limits=self.limits,
                                   on_attempt=self._remember, gpu_sample=self.host_gpus)
        if ref is not None and outcome.run_id:
            outcome.resume_from = ref.words()
        return outcome

    async def history(self) -> list[HistoryRun]:
        """The runs in the run dir's history/, newest first, each judged as it ended."""
        return await list_runs(await self.ops(), self.profile.run_dir, self.limits)

    async def history_run(self, run_id: str) -> HistoryRun:
        return await open_run(await self.ops(), self.profile.run_dir, run_id, self.limits)

    async def newest_checkpoint(self) -> CheckpointRef | None:
        """What a resumed relaunch would continue from (None: nothing to resume)."""
        return await newest_checkpoint(await self.ops(), self.profile.run_dir)

    async def stop(self, grace_s: float | None = None, *,
                   before_signal: Callable[[], Awaitable[None]] | None = None,
                   requested_by: str | None = None) -> StopResult:
        res = await self.launcher.stop(await self.ops(), self.profile.run_dir,
                                       grace_s=self.profile.stop_grace_s if grace_s is None else grace_s,
                                       requested_by=requested_by, before_signal=before_signal)
        if res.record is not None and not res.recorded:
            self.local_stop = res.record
            save_local_stop(self.profile, res.record)
        return res

    async def canary(self, sleep_s: int = 30) -> CanaryResult:
        return await run_canary(self.profile, self.launcher, await self.ops(), self.reopen,
                                sleep_s=sleep_s)

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
