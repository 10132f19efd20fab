"""The recent bytes of a run's growing files, as its readers read them: one memo they all consult.

The dashboard reads train.log and events.jsonl twice over: the progress tracker at every look
(run/evidence/activity.py) and the log pane's follower between looks (run/evidence/logtail.py). Each records here
what it read, and each asks here before it asks the target: bytes [a, b) of one inode of a file
that is only appended to do not change, so a reader takes what the other already holds and asks
only for the bytes past it. Held per path: one contiguous range of one inode, its newest
HELD_MAX bytes, when it was last extended and the file's size then. A read of another inode, of
a file shorter than what is held (truncated), or one that does not meet the range replaces it.

Whether the file is still that inode and at least that long is the caller's to know (the look's
stat, the follower's next read): `past` answers only for the inode asked, and a caller uses
held bytes only up to a size it has seen itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...remote.ops import FileChunk

# Bytes held per path at most: the log follower's window (a reader further behind reads itself).
HELD_MAX = 256 << 10


@dataclass(frozen=True)
class Held:
    """Bytes of one inode of a file from `start` on, and when the newest of them was read."""

    inode: int
    start: int
    data: bytes
    size: int          # the file's size at the newest read
    at: float          # time.monotonic() of the newest read that reached the end of `data`

    @property
    def end(self) -> int:
        return self.start + len(self.data)


class RecentReads:
    def __init__(self, max_bytes: int = HELD_MAX) -> None:
        self.max_bytes = max_bytes
        self._held: dict[str, Held] = {}

    def record(self, chunk: FileChunk) -> None:
        """A reader read `chunk` (from the target): hold its bytes beside those held already."""
        if not chunk.exists:
            self._held.pop(chunk.path, None)
            return
        now = time.monotonic()
        held = self._held.get(chunk.path)
        chunk_end = chunk.offset + len(chunk.data)
        if (held is not None and held.inode == chunk.inode and chunk.size >= held.end
                and held.start <= chunk.offset <= held.end):
            if chunk_end < held.end:
                return   # older bytes read again: nothing new
            data = held.data[:chunk.offset - held.start] + chunk.data
            start = held.start
        else:
            data, start = chunk.data, chunk.offset
        if len(data) > self.max_bytes:
            start += len(data) - self.max_bytes
            data = data[-self.max_bytes:]
        self._held[chunk.path] = Held(chunk.inode, start, data, chunk.size, now)

    def past(self, path: str, inode: int | None, offset: int) -> Held | None:
        """What is held of `path` (file `inode`) from `offset` on (possibly no bytes: held up to
        it exactly); None when nothing of that inode covers `offset`."""
        held = self._held.get(path)
        if held is None or held.inode != inode or not held.start <= offset <= held.end:
            return None
        if offset == held.start:
            return held
        return Held(held.inode, offset, held.data[offset - held.start:], held.size, held.at)

    def end(self, path: str, inode: int | None, offset: int) -> int:
        """Where a reader at `offset` of file `inode` asks the target from: past what is held."""
        held = self.past(path, inode, offset)
        return offset if held is None else held.end

    def forget(self, path: str | None = None) -> None:
        """Drop what is held of `path` (of every path: a new run in the same dir)."""
        if path is None:
            self._held.clear()
        else:
            self._held.pop(path, None)
