"""Gather the evidence about one run directory through RemoteOps: files, records, the process tree.

One poll is: the target's clock, one stat of every run file, small reads of the JSON records
that exist, and one proc_tree of the wrapper's pid (its liveness, and the CPU time, states and
threads of every process under it). Then the run's `ProgressTracker` (run/evidence/activity.py) reads
the new bytes of train.log and events.jsonl, only when they grew, and says what advanced.
The log's tail is read only when the verdict needs it (a dead process: CRASHED's traceback; a
launch that never started: launch.out). What cannot be parsed is kept as a `problem` string,
never raised.
"""

from __future__ import annotations

import asyncio
import functools
import posixpath
import time
from dataclasses import dataclass, field, replace

from ...contract.rundir import (EVENTS_JSONL, EXIT_JSON, LAUNCH_JSON, LAUNCH_OUT, LAUNCH_SH, LOG_GROWTH, PROBE_DIR,
                                 STATUS_JSON, STOP_JSON, TRAIN_LOG, ExitRecord, LaunchRecord, SchemaError, StopRecord,
                                 TrainStatus, inert_text, parse_exit, parse_launch, parse_status, parse_stop,
                                 rank_file)

from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import FileStat, PidInfo, ProcTree, RemoteOps
from .activity import CPU_WINDOW_S, WINDOW as ACTIVITY_WINDOW, Activity, ProgressTracker
from .metric_files.reader import MetricsView
from ..attempts import LaunchAttempt
from ..eager import gather_eager
from .checkpoints import CheckpointsView
from .first_look import first_look, fresh_ops, one_answer
from .flight_recorder import gather_collectives, gather_root_cause, holds_distributed_files
from .memory import LookMemory
from ..stacks.records import HangEvidence
from .probe_files import REPORT_MAX_BYTES, ProbeReports, gather_probes
from .memory_runway import MemoryRunway
from .runway import DiskRunway
from .stack_dumps import gather_stack_dumps
from .tracebacks import last_traceback
from ..wrapper import LEGACY_WRAPPER_ARGV, run_id_of_wrapper, wrapper_argv

_WRAPPER_HEAD = 512   # launch.sh's marker line is in its first bytes
RUN_FILES = (LAUNCH_SH, LAUNCH_JSON, LAUNCH_OUT, TRAIN_LOG, STATUS_JSON, EXIT_JSON, STOP_JSON, EVENTS_JSONL, LOG_GROWTH)
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
    # The run's metrics from its log's metric lines and its metric files (TensorBoard, CSV,
    # trainer_state.json, MLflow): sources, newest points, this poll's new points.
    metrics: MetricsView | None = None
    # Per-process reports of the run probe (RUN_DIR/probe/<pid>.json), when a program runs
    # under it: heartbeats prove a process alive; its step events (events.jsonl) are progress.
    # With the probe directory's listing and the reports that could not be read.
    probes: ProbeReports = field(default_factory=ProbeReports)
    # Stacks of processes whose reports went stale, collectives per rank, the first failure.
    hang: HangEvidence = field(default_factory=HangEvidence)
    # The run's checkpoints, each judged complete or torn (run/evidence/checkpoints.py), and
    # whether the next ones fit on their disk (run/evidence/runway.py); None when not looked
    # for (a one-shot look of the stop and launch paths, a history run).
    checkpoints: CheckpointsView | None = None
    runway: DiskRunway | None = None
    # The run's host memory and each GPU's held by its processes, as trends over its steps
    # (run/evidence/memory_runway.py); None when not looked at (a one-shot look, an ended run).
    memory: MemoryRunway | None = None
    # What a scheduler's backend observed beside the run dir (backends/<name>/: Slurm's job),
    # opaque here: only that backend's `observe` fills it and its `judge` reads it.
    scheduler: object = None

    def __post_init__(self) -> None:
        if not isinstance(self.probes, ProbeReports):   # reports given as a plain list
            self.probes = ProbeReports(self.probes)

    def path(self, name: str) -> str:
        return _joined(self.run_dir, name)

    def exists(self, name: str) -> bool:
        st = self.files.get(name)
        return bool(st and st.exists)


