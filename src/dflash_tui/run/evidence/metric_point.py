"""A metric point as every source of metrics gives it: (name, step, value).

The same shape as run/verdict/series.Point (a tuple of three), so the Metrics pane and the
verdict's series take the points of the log's metric lines and of metric files as they come.
Here, below the verdict, so the readers of run/evidence/ can make them.
"""

from __future__ import annotations

from typing import NamedTuple


class MetricPoint(NamedTuple):
    name: str
    step: int
    value: float
