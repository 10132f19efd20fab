"""Gather the evidence about one run directory through RemoteOps: files, records, the process tree.

One poll is: the target's clock, one stat of every run file, small reads of the JSON records
that exist, and one proc_tree of the wrapper's pid (its liveness, and the CPU time, states and
threads of every process under it). Then the run's `ProgressTracker` (run/activity.py) reads
the new bytes of train.log and events.jsonl, only when they grew, and says what advanced.
The log's tail is read only when the verdict needs it (a dead process: CRASHED's traceback; a
launch that never started: launch.out). What cannot be parsed is kept as a `problem` string,
never raised.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from dataclasses import dataclass, field

from ..contract.rundir import (EVENTS_JSONL, EXIT_JSON, LAUNCH_JSON, LAUNCH_OUT, LAUNCH_SH, STATUS_JSON, STOP_JSON,
                                 TRAIN_LOG, ExitRecord, LaunchRecord, SchemaError, SlurmJobRecord, StopRecord,
                                 TrainStatus, parse_exit, parse_launch, parse_status, parse_stop, rank_file)

from ..remote.base import CommandTimeout, ContainerNotRunning, TargetError, TargetUnreachable
from ..remote.ops import FileStat, PidInfo, ProcTree, RemoteOps
from ..slurm.job import SlurmJob
from .activity import CPU_WINDOW_S, Activity, ProgressTracker
from .attempts import LaunchAttempt
from .hang_evidence import HangEvidence
from .probe_files import ProbeReport, gather_probes
from .tracebacks import last_traceback
from .wrapper import run_id_of_wrapper

RUN_FILES = (LAUNCH_SH, LAUNCH_JSON, LAUNCH_OUT, TRAIN_LOG, STATUS_JSON, EXIT_JSON, STOP_JSON, EVENTS_JSONL)
# Records are tiny; anything bigger is not ours (and must not cost a big read every second).
_RECORD_MAX = 256 << 10


@dataclass
class Evidence:
    now: float                                   # target clock
    run_dir: str
    files: dict[str, FileStat] = field(default_factory=dict)
    wrapper_run_id: str | None = None            # from launch.sh's marker line
    launch: LaunchRecord | None = None
    launch_problem: str | None = None
    exit: ExitRecord | None = None
    exit_problem: str | None = None
    stop: StopRecord | None = None
    status: TrainStatus | None = None
    status_problem: str | None = None
    proc: PidInfo | None = None
    detached_proc: PidInfo | None = None         # the pid the launch command printed, while no launch.json
    last_traceback: str | None = None
    log_tail: str = ""                           # last lines of train.log, when read
    launch_out: str = ""                         # the wrapper's own stdout/stderr, when read
    attempt: LaunchAttempt | None = None
    tree: ProcTree | None = None                 # the wrapper's process tree (proc_tree), while launched
    activity: Activity | None = None             # what advanced: CPU, log, steps (ProgressTracker)
    # Per-process reports of the run probe (RUN_DIR/probe/<pid>.json), when a program runs
    # under it: heartbeats prove a process alive; its step events (events.jsonl) are progress.
    probes: list[ProbeReport] = field(default_factory=list)
    # Stacks of processes whose reports went stale, collectives per rank, the first failure.
    hang: HangEvidence = field(default_factory=HangEvidence)
    # A run under Slurm (backends/slurm.py fills these): slurm.json, the job as the scheduler
    # describes it now, and the tail of the job's own stdout/stderr (slurm.out).
    slurm: SlurmJobRecord | None = None
    slurm_problem: str | None = None
    job: SlurmJob | None = None
    slurm_out: str = ""

    def path(self, name: str) -> str:
        return posixpath.join(self.run_dir, name)

    def exists(self, name: str) -> bool:
        st = self.files.get(name)
        return bool(st and st.exists)


def _is_transport_failure(exc: TargetError) -> bool:
    return isinstance(exc, (TargetUnreachable, CommandTimeout, ContainerNotRunning))


async def _read_text(ops: RemoteOps, path: str, max_bytes: int = _RECORD_MAX) -> tuple[str | None, str | None]:
    """(text, problem). A file that vanished between stat and read is (None, None)."""
    try:
        chunk = await ops.read(path, 0, max_bytes)
    except TargetError as exc:
        if _is_transport_failure(exc):
            raise
        return None, exc.message     # e.g. permission denied: evidence, not a crash
    if not chunk.exists:
        return None, None
    if chunk.size > max_bytes:
        return None, f"{posixpath.basename(path)} is {chunk.size} bytes, too big to be a record"
    try:
        return chunk.data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, f"{posixpath.basename(path)} is not UTF-8 text"


async def _read_record(ops: RemoteOps, ev: Evidence, name: str, parse):
    if not ev.exists(name):
        return None, None
    st = ev.files[name]
    if st.is_dir:
        return None, f"{ev.path(name)} is a directory"
    key = (ev.path(name), st.inode, st.size, st.mtime, parse)
    if key in _RECORDS:   # the same file as at the last look: not read or parsed again
        return _RECORDS[key], None
    text, problem = await _read_text(ops, ev.path(name))
    if text is None:
        return None, problem
    try:
        record = parse(text)
    except SchemaError as exc:
        return None, str(exc)
    _remember(_RECORDS, key, record)
    return record, None


async def _read_tail_text(ops: RemoteOps, path: str, max_bytes: int) -> str:
    try:
        chunk = await ops.read_tail(path, max_bytes)
    except TargetError as exc:
        if _is_transport_failure(exc):
            raise
        return ""        # an unreadable log only costs the traceback line
    if not chunk.exists:
        return ""
    text = chunk.data.decode("utf-8", "replace")
    if chunk.offset > 0:
        # The tail may start mid-line: drop the partial first line.
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return text


async def gather(ops: RemoteOps, run_dir: str, *, attempt: LaunchAttempt | None = None,
                 tail_bytes: int = 64 << 10, tracker: ProgressTracker | None = None,
                 rank: int = 0, local_stop: StopRecord | None = None) -> Evidence:
    """One observation. `tracker` is the run's memory across polls (the dashboard's and a
    session's); without one, a fresh tracker makes this a one-shot look without the second CPU
    sample (the stop and launch paths, which need no busy/idle judgement). `rank`: the
    torch.distributed rank whose status this run dir holds (a node of a run on several hosts;
    its file is `rank_file(STATUS_JSON, rank)`). `local_stop`: this machine's record of a stop
    request whose stop.json the target could not take; it stands in for a missing stop.json."""
    status_name = rank_file(STATUS_JSON, rank)
    names = tuple(status_name if n == STATUS_JSON else n for n in RUN_FILES)
    now, stats = await asyncio.gather(
        ops.now(), ops.stat([posixpath.join(run_dir, n) for n in names]))
    ev = Evidence(now=now, run_dir=run_dir, attempt=attempt,
                  files={name: st for name, st in zip(names, stats)})

    async def wrapper_id():
        if ev.exists(LAUNCH_SH):
            st = ev.files[LAUNCH_SH]
            key = (ev.path(LAUNCH_SH), st.inode, st.size, st.mtime)
            if key in _WRAPPER_IDS:   # the same launch.sh as at the last look: the same run id
                ev.wrapper_run_id = _WRAPPER_IDS[key]
                return
            try:
                chunk = await ops.read(ev.path(LAUNCH_SH), 0, 512)
            except TargetError as exc:
                if _is_transport_failure(exc):
                    raise
                return   # a launch.sh that is a directory or a FIFO names no run
            ev.wrapper_run_id = run_id_of_wrapper(chunk.data.decode("utf-8", "replace"))
            _remember(_WRAPPER_IDS, key, ev.wrapper_run_id)

    async def launch():
        ev.launch, ev.launch_problem = await _read_record(ops, ev, LAUNCH_JSON, parse_launch)

    async def exit_():
        ev.exit, ev.exit_problem = await _read_record(ops, ev, EXIT_JSON, parse_exit)

    async def stop():
        ev.stop, _ = await _read_record(ops, ev, STOP_JSON, parse_stop)

    async def status():
        ev.status, ev.status_problem = await _read_record(ops, ev, status_name, parse_status)

    await asyncio.gather(wrapper_id(), launch(), exit_(), stop(), status())

    # Records left over from an earlier run in the same dir are not evidence about this one.
    run_id = current_run_id(ev)
    if run_id is not None:
        if ev.launch is not None and ev.launch.run_id != run_id:
            ev.launch_problem = f"launch.json belongs to run {ev.launch.run_id}, not {run_id}"
            ev.launch = None
        if ev.exit is not None and ev.exit.run_id != run_id:
            ev.exit = None
        if ev.stop is not None and ev.stop.run_id != run_id:
            ev.stop = None
        if ev.stop is None and local_stop is not None and local_stop.run_id == run_id:
            ev.stop = local_stop
        if ev.status is not None and ev.status.run_id != run_id:
            ev.status_problem = f"{status_name} belongs to run {ev.status.run_id}"
            ev.status = None

    ev.probes = await gather_probes(ops, run_dir, run_id)
    tracker = tracker or ProgressTracker(second_sample=False)
    if ev.launch is not None:
        ev.tree, _ = await asyncio.gather(ops.proc_tree(ev.launch.pid),
                                          tracker.read_files(ops, run_dir, run_id, ev.now, ev.files))
        ev.proc = ev.tree.root
    elif attempt is not None and attempt.pid and attempt.run_id == run_id:
        (ev.detached_proc,) = await ops.pid_info([attempt.pid])
        if not ev.detached_proc.alive or ev.detached_proc.state == "Z":
            # It may have written launch.json and ended between our stat and pid_info: look
            # again before calling it NEVER STARTED.
            (again,) = await ops.stat([ev.path(LAUNCH_JSON)])
            if again.exists:
                return await gather(ops, run_dir, attempt=attempt, tail_bytes=tail_bytes, tracker=tracker,
                                    rank=rank, local_stop=local_stop)

    wrapper_gone = ev.launch is not None and not process_matches(ev.launch, ev.proc)
    if wrapper_gone and ev.exit is None:
        # The wrapper writes exit.json and then exits: it may have done both between our stat
        # and pid_info. Now that it is gone, a second look at exit.json is final.
        (st,) = await ops.stat([ev.path(EXIT_JSON)])
        if st.exists:
            ev.files[EXIT_JSON] = st
            ev.exit, ev.exit_problem = await _read_record(ops, ev, EXIT_JSON, parse_exit)
            if ev.exit is not None and run_id is not None and ev.exit.run_id != run_id:
                ev.exit = None
    if ev.exists(TRAIN_LOG) and not ev.files[TRAIN_LOG].is_dir and (wrapper_gone or ev.exit is not None):
        ev.log_tail = await _read_tail_text(ops, ev.path(TRAIN_LOG), tail_bytes)
        ev.last_traceback = last_traceback(ev.log_tail)
    if ev.launch is None and ev.exists(LAUNCH_OUT):
        ev.launch_out = await _read_tail_text(ops, ev.path(LAUNCH_OUT), 4 << 10)
    elif ev.launch is not None and ev.launch.log_error and ev.exists(LAUNCH_OUT):
        ev.launch_out = await _read_tail_text(ops, ev.path(LAUNCH_OUT), 4 << 10)
    if ev.launch is not None:
        await _observe_activity(ops, ev, tracker)
    return ev


# A dashboard looks at the same records every second; most of them have not changed since
# (launch.json never does, status.json at most once a second, always by an atomic rename).
# Records are read-only evidence, so a file with the same inode, size and mtime as at the last
# look gives the same parsed record, and such a launch.sh the same run id, without a read.
_CACHE_MAX = 4096
_RECORDS: dict[tuple, object] = {}
_WRAPPER_IDS: dict[tuple, str | None] = {}


def _remember(cache: dict, key: tuple, value) -> None:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value


async def _observe_activity(ops: RemoteOps, ev: Evidence, tracker: ProgressTracker) -> None:
    ev.activity = tracker.observe(ev.now, ev.tree)
    if tracker.needs_second_sample(ev.now, ev.files.get(TRAIN_LOG), ev.tree) and ev.exit is None:
        # One-shot: busy or idle needs a CPU rate, and a rate needs a second sample.
        t0 = time.monotonic()
        await asyncio.sleep(CPU_WINDOW_S)
        tree = await ops.proc_tree(ev.launch.pid)
        later = ev.now + (time.monotonic() - t0)
        tracker.sample_cpu(later, tree)
        if not process_matches(ev.launch, tree.root):
            return      # it ended in the meantime: the next look says how
        ev.activity = tracker.activity(later, tree)


def current_run_id(ev: Evidence) -> str | None:
    """The run this dir is about now: the last launch we sent, else launch.sh's, else launch.json's."""
    if ev.attempt is not None and ev.attempt.run_dir == ev.run_dir:
        wrapper = ev.files.get(LAUNCH_SH)
        newer_elsewhere = (ev.wrapper_run_id and ev.wrapper_run_id != ev.attempt.run_id
                           and wrapper is not None and ev.attempt.target_time is not None
                           and wrapper.mtime > ev.attempt.target_time + 1)
        if not newer_elsewhere:   # a launch.sh newer than ours: someone launched since
            return ev.attempt.run_id
    if ev.wrapper_run_id:
        return ev.wrapper_run_id
    return ev.launch.run_id if ev.launch is not None else None


def process_matches(launch: LaunchRecord, proc: PidInfo | None) -> bool:
    """The wrapper recorded in launch.json is still alive (and is still the same process)."""
    if proc is None or not proc.alive or proc.state == "Z":
        return False
    if launch.start_ticks is not None and proc.start_ticks is not None:
        return proc.start_ticks == launch.start_ticks
    return True
