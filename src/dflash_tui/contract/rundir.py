"""The run-directory contract: file names, records, events, and how each is validated.

Stdlib-only and self-contained (it imports nothing of this package), so the same file is
imported by the dashboard and the bundled trainer and copied verbatim into a run directory by
the run probe. docs/ARCHITECTURE.md describes the contract in prose.

Layout of RUN_DIR:

    launch.sh      generated POSIX-sh wrapper
    launch.json    written by the wrapper after train.log exists: proves the shell ran
    launch.out     stdout/stderr of the wrapper itself (before train.log is open)
    train.log      stdout+stderr of the trainer, human lines
    events.jsonl   one JSON object per line (heartbeat, compile, step, eval, checkpoint, error, exit)
    status.json    atomic snapshot, rewritten at most once a second
    exit.json      written by the wrapper when the trainer ends
    stop.json      written by `dflash-tui --stop` before it signals: who asked, when, how
    .launch-claim  held by the one launch in progress (run/launch/claim.py): who, which process
    checkpoints/   atomic checkpoints
    probe/         the run probe (when the profile allows it): sitecustomize.py, dflash_probe.py,
                   dflash_rundir.py (a copy of this file), written by the launcher; then one
                   <pid>.json report per Python process of the run, and errors.log

A trainer under torch.distributed (torchrun, one process per node) runs as ranks 0..N-1, each
writing its own status.json, events.jsonl and train.log: rank 0 under the names above (so a
one-process run, and a dashboard that watches rank 0, see what they always saw), rank R >= 1
under the same names with ``.rank<R>`` before the extension (``status.rank1.json``,
``events.rank1.jsonl``, ``train.rank1.log``; see `rank_file`). Each rank writes them into its
own node's RUN_DIR; ranks that share a machine share the directory. Every status record and
every event carries the ``rank`` and the ``node`` (host name) that wrote it. Only rank 0 writes
checkpoints/.

Every record carries ``"v": SCHEMA_VERSION`` and is validated field by field where it is read:
a record a program wrote with a wrong type (``"pid": "abc"``), a non-finite or absurd number,
or JSON nested too deep raises `SchemaError` naming the file, the field and the value, never
anything else. events.jsonl readers skip and count such lines instead: a half-written last line
is normal there.

Every string a record or event holds (keys included) is made inert where it is read
(`inert_text`): a control character, a lone surrogate or a line separator becomes its visible
escape (``\\x1b``, ``\\ud800``), so nothing a program writes into its run dir can reach a
terminal as an escape sequence, whatever view prints it.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import math
import re
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Iterable

SCHEMA_VERSION = 1

LAUNCH_SH = "launch.sh"
LAUNCH_JSON = "launch.json"
LAUNCH_OUT = "launch.out"
TRAIN_LOG = "train.log"
EVENTS_JSONL = "events.jsonl"
STATUS_JSON = "status.json"
EXIT_JSON = "exit.json"
STOP_JSON = "stop.json"
# When train.log grew, kept by the wrapper while its program runs: one "UPTIME SIZE" line per
# growth it saw (the target's /proc/uptime, the log's size then), sampled every LOG_GROWTH_EVERY_S,
# the newest LOG_GROWTH_KEEP lines at most (about 8 KiB; trimmed to the newest half when full).
# Any look, a first one included, reads the pace of the step lines from it (parse_log_growth;
# run/evidence/log_growth.py), where one stat of the log sees one mtime.
LOG_GROWTH = "log_growth"
LOG_GROWTH_EVERY_S = 0.5
LOG_GROWTH_KEEP = 256
LOG_GROWTH_MAX_BYTES = 32 << 10     # what a look reads of it at most
# A run under Slurm (dflash_tui/backends/slurm/): the job the launch submitted, and the job's own
# stdout/stderr (slurmstepd's words: "CANCELLED AT ... DUE TO TIME LIMIT", "exceeded memory limit").
SLURM_JSON = "slurm.json"
SLURM_OUT = "slurm.out"
# The bundled trainer's checkpoints: CHECKPOINTS_DIR/step-NNNNNNNN/{state.pt, CHECKPOINT_META},
# the meta written last (a directory with it is complete). The meta names the run that saved it
# (`run_id`), its `line` (the run id of the run that started from step 0; a --resume keeps the
# line of the checkpoint it loaded) and when it was saved (`time`). Retention is per run: a save
# prunes only its own line's checkpoints beyond the `keep` highest steps, never another run's
# (the run before a relaunch from scratch keeps its own). The newest checkpoint, the one
# --resume loads and a resume offer names with its run, is the one saved last
# (`checkpoint_recency`).
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_META = "meta.json"
# Where a relaunch sets the run before it aside (RUN_DIR/history/<run_id>/).
HISTORY_DIR = "history"
LAUNCH_CLAIM = ".launch-claim"
PROBE_DIR = "probe"
PROBE_SITECUSTOMIZE = "sitecustomize.py"
PROBE_MODULE = "dflash_probe.py"
PROBE_CONTRACT = "dflash_rundir.py"      # this file, copied verbatim
PROBE_ERRORS_LOG = "errors.log"          # what the probe swallowed, bounded
# PyTorch's Flight Recorder dumps, one per rank: PROBE_DIR/FR_DUMP_PREFIX<rank> (the prefix is
# torch's TORCH_FR_DUMP_TEMP_FILE; torch writes it on an NCCL watchdog timeout, the probe when a
# process has waited in torch.distributed for FR_DUMP_AFTER_S).
FR_DUMP_PREFIX = "fr_rank_"
FR_DUMP_AFTER_S = 30.0
FR_DUMP_EVERY_S = 60.0
# torchelastic's error files: PROBE_DIR/ELASTIC_ERROR_FILE (TORCHELASTIC_ERROR_FILE: torchrun's
# own, a copy of the first failure, or a @record program's) and, per worker, torchrun's
# PROBE_DIR/ELASTIC_LOG_DIR/<run>/attempt_<n>/<local rank>/error.json (its --log-dir).
ELASTIC_ERROR_FILE = "error.json"
ELASTIC_LOG_DIR = "torchelastic"
# The files every rank writes for itself (see the module docstring).
PER_RANK_FILES = (STATUS_JSON, EVENTS_JSONL, TRAIN_LOG)
_RANK_INFIX = ".rank"


def rank_file(name: str, rank: int) -> str:
    """The name rank `rank` writes `name` under: `name` itself for rank 0, else
    ``status.json`` -> ``status.rank3.json``."""
    if name not in PER_RANK_FILES:
        raise ValueError(f"{name} is not a per-rank file (those are {', '.join(PER_RANK_FILES)})")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be an integer >= 0 (got {rank!r})")
    if rank == 0:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}{_RANK_INFIX}{rank}{dot}{ext}"


def rank_file_globs() -> tuple[str, ...]:
    """Shell glob patterns that match every rank >= 1 file, e.g. ``status.rank*.json``."""
    return tuple(f"{stem}{_RANK_INFIX}*.{ext}" for stem, _, ext in (n.rpartition(".") for n in PER_RANK_FILES))


def parse_rank_file(filename: str) -> tuple[str, int] | None:
    """(per-rank file, rank) for a name `rank_file` makes, e.g. ``status.rank3.json`` ->
    (``status.json``, 3); None for any other name."""
    if filename in PER_RANK_FILES:
        return filename, 0
    for name in PER_RANK_FILES:
        stem, _, ext = name.rpartition(".")
        head, tail = f"{stem}{_RANK_INFIX}", f".{ext}"
        digits = filename[len(head):-len(tail)] if filename.startswith(head) and filename.endswith(tail) else ""
        if digits.isdigit() and digits.isascii() and not digits.startswith("0") and len(digits) <= 9:
            return name, int(digits)
    return None

# The trainer promises a heartbeat at least this often, compiling or not.
HEARTBEAT_INTERVAL_S = 2.0
# The run probe rewrites each process's report about this often.
PROBE_INTERVAL_S = 1.0
# status.json is rewritten at most this often.
STATUS_MIN_INTERVAL_S = 1.0


class SchemaError(ValueError):
    """A record that exists but cannot be understood (corrupt, wrong version, wrong shape)."""


class CompileState(str, Enum):
    PENDING = "pending"
    WARMING = "warming"
    COMPILED = "compiled"
    WAITING_AT_GATE = "waiting_at_gate"
    COMPILING = "compiling"
    FAILED = "failed"


class EventKind(str, Enum):
    HEARTBEAT = "heartbeat"
    COMPILE = "compile"
    STEP = "step"
    EVAL = "eval"
    CHECKPOINT = "checkpoint"
    ERROR = "error"
    EXIT = "exit"


class Phase(str, Enum):
    STARTING = "starting"      # parsing args, building models
    WARMING = "warming"        # main-thread compile warm-up
    TRAINING = "training"
    CHECKPOINTING = "checkpointing"
    EVALUATING = "evaluating"  # the leader measures tau; the other threads wait
    FINISHED = "finished"
    FAILED = "failed"


@dataclass
class LaunchRecord:
    """launch.json: written by launch.sh once train.log exists, before the trainer starts."""

    run_id: str
    pid: int = field(metadata={"min": 1})   # the wrapper's pid; also its session and group leader
    pgid: int = field(metadata={"min": 1})
    start_ticks: int | None  # field 22 of /proc/<pid>/stat: guards a stop against pid reuse
    start_time: float     # epoch seconds, target clock
    argv: list[str]
    host: str = ""
    user: str = ""
    python: str = ""
    cwd: str = ""
    v: int = SCHEMA_VERSION
    # Set when the wrapper could not open train.log (why, as the shell said it): the wrapper
    # then writes launch.json anyway and does not start the trainer (verdict LOG MISSING).
    log_error: str = ""
    # The wrapper's own argv, exactly as it was started: ["sh", "RUN_DIR/launch.sh", RUN_ID].
    # It names the run dir and the run id, so /proc/PID/cmdline proves which run dir a live
    # pid is the wrapper of (a copied run dir cannot adopt the original's process). Empty in
    # a launch.json of an earlier version, whose wrapper ran as `sh ./launch.sh` in the run dir.
    wrapper_argv: list[str] = field(default_factory=list)


@dataclass
class ExitRecord:
    """exit.json: written by launch.sh when the trainer ends (not when it is SIGKILLed)."""

    run_id: str
    exit_code: int | None  # None when the trainer died of a signal
    signal: int | None     # signal number when it died of one (shell reports 128+N)
    end_time: float
    v: int = SCHEMA_VERSION


@dataclass
class StopRecord:
    """stop.json: written by the stopper before it sends any signal."""

    run_id: str
    pid: int = field(metadata={"min": 1})
    requested_time: float
    requested_by: str = ""
    signal_sent: str = ""   # "SIGTERM", then "SIGKILL" if the grace period ran out; "scancel" for a Slurm job
    v: int = SCHEMA_VERSION
    job_id: str = ""        # a Slurm job's id (then pid is the job id while no wrapper pid is known)


@dataclass
class SlurmJobRecord:
    """slurm.json: written by the launch right after `sbatch` accepted the job. The job id is
    what stop cancels and what the verdict asks the scheduler about."""

    run_id: str
    job_id: str
    submit_time: float        # epoch seconds, the login host's clock
    partition: str = ""
    nodes: int = field(default=1, metadata={"min": 1})
    cluster: str = ""         # sbatch --parsable prints "ID;CLUSTER" on a multi-cluster setup
    submit_host: str = ""
    v: int = SCHEMA_VERSION


@dataclass
class ClaimRecord:
    """.launch-claim: written (atomically, by a hard link) by the launch that holds the run dir."""

    token: str            # random; only the holder's release removes a claim with its token
    launcher: str         # user@host of the launching process, for the refusal message
    pid: int = field(metadata={"min": 1})   # the launching process, on the launcher's machine
    start_ticks: int | None = None           # its /proc start time there, against pid reuse
    machine: str = ""     # host name | boot id | pid namespace of the launcher's machine
    action: str = "launch"   # "launch" or "relaunch"
    v: int = SCHEMA_VERSION


@dataclass
class ThreadStatus:
    """One trainer thread, as the dashboard's Threads pane shows it."""

    name: str
    role: str                      # "target" | "drafter" | "main"
    device: str
    compile_state: str = CompileState.PENDING.value
    graphs: int = 0                # compiled graphs (frames) this thread has caused
    recompiles: int = 0
    compile_seconds: float = 0.0
    step: int = 0
    last_step_time: float | None = None
    last_beat_time: float | None = None   # the thread's own liveness, not the process's
    error: str | None = None


