"""What every pane of the run view shares, so the app handles them as one list.

A pane is a Textual widget that also derives from `Pane`: it has an id and a title (its tab's
label, or none for the panes above the tabs), draws what it shows of each report (`show`), and
forgets what it drew when the run changes (`new_run`) or another source is shown (`reset`).
Feeds that are more than a report stay the pane's own: GPU snapshots (GpuPane.show_snapshot),
log lines and events.jsonl (fed by ui/streams.py, as the pane's STREAM says), the header's
clock tick. A pane's keys are its own too (KEYS, handled by its `action_<name>` methods): the
run screen binds them for the whole view, so they work whichever widget has the focus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ...run.verdict.report import RunReport


@dataclass(frozen=True)
class PaneKey:
    """A key of a pane: `action` is the pane's `action_<action>`. `reveal`: the pane's tab is
    shown first. `late`: after the view's own keys in the footer (which shows what fits, in
    order), where a narrow terminal cuts it."""
    key: str
    action: str
    description: str
    tooltip: str = ""
    show: bool = True
    reveal: bool = False
    late: bool = False


# The feed a pane needs beside the reports (ui/streams.py): "log" (the shown log file, always),
# "events" (events.jsonl, only while the pane's tab is shown), "gpus" (GPU snapshots).
Stream = Literal["log", "events", "gpus"]


class Pane:
    """Mixin for a run-view pane; list it in RUN_PANES and the run screen composes, feeds,
    binds and resets it."""

    PANE_ID: ClassVar[str]              # the widget id; "tab-<id>" for its tab
    TITLE: ClassVar[str | None] = None  # its tab's label; None: above the tabs, always shown
    KEYS: ClassVar[tuple[PaneKey, ...]] = ()
    STREAM: ClassVar[Stream | None] = None

    def show(self, report: RunReport) -> None:
        """Draw what this pane shows of `report`. The panes fed by something else ignore it."""

    def new_run(self, run_id: str) -> None:
        """A new run started under the same source; a pane that shows only the newest report
        has nothing to forget."""

    def reset(self) -> None:
        """Another source (a profile, a history run) is shown from now on: forget the last one."""

    def tab_label(self) -> str:
        """The tab's label for what the pane shows now, e.g. with a count of what is wrong."""
        return self.TITLE or ""
