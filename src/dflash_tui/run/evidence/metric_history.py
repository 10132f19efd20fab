"""The history of a run's metric series, kept by the headless core so any view can draw every
series from its first point, whenever it starts looking (a tab opened late, a finished run).

Bounded: a series keeps at most MAX_POINTS points; at the bound it keeps every second one (its
first and newest always), so a long run is drawn at half the resolution, then a quarter, and so
on, in O(1) amortised per point. Points arrive in step order from each source; a point of a
step already held replaces its value, and one of an earlier step is put in its place (a
trainer_state.json read after the log's lines of the same steps).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .metric_point import MetricPoint

MAX_POINTS = 5000   # per series: a chart is at most a few hundred cells wide


class SeriesHistory:
    """One series: steps and values in step order, bounded by halving its resolution."""

    __slots__ = ("steps", "values", "stride", "_frozen")

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.values: list[float] = []
        self.stride = 1            # how many points each kept one stands for (1: every point)
        self._frozen: tuple[tuple[int, ...], tuple[float, ...]] | None = None

    def add(self, step: int, value: float) -> None:
        self._frozen = None
        steps = self.steps
        if not steps or step > steps[-1]:
            steps.append(step)
            self.values.append(value)
        else:
            i = bisect.bisect_left(steps, step)
            if steps[i] == step:
                self.values[i] = value
                return
            steps.insert(i, step)
            self.values.insert(i, value)
        if len(steps) > MAX_POINTS:
            self._halve()

    def _halve(self) -> None:
        keep = list(range(0, len(self.steps) - 1, 2)) + [len(self.steps) - 1]
        self.steps = [self.steps[i] for i in keep]
        self.values = [self.values[i] for i in keep]
        self.stride *= 2

    def clear(self) -> None:
        self.steps, self.values, self.stride, self._frozen = [], [], 1, None

    def frozen(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(steps, values) as tuples, made again only after a change."""
        if self._frozen is None:
            self._frozen = (tuple(self.steps), tuple(self.values))
        return self._frozen


class MetricHistory:
    """name -> SeriesHistory of one run (a new run starts a new one)."""

    def __init__(self) -> None:
        self.series: dict[str, SeriesHistory] = {}
        self.version = 0           # moves with every change: a view redraws only when it moved

    def add(self, points: Iterable[MetricPoint]) -> None:
        for name, step, value in points:
            s = self.series.get(name)
            if s is None:
                s = self.series[name] = SeriesHistory()
            s.add(step, value)
            self.version += 1

    def drop(self, name: str) -> None:
        """Forget a series (its points are another source's now)."""
        if self.series.pop(name, None) is not None:
            self.version += 1

    def snapshot(self) -> Mapping[str, tuple[tuple[int, ...], tuple[float, ...]]]:
        """Every series as (steps, values) tuples: safe to hand to a view across polls."""
        return MappingProxyType({name: s.frozen() for name, s in self.series.items() if s.steps})