@dataclass
class TrainStatus:
    """status.json: the trainer's atomic snapshot of itself."""

    run_id: str
    pid: int = field(metadata={"min": 1})
    time: float                    # when this snapshot was written (epoch, trainer clock)
    phase: str = Phase.STARTING.value
    step: int = 0
    total_steps: int = 0
    loss: float | None = None
    accuracy: float | None = None
    tau: float | None = None       # mean acceptance length from block verification
    tokens_per_s: float | None = None
    step_time_s: float | None = None   # wall seconds between the last two step ends
    mfu: float | None = None           # model FLOPs utilisation of the drafter devices, 0..1, against peak_tflops
    peak_tflops: float | None = None   # the per-device peak MFU divides by (assumed or --peak-tflops); None: no MFU
    first_step_s: float | None = None  # seconds from the process's start to the end of its first step
    heartbeat_time: float | None = None
    threads: list[ThreadStatus] = field(default_factory=list)
    last_error: str | None = None
    rank: int = field(default=0, metadata={"min": 0})         # torch.distributed rank; 0 when alone
    world_size: int = field(default=1, metadata={"min": 1})   # processes in the run
    node: str = ""                                            # host name of the writer
    v: int = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainStatus":
        return build_record(cls, data, STATUS_JSON)


@dataclass
class ProbeThread:
    """One thread of a probed process, as `py-spy dump` would show it."""

    name: str
    ident: int
    native_id: int | None = None
    daemon: bool = False
    frames: list[str] = field(default_factory=list)   # "file:line function", innermost first
    compile_state: str = ""        # "" (never compiled), CompileState.COMPILING or .COMPILED
    compiling_for_s: float | None = None   # how long the compile in progress has run
    graphs: int = 0                # dynamo graphs this thread compiled (torch's end callbacks)
    recompiles: int = 0            # of those, recompiles of a frame compiled before
    compile_seconds: float = 0.0
    # Since when its frames stand where they are now (target clock), as the probe saw them at
    # its beats: the innermost frame's line aside, first seen at a beat. None: an older probe.
    stack_since: float | None = None
    # Since when its frames kept are exactly these, lines included (a thread that waits stood
    # still since then). None: an older probe.
    frames_since: float | None = None


