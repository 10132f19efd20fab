"""What every pane of the run view shares, so the app handles them as one list.

A pane is a Textual widget that also derives from `Pane`: it has an id and a title (its tab's
label, or none for the panes above the tabs), draws what it shows of each report (`show`), and
forgets what it drew when the run changes (`new_run`) or another source is shown (`reset`).
Feeds that are more than a report stay the pane's own: GPU snapshots (GpuPane.show_snapshot),
log lines and events.jsonl (fed by ui/streams.py), the header's clock tick.
"""

from __future__ import annotations

from typing import ClassVar

from ...run.verdict.report import RunReport


class Pane:
    """Mixin for a run-view pane; list it in the app's RUN_PANES and the app composes, feeds
    and resets it."""

    PANE_ID: ClassVar[str]              # the widget id; "tab-<id>" for its tab
    TITLE: ClassVar[str | None] = None  # its tab's label; None: above the tabs, always shown

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
