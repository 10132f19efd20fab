"""How fast the steps go: the rate of a run's step over its recent looks, for an ETA.

A step and when it was reached (target clock), one pair per look that saw it advance; the
rate is over the pairs of the last WINDOW_S (at least two, a step apart). None until then: a
one-shot look has one pair, and its ETA comes from a rate the program printed (it/s, s/it).
"""

from __future__ import annotations

import collections

WINDOW_S = 300.0
_MAX = 64


class StepClock:
    def __init__(self) -> None:
        self._seen: collections.deque[tuple[float, int]] = collections.deque(maxlen=_MAX)

    def saw(self, step: int | None, at: float | None) -> None:
        if step is None or at is None:
            return
        if self._seen and (step <= self._seen[-1][1] or at <= self._seen[-1][0]):
            if step < self._seen[-1][1]:
                self._seen.clear()        # steps went back: a restart, a new count
                self._seen.append((at, step))
            return
        self._seen.append((at, step))
        while len(self._seen) > 2 and at - self._seen[0][0] > WINDOW_S:
            self._seen.popleft()

    def steps_per_s(self) -> float | None:
        if len(self._seen) < 2:
            return None
        (t0, s0), (t1, s1) = self._seen[0], self._seen[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None


def eta_s(step: int | None, total: int | None, steps_per_s: float | None, rate: float | None = None,
          rate_unit: str = "") -> float | None:
    """Seconds to `total` at the measured rate, else at the rate the program printed."""
    if step is None or not total or total <= step:
        return 0.0 if step is not None and total and step >= total else None
    left = total - step
    if steps_per_s:
        return left / steps_per_s
    if rate and rate > 0 and rate_unit == "it/s":
        return left / rate
    if rate and rate > 0 and rate_unit == "s/it":
        return left * rate
    return None