@functools.lru_cache(maxsize=4096)
def _joined(run_dir: str, name: str) -> str:
    """A run file's path (asked several times per look, the same every look)."""
    return posixpath.join(run_dir, name)


async def _read_text(ops: RemoteOps, path: str, max_bytes: int = _RECORD_MAX) -> tuple[str | None, str | None]:
    """(text, problem). A file that vanished between stat and read is (None, None)."""
    try:
        chunk = await ops.read(path, 0, max_bytes)
    except TargetError as exc:
        if is_transport_failure(exc):
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


async def _read_record(ops: RemoteOps, ev: Evidence, name: str, parse, memory: LookMemory):
    if not ev.exists(name):
        return None, None
    st = ev.files[name]
    if st.is_dir:
        return None, f"{ev.path(name)} is a directory"
    key = (ev.path(name), st.inode, st.size, st.mtime, parse)
    if key in memory.records:   # the same file as at the last look: not read or parsed again
        return memory.records[key], None
    text, problem = await _read_text(ops, ev.path(name))
    if text is None:
        return None, problem
    try:
        record = parse(text)
    except SchemaError as exc:
        return None, str(exc)
    memory.records.remember(key, record)
    memory.held(ev.path(name), st)
    return record, None


async def _read_tail_text(ops: RemoteOps, path: str, max_bytes: int) -> str:
    try:
        chunk = await ops.read_tail(path, max_bytes)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return ""        # an unreadable log only costs the traceback line
    if not chunk.exists:
        return ""
    text = chunk.data.decode("utf-8", "replace")
    if chunk.offset > 0:
        # The tail may start mid-line: drop the partial first line.
        text = text.split("\n", 1)[1] if "\n" in text else ""
    # Read as lines (a traceback), and inert: nothing of the program's output reaches a terminal.
    return inert_text(text, keep_newlines=True)


