"""The Health pane: the checklist exactly as `--check` reports it, always on screen.

Every check shows its state (as a word and a symbol, so it reads under NO_COLOR), its
one-line cause, its hint and how long it has been in that state. Ages are measured on the
report's own clock (the target's), so they never depend on skew between laptop and host.
"""

from __future__ import annotations

from rich.console import Group
from rich.segment import Segment
from rich.text import Text
from textual.widgets import Static

from ..run.report import RunReport
from ..run.verdict import CheckState, Verdict
from .fmt import STATE_SYMBOL, age, one_line

_STATE_STYLE = {
    CheckState.OK: "green",
    CheckState.WARN: "yellow",
    CheckState.FAIL: "bold red",
    CheckState.PENDING: "dim",
}
TRACEBACK_LINES = 6   # the tail of the last traceback shown under a CRASHED checklist


class HealthPane(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("waiting for the first poll…", **kwargs)
        self.report: RunReport | None = None
        self._shown: tuple | None = None

    def show(self, report: RunReport) -> None:
        self.report = report
        seen = signature(report)
        if seen == self._shown:
            return   # same words on screen: no repaint
        # A relayout only when the pane's height can change (number of lines), not each second.
        layout = self._shown is None or _height(seen) != _height(self._shown)
        self._shown = seen
        self.update(render_checklist(report), layout=layout)


def signature(report: RunReport) -> tuple:
    cl = report.checklist
    # The age as drawn, not in seconds: from an hour on it reads "2h05m", so a long-quiet
    # check keeps its words (and the pane its pixels) for a minute instead of a second.
    rows = tuple((c.state, c.label, c.cause, c.hint,
                  None if c.since is None else age(report.time - c.since)) for c in cl.checks)
    tb = report.last_traceback if cl.verdict is Verdict.CRASHED else None
    return (cl.verdict, cl.summary, report.error, tb, rows)


def _height(sig: tuple) -> tuple:
    _, summary, error, tb, rows = sig
    return (bool(summary), bool(error), tb, len(rows))


def _cause_and_hint(cause: str, hint: str) -> Text:
    # One column, so a short cause leaves its room to the hint at 80 columns.
    text = Text(one_line(cause))
    if hint:
        text.append(" → ", "dim").append(one_line(hint), "italic")
    return text


class ChecklistRows:
    """The checks as aligned one-line rows: state, check, cause → hint, age.

    Laid out by hand rather than with rich's Table: this redraws every second, and fixed
    columns with an ellipsis on the one flexible column cost a fraction of a table measure.
    """

    def __init__(self, report: RunReport) -> None:
        self.report = report

    def __rich_console__(self, console, options):
        report = self.report
        checks = report.checklist.checks
        width = options.max_width
        label_w = min(LABEL_MAX, max((len(c.label) for c in checks), default=0))
        flex = max(8, width - STATE_W - label_w - AGE_W - 3)
        for check in checks:
            since = None if check.since is None else report.time - check.since
            row = Text(no_wrap=True, overflow="ellipsis", end="")
            row.append(STATE_SYMBOL[check.state].ljust(STATE_W), _STATE_STYLE[check.state])
            row.append(" ")
            label = check.label if len(check.label) <= label_w else check.label[: label_w - 1] + "…"
            row.append(label.ljust(label_w))
            row.append(" ")
            cause = _cause_and_hint(check.cause, check.hint)
            cause.truncate(flex, overflow="ellipsis", pad=True)
            row.append_text(cause)
            row.append(" ")
            row.append((age(since) if since is not None else "").rjust(AGE_W))
            yield row
            yield Segment.line()


STATE_W, LABEL_MAX, AGE_W = 9, 26, 6


def render_checklist(report: RunReport) -> Group:
    cl = report.checklist
    parts: list = []
    if cl.summary:
        style = "bold red" if cl.verdict.failing else ("green" if cl.verdict.healthy else "")
        parts.append(Text(one_line(cl.summary, 400), style=style, no_wrap=True, overflow="ellipsis"))
    if report.error:
        parts.append(Text(f"poll error: {one_line(report.error)}", style="yellow", no_wrap=True,
                          overflow="ellipsis"))
    parts.append(ChecklistRows(report))
    if cl.verdict is Verdict.CRASHED and report.last_traceback:
        tail = report.last_traceback.rstrip().splitlines()[-TRACEBACK_LINES:]
        tb = Text("\n".join(tail), style="red", no_wrap=True, overflow="ellipsis")
        parts.append(Text("last traceback (e: jump to it in the log)", style="bold"))
        parts.append(tb)
    return Group(*parts)