@dataclass
class BeatStack:
    """Where one non-daemon thread stood at a beat (ProbeReport.beats)."""

    frames: list[str] = field(default_factory=list)   # as ProbeThread.frames
    compile_state: str = ""


# Beats a probe report keeps the stacks of (ProbeReport.beats): a reader that reads a report
# every few seconds (a run of many ranks, read in turns) still counts every beat.
BEAT_HISTORY = 16


@dataclass
class ProbeReport:
    """probe/<pid>.json: one Python process of the run, rewritten by the probe every second.

    Written by any Python program the run starts (torchrun workers included) with no code of
    its own: the launcher puts the probe on PYTHONPATH as a sitecustomize."""

    run_id: str
    pid: int = field(metadata={"min": 1})
    time: float                    # when this report was written (epoch, target clock)
    ppid: int = 0
    start_time: float | None = None     # when the probe started in this process
    seq: int = 0                   # reports written so far by this process
    node: str = ""                 # the node it runs on: $DFLASH_NODE (the launcher's name), else the host name
    rank: int | None = None        # $RANK, $LOCAL_RANK, $WORLD_SIZE as torchrun/accelerate set them
    local_rank: int | None = None
    world_size: int | None = None
    argv: list[str] = field(default_factory=list)
    executable: str = ""
    python: str = ""               # version
    cpu_s: float = 0.0             # user+system CPU time of the whole process so far
    probe_cpu_s: float = 0.0       # of which the probe's own thread used
    threads: list[ProbeThread] = field(default_factory=list)
    torch: str = ""                # torch.__version__ once the program imported torch
    graphs: int = 0                # process totals: dynamo graphs, recompiles, compile seconds
    recompiles: int = 0
    compile_seconds: float = 0.0
    unique_graphs: int = 0         # torch._dynamo.utils.counters, process-wide
    graph_breaks: int = 0
    step: int | None = None        # the last dflash_probe.log(step=...) of this process
    step_time: float | None = None
    ended: bool = False            # the process exited normally (atexit): the last report
    errors: int = 0                # failures the probe swallowed (probe/errors.log says which)
    # /proc/<pid>/stat field 22: with pid, proof that a later signal reaches this very process.
    start_ticks: int | None = None
    # The signal on which this process dumps every thread's stack into probe/<pid>.stack
    # (faulthandler, from C: it works while another thread holds the GIL). None: no handler
    # registered, and then that signal must never be sent.
    stack_signal: int | None = None
    # The last beats up to this one (at most BEAT_HISTORY; beats[-1] is this report's, seq
    # `seq`, the one before it seq - 1, ...): each beat's non-daemon threads, as indices into
    # `beat_stacks`. Empty: an older probe (a reader samples `threads` once a report).
    beats: list[list[int]] = field(default_factory=list)
    beat_stacks: list[BeatStack] = field(default_factory=list)
    v: int = SCHEMA_VERSION

    def beat_samples(self) -> list[tuple[int, list[BeatStack]]]:
        """(seq, the non-daemon threads' stacks then) of each beat the report holds, oldest
        first; an index that names no stack is left out."""
        first = self.seq - len(self.beats) + 1
        n = len(self.beat_stacks)
        return [(first + i, [self.beat_stacks[j] for j in idx if 0 <= j < n])
                for i, idx in enumerate(self.beats)]