async def gather(ops: RemoteOps, run_dir: str, *, attempt: LaunchAttempt | None = None,
                 tail_bytes: int = 64 << 10, tracker: ProgressTracker | None = None,
                 rank: int = 0, local_stop: StopRecord | None = None) -> Evidence:
    """One observation. `tracker` is the run's memory across polls (the dashboard's and a
    session's); without one, a fresh tracker makes this a one-shot look without the second CPU
    sample (the stop and launch paths, which need no busy/idle judgement). `rank`: the
    torch.distributed rank whose status this run dir holds (a node of a run on several hosts;
    its file is `rank_file(STATUS_JSON, rank)`). `local_stop`: this machine's record of a stop
    request whose stop.json the target could not take; it stands in for a missing stop.json."""
    status_name, names, plan_paths, record_reads = _look_plan(run_dir, rank)
    paths, reads = list(plan_paths), dict(record_reads)
    watched = tracker is not None   # a run's own tracker: its checkpoints are looked at too
    # The probe reports read at the last look are rewritten every second: ask for them up front.
    tracker = tracker or ProgressTracker(second_sample=False)
    memory = tracker.looks
    reads.update((path, REPORT_MAX_BYTES) for path in memory.reports)
    if watched:
        reads.update(tracker.memory.prefetch())   # the tree's PSS, when this look samples it
        reads.update(tracker.growth_prefetch(run_dir))   # when the log's step lines came
    pid = memory.pid
    grown = {path: (offset, ACTIVITY_WINDOW) for path, offset in tracker.cursors(run_dir).items()}
    # The folders that hold the run's checkpoints: whether they moved decides the next search.
    folders = tracker.checkpoints.prefetch() if watched else []
    ops = await first_look(ops, [*paths, *folders], reads=reads, grown=grown, list_dirs=[posixpath.join(run_dir, PROBE_DIR)],
                           proc_tree=None if pid is None else (pid, run_dir), memory=memory)
    now, stats = await gather_eager(ops.now(), ops.stat(paths))
    ev = Evidence(now=now, run_dir=run_dir, attempt=attempt,
                  files={name: st for name, st in zip(names, stats)})

    async def wrapper_id():
        if ev.exists(LAUNCH_SH):
            st = ev.files[LAUNCH_SH]
            key = (ev.path(LAUNCH_SH), st.inode, st.size, st.mtime)
            if key in memory.wrapper_ids:   # the same launch.sh as at the last look: the same run id
                ev.wrapper_run_id = memory.wrapper_ids[key]
                return
            try:
                chunk = await ops.read(ev.path(LAUNCH_SH), 0, _WRAPPER_HEAD)
            except TargetError as exc:
                if is_transport_failure(exc):
                    raise
                return   # a launch.sh that is a directory or a FIFO names no run
            ev.wrapper_run_id = run_id_of_wrapper(chunk.data.decode("utf-8", "replace"))
            memory.wrapper_ids.remember(key, ev.wrapper_run_id)
            memory.held(ev.path(LAUNCH_SH), st)

    async def launch():
        ev.launch, ev.launch_problem = await _read_record(ops, ev, LAUNCH_JSON, parse_launch, memory)

    async def exit_():
        ev.exit, ev.exit_problem = await _read_record(ops, ev, EXIT_JSON, parse_exit, memory)

    async def stop():
        ev.stop, _ = await _read_record(ops, ev, STOP_JSON, parse_stop, memory)

    async def status():
        ev.status, ev.status_problem = await _read_record(ops, ev, status_name, parse_status, memory)

    await gather_eager(wrapper_id(), launch(), exit_(), stop(), status())

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

    ev.probes = await gather_probes(ops, run_dir, run_id, memory)
    await _gather_distributed(ops, ev, memory)
    if ev.launch is not None:
        memory.pid = ev.launch.pid
        ev.tree, _ = await gather_eager(ops.proc_tree(ev.launch.pid, run_dir=run_dir),
                                          tracker.read_files(ops, run_dir, run_id, ev.now, ev.files))
        ev.metrics = tracker.metrics
        ev.proc = judged_root(ev.launch, run_dir, ev.tree.root)
    elif attempt is not None and attempt.pid and attempt.run_id == run_id:
        (ev.detached_proc,) = await ops.pid_info([attempt.pid])
        if ev.detached_proc.gone:
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
            ev.exit, ev.exit_problem = await _read_record(ops, ev, EXIT_JSON, parse_exit, memory)
            if ev.exit is not None and run_id is not None and ev.exit.run_id != run_id:
                ev.exit = None
    if ev.exists(TRAIN_LOG) and not ev.files[TRAIN_LOG].is_dir and (wrapper_gone or ev.exit is not None):
        ev.log_tail = await _read_tail_text(ops, ev.path(TRAIN_LOG), tail_bytes)
        ev.last_traceback = last_traceback(ev.log_tail)
    if ev.launch is None and ev.exists(LAUNCH_OUT):
        ev.launch_out = await _read_tail_text(ops, ev.path(LAUNCH_OUT), 4 << 10)
    elif ev.launch is not None and ev.launch.log_error and ev.exists(LAUNCH_OUT):
        ev.launch_out = await _read_tail_text(ops, ev.path(LAUNCH_OUT), 4 << 10)
    if ev.launch is not None and not wrapper_gone and ev.exit is None:
        await _gather_hang(ops, ev, memory)
    if ev.launch is not None:
        await _observe_activity(ops, ev, tracker)
        if watched:
            await _observe_checkpoints(ops, ev, tracker)
            if not wrapper_gone and ev.exit is None:
                ev.memory = await tracker.memory.look(ops, ev, run_id)
    if (ev.launch is not None and not wrapper_gone and ev.stop is None and run_id is not None
            and not one_answer(ops)):
        # Read at more than one instant (one question at a time, or stacks dumped on request):
        # a steady look the agent answered at once has nothing to read again.
        await _stop_since(ops, ev, memory, run_id)
    return ev


