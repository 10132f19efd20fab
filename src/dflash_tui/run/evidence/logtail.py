"""Follow a log file on the target: new complete lines since the last poll, bounded memory.

`LogFollower(ops, path).poll()` reads from the last offset through RemoteOps. A new inode
means the file was rotated (start the new file from its beginning); a size below the offset
means it was truncated (start again from 0). A burst larger than `window` bytes is skipped to
its last `window` bytes with a marker line, so neither this process nor the wire ever carries
more than a window per poll, whatever the log's size.
"""

from __future__ import annotations

import time

from ...remote.ops import FileChunk, RemoteOps
from .recent_reads import RecentReads

DEFAULT_WINDOW = 256 << 10
# A single line longer than this is cut, so a log without newlines cannot grow the buffer.
MAX_LINE = 16 << 10
# Bytes another reader read at most this long ago stand in for a read of ours: the dashboard's
# log poll right behind a report takes the bytes that report's look just read, and asks nothing.
# Older held bytes are taken too, and only the bytes past them are asked for.
SHARED_MAX_AGE_S = 0.2


class LogFollower:
    def __init__(self, ops: RemoteOps, path: str, *, window: int = DEFAULT_WINDOW,
                 from_start: bool = False, shared: RecentReads | None = None,
                 replaced: str = "") -> None:
        """`shared`: the memo of what the readers of this file read (run/evidence/recent_reads.py; the
        progress tracker's, ProgressTracker.reads): this follower records its reads there and
        takes from there the bytes another reader read past its offset.
        `replaced`: what a new file at `path` means, where the caller knows (a run dir's
        train.log is replaced only by a launch, which sets the previous run's aside); by
        default the file was rotated."""
        self.ops = ops
        self.replaced = replaced or f"{path} was rotated; following the new file"
        self.path = path
        self.window = window
        self.shared = shared
        self.shared_polls = 0      # polls answered from `shared`, without a read of their own
        self.shared_bytes = 0      # bytes taken from `shared` instead of read
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
            self._record(chunk)
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

        chunk = await self._next_chunk()
        self.exists = chunk.exists
        if not chunk.exists:
            return []
        lines: list[str] = []
        if chunk.inode != self._inode or chunk.size < self._offset:
            # Rotated or truncated: what is left of the partial line belongs to the old file.
            lines += self._flush_partial()
            lines.append(f"[dflash-tui: {self.replaced}]" if chunk.inode != self._inode else
                         f"[dflash-tui: {self.path} was truncated; following it from its start]")
            self.resets += 1
            self._inode = chunk.inode
            self._offset = 0
            chunk = await self._read(0)
        if chunk.size - self._offset > self.window:
            # More arrived than one window: show the newest window, say how much was skipped.
            skip_to = chunk.size - self.window
            lines += self._flush_partial()
            lines.append(f"[dflash-tui: skipped {skip_to - self._offset} bytes of fast log output]")
            self.skipped_bytes += skip_to - self._offset
            chunk = await self._read(skip_to)
            data = chunk.data
            self._offset = skip_to + len(data)
            if b"\n" in data:
                data = data.split(b"\n", 1)[1]
            return lines + self._lines(data)
        self._offset += len(chunk.data)
        return lines + self._lines(chunk.data)

    async def _read(self, offset: int) -> FileChunk:
        chunk = await self.ops.read(self.path, offset, self.window)
        self._record(chunk)
        return chunk

    def _record(self, chunk: FileChunk) -> None:
        if self.shared is not None:
            self.shared.record(chunk)

    async def _next_chunk(self) -> FileChunk:
        """The bytes past our offset: what another reader read of this file (`shared`), and,
        unless that read is at most SHARED_MAX_AGE_S old, what came after it, read ourselves."""
        held = self.shared.past(self.path, self._inode, self._offset) if self.shared is not None else None
        if held is None or not held.data:
            return await self._read(self._offset)
        data = held.data[:self.window]
        if time.monotonic() - held.at <= SHARED_MAX_AGE_S or len(data) == self.window:
            self.shared_polls += 1
            self.shared_bytes += len(data)
            return FileChunk(self.path, self._offset, data, held.size, held.inode)
        rest = await self._read(self._offset + len(data))
        if not rest.exists or rest.inode != held.inode or rest.size < held.end:
            # Replaced or truncated since: the held bytes may not be the file's any more.
            return rest if not rest.exists or rest.inode != held.inode else await self._read(self._offset)
        self.shared_bytes += len(data)
        return FileChunk(self.path, self._offset, data + rest.data[:self.window - len(data)], rest.size,
                         rest.inode)

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
