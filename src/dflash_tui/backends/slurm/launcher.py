"""The Slurm backend: a run is a job, submitted, observed, found alive and cancelled from a
login host (`host`, or this machine) through the scheduler's commands (commands.py).

The launch sequence is everyone's (run/launch/launch.py: preflight, claim, archive, launch.sh, the run
probe); `detach` submits launch.sh as the job's script with `sbatch` instead of starting it, and
slurm.json records the job id in the run dir (stop cancels exactly that job; the verdict asks
the scheduler about it). The wrapper then runs on the job's first node and writes launch.json,
train.log and exit.json into the shared run dir as on one host; on several nodes its program
is srun with one task per node (`job_argv`, script.py).

A run "lives" while its job is pending or running. Observing a run is the run dir's evidence
(run/evidence/observe.gather) plus, in `Evidence.scheduler` (evidence.py), slurm.json, the job as
the scheduler says (commands.query, at most every `min_query_interval_s`; an ended job is final
and never asked again), and the tail of slurm.out (the job's own stdout/stderr, where
slurmstepd writes why it ended). Its verdict is verdict.py's (`judge`).

A job id in slurm.json is this run dir's job only where scontrol shows it running this run
dir's launch.sh in this run dir (`SlurmJob.runs_in`): a copy of a run dir (`cp -a`) names the
original's job, which the copy's check does not report and its stop never cancels. Stop
cancels only a job proven so, and says so in one line when Slurm cannot prove it (no answer,
no scheduler commands on the host).
"""

from __future__ import annotations

import getpass
import posixpath
import socket
import time
from typing import Awaitable, Callable

from ...config import Limits, Profile
from ...contract.rundir import (LAUNCH_SH, SLURM_JSON, SLURM_OUT, STOP_JSON, LaunchRecord, SchemaError,
                               SlurmJobRecord, StopRecord, inert_text, parse_slurm_job, to_json)
from ...remote.base import CommandTimeout, TRANSPORT_FAILURES, Target, TargetError, is_transport_failure
from ...remote.ops import RemoteOps
from ...run.launch.environment import EnvError, launch_environment
from ...run.launch.launcher import Detached, Launcher
from ...run.launch.request import Placement
from ...run.evidence.memory import LookMemory
from ...run.evidence.observe import Evidence, gather
from ...run.launch.preflight import PreflightResult
from ...run.launch.stop import StopResult
from ...run.launch.preflight import PER_RUN_FILES
from ...run.verdict.checklist import Check, CheckId, CheckState, Checklist
from ...run.verdict.health import evaluate
from .commands import SchedulerMissing, cancel, failed_nodes, query, run_scheduler, submit
from .evidence import SlurmEvidence, slurm_of
from .job import JobState, SlurmJob
from .script import job_argv
from .spec import KEYS, SlurmSpec
from .verdict import job_vouches, judge_job

SLURM_OUT_TAIL = 8 << 10
# A dashboard polls every second; the controller is shared by every user of the cluster, so a
# live job is asked at most this often (an ended one never again).
MIN_QUERY_INTERVAL_S = 5.0
JOB_NAME_PREFIX = "dflash-"
# squeue/scontrol against a controller that hangs wait for it; past this the job is "not
# answered" (never taken for its end), and the poll goes on with the run dir's evidence.
QUERY_TIMEOUT_S = 15.0
# After scancel, how long past the stop's grace the job may take to leave pending/running
# (Slurm's KillWait, the epilog) before the stop says it survived.
CANCEL_MARGIN_S = 30.0
NODE_FAILURES = (JobState.NODE_FAIL, JobState.BOOT_FAIL)


def job_name(run_dir: str) -> str:
    base = posixpath.basename(run_dir.rstrip("/")) or "run"
    return JOB_NAME_PREFIX + "".join(c if c.isalnum() or c in "._-" else "_" for c in base)[:60]


def _requested_by() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:   # getuser raises when the uid has no name; the field is informative only
        return "dflash-tui"