async def _observe_checkpoints(ops: RemoteOps, ev: Evidence, tracker: ProgressTracker) -> None:
    """The run's checkpoints and the disk runway of the next ones (each at its own cadence)."""
    ev.checkpoints = await tracker.checkpoints.look(ops, ev.run_dir, ev.now)
    log = ev.files.get(TRAIN_LOG)
    rate = tracker.runway.log_rate(ev.now, log.size if log is not None and log.is_regular else None,
                                   ev.launch.start_time if ev.launch is not None else None)
    ev.runway = await tracker.runway.look(ops, ev.run_dir, ev.checkpoints, ev.now, rate)


async def _stop_since(ops: RemoteOps, ev: Evidence, memory: LookMemory, run_id: str) -> None:
    """stop.json read again after the log, the probes and the stacks, so one look's evidence
    is of one instant as far as a stop goes: a stop requested while the look read them (its
    SIGTERM reaching a handler that prints or whose stack moves) makes that output and motion
    the stop's (STOPPING), never progress. Past the prefetch: that answer is the earlier instant."""
    fresh = fresh_ops(ops)
    (st,) = await fresh.stat([ev.path(STOP_JSON)])
    if not st.exists or st.is_dir:
        return
    ev.files[STOP_JSON] = st
    stop, _ = await _read_record(fresh, ev, STOP_JSON, parse_stop, memory)
    if stop is not None and stop.run_id == run_id:
        ev.stop = stop


@functools.lru_cache(maxsize=1024)
def _look_plan(run_dir: str, rank: int) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[tuple[str, int], ...]]:
    """What every look at `run_dir` asks for (the same each second): rank's status file name,
    the run files' names and paths, and the records read whole ((path, max bytes) pairs,
    immutable: the cache hands the same plan to every look)."""
    status_name = rank_file(STATUS_JSON, rank)
    names = tuple(status_name if n == STATUS_JSON else n for n in RUN_FILES)
    paths = tuple(posixpath.join(run_dir, n) for n in names)
    reads = {posixpath.join(run_dir, n): _RECORD_MAX for n in (LAUNCH_JSON, EXIT_JSON, STOP_JSON, status_name)}
    reads[posixpath.join(run_dir, LAUNCH_SH)] = _WRAPPER_HEAD
    return status_name, names, paths, tuple(reads.items())


async def _gather_distributed(ops: RemoteOps, ev: Evidence, memory: LookMemory) -> None:
    """Where each rank's collectives stand (Flight Recorder) and the first failure (torchelastic),
    from the files the run left in its probe directory; live or ended."""
    listing = ev.probes.listing
    if not listing or not holds_distributed_files(tuple(st.path for st in listing)):
        return   # what the two would find in it: nothing
    (ev.hang.collectives, fr_problems), (ev.hang.root_cause, err_problems) = await gather_eager(
        gather_collectives(ops, ev.run_dir, listing, ev.probes, memory),
        gather_root_cause(ops, ev.run_dir, listing, ev.probes, memory))
    ev.hang.bad_files.extend(fr_problems + err_problems)


async def _gather_hang(ops: RemoteOps, ev: Evidence, memory: LookMemory) -> None:
    """Stacks of the processes whose probe reports went stale (only while the run lives)."""
    ev.hang.stack_dumps, problems = await gather_stack_dumps(ops, ev.run_dir, ev.probes, ev.now, memory)
    ev.hang.gone = ev.hang.stack_dumps.gone
    ev.hang.problems.extend(problems)
    ev.hang.bad_files.extend(d.problem for d in ev.hang.stack_dumps.values() if d.problem)


# How often a one-shot look waits another half CPU_WINDOW_S for fresh probe reports.
_REPORT_RETRIES = 2


