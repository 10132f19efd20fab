"""The checklist's checks, one builder each, and the words they share; run/verdict/health.py's ladder
decides the verdict from them.

Each builder reads Evidence (or a part of it) and returns a Check, or the words of one; none
decides a verdict. The words (ages, durations, CPU use) are dflash_tui/words.py's.
"""

from __future__ import annotations

import re

from ...contract.rundir import LAUNCH_OUT, TRAIN_LOG, LaunchRecord
from .gpu_check import gpu_check_for_status
from ...gpu.sample import GpuSnapshot
from ...words import age_at as _age, cpu_use, duration as _duration, one_line as _one_line, progress, size
from ..evidence.activity import Activity
from ..evidence.step_clock import eta_s
from ...words import eta as eta_words
from ..attempts import LaunchAttempt
from .hang import STALE_AFTER_S, Hang, ThreadView, idle_worker
from ..evidence.observe import Evidence
from ..stacks.classify import ThreadClass
from .checklist import Check, CheckId, CheckState

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING

# dash/bash prefix their messages with the script name and line: "./launch.sh: 32: cannot ..."
SH_PREFIX = re.compile(r"^\S*launch\.sh: (line )?\d+: ")
DISK_HINT = "free space on the run dir's filesystem (old runs, history/, checkpoints), then relaunch"


def last_line(text: str) -> str:
    # The wrapper's own "dflash-tui: run ... ended" lines say nothing about the cause.
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("dflash-tui: ")]
    return SH_PREFIX.sub("", lines[-1].strip()) if lines else ""


# -- the launch ---------------------------------------------------------------------------------

def launch_cmd_check(attempt: LaunchAttempt | None, launch: LaunchRecord | None) -> Check | None:
    """The launch command this machine sent (None: this machine sent none for this run)."""
    if attempt is None:
        return None
    def c(state: CheckState, cause: str, hint: str = "") -> Check:
        return Check.of(CheckId.LAUNCH_CMD, state, cause, hint, attempt.target_time)
    if attempt.error:
        return c(FAIL, _one_line(attempt.transport_summary()), "check the connection and the container, then relaunch")
    if attempt.exit_status == 0 and attempt.pid and launch is None and attempt.stderr.strip():
        return c(FAIL, _one_line(attempt.transport_summary()), "the detach shell complained: fix what its stderr names")
    if attempt.exit_status == 0 and attempt.pid:
        if attempt.own_session is False and attempt.via == "setsid":
            return c(WARN, f"pid {attempt.pid} via setsid, but it was not seen in its own session",
                     "a channel close may still reach it: run the canary")
        if attempt.via == "nohup":
            return c(WARN, f"detached pid {attempt.pid} via nohup (no setsid on the target)",
                     "install util-linux (setsid) on the target")
        return c(OK, f"detached pid {attempt.pid} via {attempt.via}, own session")
    return c(FAIL, _one_line(attempt.transport_summary()),
             "the transport did not run the detach shell; try a plain command through it")


def never_started_cause(ev: Evidence, attempt: LaunchAttempt | None) -> str:
    if ev.launch_problem:
        return ev.launch_problem
    if attempt is not None and not attempt.wrapper_written:
        return f"launch.sh could not be written to {ev.run_dir}"
    if not ev.exists("launch.sh"):
        return f"no launch.sh and no launch.json in {ev.run_dir}: commands on this transport ran nothing"
    out = last_line(ev.launch_out)
    if out:
        return f"no launch.json; {LAUNCH_OUT} says: {out}"
    if attempt is not None and attempt.pid and ev.detached_proc is not None and not ev.detached_proc.alive:
        return f"the detached shell (pid {attempt.pid}) exited without writing launch.json"
    return f"no launch.json in {ev.run_dir}: the launch shell did not run"


def log_problem(ev: Evidence) -> str:
    """Why train.log cannot be read ("" when it can): deleted, a directory, unreadable, not opened."""
    launch = ev.launch
    log = ev.files.get(TRAIN_LOG)
    path = ev.path(TRAIN_LOG)
    if launch.log_error:
        why = SH_PREFIX.sub("", launch.log_error.strip())
    elif log is None or not log.exists:
        why = f"{path} does not exist although the wrapper opened it: deleted after the launch?"
    elif log.is_dir:
        why = f"{path} is a directory"
    elif log.error:
        why = f"{path}: {log.error}"
    else:
        return ""
    if "No space left on device" in why or "Disk quota exceeded" in why:
        why = f"disk full: {why}"
    return why


# -- CPU, disk --------------------------------------------------------------------------------

