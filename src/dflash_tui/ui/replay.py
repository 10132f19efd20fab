"""Play recorded states through the dashboard: the test double of `DashboardSource`.

It carries real dataclasses (RunReport, Checklist, TrainStatus, GpuSnapshot) and real log
and events.jsonl lines, so Pilot and snapshot tests, the README screenshots and the
dashboard benchmark drive the same code paths the live Session does. Items pushed while the
app runs arrive exactly as the live monitor's would.

The scenarios below are the states the snapshot tests pin down; they use a fixed clock
(`T0`) so no wall-clock age ever reaches a snapshot.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable

from ..contract.rundir import (CompileState, ExitRecord, LaunchRecord, Phase, ThreadStatus,
                                 TrainStatus, make_event, to_json)

from ..gpu.sample import GpuError, GpuErrorKind, GpuProcess, GpuSample, GpuSnapshot
from ..run.health import Limits
from ..run.report import RunReport
from ..run.verdict import Check, CheckState, Checklist, Verdict
from .source import EVENTS_LOG, TRAIN_LOG, ActionError

T0 = 1_780_000_000.0          # fixed "now" of every scenario
RUN_DIR = "/srv/runs/dflash-8b"
PROFILE = "h200"
TARGET = "root@gpu1 · pct:200"


class ReplayFollower:
    def __init__(self, exists: bool = True) -> None:
        self._pending: list[str] = []
        self.exists = exists

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
                 missing: tuple[str, ...] = (),
                 on_action: Callable[[str], Awaitable[str]] | None = None) -> None:
        self.profile = profile
        self.limits = Limits()
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

    async def _act(self, name: str) -> str:
        self.calls.append(name)
        if self.on_action is None:
            raise ActionError(f"{name}: this replay has no actions")
        return await self.on_action(name)

    async def launch(self) -> str:
        return await self._act("launch")

    async def stop(self) -> str:
        return await self._act("stop")

    async def relaunch(self) -> str:
        return await self._act("relaunch")

    async def canary(self) -> str:
        return await self._act("canary")

    async def close(self) -> None:
        self.closed = True


# -- recorded states --------------------------------------------------------------------------

def _launch(run_id: str = "r-20260601-0412", pid: int = 48211) -> LaunchRecord:
    return LaunchRecord(run_id=run_id, pid=pid, pgid=pid, start_ticks=912345,
                        start_time=T0 - 754, argv=["python3", "-m", "dflash_train", "--run-dir", RUN_DIR],
                        host="gpu1", user="root", python="/usr/bin/python3", cwd=RUN_DIR)


def _check(id_: str, label: str, state: CheckState, cause: str, hint: str = "",
           ago: float = 750) -> Check:
    return Check(id_, label, state, cause, hint, since=T0 - ago)


def threads(n_drafters: int = 3, n_targets: int = 5, *, stuck: str | None = None,
            failed: str | None = None) -> list[ThreadStatus]:
    out = []
    for i in range(n_targets):
        out.append(ThreadStatus(name=f"target-{i}", role="target", device=f"cuda:{i}",
                                compile_state=CompileState.COMPILED.value, graphs=2,
                                compile_seconds=11.4 + i, step=1530 + i,
                                last_step_time=T0 - 0.4, last_beat_time=T0 - 0.4))
    for j in range(n_drafters):
        name = f"drafter-{j}"
        t = ThreadStatus(name=name, role="drafter", device=f"cuda:{n_targets + j}",
                         compile_state=CompileState.COMPILED.value, graphs=6, recompiles=1 if j == 0 else 0,
                         compile_seconds=48.2 + j, step=1527, last_step_time=T0 - 0.6,
                         last_beat_time=T0 - 0.6)
        if name == stuck:
            t.last_step_time, t.last_beat_time = T0 - 312, T0 - 305
        if name == failed:
            t.compile_state = CompileState.FAILED.value
            t.error = "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function"
        out.append(t)
    return out


def _status(**kw) -> TrainStatus:
    base = dict(run_id="r-20260601-0412", pid=48213, time=T0 - 0.5, phase=Phase.TRAINING.value,
                step=1527, total_steps=20000, loss=2.184, accuracy=0.412, tau=3.27,
                tokens_per_s=18450.0, heartbeat_time=T0 - 0.5, threads=threads())
    base.update(kw)
    return TrainStatus(**base)


def _report(verdict: Verdict, checks: list[Check], summary: str, **kw) -> RunReport:
    base = dict(time=T0, profile=PROFILE, target_label=TARGET, run_dir=RUN_DIR,
                checklist=Checklist(verdict, checks, summary))
    base.update(kw)
    return RunReport(**base)


def _healthy_checks() -> list[Check]:
    return [
        _check("target", "target reachable", CheckState.OK, "ssh root@gpu1 ok, pct 200 running", ago=760),
        _check("launch_json", "launch.json", CheckState.OK, "written 0.1 s after the launch returned", ago=754),
        _check("train_log", "train.log", CheckState.OK, "present, 1.2 MB, growing", ago=754),
        _check("pid_alive", "process", CheckState.OK, "pid 48211 alive (launch.sh → python3 48213)", ago=754),
        _check("heartbeat", "heartbeat", CheckState.OK, "last beat 0.5 s ago, all 8 threads beating", ago=690),
        _check("steps", "steps", CheckState.OK, "step 1527/20000, advancing 2.0 steps/s", ago=690),
        _check("gpus", "GPUs", CheckState.OK, "run processes on GPUs 0-7", ago=700),
    ]


def healthy() -> RunReport:
    return _report(Verdict.RUNNING, _healthy_checks(), "step 1527/20000 · loss 2.184 · τ 3.27 · 18,450 tok/s",
                   launch=_launch(), status=_status(), pid_alive=True, uptime_s=754)


def never_started() -> RunReport:
    checks = [
        _check("target", "target reachable", CheckState.OK, "ssh root@gpu1 ok, pct 200 running", ago=2),
        _check("launch_json", "launch.json", CheckState.FAIL,
               "not written 1.0 s after the launch returned: the launch shell never ran",
               "transport said: exit 0, stderr empty; run dflash-tui --canary", ago=1),
        _check("train_log", "train.log", CheckState.FAIL, "missing: /srv/runs/dflash-8b/train.log",
               "nothing was started; see launch.json", ago=1),
        _check("pid_alive", "process", CheckState.PENDING, "no pid recorded", ago=1),
        _check("heartbeat", "heartbeat", CheckState.PENDING, "no status.json", ago=1),
    ]
    return _report(Verdict.NEVER_STARTED, checks,
                   "launch returned exit 0 but launch.json never appeared: the shell did not run",
                   pid_alive=None)


TRACEBACK = """Traceback (most recent call last):
  File "/opt/dflash/src/dflash_train/cli.py", line 88, in main
    trainer.run()
  File "/opt/dflash/src/dflash_train/pool.py", line 214, in run
    raise ValueError(f"drafter-1: loss is nan at step {step}")
