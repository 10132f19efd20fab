"""The dashboard states the snapshot tests, Pilot tests and README pictures show.

Each state starts as Evidence (what `run/observe.gather` returns: file stats, records, the pid's
/proc answer, the launcher's own attempt) and goes through the real `evaluate()`,
`with_gpu_check()`, `HealthTracker` and `report_from()`, so a picture can only show what the
product itself would say about that evidence. A fixed clock (`T0`) keeps wall-clock ages out
of every snapshot.
"""

from __future__ import annotations

import dataclasses
import posixpath

from dflash_tui.contract.rundir import (EXIT_JSON, LAUNCH_JSON, LAUNCH_SH, STATUS_JSON, TRAIN_LOG, CompileState,
                                        ExitRecord, LaunchRecord, Phase, ProbeReport, ProbeThread, StopRecord,
                                        ThreadStatus, TrainStatus, make_event,
                                        to_json)
from dflash_tui.gpu.sample import GpuError, GpuErrorKind, GpuProcess, GpuSample, GpuSnapshot
from dflash_tui.remote.ops import FileStat, PidInfo
from dflash_tui.run.attempts import LaunchAttempt
from dflash_tui.run.verdict.health import HealthTracker, Limits, evaluate, with_gpu_check
from dflash_tui.run.evidence.observe import Evidence, current_run_id
from dflash_tui.run.verdict.report import RunReport, report_from
from dflash_tui.run.evidence.tracebacks import last_traceback

from .replay import PROFILE, ReplayFollower, ReplaySource  # noqa: F401  (the tests' one import)

T0 = 1_780_000_000.0          # fixed "now" of every scenario
RUN_DIR = "/srv/runs/dflash-8b"
TARGET = "root@gpu1 · pct:200"
RUN_ID = "20260601-041200-a1b2c3"
WRAPPER_PID = 48211
START = T0 - 754              # the wrapper started 12 min 34 s before T0
WARMUP_DONE = START + 64      # the main thread's compile warm-up ended here


# -- evidence building blocks ----------------------------------------------------------------

def _stat(name: str, *, size: int = 0, mtime: float = START) -> FileStat:
    return FileStat(path=posixpath.join(RUN_DIR, name), exists=True, size=size, mtime=mtime, inode=1)


def _launch() -> LaunchRecord:
    return LaunchRecord(run_id=RUN_ID, pid=WRAPPER_PID, pgid=WRAPPER_PID, start_ticks=912345, start_time=START,
                        argv=["/usr/bin/python3", "-m", "dflash_train", "--run-dir", RUN_DIR],
                        host="gpu1", user="root", python="/usr/bin/python3", cwd=RUN_DIR,
                        wrapper_argv=list(WRAPPER_ARGV))


# The wrapper's argv, as the launch started it and /proc shows it; its cwd is the run dir.
WRAPPER_ARGV = ("sh", posixpath.join(RUN_DIR, "launch.sh"), RUN_ID)


def _alive() -> PidInfo:
    return PidInfo(pid=WRAPPER_PID, alive=True, start_ticks=912345, cmdline=WRAPPER_ARGV,
                   state="S", pgid=WRAPPER_PID, in_run_dir=True)


def _gone() -> PidInfo:
    return PidInfo(pid=WRAPPER_PID, alive=False)


def threads(n_drafters: int = 3, n_targets: int = 5, *, stuck: str | None = None,
            failed: str | None = None) -> list[ThreadStatus]:
    """The pool's threads as the bundled trainer names them: main, target0.., drafter0.."""
    out = [ThreadStatus(name="main", role="main", device="-", compile_state=CompileState.COMPILED.value,
                        graphs=24, compile_seconds=61.8, last_beat_time=WARMUP_DONE)]
    for i in range(n_targets):
        out.append(ThreadStatus(name=f"target{i}", role="target", device=f"cuda:{i}",
                                compile_state=CompileState.COMPILED.value, graphs=2,
                                compile_seconds=11.4 + i, step=1530 + i,
                                last_step_time=T0 - 0.4, last_beat_time=T0 - 0.4))
    for j in range(n_drafters):
        name = f"drafter{j}"
        t = ThreadStatus(name=name, role="drafter", device=f"cuda:{n_targets + j}",
                         compile_state=CompileState.COMPILED.value, graphs=6, recompiles=1 if j == 0 else 0,
                         compile_seconds=48.2 + j, step=1527, last_step_time=T0 - 0.6,
                         last_beat_time=T0 - 0.6)
        if name == stuck:
            t.last_beat_time = T0 - 305
        if name == failed:
            t.compile_state = CompileState.FAILED.value
            t.error = "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function"
        out.append(t)
    if stuck:   # the step barrier holds every other thread at the step the stuck one never ended
        for t in out[1:]:
            t.last_step_time = T0 - 312
    return out