def probe_report_name(pid: int) -> str:
    """The file name of one process's report inside PROBE_DIR."""
    return f"{int(pid)}.json"


def probe_stack_name(pid: int) -> str:
    """The file inside PROBE_DIR that a process's stack dumps are written to."""
    return f"{int(pid)}.stack"


# A frame's line number has at most this many digits: no source file has a billion lines, and
# a longer one (4,300 digits and Python's int() refuses it) is not a frame the probe wrote.
FRAME_LINE_DIGITS = 9
_LONG_DIGITS = re.compile("[0-9]{%d} " % (FRAME_LINE_DIGITS + 1))
_LONG_FRAME_LINE = re.compile(r":([0-9]{%d,}) " % (FRAME_LINE_DIGITS + 1))


def parse_probe(text: str, what: str = PROBE_DIR + "/<pid>.json") -> ProbeReport:
    report = build_record(ProbeReport, loads_object(text, what), what)
    if _LONG_DIGITS.search(text):    # rare: a number is followed by a comma in JSON, not a space
        for i, t in enumerate(report.threads):
            for j, frame in enumerate(t.frames):
                m = _LONG_FRAME_LINE.search(frame)
                if m:
                    raise SchemaError(f"{what}: threads[{i}].frames[{j}] has a line number of "
                                      f"{len(m.group(1))} digits, not a frame the probe writes")
    return report


# The fields of a probe report that move at each beat (or step) while the rest stands still.
_PROBE_BEAT = frozenset(("time", "seq", "cpu_s", "probe_cpu_s", "step", "step_time", "beats"))


