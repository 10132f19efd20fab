"""Memory trend: whether a run's memory grows steadily with its steps, and when it reaches a limit.

Pure. From (time, step, bytes) samples, one per look: a Theil-Sen slope (the median of the
pairwise slopes, by step) over the samples since the last drop, named a steady growth only when
the memory rises through that window without falling back. A warm-up jump then a flat line has a
median slope of about 0 (most pairs lie on the flat part); a GC sawtooth drops, and each drop
starts the window afresh, so its teeth never gather enough samples to read as a leak.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

MIN_SAMPLES = 6            # samples (looks at distinct steps) in the window before a trend is named
MIN_GROWTH = 8 << 20       # and at least this much growth across it: below, noise
DROP_TOLERANCE = 0.02      # a fall of more than this fraction of the level (or MIN_GROWTH) is a drop
STEADY_RISES = 0.6         # of the steps between samples, at least this share must rise
WINDOW = 64                # the last this many samples are kept


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
    limit_source: str = ""    # "cgroup memory.max", "host MemTotal", "GPU total"
    full_at_step: int | None = None
    full_in_s: float | None = None

    def to_json(self) -> dict:
        return {"used_bytes": self.used, "step": self.step,
                "bytes_per_100_steps": round(self.bytes_per_step * 100),
                "since_step": self.since_step, "limit_bytes": self.limit, "limit_source": self.limit_source,
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


def trend(samples: list[Sample], limit: int | None = None, limit_source: str = "") -> Trend | None:
    """A steady growth by step, with its forecast against `limit`; None when there is none."""
    by_step: dict[int, Sample] = {}
    for s in samples:
        by_step[s.step] = s            # one sample per step: the latest look at it
    win = _window(sorted(by_step.values(), key=lambda s: s.step))
    if len(win) < MIN_SAMPLES:
        return None
    steps = [float(s.step) for s in win]
    used = [float(s.used) for s in win]
    slope = theil_sen(steps, used)
    grown = slope * (steps[-1] - steps[0])
    rises = sum(1 for a, b in zip(used, used[1:]) if b > a)
    if slope <= 0 or grown < MIN_GROWTH or rises < STEADY_RISES * (len(win) - 1):
        return None
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
    """One quantity's samples across looks (the tree's host memory, one GPU's)."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def add(self, t: float, step: int | None, used: int | None) -> None:
        if step is None or used is None:
            return
        if self.samples and step < self.samples[-1].step:
            self.samples.clear()        # a restart from an earlier step: a new process
        self.samples.append(Sample(t, step, used))
        del self.samples[:-WINDOW]