async def _observe_activity(ops: RemoteOps, ev: Evidence, tracker: ProgressTracker) -> None:
    ev.activity = tracker.observe(ev.now, ev.tree, ev.probes, ev.hang.stack_dumps,
                                  ev.status.phase if ev.status is not None else None)
    if tracker.needs_second_sample(ev.now, ev.files.get(TRAIN_LOG), ev.tree) and ev.exit is None:
        # One-shot: busy or idle needs a CPU rate, and a rate needs a second sample; so do
        # stacks that move (the probe rewrites its reports every second).
        t0 = time.monotonic()
        await asyncio.sleep(CPU_WINDOW_S)
        tree, probes = await asyncio.gather(ops.proc_tree(ev.launch.pid, run_dir=ev.run_dir),
                                            gather_probes(ops, ev.run_dir, current_run_id(ev), tracker.looks))
        before = {p.pid: p.seq for p in ev.probes if not p.ended and ev.now - p.time <= 2 * CPU_WINDOW_S}
        for _ in range(_REPORT_RETRIES):
            # A report the probe has not rewritten yet says nothing new: look once more.
            if all(p.seq != before[p.pid] for p in probes if p.pid in before and p.pid in probes.fresh):
                break
            await asyncio.sleep(CPU_WINDOW_S / 2)
            probes = await gather_probes(ops, ev.run_dir, current_run_id(ev), tracker.looks)
        later = ev.now + (time.monotonic() - t0)
        tracker.sample_cpu(later, tree)
        tracker.sample_stacks(probes, ev.hang.stack_dumps)
        if probes or not ev.probes:
            ev.probes = probes
        if not process_matches(ev.launch, judged_root(ev.launch, ev.run_dir, tree.root)):
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


def judged_root(launch: LaunchRecord, run_dir: str, root: PidInfo) -> PidInfo:
    """The wrapper's PidInfo as judged for `run_dir`: a launch.json whose wrapper argv names
    another run dir (a copied run dir) makes its process not this run dir's, whatever its cwd.
    (Records are read inert, contract/rundir.py `inert_text`: so is the argv they are held to.)"""
    expected = [inert_text(a) for a in wrapper_argv(run_dir, launch.run_id)]
    if launch.wrapper_argv and launch.wrapper_argv != expected:
        return replace(root, in_run_dir=False)
    return root


def wrapper_refusal(launch: LaunchRecord, proc: PidInfo) -> str | None:
    """Why the live `proc` is not provably the wrapper launch.json records, or None. The proof:
    its exact command line (which names the run dir and the run id) and its working directory
    (the run dir; where it can be looked at). A launch.json of an earlier version has no argv
    of the wrapper's own, so there the working directory must be proven."""
    if launch.pid <= 1 or launch.pgid <= 1:
        return f"pid {launch.pid} / group {launch.pgid} cannot be a wrapper (init, or every process)"
    expected = tuple(launch.wrapper_argv) if launch.wrapper_argv else LEGACY_WRAPPER_ARGV
    if tuple(proc.cmdline) != expected:
        return f"its command line is {_argv_words(proc.cmdline)}, not the wrapper's {_argv_words(expected)}"
    if proc.in_run_dir is False:
        return "it is the wrapper of another run dir (its command line or working directory names another)"
    if proc.in_run_dir is None and not launch.wrapper_argv:
        return "its working directory cannot be looked at, so it cannot be proven to be this run dir's wrapper"
    return None


def _argv_words(argv) -> str:
    text = " ".join(argv) or "empty"
    return repr(text if len(text) <= 80 else text[:77] + "...")


def process_matches(launch: LaunchRecord, proc: PidInfo | None) -> bool:
    """The wrapper recorded in launch.json is still alive, is still the same process (start
    time), and is provably this run dir's wrapper (`wrapper_refusal`)."""
    if proc is None or proc.gone:
        return False
    if launch.start_ticks is not None and proc.start_ticks is not None and proc.start_ticks != launch.start_ticks:
        return False
    return wrapper_refusal(launch, proc) is None