def parse_probe_after(text: str, what: str, before: tuple | None) -> tuple[ProbeReport, tuple | None]:
    """`parse_probe` for a reader that reads the same report every second: `before` is what
    this function returned for the report's last read (None the first time). A thread whose
    JSON is equal to the one at its place there keeps its parse (a rank's helpers, and every
    thread of a hung rank, stand still while the probe rewrites the report each beat), and
    when nothing but the beat's fields (_PROBE_BEAT) moved besides, the report is the last
    one with those fields replaced (each checked as its field's rule checks it). Returns the
    report and what to pass as `before` next time. The same answer as `parse_probe`, errors
    included: anything unusual is parsed by it."""
    data = loads_object(text, what)
    raw = data.get("threads")
    if not isinstance(raw, list):
        return parse_probe(text, what), None
    if before is None or len(raw) > _MAX_ITEMS:
        report = parse_probe(text, what)
        return report, (raw, report.threads, _probe_rest(data), report)
    old_raw, old_threads, old_rest, old_report = before
    threads = []
    for i, t in enumerate(raw):
        if i < len(old_raw) and t == old_raw[i]:
            threads.append(old_threads[i])   # its frames passed parse_probe's line check then
            continue
        try:
            threads.append(build_record(ProbeThread, t, what) if isinstance(t, dict) else None)
        except SchemaError:
            threads.append(None)
        # parse_probe refuses a frame's overlong line number: looked for in this thread's
        # frames alone (a search of the whole text costs more than the rest of this read).
        if threads[-1] is None or any(_LONG_FRAME_LINE.search(f) for f in threads[-1].frames):
            report = parse_probe(text, what)   # the error named as the whole report's parse names it
            return report, (raw, report.threads, _probe_rest(data), report)
    if len(threads) == len(old_threads) and all(a is b for a, b in zip(threads, old_threads)):
        # Every thread as it was: the same list, so a reader's memo of it (run/verdict/hang.py,
        # run/evidence/activity.py) holds across reads.
        threads = old_threads
    rest = _probe_rest(data)
    if rest == old_rest:
        # Only the beat moved (and perhaps threads): the last report with the beat's fields.
        beat = {}
        for name, check in _beat_plan():
            if name in data:
                try:
                    beat[name] = check(data[name])
                except _Bad as bad:
                    raise SchemaError(f"{what}: field {name!r}{bad.path} {bad.tail}") from None
        report = object.__new__(ProbeReport)   # dataclasses.replace, without its per-field dispatch
        report.__dict__.update(old_report.__dict__, threads=threads, **beat)
    else:
        report = build_record(ProbeReport, {**data, "threads": []}, what)
        report.threads = threads
    return report, (raw, threads, rest, report)


@functools.cache
def _beat_plan() -> tuple[tuple[str, Any], ...]:
    """(name, checker) of the beat's fields, in the report's field order."""
    return tuple((name, check) for name, _required, _default, check in _plan(ProbeReport) if name in _PROBE_BEAT)


def _probe_rest(data: dict) -> tuple:
    """A report's fields other than its threads and beat, and which beat fields it has."""
    return ({k: v for k, v in data.items() if k != "threads" and k not in _PROBE_BEAT},
            frozenset(k for k in _PROBE_BEAT if k in data))


# -- events -------------------------------------------------------------------------------
# One dataclass per kind: the fields a reader may rely on. Writers may add more (forward
# compatibility); a known field of the wrong type makes the line unreadable, never a crash.

@dataclass
class EventOrigin:
    """Fields of every event, whatever its kind: who wrote it."""

    rank: int = field(default=0, metadata={"min": 0})
    node: str = ""


@dataclass
class StepEvent:
    step: int = field(metadata={"min": 0})
    loss: float | None = None
    accuracy: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    mfu: float | None = None             # model FLOPs utilisation, 0..1, against `peak_tflops`
    peak_tflops: float | None = None
    acc_per_pos: list[float] = field(default_factory=list)
    first_step_s: float | None = None    # on the process's first step: seconds since the process started


@dataclass
class EvalEvent:
    step: int = field(metadata={"min": 0})
    tau: float | None = None             # mean acceptance length from block verification
    seconds: float | None = None
    prompts: int | None = None
    new_tokens: int | None = None


@dataclass
class CompileEvent:
    thread: str
    state: str                           # a CompileState value, or "start" / "end" / "recompile" / "warmup_done"
    seconds: float | None = None


@dataclass
class CheckpointEvent:
    step: int = field(metadata={"min": 0})
    path: str = ""
    action: str = ""                     # "saved" | "resumed"
    seconds: float | None = None         # a save: how long it took


@dataclass
class HeartbeatEvent:
    phase: str = ""
    step: int = 0


@dataclass
class ErrorEvent:
    message: str = ""
    fatal: bool = False


@dataclass
class ExitEvent:
    code: int | None = None
    step: int | None = None
    reason: str = ""


EVENT_TYPES: dict[str, type] = {
    EventKind.STEP.value: StepEvent, EventKind.EVAL.value: EvalEvent,
    EventKind.COMPILE.value: CompileEvent, EventKind.CHECKPOINT.value: CheckpointEvent,
    EventKind.HEARTBEAT.value: HeartbeatEvent, EventKind.ERROR.value: ErrorEvent,
    EventKind.EXIT.value: ExitEvent,
}


# -- validation -----------------------------------------------------------------------------
# Bounds that no honest writer reaches: they keep a hostile record from costing memory or time.
_INT_LIMIT = 1 << 63
_MAX_ITEMS = 4096          # list fields (threads, argv, per-position accuracy)
_MAX_DEPTH = 32            # JSON nesting: deeper is not a record of ours


