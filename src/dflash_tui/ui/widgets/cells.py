"""TextCells: the cells of a table's draw, each (text, style) one Text from draw to draw.

A cell that says what it said at the last draw is the same Text object, so RowTable.set_rows
compares and measures it once; only the cells of the newest draw are kept.
"""

from __future__ import annotations

from rich.text import Text


class TextCells:
    def __init__(self) -> None:
        self._last: dict[tuple[str, str], Text] = {}
        self._now: dict[tuple[str, str], Text] = {}

    def new_draw(self) -> None:
        """The cells from here on belong to a new draw; the last one's can still be reused."""
        self._last, self._now = self._now, {}

    def __call__(self, text: str, style: str = "") -> Text:
        key = (text, style)
        found = self._now.get(key) or self._last.get(key)
        if found is None:
            found = Text(text, style=style)
        self._now[key] = found
        return found
