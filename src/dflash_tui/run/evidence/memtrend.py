"""Memory trend: whether a run's memory grows steadily with its steps, and when it reaches a limit.

Pure. From (time, step, bytes) samples: a Theil-Sen slope (the median of the pairwise slopes, by
step) over the samples since the last drop, named a steady growth only when the memory rises
through that window without falling back. A warm-up jump then a flat line has a median slope of
about 0 (most pairs lie on the flat part); a GC sawtooth drops, and each drop starts the window
afresh, so its teeth never gather enough samples to read as a leak. A one-off jump mid-run (the
first compile, a cache filled once) lies in one third of the window: the other thirds are flat,
and a steady growth rises in each.

Bounded for a run of any length: a series keeps at most WINDOW samples; when full, every other
older sample is dropped (the newest always kept), so the window spans the whole run at a
coarser grain as it ages, and the slope's cost (WINDOW^2 / 2 pairs) stays fixed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

MIN_SAMPLES = 6            # samples (looks at distinct steps) in the window before a trend is named
MIN_GROWTH = 8 << 20       # and at least this much growth across it: below, noise
DROP_TOLERANCE = 0.02      # a fall of more than this fraction of the level (or MIN_GROWTH) is a drop
STEADY_RISES = 0.6         # of the steps between samples, at least this share must rise
THIRDS_SHARE = 0.25        # each third of the window must rise at least this share of the whole's rate
WINDOW = 64                # samples kept per series (decimated when full)


@dataclass(frozen=True)
class Sample:
    t: float        # target clock, s
    step: int
    used: int       # bytes


@dataclass(frozen=True)
class Trend:
    bytes_per_step: float
    since_step: int           # the first step of the steady window
    used: int                 # the newest sample's bytes
    step: int                 # and its step
    s_per_step: float | None  # the window's pace, for a forecast in time
    limit: int | None = None
    limit_source: str = ""    # "cgroup memory.max", "host MemTotal", "GPU total", "memory_limit_mb"
    full_at_step: int | None = None
    full_in_s: float | None = None

    def to_json(self) -> dict:
        return {"bytes_per_100_steps": round(self.bytes_per_step * 100), "since_step": self.since_step,
                "full_at_step": self.full_at_step,
                "full_in_s": round(self.full_in_s, 1) if self.full_in_s is not None else None}


def theil_sen(xs: list[float], ys: list[float]) -> float:
    """The median of the slopes between every pair of points with distinct x."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i])
              for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else 0.0


def _window(samples: list[Sample]) -> list[Sample]:
    """The samples after the last drop: a fall back means the memory is freed, not leaked."""
    start = 0
    for i in range(1, len(samples)):
        prev, cur = samples[i - 1].used, samples[i].used
        if prev - cur > max(MIN_GROWTH, DROP_TOLERANCE * prev):
            start = i
    return samples[start:]


def _steady_slope(win: list[Sample]) -> float | None:
    """The window's Theil-Sen slope (bytes per step) where it is a steady growth: enough samples,
    enough growth, most steps rising, and each third of the window rising at no less than
    THIRDS_SHARE of the whole one's rate (a one-off jump lies in one third: the others are flat)."""
    if len(win) < MIN_SAMPLES:
        return None
    steps = [float(s.step) for s in win]
    used = [float(s.used) for s in win]
    slope = theil_sen(steps, used)
    rises = sum(1 for a, b in zip(used, used[1:]) if b > a)
    if slope <= 0 or slope * (steps[-1] - steps[0]) < MIN_GROWTH or rises < STEADY_RISES * (len(win) - 1):
        return None
    n = len(win)
    for lo, hi in ((0, n // 3 + 1), (n // 3, 2 * n // 3 + 1), (2 * n // 3, n)):
        if theil_sen(steps[lo:hi], used[lo:hi]) < THIRDS_SHARE * slope:
            return None
    return slope


def trend(samples: list[Sample], limit: int | None = None, limit_source: str = "") -> Trend | None:
    """A steady growth by step, with its forecast against `limit`; None when there is none. The
    growth may have begun after the window's start (a leak that set in at step 2,000): the newer
    half, quarter, ... of the window is tried in turn."""
    by_step: dict[int, Sample] = {}
    for s in samples:
        by_step[s.step] = s            # one sample per step: the latest look at it
    whole = _window(sorted(by_step.values(), key=lambda s: s.step))
    start, slope = 0, None
    while len(whole) - start >= MIN_SAMPLES:
        slope = _steady_slope(whole[start:])
        if slope is not None:
            break
        start += max(1, (len(whole) - start) // 2)
    if slope is None:
        return None
    win = whole[start:]
    last = win[-1]
    pace = ((last.t - win[0].t) / (last.step - win[0].step)
            if last.step > win[0].step and last.t > win[0].t else None)
    full_step = full_s = None
    if limit is not None and limit > 0:
        to_go = max(0.0, (limit - last.used) / slope)
        full_step = int(last.step + to_go)
        full_s = to_go * pace if pace is not None else None
    return Trend(slope, win[0].step, last.used, last.step, pace, limit, limit_source, full_step, full_s)


class MemorySeries:
    """One quantity's samples across looks (the run's host memory, one GPU's), at most WINDOW."""

    def __init__(self, samples: list[Sample] | None = None) -> None:
        self.samples: list[Sample] = list(samples or [])[-WINDOW:]

    def add(self, t: float, step: int | None, used: int | None) -> None:
        if step is None or used is None:
            return
        s = self.samples
        if s and step < s[-1].step:
            s.clear()            # a restart from an earlier step: a new process
        if s and step == s[-1].step:
            s[-1] = Sample(t, step, used)   # the same step looked at again: its latest reading
            return
        s.append(Sample(t, step, used))
        if len(s) > WINDOW:
            # Every other older sample goes; the newest stays: the whole run, coarser with age.
            self.samples = s[:-1][::2] + [s[-1]]

    def to_json(self) -> list[list]:
        return [[round(s.t, 3), s.step, s.used] for s in self.samples]

    @classmethod
    def from_json(cls, rows) -> "MemorySeries":
        """A series as `to_json` wrote it; anything malformed gives an empty one (it is rebuilt)."""
        try:
            samples = [Sample(float(t), int(step), int(used)) for t, step, used in rows]
        except (TypeError, ValueError):
            return cls()
        if any(b.step <= a.step for a, b in zip(samples, samples[1:])):
            return cls()
        return cls(samples)
