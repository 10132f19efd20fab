"""The Health pane: the checklist exactly as `--check` reports it, always on screen.

Every check shows its state (as a word and a symbol, so it reads under NO_COLOR), its
one-line cause, its hint and how long it has been in that state. Ages are measured on the
report's own clock (the target's), so they never depend on skew between laptop and host.

Healthy (ok) checks fold into one summary line unless the pane is expanded (the app's k
key); a warn, fail or pending check is always drawn, and a warn or fail one in full: its
cause and hint wrap onto as many lines as they need instead of being cut at the edge.
The states are told apart by words and by bold/reverse, never by colour alone, so a
failure is the most visible thing on screen under NO_COLOR too.
"""

from __future__ import annotations

import functools

from rich.console import Console, Group, RenderableType
from rich.text import Text
from textual.containers import VerticalScroll

from ...run.verdict.report import RunReport
from ...run.verdict.checklist import CheckState, Verdict
from ..fmt import STATE_SYMBOL, age, alarm_style, one_line
from ..widgets.part_lines import Part, PartLines
from .base import Pane, PaneKey

_STATE_STYLE = {
    CheckState.OK: "green",
    CheckState.WARN: "bold yellow",
    CheckState.FAIL: alarm_style(),
    CheckState.PENDING: "italic",
}
TRACEBACK_LINES = 6   # the tail of the last traceback shown under a CRASHED checklist
# Rows the run view keeps for the tabs whatever the checklist says: the tab bar (2), a note,
# a table header and eight rows of threads or log. Past its share the checklist scrolls.
TABS_MIN_ROWS = 12
HEADER_ROWS, FOOTER_ROWS = 2, 1


