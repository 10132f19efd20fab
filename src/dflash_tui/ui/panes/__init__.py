"""The run view's panes, one module each, and the one list the app composes, feeds and resets.

A new pane is its module (a `Pane`, base.py, with its KEYS and STREAM), its entry in
RUN_PANES and its tests.
"""

from .base import Pane
from .gpus import GpuPane
from .header import RunHeader
from .health import HealthPane
from .logview import LogPane
from .metrics import MetricsPane
from .ranks import RanksPane
from .threads import ThreadsPane

# Top to bottom: the panes without a title above the tabs, then the tabs in order (keys 1, 2, ...).
RUN_PANES: tuple[type[Pane], ...] = (RunHeader, HealthPane, LogPane, ThreadsPane, GpuPane, MetricsPane, RanksPane)
TAB_PANES = tuple(p for p in RUN_PANES if p.TITLE is not None)
