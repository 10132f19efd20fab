"""What the run view's charts share: a plotext chart that times its own build, and the spacing of
redraws that keeps each chart within its share of a core (the Metrics charts, the GPU history)."""

from __future__ import annotations

import time

from textual_plotext import PlotextPlot

CHART_MIN_S, CHART_MAX_S = 5.0, 30.0   # redraws at least this far apart, and at most (TensorBoard: 30 s)


def redraw_interval(cost_s: float, share: float) -> float:
    """Seconds between redraws of charts whose last build took `cost_s`: the cost over their
    `share` of a core, between CHART_MIN_S and CHART_MAX_S (the GPU history graph too)."""
    return min(CHART_MAX_S, max(CHART_MIN_S, cost_s / share))


class TimedPlot(PlotextPlot):
    """A plotext chart that knows what its last build and paint took (`render_s`), the cost
    `redraw_interval` spaces its redraws by."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.render_s = 0.0

    def render(self):
        t0 = time.perf_counter()
        try:
            return super().render()
        finally:
            self.render_s = time.perf_counter() - t0