def max_rows(screen_height: int) -> int:
    """The checklist's height cap (its border included) for a screen this tall: at most 60 %
    of it, and never so much that the tabs keep fewer than TABS_MIN_ROWS (at 80x24 a STALLED
    checklist in full left the Threads tab one row)."""
    return max(4, min(screen_height * 6 // 10, screen_height - HEADER_ROWS - FOOTER_ROWS - TABS_MIN_ROWS))


class HealthBox(VerticalScroll, can_focus=False):
    """The Health pane's frame: as tall as the checklist up to its cap (`max_rows`), and past
    it the checklist scrolls (the wheel). A container, because a widget capped by max-height
    only clips what does not fit."""

    def fit(self, screen_height: int) -> None:
        """Cap the height for a screen this tall (the app calls it on every resize)."""
        cap = max_rows(screen_height)
        if self.styles.max_height is None or self.styles.max_height.value != cap:
            self.styles.max_height = cap


class HealthPane(Pane, PartLines):
    PANE_ID = "health"
    KEYS = (PaneKey("k", "toggle_checks", "Checks", "show the ok checks one per row, or fold them into one line",
                    show=False),)

    def __init__(self, **kwargs) -> None:
        super().__init__("waiting for the first poll…", **kwargs)
        self.report: RunReport | None = None
        self.expanded = False      # show the ok checks one per row too
        self.launching = ""        # the launch/relaunch in flight, while its run has no report yet
        self._shown: tuple | None = None

    def show(self, report: RunReport | None = None) -> None:
        """Without a report: draw the last one again (the launch note or the width changed)."""
        if report is not None:
            self.report = report
        report = self.report
        if report is None:
            return
        seen = (signature(report, self.expanded), self.expanded, self._launch_note(report), self.size.width)
        if seen == self._shown:
            return   # same words on screen: no repaint
        # A relayout only when the pane's height can change (number of lines), not each second.
        layout = self._shown is None or _height(seen[0]) != _height(self._shown[0]) or seen[1:] != self._shown[1:]
        self._shown = seen
        self.show_parts(checklist_parts(report, self.app.console, expanded=self.expanded, note=seen[2],
                                        no_color=self.app.no_color), layout=layout)

    def toggle(self) -> bool:
        self.expanded = not self.expanded
        self.show()
        return self.expanded

    def action_toggle_checks(self) -> None:
        self.toggle()

    def on_resize(self) -> None:
        self.show()   # wrapped warn/fail rows change height with the width

    def _launch_note(self, report: RunReport) -> str:
        """While a launch is in flight and the checklist still describes the run dir before
        it (NO RUN), say so instead of letting "nothing launched" contradict the header."""
        if self.launching and report.checklist.verdict is Verdict.NO_RUN:
            return f"{self.launching} under way: the checklist fills in as the run starts"
        return ""


def signature(report: RunReport, expanded: bool = True) -> tuple:
    """What the pane would draw, as a value: the pane repaints only when it changes."""
    cl = report.checklist
    # The age as drawn, not in seconds: from an hour on it reads "2h05m", so a long-quiet
    # check keeps its words (and the pane its pixels) for a minute instead of a second.
    # A folded ok check shows only its label: its cause and age changing redraw nothing.
    rows = tuple((c.state, c.label, "", "", None) if c.state is CheckState.OK and not expanded else
                 (c.state, c.label, c.cause, c.hint, None if c.since is None else age(report.time - c.since))
                 for c in cl.checks)
    tb = report.last_traceback if cl.verdict is Verdict.CRASHED else None
    return (cl.verdict, cl.summary, report.error, tb, rows)


def _height(sig: tuple) -> tuple:
    _, summary, error, tb, rows = sig
    return (bool(summary), error, tb, tuple((r[0], r[2], r[3]) for r in rows if r[0] is not CheckState.OK),
            sum(1 for r in rows if r[0] is CheckState.OK))


def _cause_and_hint(cause: str, hint: str, limit: int = 200) -> Text:
    # One column, so a short cause leaves its room to the hint at 80 columns.
    text = Text(one_line(cause, limit))
    if hint:
        text.append(" → ", "bold").append(one_line(hint, limit), "italic")
    return text


STATE_W, LABEL_MAX, AGE_W, CONT_INDENT = 9, 26, 6, 4
FULL_LIMIT = 2000   # a warn/fail cause or hint is cut only past this (hostile input stays bounded)


def checklist_parts(report: RunReport, console: Console, *, expanded: bool = False, note: str = "",
                    no_color: bool = False) -> list[Part]:
    """The checklist as parts (ui/widgets/part_lines.py): the summary, a poll error, a row per
    check shown (with its wrapped cause and hint), the folded ok checks, the traceback's tail.
    A part's key is what it shows, so a second in which one age moved renders one row."""
    cl = report.checklist
    parts: list[Part] = []
    if note:
        parts.append(Part(("note", note), lambda w: Text(note, style="bold", no_wrap=True, overflow="ellipsis"),
                          one_line=True))
    elif cl.summary:
        # Worse news is louder: a failing summary is bold and reversed, never dimmer.
        style = alarm_style(no_color) if cl.verdict.failing else ("green" if cl.verdict.healthy else "bold")
        summary = one_line(cl.summary, 400)
        parts.append(Part(("summary", summary, str(style)),
                          lambda w: Text(summary, style=style, no_wrap=True, overflow="ellipsis"), one_line=True))
    if report.error:
        error = f"poll error: {one_line(report.error)}"
        parts.append(Part(("error", error), lambda w: Text(error, style="bold yellow")))
    styles = {**_STATE_STYLE, CheckState.FAIL: alarm_style(no_color)}
    checks = cl.checks
    ok = [c for c in checks if c.state is CheckState.OK]
    shown = checks if expanded else [c for c in checks if c.state is not CheckState.OK]
    label_w = min(LABEL_MAX, max((len(c.label) for c in shown), default=0))
    for check in shown:
        since = None if check.since is None else age(report.time - check.since)
        full = check.state in (CheckState.WARN, CheckState.FAIL)
        key = ("check", check.state, check.label, check.cause, check.hint, since, label_w, str(styles[check.state]))
        parts.append(Part(key, functools.partial(_check_row, console, check, since, label_w, str(styles[check.state])),
                          one_line=not full))
    if ok and not expanded:
        labels = ", ".join(c.label for c in ok)
        parts.append(Part(("ok", len(ok), labels), functools.partial(_folded_ok, len(ok), labels), one_line=True))
    if cl.verdict is Verdict.CRASHED and report.last_traceback:
        tail = "\n".join(report.last_traceback.rstrip().splitlines()[-TRACEBACK_LINES:])
        parts.append(Part(("traceback", tail, no_color), lambda w: Group(
            Text("last traceback (e: jump to it in the log)", style="bold"),
            Text(tail, style="bold" if no_color else "red", no_wrap=True, overflow="ellipsis"))))
    return parts


def _check_row(console: Console, check, since: str | None, label_w: int, state_style: str, width: int) -> RenderableType:
    """One check as a row (state, check, cause → hint, age) at `width`. An ok check is one row;
    a warn or fail check's cause and hint wrap under the flexible column, so nothing of a fix
    is cut off. Laid out by hand rather than with rich's Table: fixed columns with an ellipsis
    on the one flexible column cost a fraction of a table measure."""
    flex = max(8, width - STATE_W - label_w - AGE_W - 3)
    full = check.state in (CheckState.WARN, CheckState.FAIL)
    row = Text(no_wrap=True, overflow="ellipsis")
    row.append(STATE_SYMBOL[check.state].ljust(STATE_W), state_style)
    row.append(" ")
    label = check.label if len(check.label) <= label_w else check.label[: label_w - 1] + "…"
    row.append(label.ljust(label_w), "bold" if full else "")
    row.append(" ")
    cause = _cause_and_hint(check.cause, check.hint, FULL_LIMIT if full else 200)
    rest: list[Text] = []
    if full and cause.cell_len > flex:
        # In full: what does not fit the row continues below it, indented, across the
        # whole width (a long hint, such as a known_hosts command, is never cut).
        first, _, tail = cause.plain.partition(" → ") if check.hint else (cause.plain, "", "")
        head = Text(first)
        lines = head.wrap(console, flex)
        cause = lines[0]
        more = Text(" ").join(lines[1:]) if len(lines) > 1 else Text("")
        if tail:
            more = more + Text(" → ", "bold") + Text(tail, "italic") if more.plain else \
                Text("→ ", "bold") + Text(tail, "italic")
        rest = list(more.wrap(console, max(8, width - CONT_INDENT))) if more.plain else []
    cause = cause.copy()
    cause.truncate(flex, overflow="ellipsis", pad=True)
    row.append_text(cause)
    row.append(" ")
    row.append((since or "").rjust(AGE_W))
    if not rest:
        return row
    out = [row]
    for part in rest:
        line = Text(" " * CONT_INDENT, no_wrap=True, overflow="ellipsis")
        line.append_text(part)
        out.append(line)
    return Group(*out)


def _folded_ok(n: int, labels: str, width: int) -> Text:
    row = Text(no_wrap=True, overflow="ellipsis")
    row.append(STATE_SYMBOL[CheckState.OK].ljust(STATE_W), _STATE_STYLE[CheckState.OK])
    row.append(" ")
    row.append(f"{n} checks ok: " if n > 1 else "1 check ok: ")
    row.append(labels)
    row.append("  (k: show them)", "italic")
    return row
