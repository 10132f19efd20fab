"""When train.log's step lines came: the wrapper's log_growth read against the log's own lines.

The wrapper samples the log's size while its program runs and keeps one "UPTIME SIZE" line
per growth it saw (contract/rundir.py LOG_GROWTH). A step line's time is the time of the first
growth whose size holds its end: the sample after it was written, so every time is late by
less than one sample (LOG_GROWTH_EVERY_S), and an interval between two of them is off by less
than one sample either way. A growth that held no step line (a warning, a bar's redraw that
names no step) is no step.

`StepEnds` remembers where the step lines a tracker read end (byte offsets in train.log, the
newest `keep`), the ones the sampler has not reached yet included, until a growth times them;
so a look that reads a line before the sampler saw it times it at the next look. Progress
segments end at a newline or a carriage return, as ProgressParser counts them (a tqdm bar's
redraw is one).
"""

from __future__ import annotations

import bisect
import collections
import re

from .progress import ProgressParser, compile_progress_regex

# A segment and its end: the text up to a newline or carriage return.
_SEGMENT = re.compile(rb"[^\r\n]*[\r\n]")
# The unterminated tail kept for the next read (a bar redrawn without end is cut to this).
_MAX_PARTIAL = 4096


class StepEnds:
    """The byte offsets in train.log where the newest step lines read so far end, untimed."""

    def __init__(self, regex=None, keep: int = 101) -> None:
        self._regex = compile_progress_regex(regex) if isinstance(regex, str) else regex
        self._keep = keep
        self.reset()

    def reset(self) -> None:
        """A new log (truncated, replaced): nothing read of it yet."""
        self._ends: collections.deque[int] = collections.deque(maxlen=self._keep)
        self._partial = b""
        self._partial_at: int | None = None

    @property
    def pending(self) -> bool:
        """Step lines read that no growth has timed yet."""
        return bool(self._ends)

    def feed(self, data: bytes, start: int) -> None:
        """The log's bytes from offset `start` (each read in order; a window that begins mid-line
        begins at its first whole line): their step lines' ends, the newest `keep`."""
        if self._partial_at is not None and self._partial_at + len(self._partial) == start:
            data, start = self._partial + data, self._partial_at
        segments = list(_SEGMENT.finditer(data))
        self._partial = data[segments[-1].end() if segments else 0:][-_MAX_PARTIAL:]
        self._partial_at = start + len(data) - len(self._partial)
        ends: list[int] = []
        for m in reversed(segments):
            if len(ends) >= self._keep:
                break
            if _is_step(m.group(), self._regex):
                ends.append(start + m.end() - 1)     # the offset of its newline or return
        self._ends.extend(reversed(ends))

    def times(self, growths: list[tuple[float, int]]) -> list[float]:
        """The times of the remembered step lines that `growths` ([(uptime, size)], oldest first:
        contract/rundir.py parse_log_growth) reach, oldest first, one per growth; those are
        forgotten, as are lines that ended before the oldest growth kept (never to be timed).
        Lines past the newest growth stay for the next look's."""
        if not growths:
            return []
        sizes = [size for _, size in growths]
        times: list[float] = []
        while self._ends:
            end = self._ends[0]
            if end < sizes[0]:
                self._ends.popleft()        # written before the oldest growth kept: no time
                continue
            i = bisect.bisect_right(sizes, end)   # the first growth whose size holds its end
            if i == len(sizes):
                break
            self._ends.popleft()
            t = growths[i][0]
            if not times or t > times[-1]:
                times.append(t)
        return times


def _is_step(segment: bytes, regex) -> bool:
    """Whether one terminated segment is progress as the tracker counts it (a step line, a
    bar's redraw, a progress dict)."""
    parser = ProgressParser(regex)
    return parser.feed(segment) > 0
