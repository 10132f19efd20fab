"""LookMemory: what the looks at one watched run remember between polls, and nothing beyond it.

A dashboard looks at the same run dir every second, and most of what it reads has not changed
since (launch.json never does; a record is rewritten by an atomic rename). A file with the same
inode, size and mtime as at the last look gives the same parsed record without a read. That memory
belongs to one run on one target: two profiles on different hosts whose run_dir is the same string
are two runs, so each watch holds its own (its Session's ProgressTracker carries it), and a
one-shot look (the stop and launch paths) starts from an empty one.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from ...remote.ops import FileStat
from ..stacks.kept import KeptByList

K = TypeVar("K")
V = TypeVar("V")


class Bounded(dict, Generic[K, V]):
    """A dict that forgets everything once it holds `limit` entries: a cache of what is cheap to
    read again, never of anything only it knows."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> None:
        if key not in self and len(self) >= self.limit:
            self.clear()
        self[key] = value


class LookMemory:
    """The caches of one watched run's looks (run/evidence/observe.py and the readers it calls)."""

    def __init__(self) -> None:
        # observe: (path, inode, size, mtime, parser) -> the parsed record; and such a launch.sh's run id
        self.records: Bounded[tuple, Any] = Bounded(4096)
        self.wrapper_ids: Bounded[tuple, str | None] = Bounded(4096)
        # The wrapper pid launch.json named at the last look: the tree the next look asks for in
        # its first request (a pid that changed is asked again, on its own).
        self.pid: int | None = None
        # The probe reports the next look is likely to read (their paths), asked for in its first request.
        self.reports: list[str] = []
        # probe_files: each report's path -> (inode, size, mtime, its parse or None) as last read,
        # and where the rotating window through the reports stands
        self.probe_reports: dict[str, tuple] = {}
        # probe_files: each report's path -> what rundir.parse_probe_after answered at its last read
        self.probe_threads: dict[str, tuple] = {}
        self.probe_cursor = 0
        # The watch's last verdict found the run steady (run/verdict/steady.py): probe_files may
        # read the reports in turns. Set by the watch after each judged look; False until then.
        self.steady = False
        # first_look: path -> [inode, size, mtime] of the copy held parsed; the agent skips its read.
        self.known: Bounded[str, list] = Bounded(4096)
        # stack_dumps: (pid, start ticks) -> (monotonic time asked, the dump then)
        self.dumps: Bounded[tuple, tuple[float, Any]] = Bounded(1024)
        # flight_recorder: a dump's or error file's key -> what it parsed to (or its problem)
        self.parsed: Bounded[tuple, Any] = Bounded(512)
        # What the judgement works out from each process's thread list while that list is the one
        # read (run/stacks/kept.py): keyed by pid, so one target's only: pids repeat across hosts
        # and containers. run/verdict/hang.py's classes and views, run/stacks/pauses.py's pause.
        self.classified = KeptByList()
        self.views = KeptByList()
        self.pauses = KeptByList()

    def held(self, path: str, st: FileStat) -> None:
        """`path` is held parsed as of `st`: the next look need not send it."""
        self.known.remember(path, [st.inode, st.size, st.mtime])
