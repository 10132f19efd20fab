"""The words the checklist speaks: verdicts, check states, checks.

Shared by `--check` (printed / JSON) and the dashboard's Health pane, so both always agree.
`Verdict` is the ground floor's (dflash_tui/verdicts.py, what each verdict is), named here too
so that the engine's readers find it beside its checklist. The verdict table itself (which
evidence gives which verdict) lives in `run/verdict/health.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum, StrEnum
from typing import Any

from ...contract.rundir import inert_text
from ...verdicts import Verdict
from ..stacks.classify import ThreadClass
from .gpu_facts import GpuFacts

__all__ = ["Check", "CheckId", "CheckState", "Checklist", "RankGroup", "SchedulerFacts", "Straggler", "ThreadHealth",
           "ThreadState", "Verdict", "rank_ranges"]


class CheckId(StrEnum):
    """A check's stable key (`--check --json` checks[].id, the store's changes) and, through
    `label`, the words a person reads for it. A run on several nodes prefixes its nodes' ids
    ("n1:steps", combine.py), so `Check.id` stays a str."""

    # The launch and what the wrapper wrote (built in run/verdict/checks/)
    LAUNCH_CMD = "launch_cmd"
    LAUNCH_JSON = "launch_json"
    TRAIN_LOG = "train_log"
    PROCESS = "process"
    EXIT = "exit"
    TRACEBACK = "traceback"
    ROOT_CAUSE = "root_cause"
    STOP = "stop"
    CHECKPOINT = "checkpoint"
    # A live run: progress, the trainer's status.json, the probe, the machine
    STATUS = "status"
    HEARTBEAT = "heartbeat"
    THREADS = "threads"
    STEPS = "steps"
    ERRORS = "errors"
    PROGRESS = "progress"
    STALL_LIMIT = "stall_limit"
    PROBE = "probe"
    PROBE_FILES = "probe_files"
    METRIC_FILES = "metric_files"
    STACKS = "stacks"
    STRAGGLERS = "stragglers"
    LOSS = "loss"                  # the watched training loss: NaN, a sustained spike (DIVERGED), a lone spike
    CPU = "cpu"
    DISK = "disk"
    MEMORY = "memory"              # the run's host and GPU memory: a steady growth and when it is full
    GPUS = "gpus"
    # The node's GPUs fit to run on (ECC, remaps, PCIe link, Xid, clocks): the preflight's and
    # the run's (run/verdict/gpu_health.py)
    GPU_HEALTH = "gpu_health"
    # The watch's own (watch/)
    TRANSPORT = "transport"
    # A scheduler's job (backends/NAME/ builds it, with its own label: "Slurm job"). The id is
    # the one published when Slurm was the only scheduler, kept for every scheduler: scripts
    # read it.
    SCHEDULER_JOB = "slurm_job"
    # A launch's own: what it did before the run (run/launch/)
    ARCHIVE = "archive"
    RELAUNCH_STOP = "relaunch_stop"
    CANARY = "canary"
    # Preflight (run/launch/preflight.py; backends/slurm, watch/nodes_session.py)
    PRE_REACHABLE = "pre_reachable"
    PRE_TRANSPORT = "pre_transport"
    PRE_CONTAINER = "pre_container"
    PRE_RUN_DIR = "pre_run_dir"
    PRE_DISK = "pre_disk"
    PRE_NO_LIVE_RUN = "pre_no_live_run"
    PRE_PYTHON = "pre_python"
    PRE_TORCH = "pre_torch"
    PRE_TRAINER = "pre_trainer"
    PRE_TOOLS = "pre_tools"
    PRE_ARGS = "pre_args"
    PRE_RUN_FILES = "pre_run_files"
    PRE_NODES = "pre_nodes"
    PRE_GPU_HEALTH = "pre_gpu_health"   # the host's GPUs before a launch (run/verdict/gpu_health.py)
    PRE_SCHEDULER = "pre_slurm"     # the scheduler answers (its backend's label: "Slurm"); the id as published

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    CheckId.LAUNCH_CMD: "Launch command",
    CheckId.LAUNCH_JSON: "Wrapper ran (launch.json)",
    CheckId.TRAIN_LOG: "Log (train.log)",
    CheckId.PROCESS: "Process",
    CheckId.EXIT: "Exit status",
    CheckId.TRACEBACK: "Last traceback",
    CheckId.ROOT_CAUSE: "First failure (torchelastic)",
    CheckId.STOP: "Stop requested",
    CheckId.CHECKPOINT: "Last checkpoint",
    CheckId.STATUS: "status.json",
    CheckId.HEARTBEAT: "Heartbeat",
    CheckId.THREADS: "Threads",
    CheckId.STEPS: "Steps advancing",
    CheckId.ERRORS: "Trainer errors",
    CheckId.PROGRESS: "Progress (log, events)",
    CheckId.STALL_LIMIT: "Silence limit",
    CheckId.PROBE: "Probe heartbeats",
    CheckId.PROBE_FILES: "Probe files",
    CheckId.METRIC_FILES: "Metric files",
    CheckId.STACKS: "Stacks (where the threads are)",
    CheckId.STRAGGLERS: "Stragglers",
    CheckId.LOSS: "Training loss (divergence)",
    CheckId.CPU: "CPU (process tree)",
    CheckId.DISK: "Disk space (run dir)",
    CheckId.MEMORY: "Memory runway",
    CheckId.GPUS: "GPUs in use by the run",
    CheckId.GPU_HEALTH: "GPU health",
    CheckId.TRANSPORT: "Target reachable",
    CheckId.SCHEDULER_JOB: "Scheduler job",
    CheckId.ARCHIVE: "Previous run set aside",
    CheckId.RELAUNCH_STOP: "Previous run stopped",
    CheckId.CANARY: "Canary outlived the channel",
    CheckId.PRE_REACHABLE: "Target reachable",
    CheckId.PRE_TRANSPORT: "Transport",
    CheckId.PRE_CONTAINER: "Container running",
    CheckId.PRE_RUN_DIR: "Run dir writable",
    CheckId.PRE_DISK: "Free disk",
    CheckId.PRE_NO_LIVE_RUN: "No live run here",
    CheckId.PRE_PYTHON: "Python found",
    CheckId.PRE_TORCH: "import torch",
    CheckId.PRE_TRAINER: "dflash_train importable",
    CheckId.PRE_TOOLS: "Wrapper's tools",
    CheckId.PRE_ARGS: "Command's files",
    CheckId.PRE_RUN_FILES: "Run files",
    CheckId.PRE_NODES: "Every node ready",
    CheckId.PRE_GPU_HEALTH: "GPU health",
    CheckId.PRE_SCHEDULER: "Scheduler",
}


class CheckState(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    PENDING = "pending"


def _inert(text: str) -> str:
    # The common case without a call: 40,000 texts a poll at 1,024 ranks.
    if not isinstance(text, str) or text.isprintable():
        return text
    return inert_text(text, keep_newlines=True)


@dataclass
class Check:
    id: str            # stable key: a CheckId ("launch_json", "train_log", "process", ...)
    label: str         # what a person reads in the checklist
    state: CheckState
    cause: str = ""    # one line: what was observed
    hint: str = ""     # one line: what to do about it
    since: float | None = None  # epoch seconds when `state` last changed

    def __post_init__(self) -> None:
        # The last guard of the trust boundary (docs/ARCHITECTURE.md): what a check says is
        # made of target output; whatever reached it un-made-inert is made inert here.
        self.cause, self.hint = _inert(self.cause), _inert(self.hint)

    @classmethod
    def of(cls, cid: CheckId, state: CheckState, cause: str = "", hint: str = "",
           since: float | None = None, *, label: str | None = None) -> "Check":
        """The check `cid` with its own label, or `label` (a scheduler's check: its backend's words)."""
        return cls(cid, cid.label if label is None else label, state, cause, hint, since)

    def since_at(self, since: float | None) -> "Check":
        """This check with another `since`: a copy that keeps the texts already made inert
        (`replace` would make them inert again, a look's checks every poll)."""
        if since == self.since:
            return self
        other = object.__new__(Check)   # no __init__: nothing to check or make inert again
        other.__dict__.update(self.__dict__)
        other.since = since
        return other

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["id"], d["state"] = str(self.id), self.state.value
        return d


class ThreadState(str, Enum):
    """One thread of the run as the engine judges it (the Threads pane draws it as is)."""

    OK = "ok"              # beating within its limit
    WAITING = "waiting"    # a worker before the training phase: waiting for the warm-up
    DONE = "done"          # its role is over (the main thread after the warm-up): silence is expected
    ENDED = "ended"        # the run has ended: silent by nature
    STUCK = "STUCK"        # silent longer than its limit while the run lives
    FAILED = "FAILED"      # its compile failed or it reported an error


@dataclass
class ThreadHealth:
    name: str
    state: ThreadState
    why: str = ""          # one line, for a STUCK or FAILED thread
    # From its stack (run/stacks/classify.py, run/verdict/hang.py), for a thread of a process the run probe
    # reports on: the process, what it waits in and where in the program's own code.
    pid: int | None = None
    rank: int | None = None
    ident: int | None = None
    cls: str = ""          # ThreadClass value: "collective", "gpu", "running", ...
    doing: str = ""        # the call it is in: "all_reduce", "torch.cuda.synchronize"
    where: str = ""        # "function (file.py:line)": its innermost frame of the program's own code
    since: float | None = None   # when its stack took its current form (target clock)
    source: str = ""       # "probe", or a stack dump's: "faulthandler", "py-spy"
    stale: bool = False    # its process's report is stale: no Python ran there since

    def __post_init__(self) -> None:
        self.name, self.why = _inert(self.name), _inert(self.why)

    @classmethod
    def probed(cls, name: str, state: ThreadState, why: str, pid: int, rank: int | None, ident: int,
               class_: str, doing: str, where: str, since: float | None, source: str,
               stale: bool) -> "ThreadHealth":
        """A probed thread's row, as `ThreadHealth(...)` makes it, without the generated
        __init__'s call chain: a look of 1,024 ranks makes 20,000 of these."""
        row = object.__new__(cls)
        row.__dict__.update(name=name if name.isprintable() else _inert(name), state=state,
                            why=why if not why or why.isprintable() else _inert(why), pid=pid, rank=rank, ident=ident,
                            cls=class_, doing=doing, where=where, since=since, source=source, stale=stale)
        return row

    def with_stack(self, pid: int, rank: int | None, ident: int, class_: str, doing: str, where: str,
                   since: float | None, source: str, stale: bool) -> "ThreadHealth":
        """This thread's row with its stack's fields: a copy that keeps the texts already made
        inert (`replace` would make them inert again, a status.json's every thread a look)."""
        row = object.__new__(ThreadHealth)
        row.__dict__.update(self.__dict__, pid=pid, rank=rank, ident=ident, cls=class_, doing=doing, where=where,
                            since=since, source=source, stale=stale)
        return row

    @property
    def trouble(self) -> bool:
        return self.state in (ThreadState.STUCK, ThreadState.FAILED)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "state": self.state.value, "why": self.why}
        if self.pid is not None:
            d.update({"pid": self.pid, "rank": self.rank, "class": self.cls, "doing": self.doing,
                      "where": self.where, "since": self.since, "source": self.source, "stale": self.stale})
        return d


