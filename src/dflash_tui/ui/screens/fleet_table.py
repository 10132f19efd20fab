"""FleetTable: the fleet's rows, one line each, drawn with Textual's Line API.

A DataTable re-renders every visible cell whenever any cell changes; with 50 profiles at 1 Hz
(and their ages ticking each second) that is the whole table every second, which is most of
the fleet screen's cost. Here a row is rendered into a Strip once and kept until its cells,
the column widths or the cursor on it change, so a poll that changes one row redraws one line.
The header is its own line above (click a column to sort by it).
"""

from __future__ import annotations

from typing import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

GAP = 2
Cell = tuple[str, str]   # (text, rich style string): one style per cell


def fit(text: str, width: int) -> str:
    """`text` in exactly `width` cells (the fleet's cells are single-width characters)."""
    if len(text) > width:
        return text[: max(0, width - 1)] + "…" if width else ""
    return text + " " * (width - len(text))


class FleetTable(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"fleet-table--cursor"}
    DEFAULT_CSS = """
    FleetTable > .fleet-table--cursor { background: $accent 60%; }
    """
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor(-100000)", "First", show=False),
        Binding("end", "cursor(100000)", "Last", show=False),
        Binding("enter", "select", "Open", show=False),
    ]

    class CursorMoved(Message):
        def __init__(self, table: "FleetTable", row: int) -> None:
            super().__init__()
            self.table, self.row = table, row

    class Selected(Message):
        def __init__(self, table: "FleetTable", row: int) -> None:
            super().__init__()
            self.table, self.row = table, row

    def __init__(self, headers: Sequence[str], **kw) -> None:
        super().__init__(**kw)
        self.headers = list(headers)
        self.keys: list[str] = []
        self.cells: list[list[Cell]] = []
        self._styles: dict[tuple[str, bool], Style] = {}
        self.widths = [len(h) for h in self.headers]
        self.cursor_row = 0
        self._strips: dict[int, tuple[tuple, Strip]] = {}

    # -- data ---------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self.keys)

    def set_rows(self, rows: Sequence[tuple[str, Sequence[Cell]]]) -> None:
        """Show `rows` (key, cells) in this order; only the lines that changed are redrawn."""
        keys = [k for k, _ in rows]
        cells = [list(c) for _, c in rows]
        widths = [len(h) for h in self.headers]
        for row in cells:
            for i, (text, _) in enumerate(row):
                widths[i] = max(widths[i], len(text))
        resized = widths != self.widths
        changed = [i for i in range(max(len(cells), len(self.cells)))
                   if i >= len(cells) or i >= len(self.cells) or keys[i] != self.keys[i]
                   or cells[i] != self.cells[i]]
        self.keys, self.cells, self.widths = keys, cells, widths
        if self.cursor_row >= len(keys):
            self.cursor_row = max(0, len(keys) - 1)
        self.virtual_size = Size(sum(widths) + GAP * len(widths), len(keys))
        if resized:
            self._strips.clear()
            self.refresh()
            if self.parent is not None:
                header = self.screen.query(FleetHeader)
                for h in header:
                    h.refresh()
        else:
            for i in changed:
                self._strips.pop(i, None)
                self.refresh_line(i)

    def refresh_line(self, row: int) -> None:
        y = row - self.scroll_offset.y
        if 0 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    # -- cursor -------------------------------------------------------------------------------
    def move_cursor(self, row: int, animate: bool = False) -> None:
        row = max(0, min(row, len(self.keys) - 1)) if self.keys else 0
        if row == self.cursor_row:
            return
        old, self.cursor_row = self.cursor_row, row
        self._strips.pop(old, None)
        self._strips.pop(row, None)
        self.refresh_line(old)
        self.refresh_line(row)
        self.scroll_to_region(Region(0, row, 1, 1), animate=animate, force=True)
        self.post_message(self.CursorMoved(self, row))

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(1, self.size.height - 1))

    def action_select(self) -> None:
        if self.keys:
            self.post_message(self.Selected(self, self.cursor_row))

    def on_click(self, event: Click) -> None:
        row = event.y + self.scroll_offset.y
        if 0 <= row < len(self.keys):
            self.move_cursor(row)
            if event.chain >= 2:
                self.action_select()

    # -- drawing ------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        row = y + self.scroll_offset.y
        width = self.size.width
        if row >= len(self.keys):
            return Strip.blank(width, self.rich_style)
        selected = row == self.cursor_row
        key = (self.keys[row], selected, width, self.scroll_offset.x)
        cached = self._strips.get(row)
        if cached is not None and cached[0] == key:
            return cached[1]
        plain = self._style("", selected)
        segments = []
        for (text, style), w in zip(self.cells[row], self.widths):
            if " on " in f" {style} ":   # a background colour stays on the word itself
                segments.append(Segment(fit(text, w), self._style(style, selected)))
                segments.append(Segment(" " * GAP, plain))
            else:                        # one run per cell, gap included (SVG exports align)
                segments.append(Segment(fit(text, w) + " " * GAP, self._style(style, selected)))
        used = sum(cell_len(seg.text) for seg in segments)
        if self.scroll_offset.x == 0 and used <= width:
            # Nothing to crop: the line padded to the width as one Strip (a Strip is costly to
            # make: each keeps seven caches).
            segments.append(Segment(" " * (width - used), plain))
            strip = Strip(segments, width)
        else:
            strip = Strip(segments).crop(self.scroll_offset.x, self.scroll_offset.x + width)
            strip = strip.extend_cell_length(width, plain)
        self._strips[row] = (key, strip)
        return strip

    def _style(self, style: str, selected: bool) -> Style:
        """The widget's style + the cell's + the cursor's, parsed once per combination."""
        key = (style, selected)
        got = self._styles.get(key)
        if got is None:
            got = self.rich_style + (Style.parse(style) if style else Style())
            if selected:
                got += self.get_component_rich_style("fleet-table--cursor")
            got = self._styles[key] = got
        return got

    def on_resize(self) -> None:
        self._strips.clear()

    def watch_scroll_y(self, old: float, new: float) -> None:
        self._strips.clear()
        super().watch_scroll_y(old, new)

    def watch_scroll_x(self, old: float, new: float) -> None:
        self._strips.clear()
        super().watch_scroll_x(old, new)


class FleetHeader(Widget):
    """The column titles above a FleetTable, in its widths; a click sorts by that column."""

    DEFAULT_CSS = """
    FleetHeader { height: 1; text-style: bold; background: $boost; }
    """

    class Clicked(Message):
        def __init__(self, column: int) -> None:
            super().__init__()
            self.column = column

    def __init__(self, table: FleetTable, **kw) -> None:
        super().__init__(**kw)
        self.table = table

    def render(self) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        for h, w in zip(self.table.headers, self.table.widths):
            out.append(fit(h, w + GAP))
        return out[self.table.scroll_offset.x:] if self.table.scroll_offset.x else out

    def on_click(self, event: Click) -> None:
        x = event.x + self.table.scroll_offset.x
        for i, w in enumerate(self.table.widths):
            if x < w + GAP:
                self.post_message(self.Clicked(i))
                return
            x -= w + GAP
