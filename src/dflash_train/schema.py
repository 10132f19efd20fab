"""The run-directory contract, shared by the trainer (writer) and the dashboard (reader).

Torch-free and stdlib-only on purpose: the dashboard imports this module and must never
pull in torch, and the remote agent may run on a host python that has nothing installed.

Layout of RUN_DIR (see DESIGN.md):

    launch.sh      generated POSIX-sh wrapper
    launch.json    written by the wrapper after train.log exists: proves the shell ran
    launch.out     stdout/stderr of the wrapper itself (before train.log is open)
    train.log      stdout+stderr of the trainer, human lines
    events.jsonl   one JSON object per line (heartbeat, compile, step, eval, checkpoint, error, exit)
    status.json    atomic snapshot, rewritten at most once a second
    exit.json      written by the wrapper when the trainer ends
    stop.json      written by `dflash-tui --stop` before it signals: who asked, when, how
    checkpoints/   atomic checkpoints

Every record carries ``"v": SCHEMA_VERSION``. Readers skip and count what they cannot parse
instead of failing: a half-written line at the end of events.jsonl is normal.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
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
CHECKPOINTS_DIR = "checkpoints"

# The trainer promises a heartbeat at least this often, compiling or not.
HEARTBEAT_INTERVAL_S = 2.0
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
    FINISHED = "finished"
    FAILED = "failed"


def _from_dict(cls, data: dict[str, Any]):
    """Build a dataclass from a dict, ignoring unknown keys (newer writers may add fields)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class LaunchRecord:
    """launch.json: written by launch.sh once train.log exists, before the trainer starts."""

    run_id: str
    pid: int              # the wrapper's pid; it is also the session and process-group leader
    pgid: int
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
    pid: int
    requested_time: float
    requested_by: str = ""
    signal_sent: str = ""   # "SIGTERM", then "SIGKILL" if the grace period ran out
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
    pid: int
    time: float                    # when this snapshot was written (epoch, trainer clock)
    phase: str = Phase.STARTING.value
    step: int = 0
    total_steps: int = 0
    loss: float | None = None
    accuracy: float | None = None
    tau: float | None = None       # mean acceptance length from block verification
    tokens_per_s: float | None = None
    heartbeat_time: float | None = None
    threads: list[ThreadStatus] = field(default_factory=list)
    last_error: str | None = None
    v: int = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainStatus":
        threads = [_from_dict(ThreadStatus, t) for t in data.get("threads", [])]
        st = _from_dict(cls, {k: v for k, v in data.items() if k != "threads"})
        st.threads = threads
        return st


def to_json(record: Any) -> str:
    """One line of JSON for a record dataclass or a plain dict."""
    obj = asdict(record) if hasattr(record, "__dataclass_fields__") else record
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, allow_nan=False, default=str)


def _loads_object(text: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} col {exc.colno})") from None
    if not isinstance(obj, dict):
        raise SchemaError(f"{what} holds a {type(obj).__name__}, expected a JSON object")
    v = obj.get("v")
    if v != SCHEMA_VERSION:
        raise SchemaError(f"{what} has schema version {v!r}, this reader understands {SCHEMA_VERSION}")
    return obj


def parse_launch(text: str) -> LaunchRecord:
    obj = _loads_object(text, LAUNCH_JSON)
    try:
        return _from_dict(LaunchRecord, obj)
    except TypeError as exc:
        raise SchemaError(f"{LAUNCH_JSON} is missing a field: {exc}") from None


def parse_exit(text: str) -> ExitRecord:
    obj = _loads_object(text, EXIT_JSON)
    try:
        return _from_dict(ExitRecord, obj)
    except TypeError as exc:
        raise SchemaError(f"{EXIT_JSON} is missing a field: {exc}") from None


def parse_stop(text: str) -> StopRecord:
    obj = _loads_object(text, STOP_JSON)
    try:
        return _from_dict(StopRecord, obj)
    except TypeError as exc:
        raise SchemaError(f"{STOP_JSON} is missing a field: {exc}") from None


def parse_status(text: str) -> TrainStatus:
    obj = _loads_object(text, STATUS_JSON)
    try:
        return TrainStatus.from_dict(obj)
    except TypeError as exc:
        raise SchemaError(f"{STATUS_JSON} is missing a field: {exc}") from None


@dataclass
class EventBatch:
    events: list[dict[str, Any]]
    skipped: int                   # lines that were not a JSON object of this schema version


def parse_events(lines: Iterable[str]) -> EventBatch:
    """Parse events.jsonl lines; count (never raise on) the ones that do not parse."""
    events: list[dict[str, Any]] = []
    skipped = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(obj, dict) or obj.get("v") != SCHEMA_VERSION or "kind" not in obj:
            skipped += 1
            continue
        events.append(obj)
    return EventBatch(events, skipped)


def make_event(kind: EventKind | str, time: float, **fields_: Any) -> dict[str, Any]:
    return {"v": SCHEMA_VERSION, "kind": EventKind(kind).value, "time": time, **fields_}


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write then rename, so a reader sees the old file or the new one, never half of one."""
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