def _status(**kw) -> TrainStatus:
    base = dict(run_id=RUN_ID, pid=WRAPPER_PID + 2, time=T0 - 0.5, phase=Phase.TRAINING.value,
                step=1527, total_steps=20000, loss=2.184, accuracy=0.412, tau=3.27,
                tokens_per_s=18450.0, heartbeat_time=T0 - 0.5, threads=threads())
    base.update(kw)
    return TrainStatus(**base)


def _running_evidence(status: TrainStatus | None = None) -> Evidence:
    files = {LAUNCH_SH: _stat(LAUNCH_SH, size=2900), LAUNCH_JSON: _stat(LAUNCH_JSON, size=400),
             TRAIN_LOG: _stat(TRAIN_LOG, size=1_262_000, mtime=T0 - 0.4),
             STATUS_JSON: _stat(STATUS_JSON, size=3100, mtime=T0 - 0.5)}
    return Evidence(now=T0, run_dir=RUN_DIR, files=files, wrapper_run_id=RUN_ID, launch=_launch(),
                    status=status or _status(), proc=_alive())


def report_of(ev: Evidence, gpu: GpuSnapshot | None = None, *, limits: Limits = Limits()) -> RunReport:
    """What the dashboard's monitor reports for `ev` (and the host's GPU snapshot, if given)."""
    checklist = evaluate(ev, limits)
    if gpu is not None:
        checklist = with_gpu_check(checklist, ev, gpu)
    checklist = HealthTracker().update(checklist, ev.now, current_run_id(ev))
    return report_from(ev, checklist, profile=PROFILE, target_label=TARGET)


# -- the states --------------------------------------------------------------------------------

def probed_program(probes) -> RunReport:
    """A program that writes no status.json, seen through the run probe's reports only."""
    return report_of(dataclasses.replace(_running_evidence(), status=None, probes=list(probes)))


def healthy() -> RunReport:
    return report_of(_running_evidence(), gpu_snapshot())


def failed_thread(name: str = "drafter2") -> RunReport:
    return report_of(_running_evidence(_status(threads=threads(failed=name))), gpu_snapshot())


def stalled() -> RunReport:
    return report_of(_running_evidence(_status(threads=threads(stuck="drafter1"))), gpu_snapshot())


def stalled_program() -> RunReport:
    """A program of the user's hung in a collective beside a waiting helper thread, on a GPU
    host whose NVML is missing: the longest checklist a STALLED run shows in full."""
    probes = [ProbeReport(run_id=RUN_ID, pid=11, time=T0 - 0.5, rank=0, threads=[
        ProbeThread(name="MainThread", ident=1, frames=[
            "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252 all_reduce",
            "/x/train.py:42 step"]),
        ProbeThread(name="Thread-1", ident=2, frames=["/usr/lib/python3.11/threading.py:320 wait",
                                                      "/x/t.py:3 f"])])]
    return report_of(dataclasses.replace(_running_evidence(), status=None, probes=probes), nvml_unavailable())


def stopping() -> RunReport:
    """A stalled run stopped 4 s ago (stop.json), still saving within its grace period."""
    ev = _running_evidence(_status(threads=threads(stuck="drafter1")))
    ev.stop = StopRecord(run_id=RUN_ID, pid=WRAPPER_PID, requested_time=T0 - 4, requested_by="ana@laptop",
                         signal_sent="SIGTERM")
    return report_of(ev, gpu_snapshot())


def nvml_report() -> RunReport:
    """A running run whose GPU check cannot see the GPUs (NVML missing on the host)."""
    return report_of(_running_evidence(), nvml_unavailable())


def never_started() -> RunReport:
    """The incident: `pct exec` exited 0 and ran nothing, so not even launch.sh was written."""
    attempt = LaunchAttempt(run_id=RUN_ID, run_dir=RUN_DIR, target=TARGET, local_time=T0 - 1.2,
                            target_time=T0 - 1.2, exit_status=0, stdout="", stderr="",
                            wrapper_written=False)
    ev = Evidence(now=T0, run_dir=RUN_DIR, files={}, attempt=attempt)
    return report_of(ev, gpu_snapshot(run_gpus=0, util=0.0))


def no_run() -> RunReport:
    return report_of(Evidence(now=T0, run_dir=RUN_DIR, files={}))


TRACEBACK = """Traceback (most recent call last):
  File "/opt/dflash/src/dflash_train/cli.py", line 88, in main
    trainer.run()
  File "/opt/dflash/src/dflash_train/pool.py", line 214, in run
    raise ValueError(f"drafter1: loss is nan at step {step}")
ValueError: drafter1: loss is nan at step 212"""


