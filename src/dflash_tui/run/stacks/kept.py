"""What a look works out from one process's thread list, kept for the next looks while its
report's list is the very one it was worked out from.

A report of a process that did not move shares its thread list with its last read (a kept copy,
run/evidence/probe_files.py; a read in which no thread moved, contract/rundir.py
`parse_probe_after`), and a parsed report is never changed: so while the list and each of its
threads are the same objects, what was made of them is what making it again gives. A look of
many ranks asks this of every process's threads (run/verdict/hang.py's classes and views,
run/stacks/pauses.py's known pause); most of them stood still since the last look. Keyed by pid,
so each watched target keeps its own (run/evidence/memory.py's `LookMemory`): pids repeat across
hosts and containers.
"""

from __future__ import annotations

import operator
from typing import Any

class KeptByList:
    """pid -> (the thread list, its threads, the value made of them): one entry a process, a
    process's new list taking its last one's place; at most `limit`, the oldest forgotten."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._kept: dict[int, tuple[list, tuple, Any]] = {}

    def get(self, pid: int, threads: list, default: Any = None) -> Any:
        """The value kept for exactly this list of exactly these threads, else `default`."""
        hit = self._kept.get(pid)
        if (hit is None or hit[0] is not threads or len(hit[1]) != len(threads)
                or not all(map(operator.is_, hit[1], threads))):
            return default
        return hit[2]

    def put(self, pid: int, threads: list, value: Any) -> None:
        self._kept.pop(pid, None)
        if len(self._kept) >= self.limit:
            del self._kept[next(iter(self._kept))]
        self._kept[pid] = (threads, tuple(threads), value)

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)

    def __iter__(self):
        return iter(self._kept)
