"""A Slurm job as the scheduler describes it: squeue, `scontrol show job -o` and sacct answers
parsed into one `SlurmJob`. Pure (text in, record out); commands.py asks.

`SlurmJob.known` is False only when every source asked agreed the job does not exist any more
(squeue and scontrol "Invalid job id", sacct nothing or no accounting): a purged job (MinJobAge)
or a job of another cluster. `answered` is False when the controller did not answer at all, which
is never taken for the job's end.

Every value taken from an answer is inert text (contract.rundir.inert_text): the scheduler's
words (a reason, a node list, a partition) reach the terminal, and a job's name or path may
hold anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from ...contract.rundir import inert_text

# squeue's format: id, state, reason, node list, partition, start time, time limit, time used.
SQUEUE_FORMAT = "%i|%T|%r|%N|%P|%S|%l|%M"
SACCT_FIELDS = "JobID,State,Reason,ExitCode,NodeList,Partition,Start,End,Timelimit"


class JobState(StrEnum):
    """Slurm's own base job states (squeue %T, scontrol JobState, sacct State), spelled as Slurm
    spells them. Some share a verdict's spelling (RUNNING, STOPPED, CANCELLED, TIMEOUT,
    PREEMPTED) and mean Slurm's state, not the verdict: the verdict is verdict.py's to draw from
    them (tests/test_verdicts.py exempts this class, and only it, for that)."""

    # Pending
    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    # Active (allocated): running, or on its way in or out
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    STOPPED = "STOPPED"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    RESIZING = "RESIZING"
    UPDATE_DB = "UPDATE_DB"
    POWER_UP_NODE = "POWER_UP_NODE"
    # Ended
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NODE_FAIL = "NODE_FAIL"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REVOKED = "REVOKED"
    SPECIAL_EXIT = "SPECIAL_EXIT"


_S = JobState
PENDING_STATES = frozenset({_S.PENDING, _S.CONFIGURING, _S.REQUEUED, _S.REQUEUE_HOLD, _S.REQUEUE_FED, _S.RESV_DEL_HOLD})
ACTIVE_STATES = frozenset({_S.RUNNING, _S.COMPLETING, _S.SUSPENDED, _S.STOPPED, _S.SIGNALING, _S.STAGE_OUT,
                           _S.RESIZING, _S.UPDATE_DB, _S.POWER_UP_NODE})
ENDED_STATES = frozenset({_S.COMPLETED, _S.FAILED, _S.CANCELLED, _S.TIMEOUT, _S.PREEMPTED, _S.OUT_OF_MEMORY,
                          _S.NODE_FAIL, _S.BOOT_FAIL, _S.DEADLINE, _S.REVOKED, _S.SPECIAL_EXIT})
KNOWN_STATES = PENDING_STATES | ACTIVE_STATES | ENDED_STATES
_INVALID_ID = "Invalid job id"
_NO_CONTROLLER = ("Unable to contact slurm controller", "Socket timed out", "Connection refused",
                  "Zero Bytes were transmitted", "Communication connection failure")
_KEY_VALUE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


@dataclass
class SlurmJob:
    job_id: str
    state: str = ""             # the base state, e.g. PENDING, RUNNING, TIMEOUT ("" when unknown)
    reason: str = ""            # Slurm's reason code (pending: Resources, Priority, Dependency, ...)
    node_list: str = ""
    partition: str = ""
    exit_code: str = ""         # "code:signal" as Slurm writes it
    batch_host: str = ""
    start_time: str = ""
    end_time: str = ""
    time_limit: str = ""
    run_time: str = ""
    restarts: int = 0
    cancelled_by: str = ""      # sacct's "CANCELLED by UID" (accounting only)
    source: str = ""            # which answer this came from: squeue, scontrol, sacct
    known: bool = True          # False: every source said the job does not exist (any more)
    answered: bool = True       # False: the controller did not answer; nothing is concluded
    error: str = ""             # what the commands said when they did not answer
    commands_missing: bool = False   # not answered because the host has no squeue/scontrol
    sources_asked: list[str] = field(default_factory=list)
    # The nodes of an ended NODE_FAIL/BOOT_FAIL job that Slurm holds down, drained or not
    # responding when the end was seen (commands.failed_nodes): the ones at fault.
    failed_nodes: tuple[str, ...] = ()
    detail: str = field(default="", repr=False)   # scontrol's line as it came, for `runs_in`

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    def runs_in(self, run_dir: str, script: str) -> bool | None:
        """Whether scontrol describes this job as `script` run in `run_dir` (what the launch
        gave sbatch: the script's path and --chdir); None when no scontrol answer says.

        Each field is matched whole, up to the next ` Key=` or the end, rather than split out:
        `-o` separates fields with spaces, and a path may hold spaces and `Key=` of its own."""
        if not self.detail:
            return None
        work_dir = run_dir.rstrip("/") or "/"
        return all(re.search(r"(?:^|\s)" + key + "=" + re.escape(value) + r"/?(?= [A-Za-z][A-Za-z0-9_/:]*=|\s*$)",
                             self.detail) is not None
                   for key, value in (("Command", script), ("WorkDir", work_dir)))

    def work_dir_words(self) -> str:
        """The job's working directory as scontrol's line shows it, inert, for a refusal."""
        m = re.search(r"(?:^|\s)WorkDir=(.*?)(?= StdErr=| StdIn=| StdOut=| Power=|\s*$)", self.detail)
        return inert_text(m.group(1))[:200] if m else "?"

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "state": self.state or None, "reason": self.reason or None,
                "node_list": self.node_list or None, "partition": self.partition or None,
                "exit_code": self.exit_code or None, "source": self.source or None,
                "known": self.known, "answered": self.answered,
                "active": self.answered and self.known and (self.pending or self.active),
                "failed_nodes": list(self.failed_nodes) or None}


def _clean(value: str) -> str:
    value = value.strip()
    return "" if value in ("(null)", "None", "N/A", "n/a", "Unknown") else inert_text(value)[:300]


def base_state(state: str) -> str:
    """"CANCELLED by 1000" -> "CANCELLED"; "RUNNING+" ... -> "RUNNING"."""
    parts = state.strip().split(" ")
    return inert_text(parts[0].rstrip("+*").upper())[:40]


def controller_silent(text: str) -> bool:
    return any(marker in text for marker in _NO_CONTROLLER)


def _job_line(job_id: str, text: str, rc: int, fields: int) -> list[str] | None:
    """The fields of the first line of a `|`-separated listing (squeue -o, sacct -P) that is
    about `job_id` and has `fields` fields at least; None where the command failed or lists none."""
    if rc != 0:
        return None
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= fields and parts[0].strip() == job_id:
            return parts
    return None


def parse_squeue(job_id: str, text: str, rc: int) -> SlurmJob | None:
    """The job from `squeue -h -j ID -o SQUEUE_FORMAT`; None when squeue does not list it
    (empty, or "Invalid job id"), which alone proves nothing."""
    parts = _job_line(job_id, text, rc, 8)
    if parts is None:
        return None
    return SlurmJob(job_id, state=base_state(parts[1]), reason=_clean(parts[2]), node_list=_clean(parts[3]),
                    partition=_clean(parts[4]), start_time=_clean(parts[5]), time_limit=_clean(parts[6]),
                    run_time=_clean(parts[7]), source="squeue")


def parse_scontrol_fields(line: str) -> dict[str, str]:
    """`scontrol show job -o` key=value pairs; a value runs until the next ` Key=` (values may
    hold spaces: a path, a reason). A key's first occurrence is its field: scontrol prints its
    fields in a fixed order, JobId and JobState long before any path, so a path that holds
    ` JobState=COMPLETED` adds a key that comes too late to count."""
    out: dict[str, str] = {}
    matches = list(_KEY_VALUE.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def parse_scontrol(job_id: str, text: str, rc: int) -> SlurmJob | None:
    if rc != 0:
        return None
    for line in text.splitlines():
        f = parse_scontrol_fields(line)
        if f.get("JobId") != job_id:
            continue
        try:
            restarts = int(f.get("Restarts", "0"))
        except ValueError:
            restarts = 0
        return SlurmJob(job_id, state=base_state(f.get("JobState", "")), reason=_clean(f.get("Reason", "")),
                        node_list=_clean(f.get("NodeList", "")), partition=_clean(f.get("Partition", "")),
                        exit_code=_clean(f.get("ExitCode", "")), batch_host=_clean(f.get("BatchHost", "")),
                        start_time=_clean(f.get("StartTime", "")), end_time=_clean(f.get("EndTime", "")),
                        time_limit=_clean(f.get("TimeLimit", "")), run_time=_clean(f.get("RunTime", "")),
                        restarts=restarts, source="scontrol", detail=line)
    return None


def parse_sacct(job_id: str, text: str, rc: int) -> SlurmJob | None:
    """The allocation's line of `sacct -n -P -X -j ID -o SACCT_FIELDS`."""
    parts = _job_line(job_id, text, rc, 9)
    if parts is None:
        return None
    state = parts[1].strip()
    by = state.split(" by ", 1)[1].strip() if " by " in state else ""
    return SlurmJob(job_id, state=base_state(state), reason=_clean(parts[2]), exit_code=_clean(parts[3]),
                    node_list=_clean(parts[4]), partition=_clean(parts[5]), start_time=_clean(parts[6]),
                    end_time=_clean(parts[7]), time_limit=_clean(parts[8]), cancelled_by=_clean(by), source="sacct")


# sinfo's short node states (%t) of a node out of service, besides a "*" (not responding).
_OUT_OF_SERVICE = frozenset({"down", "drain", "drng", "drained", "draining", "fail", "failg", "failing", "inval",
                             "unk", "boot_fail"})


def parse_failed_nodes(text: str, rc: int) -> tuple[str, ...]:
    """The nodes out of service in `sinfo -h -N -n LIST -o "%N %t"` (a node once per partition
    it is in): down, drained or draining, failing, or not responding ("idle*")."""
    if rc != 0:
        return ()
    out: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        node, state = inert_text(parts[0])[:100], parts[1].lower()
        if state.endswith("*") or state.rstrip("~#!%$@^-") in _OUT_OF_SERVICE:
            out.append(node)
    return tuple(dict.fromkeys(out))


def unknown_job(job_id: str, asked: list[str]) -> SlurmJob:
    return SlurmJob(job_id, known=False, sources_asked=asked)


def unanswered(job_id: str, error: str) -> SlurmJob:
    return SlurmJob(job_id, answered=False, error=inert_text(" ".join(error.split())[:300]))


def invalid_id(text: str) -> bool:
    return _INVALID_ID in text