class SlurmLauncher(Launcher):
    """`scheduler = "slurm"`: the host (SSH or this machine) is the cluster's login host."""

    name = "slurm"
    RUN_FILES = (*PER_RUN_FILES, SLURM_JSON, SLURM_OUT)
    # The job's end is the scheduler's to tell (a cancelled job may leave no exit.json).
    POLL_SLOWLY_WHEN_STEADY = False
    CONFIG_KEYS = KEYS
    # sbatch picks the job's nodes, and avoids the ones a placement excludes (--exclude).
    PLACES_NODES = True
    # scancel's wait for the job to leave pending/running comes on top of the stopper's.
    STOP_SLACK_S = Launcher.STOP_SLACK_S + CANCEL_MARGIN_S

    def __init__(self, profile: Profile, host: Target, target: Target) -> None:
        super().__init__(profile, host, target)
        assert isinstance(profile.scheduler, SlurmSpec)
        self.spec: SlurmSpec = profile.scheduler
        self.min_query_interval_s = MIN_QUERY_INTERVAL_S
        self.query_timeout_s = QUERY_TIMEOUT_S
        self.cancel_margin_s = CANCEL_MARGIN_S
        self._last: dict[str, tuple[float, SlurmJob]] = {}   # job id -> (when asked, the answer)
        self._asked_at_exit: set[str] = set()   # jobs asked again as their wrapper's exit.json appeared

    @classmethod
    def handles(cls, profile: Profile) -> bool:
        return isinstance(profile.scheduler, SlurmSpec)

    @classmethod
    def make_run_target(cls, profile: Profile, host: Target) -> Target:
        return host   # the run dir is on shared storage the login host sees

    # -- start ------------------------------------------------------------------------------
    def job_argv(self, argv: list[str]) -> list[str]:
        return job_argv(argv, self.spec.nodes)

    async def preflight(self, ops: RemoteOps | None, *, profile: Profile | None = None,
                        check_live_run: bool = True, gpu_sample=None) -> PreflightResult:
        """Everyone's checks, then `sinfo`: a Slurm login host, and the partition is up. No
        "gpu_health": the login host's GPUs are not the job's, whose node the scheduler picks
        later (the recovery excludes a node whose GPU failed it during the run)."""
        pre = await super().preflight(ops, profile=profile, check_live_run=check_live_run)
        if pre.ok:
            pre.checks.append(await self._sinfo_check())
        return pre

    async def _sinfo_check(self) -> Check:
        """Is this a Slurm login host, and does the partition exist and take jobs?"""
        now = time.time()

        def check(state: CheckState, cause: str, hint: str = "") -> Check:
            return Check.of(CheckId.PRE_SCHEDULER, state, cause, hint, now, label=KEYS.title)

        argv = ["sinfo", "-h", "-o", "%P %a"] + ([f"--partition={self.spec.partition}"] if self.spec.partition else [])
        try:
            res = await run_scheduler(self.target, argv, 20)
        except TRANSPORT_FAILURES:
            raise
        except TargetError as exc:
            return check(CheckState.FAIL, exc.message, "check sinfo on the login host")
        text = inert_text(" ".join((res.stderr or res.stdout).split()))[:200]
        if not res.ok:
            return check(CheckState.FAIL, f"sinfo failed: {text or res.exit_status}",
                         "run it on a Slurm login host (sinfo, sbatch, squeue on PATH)")
        lines = [l.split() for l in res.stdout.splitlines() if l.strip()]
        if not lines:
            want = f"partition {self.spec.partition!r}" if self.spec.partition else "any partition"
            return check(CheckState.FAIL, f"sinfo lists no {want}", "set partition to one that `sinfo -s` lists")
        down = [p for p, avail in (l[:2] for l in lines if len(l) >= 2) if avail != "up"]
        if self.spec.partition and down:
            return check(CheckState.FAIL, f"partition {self.spec.partition} is {lines[0][1]}",
                         "pick a partition that is up (sinfo -s)")
        names = inert_text(", ".join(l[0] for l in lines[:4]))
        return check(CheckState.OK, f"sinfo answers; partition {names}")

    async def detach(self, run_dir: str, run_id: str, placement: Placement) -> Detached:
        """Submit launch.sh with sbatch (`--exclude` for the placement's); slurm.json is written before
        this returns, so a stop or a check from now on knows the job. A refusal is
        `Detached.error` with sbatch's words."""
        try:
            env = launch_environment(self.profile.env, self.profile.env_file)
        except EnvError as exc:
            return Detached(None, via="sbatch", error=str(exc))
        try:
            sub = await submit(self.target, self.spec, run_dir, job_name(run_dir), placement, env)
        except (CommandTimeout, TargetError) as exc:   # unreachable included
            return Detached(None, error=str(exc))
        res = sub.result
        if sub.job_id is None:
            return Detached(res.exit_status, res.stdout[-2000:], res.stderr[-2000:], via="sbatch",
                            error=f"sbatch refused the job: {sub.refusal()}")
        record = SlurmJobRecord(run_id=run_id, job_id=sub.job_id, submit_time=time.time(),
                                partition=self.spec.partition or "", nodes=self.spec.nodes, cluster=sub.cluster,
                                submit_host=socket.gethostname())
        try:
            await self.target.write_file(posixpath.join(run_dir, SLURM_JSON), (to_json(record) + "\n").encode())
        except TargetError as exc:
            # Without slurm.json nothing could find or cancel the job later: cancel it now.
            try:
                await cancel(self.target, sub.job_id, wait_s=10, timeout=self.query_timeout_s)
                done = "the job was cancelled"
            except (CommandTimeout, TargetError):
                done = f"cancel it by hand (scancel {sub.job_id}): scancel did not answer"
            return Detached(res.exit_status, res.stdout[-2000:], res.stderr[-2000:], via="sbatch",
                            error=f"job {sub.job_id} submitted, but {SLURM_JSON} could not be written "
                                  f"({exc.message}); {done}")
        return Detached(res.exit_status, res.stdout[-2000:], res.stderr[-2000:], via="sbatch")

    # -- observe ----------------------------------------------------------------------------
    async def job(self, job_id: str, *, fresh: bool = False) -> SlurmJob:
        now = time.monotonic()
        seen = self._last.get(job_id)
        if seen is not None and (seen[1].ended or (not fresh and now - seen[0] < self.min_query_interval_s)):
            return seen[1]
        try:
            job = await query(self.target, job_id, timeout=self.query_timeout_s)
        except SchedulerMissing as exc:
            job = SlurmJob(job_id, answered=False, error=str(exc), commands_missing=True)
        except CommandTimeout:
            job = SlurmJob(job_id, answered=False,
                           error=f"squeue/scontrol did not answer within {self.query_timeout_s:.0f} s")
        if job.ended and job.state in NODE_FAILURES and job.node_list:
            # Which of its nodes failed, asked once as the end is seen (the job's record is
            # final from here): a recovery excludes those, not every node of the job.
            job.failed_nodes = await failed_nodes(self.target, job.node_list, timeout=self.query_timeout_s)
        if job.answered:
            self._last[job_id] = (now, job)
        return job

    async def observe(self, ops: RemoteOps, run_dir: str, *, fresh: bool = False, **gather_kw) -> Evidence:
        ev = await gather(ops, run_dir, **gather_kw)
        record, problem = await read_record(ops, run_dir)
        seen = ev.scheduler = SlurmEvidence(record, problem)
        attempt = ev.attempt
        if (record is None and ev.launch is None and attempt is not None and attempt.via == "sbatch"
                and attempt.error and attempt.run_id == ev.wrapper_run_id):
            # sbatch refused the job: no launch.json will ever come, and sbatch's words say why.
            ev.launch_problem = attempt.error
        if problem and ev.launch is None and not ev.launch_problem:
            # A slurm.json that cannot be read names no job to ask about or cancel.
            ev.launch_problem = f"{problem}: the run's Slurm job cannot be identified"
        if record is None:
            return ev
        # The job of the run this dir is about: a record left by an older run is not it.
        if ev.wrapper_run_id and record.run_id and record.run_id != ev.wrapper_run_id:
            return ev
        job = await self.job(record.job_id, fresh=fresh)
        if (ev.exit is not None and job.answered and not job.ended and record.job_id not in self._asked_at_exit):
            # The wrapper just ended: the job's end (a node that failed, a preemption: the
            # signal the program died of) is news the answer kept from before may not have yet.
            # Asked once, so a job still completing is not asked at every poll.
            self._asked_at_exit.add(record.job_id)
            job = await self.job(record.job_id, fresh=True)
        if job.runs_in(run_dir, posixpath.join(run_dir, LAUNCH_SH)) is False:
            # Another run dir's job (this dir is a copy of that one): not this run's to report
            # or cancel; the run dir's own evidence decides.
            seen.problem = (f"job {record.job_id} in {SLURM_JSON} runs in {job.work_dir_words()}, not in this "
                                "run dir (a copy of another run dir?)")
            return ev
        seen.job = job
        try:
            chunk = await ops.read_tail(posixpath.join(run_dir, SLURM_OUT), SLURM_OUT_TAIL)
            seen.out = chunk.data.decode("utf-8", "replace") if chunk.exists else ""
        except TargetError as exc:
            if is_transport_failure(exc):
                raise
        return ev

    def alive(self, ev: Evidence) -> bool:
        """The run's job is pending or running (or the scheduler does not answer about it)."""
        job = slurm_of(ev).job
        return job is not None and (not job.answered or job.pending or job.active)

    def judge(self, ev: Evidence, limits: Limits, memory: LookMemory | None = None) -> Checklist:
        """A run with a job: the job's states beside the evidence (verdict.py); else the evidence."""
        if slurm_of(ev).job is None:
            return evaluate(ev, limits, stop_slack_s=self.STOP_SLACK_S, memory=memory)
        return judge_job(ev, lambda plain: evaluate(plain, limits, stop_slack_s=self.STOP_SLACK_S, memory=memory))

    def vouches(self, ev: Evidence) -> bool:
        return job_vouches(ev)

    def describe_live(self, ev: Evidence) -> str:
        seen = slurm_of(ev)
        job, rec = seen.job, seen.record
        if job is None or rec is None:
            return super().describe_live(ev)
        return f"job {job.job_id} of run {rec.run_id} ({job.state or 'not answering'})"

    # -- stop -------------------------------------------------------------------------------
    async def stop(self, ops: RemoteOps, run_dir: str, *, grace_s: float,
                   requested_by: str | None = None,
                   before_signal: Callable[[], Awaitable[None]] | None = None) -> StopResult:
        """stop.json, then `scancel JOB_ID` (that job only), verified: the job must leave
        pending/running. Slurm itself sends SIGTERM, waits KillWait, then SIGKILL."""
        t0 = time.monotonic()
        ev = await self.observe(ops, run_dir, fresh=True)
        seen = slurm_of(ev)
        rec = seen.record
        if rec is None:
            why = seen.problem or f"no {SLURM_JSON} in {run_dir}"
            return StopResult("no-run", None, None, 0.0, f"{why}: no Slurm job to cancel")
        job = seen.job
        if job is None and seen.problem:
            return StopResult("mismatch", None, rec.run_id, time.monotonic() - t0,
                              f"{seen.problem}: nothing was cancelled")
        if job is not None and not job.answered:
            fix = ("run --stop on a Slurm login host (squeue, scontrol and scancel on PATH)" if job.commands_missing
                   else f"run --stop again once Slurm answers, or check `scontrol show job {rec.job_id}` and "
                        "scancel it by hand")
            return StopResult("unverified", None, rec.run_id, time.monotonic() - t0,
                              f"job {rec.job_id} cannot be verified as this run dir's job: "
                              f"{job.error or 'Slurm did not answer'}; nothing was cancelled; {fix}")
        if job is not None and (job.pending or job.active) and job.runs_in(run_dir, posixpath.join(run_dir, LAUNCH_SH)) is None:
            return StopResult("unverified", None, rec.run_id, time.monotonic() - t0,
                              f"scontrol did not describe job {rec.job_id} ({job.state}), so it cannot be verified "
                              "as this run dir's job: nothing was cancelled; run --stop again")
        if job is None or (job.answered and not (job.pending or job.active)):
            state = job.state if job is not None and job.known else "no longer known to Slurm"
            return StopResult("not-running", None, rec.run_id, time.monotonic() - t0,
                              f"job {rec.job_id} of run {rec.run_id} is not running ({state or 'ended'})")
        launch: LaunchRecord | None = ev.launch if ev.launch is not None and ev.launch.run_id == rec.run_id else None
        record = StopRecord(run_id=rec.run_id, pid=launch.pid if launch is not None else int(rec.job_id),
                            requested_time=await ops.now(), requested_by=requested_by or _requested_by(),
                            signal_sent="scancel", job_id=rec.job_id)
        try:
            await self.target.write_file(posixpath.join(run_dir, STOP_JSON), (to_json(record) + "\n").encode())
            recorded = True
        except TargetError:
            recorded = False
        if before_signal is not None:
            await before_signal()
        try:
            # A job on several nodes: its ranks (srun's tasks) get SIGTERM first, for the grace.
            steps_first = grace_s if self.spec.nodes > 1 and job.active else 0.0
            res, last = await cancel(self.target, rec.job_id, wait_s=grace_s + self.cancel_margin_s - steps_first,
                                     steps_first_s=steps_first, timeout=self.query_timeout_s)
        except CommandTimeout as exc:
            return StopResult("survived", record.pid, rec.run_id, time.monotonic() - t0,
                              f"{exc.message}: job {rec.job_id} may still run; check `squeue -j {rec.job_id}`",
                              record=record, recorded=recorded)
        self._last[rec.job_id] = (time.monotonic(), last)
        took = time.monotonic() - t0
        if last.answered and (not last.known or last.ended):
            return StopResult("terminated", record.pid, rec.run_id, took,
                              f"job {rec.job_id} of run {rec.run_id} cancelled ({last.state or 'gone'})",
                              record=record, recorded=recorded)
        words = inert_text(" ".join((res.stderr or res.stdout).split()))[:200]
        return StopResult("survived", record.pid, rec.run_id, took,
                          f"job {rec.job_id} is still {last.state or 'unanswered'} after scancel"
                          + (f" ({words})" if words else "") + f"; check `squeue -j {rec.job_id}`",
                          record=record, recorded=recorded)


async def read_record(ops: RemoteOps, run_dir: str) -> tuple[SlurmJobRecord | None, str | None]:
    try:
        chunk = await ops.read(posixpath.join(run_dir, SLURM_JSON), 0, 64 << 10)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return None, exc.message
    if not chunk.exists:
        return None, None
    try:
        return parse_slurm_job(chunk.data.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, f"{SLURM_JSON} is not UTF-8 text"
    except SchemaError as exc:
        return None, str(exc)
