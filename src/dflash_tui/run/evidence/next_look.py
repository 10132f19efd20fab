"""NextLook: whether the next look of a run is likely to come past a step's cadence, so that the
look before it asks that step's reads up front (in the first request, run/evidence/first_look.py).

A step that runs every few seconds (the tree's PSS, the stat of the checkpoints' folders) is due
at one look of several. Asking its reads at every look costs what the cadence saves; asking none
up front costs the due look a request of its own. The looks' own spacing says which look that is:
the dashboard looks about once a second, more slowly while a run is steady, sooner after an
action. The next look is taken to come one recent gap (the longest of the last few, so a look
woken early does not shorten it) after this one, and never sooner than MIN_AHEAD_S: a look that
comes sooner than that costs a request, never a missed sample.
"""

from __future__ import annotations

import collections

MIN_AHEAD_S = 1.0     # a look comes about a second after the last one at the most
GAPS_KEPT = 4


class NextLook:
    def __init__(self) -> None:
        self._last: float | None = None
        self._gaps: collections.deque[float] = collections.deque(maxlen=GAPS_KEPT)

    def saw(self, now: float) -> None:
        """A look at `now` (the target's clock)."""
        if self._last is not None and now > self._last:
            self._gaps.append(now - self._last)
        elif self._last is not None and now < self._last:
            self._gaps.clear()      # a clock that went back: what came before says nothing
        self._last = now

    def ahead_s(self) -> float:
        return max([MIN_AHEAD_S, *self._gaps])

    def due(self, at: float | None, every_s: float) -> bool:
        """Whether the next look comes `every_s` or more after `at` (the step's last run); True
        before the first look or the first run, and when the clock went back past `at`."""
        if at is None or self._last is None:
            return True
        since = self._last + self.ahead_s() - at
        return not 0 <= since < every_s