# -- inert text ---------------------------------------------------------------------------
# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI to some terminals), line/paragraph
# separators and lone surrogates (which no UTF-8 output can encode).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_UNSAFE_KEEP_NL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# What in a JSON text can decode to one of those: an escape (\\n, \\u001b, \\ud800) or the raw
# character (JSON allows raw C1 controls and separators inside strings). A raw C0 control is
# not in the list: json.loads (strict) refuses one inside a string, so in a text it parsed, one
# is whitespace between tokens (the newline a writer ends its file with) and decodes to nothing.
_JSON_UNSAFE = re.compile(r'\\(?:[bfnrt]|u(?:00[01]|007[fF]|00[89]|202[89]|[dD][89a-fA-F]))'
                          "|[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _json_unsafe(text: str) -> bool:
    """`_JSON_UNSAFE` matches in `text`. Its search walks the text in Python's regex engine;
    a text of plain ASCII without a backslash or DEL (most records) cannot match, and says so
    at C speed."""
    if text.isascii() and "\\" not in text and "\x7f" not in text:
        return False
    return _JSON_UNSAFE.search(text) is not None


def _escape(m: "re.Match[str]") -> str:
    ch = m.group()
    return ascii(ch)[1:-1] if ch not in "\u2028\u2029" else f"\\u{ord(ch):04x}"


def finite_number(v: Any) -> float | None:
    """`v` as a float when it is a finite JSON number (not a bool, not an int too large for a
    float), else None: what any reader of a number written by a run may believe."""
    if type(v) is float:   # the common case, a float already: nan and inf give nan in v - v
        return v if v - v == 0.0 else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if f - f == 0.0 else None


def inert_text(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every character that a terminal could act on shown as its escape
    (ESC as ``\\x1b``, a lone surrogate as ``\\ud800``); with `keep_newlines`, a newline stays
    one (a traceback shown as lines)."""
    if text.isprintable():   # nothing of either class (controls, separators, surrogates), at C speed
        return text
    rx = _UNSAFE_KEEP_NL if keep_newlines else _UNSAFE
    return rx.sub(_escape, text) if rx.search(text) else text


def _inert_json(value: Any) -> Any:
    if isinstance(value, str):
        return inert_text(value)
    if isinstance(value, list):
        return [_inert_json(v) for v in value]
    if isinstance(value, dict):
        return {inert_text(k): _inert_json(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_word(hint: Any) -> str:
    words = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        parts = [_type_word(a) for a in typing.get_args(hint) if a is not type(None)]
        return " or ".join(parts) + " or null"
    if typing.get_origin(hint) is list:
        return "a list"
    return words.get(hint, getattr(hint, "__name__", str(hint)))


class _Bad(Exception):
    """A value that breaks its field's rule; build_record adds the file and the field's path."""

    def __init__(self, tail: str, path: str = "") -> None:
        super().__init__(tail)
        self.tail, self.path = tail, path


def _wrong(value: Any, expected: str) -> _Bad:
    return _Bad(f"is {_show(value)}, expected {expected}")


_INT, _LIST = frozenset((int,)), frozenset((list,))


def _plain_ints(values: list) -> bool:
    """Every value an int (not a bool) within _INT_LIMIT: `check_int`'s rule, in C's loops."""
    return (set(map(type, values)) <= _INT
            and (not values or -_INT_LIMIT < min(values) and max(values) < _INT_LIMIT))


def _checker(hint: Any, meta: Any = None):
    """A function value -> value as `hint` requires (ints stay ints, numbers become floats),
    raising _Bad. Built once per field, so reading a record dispatches on no types."""
    origin = typing.get_origin(hint)
    low = (meta or {}).get("min")
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        optional = type(None) in args
        inner = [a for a in args if a is not type(None)]
        inner_check = _checker(inner[0], meta) if len(inner) == 1 else None
        word = _type_word(hint)

        def check_union(value):
            if value is None and optional:
                return None
            if inner_check is not None:
                try:
                    return inner_check(value)
                except _Bad:
                    pass
            raise _wrong(value, word)
        return check_union
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        item_check = _checker(item)

        plain_ints = item is int
        lists_of_ints = typing.get_origin(item) is list and typing.get_args(item) == (int,)

        def check_list(value):
            if not isinstance(value, list):
                raise _wrong(value, "a list")
            if len(value) > _MAX_ITEMS:
                raise _Bad(f"has {len(value)} items, more than {_MAX_ITEMS}")
            # The common cases of ints and lists of ints (a report's beats: 16 lists a read) in
            # one pass without a call per item; anything else gets the item's own check and its
            # words.
            if plain_ints and _plain_ints(value):
                return list(value)
            if (lists_of_ints and set(map(type, value)) <= _LIST and max(map(len, value), default=0) <= _MAX_ITEMS
                    and _plain_ints(list(itertools.chain.from_iterable(value)))):
                return list(map(list, value))
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(item_check(v))
                except _Bad as bad:
                    bad.path = f"[{i}]{bad.path}"
                    raise
            return out
        return check_list
    if hint is Any:
        return lambda value: value
    if hint is bool:
        def check_bool(value):
            if not isinstance(value, bool):
                raise _wrong(value, "true or false")
            return value
        return check_bool
    if hint is int:
        def check_int(value):
            if isinstance(value, bool) or not isinstance(value, int) or not -_INT_LIMIT < value < _INT_LIMIT:
                raise _wrong(value, "an integer")
            if low is not None and value < low:
                raise _wrong(value, f"at least {low}")
            return value
        return check_int
    if hint is float:
        def check_float(value):
            if type(value) is float and value - value == 0.0 and (low is None or value >= low):
                return value   # the common case, a finite float in range, without the dispatch below
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    isinstance(value, int) and not -_INT_LIMIT < value < _INT_LIMIT):
                raise _wrong(value, "a number")
            value = float(value)
            if not math.isfinite(value):
                raise _wrong(value, "a finite number")
            if low is not None and value < low:
                raise _wrong(value, f"at least {low}")
            return value
        return check_float
    if hint is str:
        def check_str(value):
            if not isinstance(value, str):
                raise _wrong(value, "a string")
            return value
        return check_str
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        def check_record(value):
            if not isinstance(value, dict):
                raise _wrong(value, "an object")
            return hint(**_coerce(hint, value))
        return check_record
    raise TypeError(f"rundir: no rule for field type {hint!r}")


# cls -> [(field name, required, default factory, checker)], built on first use.
_PLANS: dict[type, list[tuple[str, bool, Any, Any]]] = {}


def _default_of(f) -> Any:
    if f.default is not MISSING:
        return lambda: f.default
    return f.default_factory if f.default_factory is not MISSING else None


def _plan(cls: type) -> list[tuple[str, bool, Any, Any]]:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = _PLANS[cls] = [
            (f.name, f.default is MISSING and f.default_factory is MISSING, _default_of(f),
             _checker(hints[f.name], f.metadata))
            for f in fields(cls)]
    return plan


def _coerce(cls: type, data: dict[str, Any], fill: bool = False) -> dict[str, Any]:
    """The known fields of `data`, each checked and converted by its field's rule; with
    `fill`, the absent optional ones at their defaults too."""
    out: dict[str, Any] = {}
    for name, required, default, check in _plan(cls):
        if name not in data:
            if required:
                raise _Bad("is missing", f": field {name!r}")
            if fill:
                out[name] = default()
            continue
        try:
            out[name] = check(data[name])
        except _Bad as bad:
            bad.path = f": field {name!r}{bad.path}"
            raise
    return out


def validated_fields(cls: type, data: dict[str, Any], what: str, *, fill: bool = False) -> dict[str, Any]:
    """`data`'s fields known to `cls`, type-checked (SchemaError naming `what`, the field, the
    value); with `fill`, every field of `cls`, the absent ones at their defaults."""
    try:
        return _coerce(cls, data, fill)
    except _Bad as bad:
        raise SchemaError(f"{what}{bad.path} {bad.tail}") from None


def build_record(cls: type, data: dict[str, Any], what: str):
    """A `cls` dataclass from a parsed JSON object, every known field type-checked.

    Unknown keys are ignored (newer writers may add fields); a missing required field, or a
    known one of the wrong type, raises SchemaError with the file (`what`), the field and the
    value, e.g. ``launch.json: field 'pid' is 'abc', expected an integer``.
    """
    return cls(**validated_fields(cls, data, what))


_TIME = _checker(float)


def _nested_deeper(obj: Any, limit: int) -> bool:
    """Whether parsed JSON nests its lists and objects more than `limit` deep: a walk of the
    containers, not of the text's characters (a report of 17 threads is 8 KB of text and a few
    hundred values)."""
    todo = [(obj, 1)]
    while todo:
        o, depth = todo.pop()
        if depth > limit:
            return True
        for x in (o.values() if isinstance(o, dict) else o):
            if isinstance(x, (dict, list)):
                todo.append((x, depth + 1))
    return False


def loads_object(text: str, what: str) -> dict[str, Any]:
    """One JSON object of this schema version, or SchemaError saying what is wrong with it."""
    too_deep = f"{what} is nested more than {_MAX_DEPTH} levels deep: not a record of ours"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} col {exc.colno})") from None
    except RecursionError:   # the C parser's own guard, at the interpreter's recursion limit
        raise SchemaError(too_deep) from None
    except ValueError as exc:   # e.g. an integer of more than 4300 digits
        raise SchemaError(f"{what} cannot be read: {str(exc)[:120]}") from None
    if not isinstance(obj, dict):
        raise SchemaError(f"{what} holds a {type(obj).__name__}, expected a JSON object")
    if text.count("[") + text.count("{") > _MAX_DEPTH and _nested_deeper(obj, _MAX_DEPTH):
        raise SchemaError(too_deep)
    if _json_unsafe(text):
        obj = _inert_json(obj)
    v = obj.get("v")
    if v != SCHEMA_VERSION or isinstance(v, bool):
        raise SchemaError(f"{what} has schema version {_show(v)}, this reader understands {SCHEMA_VERSION}")
    return obj


def to_json(record: Any) -> str:
    """One line of JSON for a record dataclass or a plain dict."""
    obj = asdict(record) if hasattr(record, "__dataclass_fields__") else record
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, allow_nan=False, default=str)


def parse_log_growth(text: str) -> tuple[list[tuple[float, int]], str]:
    """The growths a log_growth file names, oldest first: [(uptime, size)], and a note on what
    was skipped ("" when nothing). A line that is not two numbers (a finite time >= 0, a size
    >= 0), or whose time or size goes back from the line before it, is skipped, never fatal:
    the file is the target's, and a cut or rewritten line only costs the intervals around it."""
    out: list[tuple[float, int]] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            t, size = float(parts[0]), int(parts[1])
            if not math.isfinite(t) or t < 0 or size < 0:
                raise ValueError
        except ValueError:
            bad += 1
            continue
        if out and (t < out[-1][0] or size < out[-1][1]):
            bad += 1
            continue
        out.append((t, size))
    note = f"{LOG_GROWTH}: {bad} line(s) skipped (not 'UPTIME SIZE' or going back)" if bad else ""
    return out, note


