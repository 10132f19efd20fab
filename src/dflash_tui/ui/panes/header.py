"""The header: verdict badge, then profile, target (host · container), run dir, pid, uptime,
the run's energy since its launch and its cost so far (the report's: run/verdict/energy.py).

When the transport is down it says how old the data is instead of freezing: the age is
counted on the local clock from the report's `stale_since` (or from the last report that
arrived, if the monitor itself went quiet), and it keeps ticking once a second.
"""

from __future__ import annotations

import functools

from rich.text import Text
from textual.containers import Horizontal
from textual.widgets import Static

from ...run.verdict.report import RunReport
from ..fmt import age, verdict_class
from ..widgets.part_lines import TEXT, Part, PartLines
from .base import Pane

# No report for this long although the monitor polls once a second: say so.
QUIET_AFTER_S = 3.0


class HeaderLines(PartLines):
    """The header's second column: its lines drawn as the lines of one Text would be."""

    DRAW = TEXT


def _line_key(line: Text) -> tuple:
    return line.plain, tuple(line.spans), str(line.style)


def _same(line: Text, width: int) -> Text:
    return line


class RunHeader(Pane, Horizontal):
    PANE_ID = "header"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.report: RunReport | None = None
        self._badge: tuple[str, str] | None = None
        self._where: str | None = None
        self._drawn: tuple = (None,)   # (report, busy, stale age, recovery as shown) of the last tick
        # The watcher's recovery of this profile in words ("recovery 1/3, next in 24 s",
        # "gave up: ..."), read from its store by the app: shown, never acted on.
        self.recovery = ""
        # Held, not queried: a timer may still fire while the app tears the screen down.
        self.badge = Static("…", id="verdict")
        self.where = HeaderLines("", id="where")

    def compose(self):
        yield self.badge
        yield self.where

    def _set(self, badge_text: str, badge_class: str, where: list[Text]) -> None:
        """Touch the widgets only when what they show changed (this runs every second)."""
        badge = self.badge
        if not badge.is_attached:
            return   # shutting down
        if (badge_text, badge_class) != self._badge:
            old_text = self._badge[0] if self._badge else None
            self._badge = (badge_text, badge_class)
            badge.set_classes(badge_class)
            badge.update(badge_text, layout=badge_text != old_text)   # its width follows the text
        plain = "\n".join(line.plain for line in where)
        if plain != self._where:
            self._where = plain
            # Fixed 2 lines, 1fr: no relayout. Each line is its own part, so the uptime ticking
            # renders line 1 and the run dir's line keeps its strips.
            width = self.where.content_size.width
            self.where.show_parts([Part(_line_key(line), functools.partial(_same, line),
                                        one_line=0 < line.cell_len <= width) for line in where], layout=False)

    def show(self, report: RunReport) -> None:
        self.report = report   # drawn by the next tick, which knows the clock

    def reset(self) -> None:
        self.report = None

    def tick(self, *, profile: str, now: float, received_at: float | None, busy: str = "") -> None:
        """Draw the newest report as of `now` (ages keep counting while no report arrives)."""
        report = self.report
        if report is None:
            self._drawn = (None,)
            self._set(" CONNECTING ", "-wait", [Text(f"profile {profile} · waiting for the first report",
                                                     no_wrap=True, overflow="ellipsis")])
            return
        verdict = report.checklist.verdict
        stale_for = self._stale_for(report, now, received_at)
        # Ticked every second and at every report: the same report, busy state and stale age
        # as drawn last time draw the same words, so nothing is built.
        drawn = (busy, None if stale_for is None else age(stale_for), self.recovery)
        if self._drawn[0] is report and self._drawn[1:] == drawn:
            return
        self._drawn = (report, *drawn)
        if stale_for is None:
            badge_text, badge_class = f" {verdict.value} ", verdict_class(verdict)
        else:
            # The last known verdict, visibly not current: grey, and saying so in words.
            badge_text, badge_class = f" {verdict.value} \n (stale) ", "-stale"

        line1 = Text(no_wrap=True, overflow="ellipsis")
        line1.append("profile ", "dim").append(report.profile, "bold")
        line1.append("  target ", "dim").append(report.target_label)
        pid = report.launch.pid if report.launch else None
        if pid is not None:
            line1.append("  pid ", "dim").append(str(pid))
            if report.pid_alive is False:
                line1.append(" (gone)", "bold")
        if report.uptime_s is not None:
            line1.append("  up ", "dim").append(age(report.uptime_s))
        if report.energy is not None:   # the watch's numbers (run/verdict/energy.py): drawn, never computed
            e = report.energy
            line1.append("  energy ", "dim").append(e.short() if e.joules is not None else f"n/a ({e.note})")
        if report.cost is not None:
            line1.append("  cost ", "dim").append(f"{report.cost.so_far:,.2f}")
            line1.append(f" ({report.cost.per_hour:,.2f}/h)", "dim")
        if report.checklist.scheduler is not None:   # a scheduler's job: its id, partition, nodes, why it waits
            for label, value in report.checklist.scheduler.headline:
                line1.append(f"  {label} ", "dim").append(value)
        if busy:
            line1.append(f"  {busy}…", "bold yellow")

        line2 = Text(no_wrap=True, overflow="ellipsis")
        if stale_for is not None:
            why = "connection lost" if not report.connected else "no new report"
            line2.append(f"STALE: {why}, data {age(stale_for)} old, reconnecting · ", "bold yellow")
        line2.append("run dir ", "dim").append(report.run_dir)
        if self.recovery:
            line2.append("  ")
            line2.append(self.recovery, "bold red" if self.recovery.startswith("gave up") else "bold yellow")
        self._set(badge_text, badge_class, [line1, line2])

    @staticmethod
    def _stale_for(report: RunReport, now: float, received_at: float | None) -> float | None:
        if not report.connected:
            since = report.stale_since if report.stale_since is not None else received_at
            return None if since is None else max(0.0, now - since)
        if received_at is not None and now - received_at > QUIET_AFTER_S:
            return now - received_at
        return None
