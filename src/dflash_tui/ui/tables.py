"""Refresh a DataTable in place: the once-a-second panes change a few cells, not the table.

Clearing and re-adding every row each second re-measures every column and re-lays out the
screen; updating only the cells whose text changed keeps a 1 Hz refresh of 16 threads and
8 GPUs to a handful of cell repaints.
"""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.widgets import DataTable


def sync_rows(table: DataTable, rows: Sequence[tuple[str, Sequence[Text]]]) -> None:
    """Make `table` show `rows` (key, cells) in that order, touching only what changed."""
    keys = [key for key, _ in rows]
    current = [rk.value for rk in table.rows]
    if current != keys:
        cursor = table.cursor_row
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if 0 <= cursor < table.row_count:
            table.move_cursor(row=cursor, animate=False)
        return
    columns = list(table.columns)
    for key, cells in rows:
        old = table.get_row(key)
        for col, new, was in zip(columns, cells, old):
            if not _same(new, was):
                # Column widths only grow when a value needs it: an ageing "9s" -> "10s"
                # must not shift every column once a second.
                table.update_cell(key, col, new, update_width=_cell_len(new) > table.columns[col].width)


def _same(a: object, b: object) -> bool:
    if isinstance(a, Text) and isinstance(b, Text):
        return a.plain == b.plain and a.style == b.style
    return a == b


def _cell_len(value: object) -> int:
    return value.cell_len if isinstance(value, Text) else len(str(value))


class OnScreenOnly:
    """Mixin for a pane behind a tab: keep taking data, draw only while it is on screen.

    A hidden DataTable or Sparkline that is updated every second still costs style and
    repaint work; the pane instead keeps its latest data and draws it when shown.
    """

    on_screen = False

    def on_show(self) -> None:
        self.on_screen = True
        self.draw()

    def on_hide(self) -> None:
        self.on_screen = False

    def draw(self) -> None:   # pragma: no cover - every pane overrides it
        raise NotImplementedError