def crashed() -> RunReport:
    ev = _running_evidence(_status(phase=Phase.FAILED.value, step=212, time=T0 - 14, heartbeat_time=T0 - 14))
    ev.files[EXIT_JSON] = _stat(EXIT_JSON, size=120, mtime=T0 - 12)
    ev.exit = ExitRecord(run_id=RUN_ID, exit_code=1, signal=None, end_time=T0 - 12)
    ev.proc = _gone()
    ev.log_tail = "\n".join(train_log(crash=True)) + "\ndflash-tui: run ended: exit status 1\n"
    ev.last_traceback = last_traceback(ev.log_tail)
    return report_of(ev, gpu_snapshot(run_gpus=0, util=0.0))


def stale() -> RunReport:
    """The last healthy report, as the monitor keeps it once the connection drops."""
    return dataclasses.replace(healthy(), connected=False, stale_since=T0 - 42,
                               error="ssh root@gpu1: connection lost (Connection reset by peer); "
                                     "reconnecting in 4 s")


COLLECTIVE_FRAMES = ["/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252 all_reduce",
                     "/srv/dflash/train.py:88 step"]
QUEUE_FRAMES = ["/usr/lib/python3.11/threading.py:331 wait", "/usr/lib/python3.11/queue.py:171 get",
                "/srv/dflash/data.py:40 next_batch"]
OWN_FRAMES = ["/srv/dflash/model.py:51 forward", "/srv/dflash/train.py:80 step"]


def rank_probes(n: int, *, stuck: int | None = None, slow: int | None = None) -> list:
    """The run probe's reports of `n` ranks on nodes of 8 (h1, h2, ...): every rank in all_reduce,
    rank `stuck` waiting on a queue, rank `slow` in its own code (the others wait for it)."""
    from dflash_tui.contract.rundir import ProbeReport, ProbeThread
    out = []
    for r in range(n):
        frames = QUEUE_FRAMES if r == stuck else OWN_FRAMES if r == slow else COLLECTIVE_FRAMES
        since = T0 - 90 if r == stuck else T0 - 0.5
        out.append(ProbeReport(
            run_id=RUN_ID, pid=60_000 + r, time=T0 - 0.5, node=f"h{r // 8 + 1}", rank=r, local_rank=r % 8,
            world_size=n, cpu_s=300.0 + r, step=1527 if r != stuck else 1490,
            step_time=(1.4 if r == slow else 0.8), threads=[
                ProbeThread(name="MainThread", ident=1, frames=list(frames), stack_since=since, frames_since=since),
                ProbeThread(name="pin_memory", ident=2, daemon=True, frames=list(QUEUE_FRAMES[:2]),
                            stack_since=T0 - 600, frames_since=T0 - 600)]))
    return out


def ranks(n: int = 64, *, stuck: int | None = None, slow: int | None = None) -> RunReport:
    """A run of `n` ranks seen through the run probe: healthy, one rank stuck on a queue while
    the others wait in all_reduce (STALLED), or one rank slow that the others wait for (RUNNING,
    its wait shares from 30 s of the tracker's samples)."""
    from dflash_tui.run.evidence.activity import Activity, WaitShare
    probes = rank_probes(n, stuck=stuck, slow=slow)
    waits = {p.pid: WaitShare(samples=30, waiting=2 if p.rank == slow else 17, doing="all_reduce")
             for p in probes}
    last = T0 - 0.4 if stuck is None else T0 - 95
    activity = Activity(samples=30, log_grew_at=last, program_output=True, output_polls=30,
                        step=1527, step_at=last, step_source="log",
                        cpu_cores=float(n), cpu_window_s=3.0, procs=n + 1, threads=2 * n, waits=waits)
    ev = dataclasses.replace(_running_evidence(), status=None, probes=probes, activity=activity)
    if stuck is not None:
        ev.files[TRAIN_LOG] = _stat(TRAIN_LOG, size=1_262_000, mtime=T0 - 95)
    return report_of(ev)


# -- GPU snapshots and log lines ---------------------------------------------------------------

# Another user's jobs on the same host: what a shared box looks like (nvitop shows them too).
FOREIGN = {3: (GpuProcess(pid=3_100_417, used_memory_bytes=18 * 2**30, name="python", user="alice"),),
           6: (GpuProcess(pid=3_100_980, used_memory_bytes=9 * 2**30, name="vllm", user="bob"),
               GpuProcess(pid=3_101_002, used_memory_bytes=512 * 2**20, name="nvtop", user="bob"))}


