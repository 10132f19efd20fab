"""RowTable: a read-only table for rows that change every second, repainting only changed rows.

Textual's DataTable invalidates its whole render cache on any cell update, so a 1 Hz refresh
of 16 thread rows re-rendered all 150 cells every second (the largest cost of the Threads
tab). This is a Line-API ScrollView instead (like the log pane): a header row, then one strip
per row, cached by the row's content; `set_rows` compares row by row and refreshes only the
lines whose text changed. Column widths only grow (an ageing "9s" -> "10s" never shifts the
columns back), and a row wider than the pane scrolls sideways. A cell of plain text with one
style (every cell the panes make) is padded and cut as a string, and a row's runs of one style
are one segment: rich's Text rendering, per cell, was most of a row's cost.
"""

from __future__ import annotations

from typing import Sequence

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .plain import PlainRows

GAP = 2   # cells between columns


class RowTable(PlainRows, ScrollView, can_focus=True):
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
        self._signatures: list[tuple] = []   # per row: what its cells say, to compare and cache by
        self._cells: dict[int, tuple[Text, tuple, int]] = {}   # id -> (cell, signature, width)
        self._strips: dict[int, tuple[tuple, Strip]] = {}
        self._frame: tuple = ((0, 0), 0, Style(), Style())   # the paint under way: offset, width, styles

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def get_row_at(self, index: int) -> tuple[Text, ...]:
        return self.rows[index][1]

    def set_rows(self, rows: Sequence[tuple[str, Sequence[Text]]]) -> None:
        new = [(key, tuple(cells)) for key, cells in rows]
        # Each cell's signature and width, kept by the cell object while the rows hold it: a
        # pane that hands the same Text again for a cell that did not change (ThreadsPane's
        # cell cache) costs a lookup, not a signature and a width per cell and second.
        known, seen = self._cells, {}
        signatures = []
        grew = False
        widths = self.widths
        n_cols = len(widths)
        for _, cells in new:
            row = []
            for i, cell in enumerate(cells):
                entry = known.get(id(cell))
                if entry is None or entry[0] is not cell:
                    entry = (cell, _cell_signature(cell), cell.cell_len)
                seen[id(cell)] = entry
                row.append(entry[1])
                if i < n_cols and entry[2] > widths[i]:
                    widths[i] = entry[2]
                    grew = True
            signatures.append(tuple(row))
        self._cells = seen
        old = self._signatures
        self.rows = new
        self._signatures = signatures
        total = sum(self.widths) + GAP * (len(self.widths) - 1) + 1
        size = Size(total, len(new) + 1)
        if self.virtual_size != size:
            self.virtual_size = size
        if grew or len(old) != len(new):
            self._strips.clear()
            self.refresh()
            return
        # The changed rows on screen, in the widget's own lines (the header is line 0 and does
        # not scroll), refreshed in one call: a refresh per row costs more than its repaint.
        top = int(self.scroll_y)
        height = self.size.height
        width = max(size.width, self.size.width)
        changed = [Region(0, y, width, 1) for y, was, now in zip(range(1 - top, len(signatures) + 1 - top), old, signatures)
                   if was != now and 1 <= y < height]
        if changed:
            self.refresh(*changed)

    def render_lines(self, crop):
        # Read once per paint, not per row: the scroll offset and width are computed regions and
        # the styles walk the DOM, each dearer than drawing a cached row.
        self._frame = (self.scroll_offset, self.scrollable_content_region.width, self.rich_style,
                       self.get_component_rich_style("rowtable--header"))
        if not self._plain_box():
            return super().render_lines(crop)
        # The rows as they are (each cached by what it shows), not each line through Textual's
        # styles pass: a report changes most rows of the Threads tab every second.
        return self._finish_rows([self.render_line(y) for y in crop.line_range], crop, self._frame[1])

    def render_line(self, y: int) -> Strip:
        (scroll_x, scroll_y), width, base, header = self._frame
        if y == 0:
            cells = tuple(Text(c) for c in self.columns)
            signature = _signature(cells)
            style = header
        else:
            index = scroll_y + y - 1
            if index >= len(self.rows):
                return Strip.blank(width, base)
            cells = self.rows[index][1]
            signature = self._signatures[index]
            style = base
        key = (signature, tuple(self.widths), style)
        cached = self._strips.get(y if y == 0 else scroll_y + y)
        if cached is not None and cached[0] == key:
            strip = cached[1]
        else:
            strip = self._render_row(cells, style)
            self._strips[y if y == 0 else scroll_y + y] = (key, strip)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _render_row(self, cells: Sequence[Text], base: Style) -> Strip:
        console = self.app.console
        widths = self.widths
        last = len(widths) - 1
        segments: list[Segment] = []
        run, run_style = [" "], base   # the pieces of the current run of one style
        for i, width in enumerate(widths):
            cell = cells[i] if i < len(cells) else _EMPTY
            # rich's Text.render draws a Text's own style only over its spans (a console print
            # applies it): a plain cell is drawn here, in its style.
            pieces = _rich_cell(cell, width, console) if cell.spans else _plain_cell(cell, width, console)
            if i < last:   # between two cells of one style, the gap is in it too: one bar
                after = cells[i + 1] if i + 1 < len(cells) else _EMPTY
                same = cell.style and after.style == cell.style and not cell.spans
                pieces.append((" " * GAP, console.get_style(cell.style, default=Style.null()) if same else None))
            for text, style in pieces:
                if not text:
                    continue
                style = base + style if style else base
                if style is not run_style and style != run_style:
                    segments.append(Segment("".join(run), run_style))
                    run, run_style = [], style
                run.append(text)
        segments.append(Segment("".join(run), run_style))
        return Strip(segments, sum(widths) + GAP * last + 1)

    def on_resize(self) -> None:
        self._strips.clear()


_EMPTY = Text("")


def _cell_signature(cell: Text) -> tuple:
    """What a cell draws: equal signatures, equal cells."""
    return (cell.plain, cell.style, cell.justify, tuple(cell.spans))


def _signature(cells: Sequence[Text]) -> tuple:
    """What a row's cells draw: equal signatures, equal rows."""
    return tuple(_cell_signature(c) for c in cells)


def _plain_cell(cell: Text, width: int, console) -> list[tuple[str, Style | None]]:
    """A cell of plain text (no spans), cut with an ellipsis and padded to `width`, in the
    cell's style as a console prints it: padded on the right, the padding in it too (a row in
    the alarm style reads as one bar); justified right, the padding plain."""
    text = cell.plain
    n = cell_len(text)
    if n > width:
        text, n = set_cell_size(text, width - 1) + "…", width
    pad = " " * (width - n)
    style = console.get_style(cell.style, default=Style.null()) if cell.style else None
    if cell.justify == "right" and pad:
        return [(pad, None), (text, style)]
    return [(text + pad, style)]


def _rich_cell(cell: Text, width: int, console) -> list[tuple[str, Style | None]]:
    """A cell with spans, rendered by rich."""
    text = cell.copy()
    text.truncate(width, overflow="ellipsis")
    pad = width - text.cell_len
    if pad > 0:
        text = Text(" " * pad) + text if cell.justify == "right" else text + Text(" " * pad)
    return [(s.text, s.style) for s in text.render(console)]
