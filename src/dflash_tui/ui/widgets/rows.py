"""RowTable: a read-only table for rows that change every second, repainting only changed rows.

Textual's DataTable invalidates its whole render cache on any cell update, so a 1 Hz refresh
of 16 thread rows re-rendered all 150 cells every second (the largest cost of the Threads
tab). This is a Line-API ScrollView instead (like the log pane): a header row, then one strip
per row, cached by the row's content; `set_rows` compares row by row and refreshes only the
lines whose text changed. Column widths only grow (an ageing "9s" -> "10s" never shifts the
columns back), and a row wider than the pane scrolls sideways.
"""

from __future__ import annotations

from typing import Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

GAP = 2   # cells between columns


class RowTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    RowTable { height: 1fr; }
    RowTable > .rowtable--header { text-style: bold; background: $boost; }
    """
    COMPONENT_CLASSES = {"rowtable--header"}

    def __init__(self, columns: Sequence[str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.columns = list(columns)
        self.widths = [len(c) for c in self.columns]
        self.rows: list[tuple[str, tuple[Text, ...]]] = []
        self._strips: dict[int, tuple[tuple, Strip]] = {}

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def get_row_at(self, index: int) -> tuple[Text, ...]:
        return self.rows[index][1]

    def set_rows(self, rows: Sequence[tuple[str, Sequence[Text]]]) -> None:
        new = [(key, tuple(cells)) for key, cells in rows]
        grew = False
        for _, cells in new:
            for i, cell in enumerate(cells[: len(self.widths)]):
                if cell.cell_len > self.widths[i]:
                    self.widths[i] = cell.cell_len
                    grew = True
        old = self.rows
        self.rows = new
        total = sum(self.widths) + GAP * (len(self.widths) - 1) + 1
        size = Size(total, len(new) + 1)
        if self.virtual_size != size:
            self.virtual_size = size
        if grew or len(old) != len(new):
            self._strips.clear()
            self.refresh()
            return
        top = int(self.scroll_y)
        for i, (was, now) in enumerate(zip(old, new)):
            if not _same_row(was[1], now[1]):
                y = i + 1 - top   # the header is line 0 and does not scroll
                if 1 <= y < self.size.height:
                    self.refresh_line(y)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        if y == 0:
            cells = tuple(Text(c) for c in self.columns)
            style = self.get_component_rich_style("rowtable--header")
        else:
            index = scroll_y + y - 1
            if index >= len(self.rows):
                return Strip.blank(width, self.rich_style)
            cells = self.rows[index][1]
            style = self.rich_style
        key = (tuple((c.plain, str(c.style)) for c in cells), tuple(self.widths), style)
        cached = self._strips.get(y if y == 0 else scroll_y + y)
        if cached is not None and cached[0] == key:
            strip = cached[1]
        else:
            strip = self._render_row(cells, style)
            self._strips[y if y == 0 else scroll_y + y] = (key, strip)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _render_row(self, cells: Sequence[Text], base: Style) -> Strip:
        segments: list[Segment] = [Segment(" ", base)]
        console = self.app.console
        for i, width in enumerate(self.widths):
            cell = cells[i] if i < len(cells) else Text("")
            text = cell.copy()
            text.truncate(width, overflow="ellipsis")
            pad = width - text.cell_len
            if pad > 0:
                text = Text(" " * pad) + text if cell.justify == "right" else text + Text(" " * pad)
            segments.extend(Segment(s.text, base + s.style if s.style else base)
                            for s in text.render(console) if s.text)
            if i < len(self.widths) - 1:
                segments.append(Segment(" " * GAP, base))
        return Strip(segments)

    def on_resize(self) -> None:
        self._strips.clear()


def _same_row(a: tuple[Text, ...], b: tuple[Text, ...]) -> bool:
    return len(a) == len(b) and all(x.plain == y.plain and x.style == y.style for x, y in zip(a, b))