def gpu_snapshot(n: int = 8, *, run_gpus: int = 8, util: float = 97.0, foreign: bool = False) -> GpuSnapshot:
    gpus = []
    for i in range(n):
        procs = (GpuProcess(pid=2_000_000 + i, used_memory_bytes=71 * 2**30, container_pid=WRAPPER_PID + 2,
                            is_run_process=True, name="python3", user="root"),) if i < run_gpus else ()
        if foreign:
            procs += FOREIGN.get(i, ())
        gpus.append(GpuSample(index=i, name="NVIDIA H200", uuid=f"GPU-0000{i}", util_sm_pct=util - i,
                              util_mem_pct=41.0, mem_used_bytes=72 * 2**30, mem_total_bytes=141 * 2**30,
                              temperature_c=61.0 + i, power_w=612.0 - 3 * i, power_limit_w=700.0,
                              sm_clock_mhz=1980, mem_clock_mhz=2619,
                              throttle_reasons=("sw_power_cap",) if i == 0 else (),
                              xid_errors=None if i == 7 else (2 if foreign and i == 6 else 0),
                              ecc_errors_uncorrected=None if i == 7 else 0, processes=procs))
    return GpuSnapshot(time=T0, source="nvml", gpus=tuple(gpus), driver_version="570.124.06",
                       latency_ms=0.4)


def gpu_history(n: int = 20, *, foreign: bool = False) -> list[GpuSnapshot]:
    """n one-second samples of 8 busy GPUs whose load dips at each checkpoint/eval."""
    out = []
    for k in range(n):
        snap = gpu_snapshot(foreign=foreign)
        gpus = tuple(dataclasses.replace(g, util_sm_pct=max(0.0, (g.util_sm_pct or 0)
                                                            - (60 if (k + g.index) % 9 == 0 else 0) - (k % 3) * 4))
                     for g in snap.gpus)
        out.append(dataclasses.replace(snap, time=T0 - n + k + 1, gpus=gpus))
    return out


def nvml_unavailable() -> GpuSnapshot:
    return GpuSnapshot(time=T0, source="none", error=GpuError(
        GpuErrorKind.LIBRARY_NOT_FOUND,
        "libnvidia-ml.so.1 not found on gpu1: install the NVIDIA driver, or nvidia-smi for the fallback"))


def no_gpu() -> GpuSnapshot:
    """A host with no NVIDIA GPU at all (nothing on its PCI bus): information, not a fault."""
    return GpuSnapshot(time=T0, source="none", error=GpuError(GpuErrorKind.NO_GPU, "no NVIDIA GPU on gpu1"))


def train_log(crash: bool = False) -> list[str]:
    lines = [
        f"dflash-tui: run {RUN_ID} started by pid {WRAPPER_PID} at 2026-06-01T04:12:00Z",
        "[dflash] targets cuda:0-4, drafters cuda:5-7",
        "[dflash] warm-up: compiling flex_attention for 3 devices x 4 shape buckets",
        "[dflash] warm-up done in 61.8 s, stance fail_on_recompile",
    ]
    for s in range(200, 213 if crash else 1528, 1 if crash else 100):
        lines.append(f"step {s}/20000 loss {2.9 - s / 2000:.4f} acc {0.2 + s / 8000:.3f} tau {1 + s / 700:.2f} "
                     f"tok/s 18,450")
    if crash:
        lines += TRACEBACK.splitlines()
    return lines


def events(steps: int = 60) -> list[str]:
    """events.jsonl as the bundled trainer writes it: step records, and an eval record (τ)
    every fifth of them."""
    out = []
    for s in range(steps):
        out.append(to_json(make_event("step", T0 - steps + s, step=s * 25, loss=3.2 - 1.0 * s / steps,
                                      accuracy=0.1 + 0.3 * s / steps, tokens_per_s=18000.0 + (s % 7) * 90)))
        if s % 5 == 0:
            out.append(to_json(make_event("eval", T0 - steps + s, step=s * 25, tau=1.0 + 2.3 * s / steps,
                                          prompts=8, new_tokens=32)))
    return out


PREVIOUS_RUN_ID = "20260531-221000-f00d42"


def previous_events(steps: int = 60) -> list[str]:
    """events.jsonl of the run before a relaunch (history/<id>/): it learned more slowly."""
    out = []
    for s in range(steps):
        out.append(to_json(make_event("step", T0 - 4000 + s, step=s * 25, loss=3.4 - 0.6 * s / steps,
                                      accuracy=0.08 + 0.2 * s / steps, tokens_per_s=17400.0 + (s % 5) * 60)))
        if s % 5 == 0:
            out.append(to_json(make_event("eval", T0 - 4000 + s, step=s * 25, tau=1.0 + 1.5 * s / steps,
                                          prompts=8, new_tokens=32)))
    return out