def rank_ranges(ranks: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 3, 5) -> "0-3, 5"."""
    runs: list[list[int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


@dataclass(frozen=True)
class RankGroup:
    """The threads of several ranks whose stacks agree: the same class, the same innermost frame
    of the program's own code (run/verdict/rank_groups.py). The Threads pane, `--check` and the
    watch's notifications list these, the odd ones out first."""
    ranks: tuple[int, ...]
    cls: ThreadClass
    where: str
    doing: str
    threads: int
    stuck: bool = False            # its threads are STUCK (the run is STALLED and they wait)
    nodes: tuple[str, ...] = ()    # the nodes its ranks are on (a run on several nodes)
    members: tuple[tuple[int, int, str], ...] = ()   # (rank, pid, thread name) of each thread

    def __post_init__(self) -> None:
        # Its threads' class as `ThreadHealth.cls` spells it (the value) is taken as the class.
        if not isinstance(self.cls, ThreadClass):
            object.__setattr__(self, "cls", ThreadClass(self.cls))

    def place(self) -> str:
        if self.doing and self.where and self.doing != self.where:
            return f"{self.doing} ({self.where.rsplit(' (', 1)[-1]}"
        return self.where or self.doing or "an unknown frame"

    def words(self) -> str:
        """ "ranks 0-6, 8-63: collective all_reduce (train.py:88)"."""
        who = f"rank {self.ranks[0]}" if len(self.ranks) == 1 else f"ranks {rank_ranges(self.ranks)}"
        if self.nodes:
            who += f" (node{'s' if len(self.nodes) > 1 else ''} {', '.join(self.nodes)})"
        return _inert(f"{who}: {self.cls.value} {self.place()}")

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "class": self.cls.value, "where": self.where, "doing": self.doing,
                "threads": self.threads, "stuck": self.stuck, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class SchedulerFacts:
    """What a scheduler says about the run's job, as its backend's `judge` put it: the fields
    the core acts on (the recovery), and the whole of it as `--check --json` and the header
    show it."""

    name: str                                  # the scheduler; --check --json's key ("slurm")
    facts: dict[str, Any]                      # --check --json's object under that key
    headline: tuple[tuple[str, str], ...] = ()  # (label, value) the header shows, in order
    active: bool = False                       # the scheduler says the job is pending or running
    nodes: tuple[str, ...] = ()                # the job's nodes, as the scheduler names them (Slurm: its node list)
    failed_nodes: tuple[str, ...] = ()         # of those, the ones it holds out of service after the job's end


