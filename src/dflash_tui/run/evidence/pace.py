"""A run's pace: the intervals between the progress its looks saw (steps, progress lines).

The verdict engine learns a run's silence limit from them (run/verdict/stall_limit.py). An
interval is the time between the newest progress one look saw and the newest the look before
it saw (target clock, the log's mtime or a step event's own time). A look that comes seldom
sees several steps at once: their interval is then the time between looks, never less than
the slowest step in between, so a coarse look can only make the learned limit longer.

An interval during which a look saw a known pause (an evaluation, a checkpoint save:
run/stacks/pauses.py) is not the steps' pace: it is left out, as the pause keeps its own limit
(nvidia-resiliency-ext learns its sections' timeouts apart in the same way).

A first look (a one-shot `--check`) has no look before it; it takes the pace the step events
of events.jsonl's newest window show, each at its own time (`step_times`), and the pace of the
log window's step lines that begin with their own time, as Python's logging and Megatron print
them ("2026-12-05 04:31:00,123 step 40 loss 0.51", "[2026-12-05 04:31:00] iteration 40/ 500 |":
`line_intervals`); pauses included, which can only make the limit longer.

Where the wrapper keeps when train.log grew (contract/rundir.py LOG_GROWTH, read against the
log's lines by run/evidence/log_growth.py), every look, the first included, reads the step
lines' own cadence from it (`Pace.grew`): one look that sees twenty steps at once learns their
twenty intervals. Those times are the target's uptime, apart from the look's clock: only their
differences are used. While they time the steps, a look's own interval (coarser: the time
between looks) is not added.

Each interval keeps where it was learned (`Pace.source`: the words stall_limit_why ends with).
"""

from __future__ import annotations

import collections
import re
from datetime import datetime, timezone

from ...contract.rundir import EventKind, SchemaError, parse_event
from .progress import parse_text

# How many of the newest intervals the pace keeps: "recent" for the learned limit.
RECENT = 100

# Where an interval was learned: the words stall_limit_why names it by.
FROM_LOOKS = "the looks"
FROM_LINE_TIMES = "its log lines' own times"
FROM_STEP_EVENTS = "events.jsonl's step times"
FROM_LOG_GROWTH = "log_growth (when train.log's step lines came)"


class Pace:
    """The recent intervals between newest progress times, in the order seen, each with where
    it was learned."""

    def __init__(self, recent: int = RECENT) -> None:
        self._last: float | None = None
        self._intervals: collections.deque[tuple[float, str]] = collections.deque(maxlen=recent)
        self._paused = False     # a look saw a known pause since the newest progress
        self._grew_last: float | None = None   # the newest step time log_growth gave (target uptime)

    def saw(self, t: float | None, source: str = FROM_LOOKS) -> None:
        """The newest progress time a look saw (None: none yet). The same time again, or an
        older one (a log rewritten), adds no interval; nor does any while log_growth times the
        steps (`grew`: finer than the looks, and the one that ends a pause then)."""
        if t is None:
            return
        if self._grew_last is None and self._last is not None and t > self._last:
            if not self._paused:
                self._intervals.append((t - self._last, source))
            self._paused = False
        if self._last is None or t > self._last:
            self._last = t

    def pausing(self) -> None:
        """A look saw the run in a known pause: the interval it is in is no step's."""
        self._paused = True

    def took(self, intervals: list[float]) -> None:
        """Intervals a first look read off the program's own clock (its log lines' times): they
        say the pace, not when the newest progress was, as that clock may not be the target's."""
        self._intervals.extend((i, FROM_LINE_TIMES) for i in intervals)

    def grew(self, times: list[float]) -> None:
        """The step lines' times log_growth shows (target uptime, oldest first): each one newer
        than the newest seen adds its interval; the first after a known pause is the pause's,
        and left out. Call before `saw` of the same look."""
        new = [t for t in times if self._grew_last is None or t > self._grew_last]
        if not new:
            return
        if self._grew_last is not None:
            new.insert(0, self._grew_last)
        intervals = [b - a for a, b in zip(new, new[1:])]
        if self._paused and intervals:
            intervals, self._paused = intervals[1:], False
        self._intervals.extend((i, FROM_LOG_GROWTH) for i in intervals)
        self._grew_last = new[-1]

    @property
    def intervals(self) -> tuple[float, ...]:
        return tuple(i for i, _ in self._intervals)

    @property
    def source(self) -> str:
        """Where the slowest recent interval was learned ("" with none): the limit is 5x it."""
        return max(self._intervals, key=lambda x: x[0])[1] if self._intervals else ""


# A line that begins with its own date and time: logging's asctime ("2026-12-05 04:31:00,123"),
# ISO 8601 ("2026-12-05T04:31:00.5"), Megatron's bracketed "[2026-12-05 04:31:00]".
_LINE_TIME = re.compile(r"\[?(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?(?![\d])")
_LINES = re.compile(r"[\r\n]")


def line_intervals(data: bytes, recent: int = RECENT) -> list[float]:
    """The intervals between the newest `recent` + 1 step lines of a log window that carry their
    time at their start (a line whose rest names no step, or whose time is no date, is skipped;
    a time that goes back, a clock set back, adds none). The times are read as UTC: only their
    differences count (a daylight-saving change makes one interval an hour longer, which only
    lengthens the limit)."""
    times: list[float] = []
    for line in reversed(_LINES.split(data.decode("utf-8", "replace"))):
        m = _LINE_TIME.match(line)
        if m is None or parse_text(line[m.end():]).step is None:
            continue
        y, mo, d, h, mi, sec, frac = m.groups()
        try:
            t = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue     # "2026-13-45 ...": no date
        times.append(t + (float("0." + frac) if frac else 0.0))
        if len(times) > recent:
            break
    times.reverse()
    return [b - a for a, b in zip(times, times[1:]) if b > a]


def step_times(data: bytes) -> list[float]:
    """The times of the step events in a window of events.jsonl, oldest first (a line cut at
    either end, or not a valid event, is skipped)."""
    times = []
    for line in data.decode("utf-8", "replace").splitlines():
        if '"step"' not in line:
            continue
        try:
            e = parse_event(line.strip())
        except SchemaError:
            continue
        if e.get("kind") == EventKind.STEP.value:
            times.append(e["time"])
    return sorted(times)