def cpu_words(act: Activity | None) -> str:
    """ "idle (0 % CPU over 1 s; 2 processes, 2 sleeping)" or "busy (180 % CPU ...)". """
    if act is None or act.cpu_cores is None:
        return "CPU not measured"
    what = "busy" if act.cpu_busy else "idle"
    tree = f"{act.procs} process{'es' if act.procs != 1 else ''}, {act.threads} threads"
    return f"{what} ({cpu_use(act.cpu_cores)} over {_duration(act.cpu_window_s or 0)}; {tree}: {act.states})"


def cpu_check(act: Activity | None, uptime: float) -> Check | None:
    """The process tree's CPU: its recent rate, or, from one sample, its lifetime average."""
    if act is None or act.cpu_s is None:
        return None
    if act.cpu_cores is None:
        avg = f", {cpu_use(act.cpu_s / uptime)} on average" if uptime > 0 else ""
        return Check.of(CheckId.CPU, OK,
                     f"{act.cpu_s:.1f} CPU seconds in {_duration(uptime)}{avg}; {act.procs} processes, "
                     f"{act.states or 'states unknown'}")
    return Check.of(CheckId.CPU, OK, cpu_words(act))


def disk_words(ev: Evidence) -> str:
    """ "disk full: 0 B free on /r (of 16.0 KiB)" when the run dir's filesystem is full, else "". """
    act = ev.activity
    if act is not None and act.disk_full:
        return f"disk full: {size(act.disk.free)} free on {act.disk.checked} (of {size(act.disk.total)})"
    if act is not None and act.disk_error:
        return f"disk full: the log says {act.disk_error!r}"
    for text in (ev.launch_out, ev.launch.log_error if ev.launch else ""):
        if text and ("No space left on device" in text or "Disk quota exceeded" in text):
            return f"disk full: {last_line(text) or text.strip()}"
    return ""


def disk_check(ev: Evidence) -> tuple[Check | None, str]:
    words = disk_words(ev)
    return (Check.of(CheckId.DISK, FAIL, _one_line(words), DISK_HINT, None) if words else None), words


# -- progress -----------------------------------------------------------------------------------

def last_progress(ev: Evidence, *also: float | None) -> float | None:
    """The latest time anything advanced: log output, a step in the log or events.jsonl,
    a probe's step, or the times given (status.json's last step). Stacks are not in it: a
    stack that moves is progress that never reaches the log, and its check says so."""
    act = ev.activity
    times = list(also)
    if act is not None:
        # A metric file of this run that advanced (a TensorBoard event, a CSV row) is progress
        # too: a program silent on stdout may write nothing else.
        times += [act.log_grew_at if act.program_output else None, act.step_at, act.metrics_at]
    return max((t for t in times if t is not None), default=None)


def progress_words(ev: Evidence) -> str:
    """ "step 120/1000, loss 2.31, 3.2 it/s" from the log/events, "" when none was read; a
    step counted within an epoch (Lightning's bar) says its epoch: "epoch 2, 51/64"."""
    act = ev.activity
    if act is None or act.step is None and act.step_at is None and act.metrics_at is None:
        return ""
    mp = ev.metrics.progress if ev.metrics is not None else None
    if mp is not None and mp.total and act.total != mp.total:
        # The HF Trainer's trainer_state.json: global_step of max_steps, where the log has no
        # total of that count.
        step, total, epoch = mp.step, mp.total, None
        left = eta_s(mp.step, mp.total, act.steps_per_s)
    else:
        step, total, epoch = act.step, act.total, act.step_epoch
        # An ETA to the run's end: not to the end of an epoch (a bar counted within one).
        left = eta_s(step, total, act.steps_per_s, act.rate, act.rate_unit) if epoch is None else None
    words = progress(step, total, act.loss, act.rate, act.rate_unit, epoch)
    if left is not None and step is not None and total and step < total:
        head = progress(step, total, epoch=epoch)
        words = f"{head}, ETA {eta_words(left)}{words[len(head):]}"
    if act.metrics_at is not None and (act.step_at is None or act.metrics_at > act.step_at):
        words += f"{', ' if words else ''}metrics written to {act.metrics_file} {_age(ev.now, act.metrics_at)}"
    return _one_line(words)


def silence_words(ev: Evidence, silent_for: float, heartbeat: str = "") -> str:
    """What is silent and what is not, in one line, when the stacks say nothing more."""
    act = ev.activity
    busy = act.cpu_busy if act is not None else None
    kind = "busy but silent" if busy else ("idle hang" if busy is False else "silent")
    quiet = ["no step", "no log output"] + ([heartbeat] if heartbeat else [])
    cpu = cpu_words(act)
    words = f"{kind}: {', '.join(quiet)} for {_duration(silent_for)}; " + (cpu if busy is None else f"process tree {cpu}")
    if act is not None and act.log_grew_at is not None and act.program_output:
        words += f"; last output {_age(ev.now, act.log_grew_at)}"
    return words