def parse_launch(text: str) -> LaunchRecord:
    return build_record(LaunchRecord, loads_object(text, LAUNCH_JSON), LAUNCH_JSON)


def parse_exit(text: str) -> ExitRecord:
    return build_record(ExitRecord, loads_object(text, EXIT_JSON), EXIT_JSON)


def parse_stop(text: str) -> StopRecord:
    return build_record(StopRecord, loads_object(text, STOP_JSON), STOP_JSON)


def parse_slurm_job(text: str) -> SlurmJobRecord:
    rec = build_record(SlurmJobRecord, loads_object(text, SLURM_JSON), SLURM_JSON)
    if not (rec.job_id.isascii() and rec.job_id.isdigit()) or len(rec.job_id) > 20:   # "²".isdigit()
        raise SchemaError(f"{SLURM_JSON}: field 'job_id' is {rec.job_id[:40]!r}, expected a Slurm job id (digits)")
    return rec


def parse_claim(text: str) -> ClaimRecord:
    return build_record(ClaimRecord, loads_object(text, LAUNCH_CLAIM), LAUNCH_CLAIM)


def parse_status(text: str) -> TrainStatus:
    st = build_record(TrainStatus, loads_object(text, STATUS_JSON), STATUS_JSON)
    if st.rank >= st.world_size:
        raise SchemaError(f"{STATUS_JSON}: field 'rank' is {st.rank}, expected less than world_size {st.world_size}")
    return st