ValueError: drafter-1: loss is nan at step 212"""


def crashed() -> RunReport:
    checks = _healthy_checks()[:3] + [
        _check("pid_alive", "process", CheckState.FAIL, "pid 48211 gone; exit.json: exit code 1",
               "see the traceback below and in train.log (e)", ago=12),
        _check("heartbeat", "heartbeat", CheckState.FAIL, "last beat 14 s ago (process ended)", ago=12),
    ]
    return _report(Verdict.CRASHED, checks, "exit code 1: ValueError: drafter-1: loss is nan at step 212",
                   launch=_launch(), exit=ExitRecord("r-20260601-0412", 1, None, T0 - 12),
                   status=_status(phase=Phase.FAILED.value, step=212), pid_alive=False, uptime_s=None,
                   last_traceback=TRACEBACK)


def stalled() -> RunReport:
    checks = _healthy_checks()[:5] + [
        _check("threads", "threads", CheckState.FAIL, "drafter-1 (cuda:6, compiled) silent 5m05s",
               "the named threads stopped; their compile state says where", ago=245),
        _check("steps", "steps", CheckState.WARN, "step 1527 unchanged for 312 s", ago=252),
    ]
    st = _status(threads=threads(stuck="drafter-1"))
    return _report(Verdict.STALLED, checks, "STALLED: threads stopped: drafter-1",
                   launch=_launch(), status=st, pid_alive=True, uptime_s=754)


def nvml_report() -> RunReport:
    """A running run whose GPU check cannot see the GPUs (NVML missing on the host)."""
    r = healthy()
    r.checklist.checks[-1] = _check("gpus", "GPUs", CheckState.WARN,
                                    "NVML unavailable: libnvidia-ml.so.1 not found on gpu1",
                                    "install the NVIDIA driver or nvidia-smi on the host", ago=700)
    return r


def stale() -> RunReport:
    r = healthy()
    r.connected = False
    r.stale_since = T0 - 42
    r.error = "ssh root@gpu1: connection lost (Connection reset by peer); reconnecting in 4 s"
    return r


def gpu_snapshot(n: int = 8, *, run_gpus: int = 8, util: float = 97.0) -> GpuSnapshot:
    gpus = []
    for i in range(n):
        procs = (GpuProcess(pid=2_000_000 + i, used_memory_bytes=71 * 2**30, container_pid=48213,
                            is_run_process=True, name="python3"),) if i < run_gpus else ()
        gpus.append(GpuSample(index=i, name="NVIDIA H200", uuid=f"GPU-0000{i}", util_sm_pct=util - i,
                              util_mem_pct=41.0, mem_used_bytes=72 * 2**30, mem_total_bytes=141 * 2**30,
                              temperature_c=61.0 + i, power_w=612.0 - 3 * i, power_limit_w=700.0,
                              sm_clock_mhz=1980, mem_clock_mhz=2619,
                              ecc_errors_uncorrected=None if i == 7 else 0, processes=procs))
    return GpuSnapshot(time=T0, source="nvml", gpus=tuple(gpus), driver_version="570.124.06",
                       latency_ms=0.4)


def gpu_history(n: int = 20) -> list[GpuSnapshot]:
    """n one-second samples of 8 busy GPUs whose load dips at each checkpoint/eval."""
    import dataclasses
    out = []
    for k in range(n):
        snap = gpu_snapshot()
        gpus = tuple(dataclasses.replace(g, util_sm_pct=max(0.0, (g.util_sm_pct or 0) - (60 if (k + g.index) % 9 == 0 else 0) - (k % 3) * 4))
                     for g in snap.gpus)
        out.append(dataclasses.replace(snap, time=T0 - n + k + 1, gpus=gpus))
    return out


def nvml_unavailable() -> GpuSnapshot:
    return GpuSnapshot(time=T0, source="none", error=GpuError(
        GpuErrorKind.LIBRARY_NOT_FOUND,
        "libnvidia-ml.so.1 not found on gpu1: install the NVIDIA driver, or nvidia-smi for the fallback"))


def train_log(crash: bool = False) -> list[str]:
    lines = [
        "[dflash] run r-20260601-0412 on gpu1: targets cuda:0-4, drafters cuda:5-7",
        "[dflash] warm-up: compiling flex_attention for 3 devices x 4 shape buckets",
        "[dflash] warm-up done in 48.2 s, stance fail_on_recompile",
    ]
    for s in range(200, 213 if crash else 1528, 1 if crash else 100):
        lines.append(f"step {s:6d} loss {2.9 - s / 2000:.3f} acc {0.2 + s / 8000:.3f} tau {1 + s / 700:.2f} tok/s 18450")
    if crash:
        lines += TRACEBACK.splitlines()
    return lines


def events(steps: int = 60) -> list[str]:
    """events.jsonl as the bundled trainer writes it: step records, and an eval record (τ)
    every fifth of them."""
    out = []
    for s in range(steps):
        out.append(to_json(make_event("step", T0 - steps + s, step=s * 25, loss=3.2 - 1.0 * s / steps,
                                      acc=0.1 + 0.3 * s / steps, tokens_per_s=18000.0 + (s % 7) * 90)))
        if s % 5 == 0:
            out.append(to_json(make_event("eval", T0 - steps + s, step=s * 25, tau=1.0 + 2.3 * s / steps,
                                          prompts=8, new_tokens=32)))
    return out
