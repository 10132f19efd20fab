"""Follow a log file on the target: new complete lines since the last poll, bounded memory.

`LogFollower(ops, path).poll()` reads from the last offset through RemoteOps. A new inode
means the file was rotated (start the new file from its beginning); a size below the offset
means it was truncated (start again from 0). A burst larger than `window` bytes is skipped to
its last `window` bytes with a marker line, so neither this process nor the wire ever carries
more than a window per poll, whatever the log's size.
"""

from __future__ import annotations

import time
from typing import Callable

from ..remote.ops import FileChunk, RemoteOps

DEFAULT_WINDOW = 256 << 10
# A single line longer than this is cut, so a log without newlines cannot grow the buffer.
MAX_LINE = 16 << 10
# Another reader's read of the same file at most this old stands in for one of ours: the
# dashboard's log poll right behind a report takes the bytes that report's look just read.
SHARED_MAX_AGE_S = 0.2

# (path) -> another reader's latest read of that file and when (time.monotonic()), or None.
SharedReads = Callable[[str], "tuple[FileChunk, float] | None"]


class LogFollower:
    def __init__(self, ops: RemoteOps, path: str, *, window: int = DEFAULT_WINDOW,
                 from_start: bool = False, shared: SharedReads | None = None) -> None:
        """`shared`: another reader's latest read of the same path (run/activity.py's
        ProgressTracker.recent_read); a poll whose new bytes it holds reads nothing itself."""
        self.ops = ops
        self.path = path
        self.window = window
        self.shared = shared
        self.shared_polls = 0      # polls answered from `shared`, without a read of their own
        self._offset: int | None = 0 if from_start else None   # None: first poll starts at the tail
        self._inode: int | None = None
        self._partial = b""
        self.skipped_bytes = 0     # total bytes jumped over (bursts bigger than a window)
        self.resets = 0            # rotations + truncations seen
        self.exists = False

    @property
    def partial(self) -> str:
        """The line being written now, not ended yet: a progress bar that redraws itself with
        carriage returns (tqdm) lives there until it ends."""
        return self._partial.decode("utf-8", "replace")

    def set_ops(self, ops: RemoteOps) -> None:
        """After a reconnect: same file, same position, new transport."""
        self.ops = ops

    async def poll(self) -> list[str]:
        if self._offset is None:
            chunk = await self.ops.read_tail(self.path, self.window)
            self._inode = chunk.inode
            self.exists = chunk.exists
            if not chunk.exists:
                self._offset = None
                return []
            self.skipped_bytes += chunk.offset
            self._offset = chunk.offset + len(chunk.data)
            data = chunk.data
            if chunk.offset > 0 and b"\n" in data:
                data = data.split(b"\n", 1)[1]     # the tail starts mid-line
            return self._lines(data)

        chunk = self._from_shared() or await self.ops.read(self.path, self._offset, self.window)
        self.exists = chunk.exists
        if not chunk.exists:
            return []
        lines: list[str] = []
        if chunk.inode != self._inode or chunk.size < self._offset:
            # Rotated or truncated: what is left of the partial line belongs to the old file.
            what = "rotated" if chunk.inode != self._inode else "truncated"
            lines += self._flush_partial()
            lines.append(f"[dflash-tui: {self.path} was {what}; following the new file]")
            self.resets += 1
            self._inode = chunk.inode
            self._offset = 0
            chunk = await self.ops.read(self.path, 0, self.window)
        if chunk.size - self._offset > self.window:
            # More arrived than one window: show the newest window, say how much was skipped.
            skip_to = chunk.size - self.window
            lines += self._flush_partial()
            lines.append(f"[dflash-tui: skipped {skip_to - self._offset} bytes of fast log output]")
            self.skipped_bytes += skip_to - self._offset
            chunk = await self.ops.read(self.path, skip_to, self.window)
            data = chunk.data
            self._offset = skip_to + len(data)
            if b"\n" in data:
                data = data.split(b"\n", 1)[1]
            return lines + self._lines(data)
        self._offset += len(chunk.data)
        return lines + self._lines(chunk.data)

    def _from_shared(self) -> FileChunk | None:
        """Our next chunk cut from another reader's fresh read of the same file: when it was
        taken at most SHARED_MAX_AGE_S ago, of the same file (inode), and holds bytes past our
        offset (it started at or before it). Otherwise None: we read ourselves."""
        recent = self.shared(self.path) if self.shared is not None else None
        if recent is None:
            return None
        chunk, at = recent
        start = self._offset - chunk.offset
        if (time.monotonic() - at > SHARED_MAX_AGE_S or chunk.inode != self._inode
                or not chunk.exists or not 0 <= start < len(chunk.data)):
            return None
        self.shared_polls += 1
        return FileChunk(self.path, self._offset, chunk.data[start:start + self.window], chunk.size,
                         chunk.inode)

    def _flush_partial(self) -> list[str]:
        if not self._partial:
            return []
        line = self._partial.decode("utf-8", "replace")
        self._partial = b""
        return [line]

    def _lines(self, data: bytes) -> list[str]:
        buf = self._partial + data
        *complete, rest = buf.split(b"\n")
        if len(rest) > MAX_LINE and b"\r" in rest.rstrip(b"\r"):
            # A line redrawn with carriage returns (a progress bar): what it shows is its last
            # drawing, so the drawings before it go, and the line is never cut.
            rest = rest[rest.rstrip(b"\r").rindex(b"\r"):]
        if len(rest) > MAX_LINE:
            complete.append(rest[:MAX_LINE] + b" [dflash-tui: line cut]")
            rest = b""
        self._partial = rest
        if not complete:
            return []
        # Decoded in one call: a newline byte ends any broken UTF-8 sequence before it, so the
        # whole decodes to the lines' own decodings joined by newlines.
        data = b"\n".join(complete)
        lines = data.decode("utf-8", "replace").split("\n")
        return [line.rstrip("\r") for line in lines] if b"\r" in data else lines