@dataclass
class EventBatch:
    events: list[dict[str, Any]]   # each a validated event: "kind", "time", and its kind's fields
    skipped: int                   # lines that were not a valid event of this schema version


def parse_event(line: str) -> dict[str, Any]:
    """One events.jsonl line as a dict whose known fields have their declared types."""
    obj = loads_object(line, EVENTS_JSONL)
    kind = obj.get("kind")
    if not isinstance(kind, str):
        raise SchemaError(f"{EVENTS_JSONL}: field 'kind' is {_show(kind)}, expected a string")
    try:
        obj["time"] = _TIME(obj.get("time"))
    except _Bad as bad:
        raise SchemaError(f"{EVENTS_JSONL}: field 'time' {bad.tail}") from None
    obj.update(validated_fields(EventOrigin, obj, EVENTS_JSONL, fill=True))
    cls = EVENT_TYPES.get(kind)
    if cls is not None:
        obj.update(validated_fields(cls, obj, f"{EVENTS_JSONL} ({kind})", fill=True))
    return obj


def parse_events(lines: Iterable[str]) -> EventBatch:
    """Parse events.jsonl lines; count (never raise on) the ones that do not parse."""
    events: list[dict[str, Any]] = []
    skipped = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            events.append(parse_event(line))
        except SchemaError:
            skipped += 1
    return EventBatch(events, skipped)


def make_event(kind: EventKind | str, time: float, **fields_: Any) -> dict[str, Any]:
    """An event record; the fields its kind declares are checked as a reader will check them."""
    kind = EventKind(kind).value
    build_record(EventOrigin, fields_, f"{kind} event")
    cls = EVENT_TYPES.get(kind)
    if cls is not None:
        build_record(cls, fields_, f"{kind} event")
    return {"v": SCHEMA_VERSION, "kind": kind, "time": time, **fields_}


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write then rename, so a reader sees the old file or the new one, never half of one."""
    # Imported here, not at the top: a measured start-up cost (tempfile pulls in shutil and
    # random) that every Python process of a run would pay through the run probe, which
    # never calls this.
    import tempfile

    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def checkpoint_line(meta: Any) -> str:
    """The line of runs a checkpoint's meta (parsed JSON, anything) belongs to: its `line`, else
    (saved before lines were recorded) its `run_id`; "" when it names neither."""
    if not isinstance(meta, dict):
        return ""
    for key in ("line", "run_id"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def checkpoint_recency(meta: Any, step: int) -> tuple[float, int]:
    """Sort key of checkpoints, oldest first: when it was saved (meta `time`; an unreadable or
    missing time counts as oldest), then its step."""
    t = meta.get("time") if isinstance(meta, dict) else None
    try:
        saved = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else math.nan
    except OverflowError:       # an int too big for a float: no time a clock gives
        saved = math.nan
    return (saved if math.isfinite(saved) else -math.inf, step)
