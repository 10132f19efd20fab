"""Evidence of where a silent run is stuck, beyond the probe's own reports.

A probe report goes stale exactly when the process cannot run Python (a C call holding the GIL,
a deadlock in the compiler): then the stacks come from outside Python's loop. Distributed runs
also leave the collectives each rank reached (PyTorch's Flight Recorder) and the first failure
(torchelastic's error file). run/evidence/observe.py gathers these into `Evidence`; the verdict engine
reads them; nothing here decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...contract.rundir import ProbeThread


@dataclass(frozen=True)
class StackDump:
    """Every thread's stack of one process, taken while its probe report was stale."""

    pid: int
    time: float                    # when the dump was written (target clock)
    source: str                    # "faulthandler" (the probe's registered signal) or "py-spy"
    # Frames as the probe reports them ("file:line function", innermost first).
    threads: tuple[ProbeThread, ...] = ()
    problem: str = ""              # what of the file was left out, naming it ("" when nothing)


@dataclass(frozen=True)
class CollectiveProgress:
    """Where one rank's collectives stand, from its Flight Recorder dump."""

    rank: int
    time: float                    # when the dump was written (target clock)
    pid: int | None = None
    process_group: str = ""
    last_enqueued_seq: int | None = None     # collective sequence numbers of this process group
    last_started_seq: int | None = None
    last_completed_seq: int | None = None
    pending_op: str = ""           # the oldest collective not completed ("allreduce"), "" if none
    pending_seq: int | None = None
    pending_since: float | None = None       # when that collective was enqueued (target clock)


@dataclass(frozen=True)
class RankFailure:
    """The first failure of a distributed run: torchrun's "root cause" (torchelastic error file)."""

    time: float
    message: str
    rank: int | None = None
    pid: int | None = None
    traceback: str = ""


@dataclass
class HangEvidence:
    """What observe.gather found about stacks and collectives in one poll."""

    stack_dumps: dict[int, StackDump] = field(default_factory=dict)   # by pid
    # The pids of stale reports whose process is gone: the target has no live process of that
    # pid and start time (it exited, or is a zombie), whatever its last report says.
    gone: frozenset[int] = frozenset()
    collectives: list[CollectiveProgress] = field(default_factory=list)
    root_cause: RankFailure | None = None
    problems: list[str] = field(default_factory=list)  # stacks that could not be had, one line each
    # Files of the probe directory the run writes (Flight Recorder dumps, torchelastic's error
    # files, stack dumps) that hold what their writer never puts there: one line each, naming
    # the file and what is wrong. The verdict is judged without them.
    bad_files: list[str] = field(default_factory=list)
