"""The Ranks pane: one row per rank of the run, the odd ones first, as run/verdict/rank_rows.py
decides them (node, step, step time, share of time waiting in collectives, state, group).

At 1,024 ranks the table stays cheap: RowTable draws only the rows on screen and repaints only
the rows that changed (it scrolls and pages with the arrows and PgUp/PgDn), and the pane draws
only while its tab is shown. `w` filters the rows by what they say ("h2", "STUCK", "all_reduce",
a rank number; `shown`).
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Input, Static

from ...run.verdict.rank_rows import SLOW, STUCK, RankRow, rank_rows, rank_summary
from ...run.verdict.report import RunReport
from ..fmt import alarm_style
from ..widgets.cells import TextCells
from ..widgets.rows import RowTable
from ..widgets.tables import OnScreenOnly
from .base import Pane, PaneKey

COLUMNS = ("rank", "node", "pid", "step", "step time", "waiting", "state", "group")


def shown(rows: list[RankRow], term: str) -> list[RankRow]:
    """The rows that match every word of `term` (any case; all rows for none): a word matches a
    row when it is one of its cells ("h2", "stuck", "777") or part of where it stands
    ("all_reduce", "data.py")."""
    words = term.lower().split()
    if not words:
        return rows

    def match(r: RankRow) -> bool:
        cells = [c.lower() for c in r.cells()]
        return all(w in cells or w in cells[-1] for w in words)
    return [r for r in rows if match(r)]


class RanksPane(Pane, OnScreenOnly, Vertical):
    PANE_ID = "ranks"
    TITLE = "Ranks"
    KEYS = (PaneKey("w", "filter_ranks", "Filter ranks", "Ranks: show only the ranks whose row contains "
                    "some words (a node, a state, a collective, a rank); empty: every rank", show=False, reveal=True),)

    def compose(self):
        self.note = Static("", id="ranks-note")
        self.table = RowTable(COLUMNS, id="ranks-table")
        self.filter_box = Input(placeholder="show the ranks whose row contains… (enter: apply, escape: close)",
                                id="ranks-filter")
        self.filter_box.display = False
        yield self.note
        yield self.table
        yield self.filter_box

    def on_mount(self) -> None:
        self.report: RunReport | None = None
        self.term = ""
        self._note = ""
        self.cell = TextCells()   # (text, style) -> the Text drawn, from draw to draw
        self._trouble = 0   # processes with a STUCK thread, and stragglers: the tab's label

    def tab_label(self) -> str:
        return f"Ranks ({self._trouble} !)" if self._trouble else "Ranks"

    def show(self, report: RunReport) -> None:
        self.report = report
        # Counted even while hidden, from the checklist alone (the rows are built only when shown).
        cl = report.checklist
        self._trouble = len({t.pid for t in cl.threads if t.pid is not None and t.trouble}) + len(cl.stragglers)
        if self.on_screen:
            self.draw()

    def draw(self) -> None:
        report = self.report
        if report is None:
            return
        rows = rank_rows(report)
        if not rows:
            self._set_note("no ranks: the run probe reports no process of this run yet")
            self.table.set_rows([])
            return
        picked = shown(rows, self.term)
        words = rank_summary(rows)
        if self.term:
            words += f" · filter {self.term!r}: {len(picked)} shown (w: change)"
        why = [r.why for r in rows if r.state == SLOW][:2]
        self._set_note(words + "".join(f"\n{w}" for w in why))
        alarm = alarm_style(self.app.no_color)
        cell = self.cell
        cell.new_draw()
        out = []
        for r in picked:
            style = alarm if r.state in (STUCK, SLOW) else ""
            out.append((f"{r.node}/{r.pid}", [cell(c, style) for c in r.cells()]))
        self.table.set_rows(out)

    def _set_note(self, text: str) -> None:
        if text != self._note:
            self._note = text
            self.note.update(Text(text, no_wrap=True, overflow="ellipsis"))

    # -- keys (KEYS) and the filter box ---------------------------------------------------------
    def action_filter_ranks(self) -> None:
        box = self.filter_box
        box.display = True
        box.value = self.term
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.term = event.value
        self.filter_box.display = False
        self.table.focus()
        self.draw()

    def on_key(self, event) -> None:
        if event.key == "escape" and self.filter_box.has_focus:
            event.stop()
            self.filter_box.display = False
            self.table.focus()