@dataclass(frozen=True)
class Straggler:
    """A rank the others wait for, while the run is healthy (run/verdict/stragglers.py)."""
    rank: int
    node: str
    why: str     # "rank 1 (node h2) is slow: the other ranks wait for it in all_reduce 55 % of the time"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "why": _inert(self.why)}


@dataclass
class Checklist:
    verdict: Verdict
    checks: list[Check] = field(default_factory=list)
    summary: str = ""  # one line explaining the verdict, e.g. "exit code 1: ValueError: ..."
    # status.json's threads, judged, then each probed process's threads with their stack's class
    threads: list[ThreadHealth] = field(default_factory=list)
    # A scheduler's facts, named by the scheduler (its backend's `judge` sets them; Slurm's job:
    # job_id, state, reason, node_list, partition, ...): the header and --check --json show them.
    scheduler: SchedulerFacts | None = None
    # The probed threads of a run of several ranks grouped by where they stand, odd ones out
    # first (run/verdict/rank_groups.py); empty for a run of one rank.
    rank_groups: list[RankGroup] = field(default_factory=list)
    # The ranks the others wait for, the slowest first (run/verdict/stragglers.py); only while RUNNING.
    stragglers: list[Straggler] = field(default_factory=list)
    # A live run's silence limit in force and why (run/verdict/stall_limit.py); None when the
    # run is not alive (or not launched).
    stall_limit_s: float | None = None
    stall_limit_why: str = ""
    # The host's GPUs as the last sample saw them (run/verdict/gpu_facts.py; set by
    # health.with_gpu_check): utilisation, power against its limit, SM clock against its top,
    # the run's processes on each, and whether its busy time is a kernel that spins.
    gpus: list[GpuFacts] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.summary = _inert(self.summary)

    def with_parts(self, *, checks: list[Check] | None = None, threads: list[ThreadHealth] | None = None,
                   rank_groups: list[RankGroup] | None = None,
                   stragglers: list[Straggler] | None = None) -> "Checklist":
        """This checklist with other checks or threads (each made inert when it was made): a
        copy that keeps the summary already made inert (`replace` would make it inert again, on
        every look, twice)."""
        other = object.__new__(Checklist)   # no __init__: nothing to make inert again
        other.__dict__.update(self.__dict__)
        if checks is not None:
            other.checks = checks
        if threads is not None:
            other.threads = threads
        if rank_groups is not None:
            other.rank_groups = rank_groups
        if stragglers is not None:
            other.stragglers = stragglers
        return other

    def thread(self, name: str) -> ThreadHealth | None:
        return next((t for t in self.threads if t.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "summary": self.summary,
                "checks": [c.to_dict() for c in self.checks],
                "threads": [t.to_dict() for t in self.threads],
                "rank_groups": [g.to_dict() for g in self.rank_groups],
                "stragglers": [s.to_dict() for s in self.stragglers],
                "stall_limit_s": self.stall_limit_s, "stall_limit_why": self.stall_limit_why,
                "gpus": [g.to_dict() for g in self.gpus],
                **({self.scheduler.name: self.scheduler.facts} if self.scheduler is not None else {})}