def unlogged_progress_words(ev: Evidence, views: list[ThreadView]) -> str:
    """Why a run whose own code moves prints nothing, as far as a log can tell."""
    return "it prints nothing, or only to a terminal (a rich or tqdm bar without one)"


# -- the run probe, the stacks -----------------------------------------------------------------

def probe_check(ev: Evidence, limits_stall_s: float) -> Check | None:
    """The run probe's per-process heartbeats: alive, not progress. A process that exited
    normally (its last report says so, or it was a DataLoader worker idle at its queue, which
    multiprocessing ends without atexit) is not missing."""
    live = [p for p in ev.probes if not p.ended]
    if not live:
        return None
    fresh = [p for p in live if ev.now - p.time <= max(limits_stall_s, STALE_AFTER_S)]
    silent = [p for p in live if p not in fresh]
    gone_workers = [p for p in silent if idle_worker(p)]
    silent = [p for p in silent if p not in gone_workers]
    newest = max((p.time for p in live), default=None)
    cause = f"{len(fresh)} of {len(fresh) + len(silent)} process(es) beating, newest {_age(ev.now, newest)}"
    if gone_workers:
        cause += f"; {len(gone_workers)} DataLoader worker(s) ended"
    if silent:
        cause += "; silent: " + ", ".join(f"pid {p.pid} ({_age(ev.now, p.time)})" for p in silent[:4])
        return Check.of(CheckId.PROBE, WARN, cause,
                     "a process that runs no Python (a C call holding the GIL), or one that died",
                     newest)
    return Check.of(CheckId.PROBE, OK, cause, "", newest)


def stacks_check(ev: Evidence, views: list[ThreadView], hang: Hang | None, stalled: bool) -> Check | None:
    """What the run's threads do, by class ("4 running, 2 in a collective"); the hang's words
    when the verdict is STALLED."""
    if not views:
        return None
    counts: dict[ThreadClass, int] = {}
    for v in views:
        counts[v.cls] = counts.get(v.cls, 0) + 1
    procs = len({v.pid for v in views})
    what = ", ".join(f"{n} {cls.words}" for cls, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    cause = f"{len(views)} thread(s) in {procs} process(es): {what}"
    if stalled and hang is not None:
        return Check.of(CheckId.STACKS, FAIL, _one_line(hang.words, 300),
                     "the named thread is where the run stopped: what it waits on (a peer, a lock, I/O) holds the run", hang.since)
    return Check.of(CheckId.STACKS, OK, _one_line(cause, 300))


# -- GPUs ---------------------------------------------------------------------------------------

def gpus_check(snap: GpuSnapshot | None, ev: Evidence, alive: bool | None) -> Check:
    """The "gpus" check: the bundled trainer's GPUs from status.json (run/verdict/gpu_check.py); any other
    program's from the processes of the run that NVML finds on the host's GPUs."""
    if ev.status is not None or snap is None or snap.error is not None or not snap.gpus or not alive \
            or any(g.lost for g in snap.gpus):
        return gpu_check_for_status(snap, ev.status, alive)
    with_run = [g for g in snap.gpus if any(p.is_run_process for p in g.processes)]
    if not with_run:
        return Check.of(CheckId.GPUS, OK,
                     f"no process of the run on the host's {len(snap.gpus)} GPU(s): it uses none so far")
    used = sum(p.used_memory_bytes or 0 for g in with_run for p in g.processes if p.is_run_process)
    util = run_gpu_util(snap)
    busy = f", {util[0]:.0f} % SM ({util[1]})" if util is not None else ""
    return Check.of(CheckId.GPUS, OK,
                 f"run processes on {len(with_run)} GPU(s) ({', '.join(str(g.index) for g in with_run)}), "
                 f"{used / 1024 ** 3:.1f} GiB{busy}")


def run_gpu_util(snap: GpuSnapshot) -> tuple[float, str] | None:
    """(SM use in %, whose) on the run's busiest GPU: the run's own processes' share where NVML
    gives it per process, else the whole device's ("the device", which another user may share)."""
    used = [g for g in snap.gpus if any(p.is_run_process for p in g.processes)]
    if not used:
        return None
    own = [sum(p.sm_util_pct for p in g.processes if p.is_run_process and p.sm_util_pct is not None)
           for g in used if any(p.is_run_process and p.sm_util_pct is not None for p in g.processes)]
    if own:
        return max(own), "the run's processes"
    return max((g.util_sm_pct or 0.0) for g in used), "the whole device"

