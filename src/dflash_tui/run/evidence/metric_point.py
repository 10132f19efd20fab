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


# No run makes more steps than this, and no JSON consumer (a double) reads a larger integer
# exactly: a step or total beyond it is ignored, with a note, never shown or timed.
MAX_STEP = 1 << 53
BEYOND_WORDS = "beyond 2^53"


def is_step(v) -> bool:
    """A step or total a run could have made: an int (not a bool), 0 <= v <= MAX_STEP."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_STEP
