"""The Log pane: a bounded, searchable tail of train.log (or events.jsonl).

`LogLines` is a Line-API ScrollView (as toolong does): it renders only the visible rows
from a ring buffer, so a log of any size costs at most `max_lines` lines of memory and a
redraw costs only the lines on screen. Tracebacks and error lines are classified once, on
arrival, so highlighting and "jump to first error" need no rescans of the text.
"""

from __future__ import annotations

import re
from collections import deque

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.containers import Vertical
from textual.message import Message
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static

from ...contract.rundir import inert_text
from ..sources.source import LOG_NAMES
from ..widgets.plain import PlainRows
from .base import Pane, PaneKey

PLAIN, ERROR, TRACEBACK, MARKER = 0, 1, 2, 3

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Log levels in capitals, Python exception lines ("ValueError: ..."), and error events.
# Anchored on literal words (no leading \w*), so a thousand lines a second cost little.
_ERROR = re.compile(r"Error:|Exception:|\b(?:ERROR|CRITICAL|FATAL)\b|\"kind\":\s*\"error\"")
# Literal pieces every _ERROR match contains: a plain substring scan (fast) rules a batch out.
_ERROR_HINTS = ("Error:", "Exception:", "ERROR", "CRITICAL", "FATAL", '"error"')
_TB_START = "Traceback (most recent call last):"
# What run/logtail.LogFollower says about the file itself (truncated, rotated, skipped).
_FOLLOWER_NOTE = "[dflash-tui: "
# Each of _ERROR_HINTS, _TB_START and _FOLLOWER_NOTE holds one of these characters: a batch
# with none of them (a test of one character runs at memchr speed, a word's at a tenth of it)
# needs no search for the words.
_HINT_CHARS = (":", '"', "R", "F")
# ASCII control characters (what str.isprintable refuses in ASCII text) to NUL, the rest to 1.
_ASCII_CONTROLS = bytes(0 if b < 0x20 or b == 0x7F else 1 for b in range(256))
_TB_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
MAX_LINE_CHARS = 2000
_NO_FILL = (0, None, ())
# Cursor up N lines (CSI N A, CSI N F): how rich redraws a display of several lines in place.
_CURSOR_UP = re.compile(r"\x1b\[([0-9]*)[AF]")


def clean(line: str) -> str:
    """One displayable line: no ANSI escapes, no C0 control characters, tabs expanded, capped.
    What else a terminal could act on (a C1 control: U+009B is a one-byte CSI, U+009D an OSC, to
    some terminals; a line separator, a lone surrogate) is shown as its escape (inert_text)."""
    line = _ANSI.sub("", line.rstrip("\r\n"))
    if "\r" in line:  # progress bars redraw with \r: what a terminal would show is the last part
        line = line.rsplit("\r", 1)[-1]
    line = inert_text(_CONTROL.sub("", line.expandtabs(4)))
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def printable(text: str) -> bool:
    """str.isprintable, for ASCII text (a log's common batch) a byte translation and one
    memchr instead of a test of each character's Unicode class (a 45 KB batch: ~30 us, not ~150)."""
    if text.isascii():
        return b"\0" not in text.encode("ascii").translate(_ASCII_CONTROLS)
    return text.isprintable()


def final_state(text: str) -> str:
    """What a terminal shows of one row written as `text`: after the last carriage return that
    is followed by something (a bar that ends with "\r" + erase shows its last drawing until
    the next one arrives)."""
    pieces = _ANSI.sub("", text).split("\r")
    shown = next((piece for piece in reversed(pieces) if piece.strip()), "")
    return clean(shown)


def cursor_moves(line: str) -> list[tuple[int, str]]:
    """A complete line cut at its cursor-up sequences: (rows up before the piece, the piece)."""
    parts = _CURSOR_UP.split(line)
    out = [(0, parts[0])]
    for count, piece in zip(parts[1::2], parts[2::2]):
        out.append((int(count or 1), piece))
    return out


class LineClassifier:
    """Marks traceback blocks and error lines as they stream in (state: inside a traceback)."""

    def __init__(self) -> None:
        self.in_traceback = False

    def __call__(self, line: str) -> int:
        if line.startswith(_FOLLOWER_NOTE):
            self.in_traceback = False
            return MARKER
        if line.startswith(_TB_START):
            self.in_traceback = True
            return TRACEBACK
        if self.in_traceback:
            if not line or line[0].isspace() or line.startswith(_TB_CHAIN):
                return TRACEBACK
            self.in_traceback = False  # the unindented line that ends a traceback is the error
            return ERROR
        return ERROR if _ERROR.search(line) else PLAIN

    def reset(self) -> None:
        self.in_traceback = False


class LogLines(PlainRows, ScrollView, can_focus=True):
    """Ring buffer of log lines rendered through the Line API."""

    COMPONENT_CLASSES = {
        "loglines--error",
        "loglines--traceback",
        "loglines--marker",
        "loglines--match",
        "loglines--cursor",
    }

    DEFAULT_CSS = """
    LogLines > .loglines--error { color: $error; text-style: bold; }
    LogLines > .loglines--traceback { color: $warning; }
    LogLines > .loglines--marker { color: $text-muted; text-style: italic; }
    LogLines > .loglines--match { background: $warning 60%; color: $text; }
    LogLines > .loglines--cursor { background: $accent 40%; }
    """

    follow: reactive[bool] = reactive(True)

    def __init__(self, max_lines: int = 5000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._kinds: deque[int] = deque(maxlen=max_lines)
        self._dropped = 0          # lines that fell off the top of the ring: absolute numbering
        self._width = 0
        self._classify = LineClassifier()
        self.search_term = ""
        self.cursor: int | None = None   # absolute line number of the current search hit
        self._styles: dict[str, Style] = {}
        self._hidden = False          # set by Hide (another tab on top), cleared by Show
        self._fell_off_hidden = 0     # lines dropped while hidden: the scroll fix-up owed on show
        self._back = 0                # rows the cursor is above the end (a display redrawn in place)
        self._partial = ""            # the line being written now (shown below the lines)
        self._frame = ((0, 0), 0)     # scroll offset and row width of the paint under way
        # The padding past the row width (PlainRows._row_fill) that the rows of the paint under
        # way draw themselves with (one Strip a row, not two); none outside _render_rows, so
        # render_line keeps the Line API's width for every other caller.
        self._fill: tuple = _NO_FILL
        # The rows on screen by absolute line number: (line, kind, cursor row, Strip), valid
        # while _rows_look (width, sideways scroll, search term) holds and the styles stay.
        self._rows: dict[int, tuple[str, int, bool, Strip]] = {}
        self._rows_look: tuple = ()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()   # theme or CSS changed: look the styles up again
        self._rows = {}

    def _style(self, name: str) -> Style:
        # Looked up once, not per rendered row: resolving a rich style walks the DOM.
        style = self._styles.get(name)
        if style is None:
            style = self.rich_style if name == "base" else self.get_component_rich_style(name)
            self._styles[name] = style
        return style

    # -- data -------------------------------------------------------------------------------
    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def dropped(self) -> int:
        return self._dropped

    def lines(self) -> list[str]:
        return list(self._lines)

    def last_line(self) -> str | None:
        return self._lines[-1] if self._lines else None

    def kinds(self) -> list[int]:
        return list(self._kinds)

    def append(self, lines: list[str]) -> None:
        if not lines:
            return
        joined = "".join(lines)
        if self._back or ("\x1b" in joined and "\x1b[" in joined and any("\x1b[" in raw and _CURSOR_UP.search(raw) for raw in lines)):
            self._append_redrawn(lines)
            return
        arrived = len(lines)
        if arrived > self.max_lines:
            lines = lines[-self.max_lines:]   # the rest would fall off the ring at once
        before = len(self._lines)
        # Fast path for the common batch (every line printable, none too long): one test over
        # the batch, no per-line pass and no regex at all.
        longest = max(map(len, lines))
        if longest <= MAX_LINE_CHARS and printable(joined):
            cleaned = lines
        else:
            cleaned = [raw if raw.isprintable() and len(raw) <= MAX_LINE_CHARS else clean(raw) for raw in lines]
            longest = max(map(len, cleaned))
        self._lines.extend(cleaned)
        classify = self._classify
        blob = "\n".join(cleaned)
        if classify.in_traceback or (any(c in blob for c in _HINT_CHARS) and (
                _TB_START in blob or _FOLLOWER_NOTE in blob or any(h in blob for h in _ERROR_HINTS))):
            self._kinds.extend(classify(line) for line in cleaned)
        else:
            self._kinds.extend([PLAIN] * len(cleaned))   # one search over the batch said: no errors
        self._width = max(self._width, longest)
        fell_off = before + arrived - len(self._lines)
        self._after_change(fell_off)

    def _append_redrawn(self, lines: list[str]) -> None:
        """Lines of a display that moves the cursor up to redraw itself (rich's progress bars):
        a redrawn row is replaced in place, so it shows once, at its latest state."""
        before = len(self._lines)
        appended = 0
        for raw in lines:
            row = len(self._lines) - self._back
            for up, piece in cursor_moves(raw):
                row = max(0, row - up)
                shown = final_state(piece)
                if row >= len(self._lines):
                    if shown or up == 0:
                        self._lines.append(shown)
                        self._kinds.append(self._classify(shown))
                        appended += 1
                        row = len(self._lines) - 1
                elif shown:
                    self._lines[row] = shown
                    self._kinds[row] = self._classify(shown)
                self._width = max(self._width, len(shown))
            self._back = max(0, len(self._lines) - (row + 1))
        self._after_change(before + appended - len(self._lines))

    def show_partial(self, raw: str) -> None:
        """Show the line the program is writing now, not ended yet, at its latest state (a tqdm
        bar redraws one line with carriage returns for minutes): one row below the lines,
        replaced at each call, gone once the line ends and arrives through `append`."""
        shown = final_state(raw) if raw else ""
        if shown == self._partial:
            return
        self._partial = shown
        self._width = max(self._width, len(shown))
        self._after_change(0)

    @property
    def partial(self) -> str:
        return self._partial

    def append_marker(self, text: str) -> None:
        """A line of our own (file switched, truncated, unavailable), styled apart from the log."""
        before = len(self._lines)
        self._lines.append(f"── {text} ──")
        self._kinds.append(MARKER)
        self._classify.reset()
        self._after_change(before + 1 - len(self._lines))

    def clear(self) -> None:
        self._partial = ""
        self._back = 0
        self._lines.clear()
        self._kinds.clear()
        self._dropped = 0
        self._width = 0
        self._classify.reset()
        self.cursor = None
        self._after_change(0)
        self.scroll_to(0, 0, animate=False)

    def on_hide(self) -> None:
        self._hidden = True

    def on_show(self) -> None:
        if self._hidden:
            self._hidden = False
            fell_off, self._fell_off_hidden = self._fell_off_hidden, 0
            self._after_change(0, shift=fell_off)

    def _after_change(self, fell_off: int, shift: int = 0) -> None:
        self._dropped += fell_off
        if self._hidden:
            # Behind another tab: a refresh or scroll of a widget that is not on screen makes
            # Textual rebuild the whole screen map on the next frame (and repaint it all), and
            # so does a new virtual size (a layout reactive): a log that grows by a line a
            # second would repaint the Metrics tab's charts every second. Sized, scrolled and
            # painted once, when shown again (on_show).
            self._fell_off_hidden += fell_off
            return
        self._size_now()
        fell_off += shift
        if self.follow:
            bottom = self.max_scroll_y
            if self.scroll_y != bottom:   # a full ring that follows is at the bottom already
                self.scroll_to(y=bottom, animate=False, immediate=True, force=True)
        elif fell_off:
            # Keep the rows the reader is looking at in place while the ring drops old ones.
            self.scroll_to(y=max(0, self.scroll_y - fell_off), animate=False, immediate=True, force=True)
        self.refresh()

    def _size_now(self) -> None:
        """The virtual size of the lines held. Unchanged once the ring is full; one row more
        while a line is being written. A jump made as the tab comes back (a key that reveals
        the pane, before its Show) scrolls within it, not within the size it had when hidden."""
        self.virtual_size = Size(self._width, len(self._lines) + bool(self._partial))

    # -- navigation -------------------------------------------------------------------------
    def on_resize(self) -> None:
        # Lines may arrive before the first layout (size 0); pin to the end once sized.
        if self.follow:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self._size_now()
            self.cursor = None
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)

    def go_top(self) -> None:
        self.follow = False
        self._size_now()
        self.scroll_to(y=0, animate=False, immediate=True, force=True)

    def go_bottom(self) -> None:
        self.follow = True
        self._size_now()
        self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)

    def _show(self, index: int) -> None:
        """Put buffer row `index` on screen, a third of the way down, and stop following."""
        self.follow = False
        self.cursor = self._dropped + index
        self._size_now()
        self.scroll_to(y=max(0, index - self.size.height // 3), animate=False, immediate=True, force=True)
        self.refresh()

    def first_error(self) -> int | None:
        """Buffer row of the first traceback or error line, shown; None when there is none."""
        for i, kind in enumerate(self._kinds):
            if kind in (ERROR, TRACEBACK):
                self._show(i)
                return i
        return None

    def search(self, term: str, backwards: bool = False) -> int | None:
        """Next (or previous) line containing `term`, case-insensitive, wrapping around."""
        self.search_term = term
        if not term or not self._lines:
            self.refresh()
            return None
        needle = term.lower()
        n = len(self._lines)
        if self.cursor is not None and self.cursor >= self._dropped:
            start = self.cursor - self._dropped
        else:
            start = n - 1 if backwards else -1
            if not self.follow and not backwards:
                start = int(self.scroll_y) - 1
        step = -1 if backwards else 1
        for k in range(1, n + 1):
            i = (start + step * k) % n
            if needle in self._lines[i].lower():
                self._show(i)
                return i
        self.refresh()
        return None

    # -- rendering --------------------------------------------------------------------------
    _KIND_STYLE = {ERROR: "loglines--error", TRACEBACK: "loglines--traceback", MARKER: "loglines--marker"}

    def render_lines(self, crop: Region) -> list[Strip]:
        # Where the rows start and how wide they are, read once per paint: each is a computed
        # region, and looked up per row they cost more than drawing the row.
        self._frame = (self.scroll_offset, self.scrollable_content_region.width)
        if not self._plain_box():
            self._rows = {}
            return super().render_lines(crop)
        return self._render_rows(crop)

    def _render_rows(self, crop: Region) -> list[Strip]:
        """The rows of `crop` as the compositor wants them, each drawn once while it is on screen:
        at a thousand lines a second every row moves up each frame, and a row that only moved
        is the same Strip (its filtered copy cached on it) instead of a new one per frame."""
        (scroll_x, scroll_y), width = self._frame
        fill = self._row_fill(width)
        look = (width, scroll_x, self.search_term, fill[:2])
        if look != self._rows_look:
            self._rows_look, self._rows = look, {}
        old, rows = self._rows, {}
        lines, kinds, dropped, n = self._lines, self._kinds, self._dropped, len(self._lines)
        cursor = -1 if self.cursor is None else self.cursor - dropped
        strips = []
        self._fill = fill
        try:
            for y in crop.line_range:
                index = scroll_y + y
                if index >= n:
                    strips.append(self.render_line(y))   # the partial line or a blank row: not kept
                    continue
                line, kind, is_cursor = lines[index], kinds[index], index == cursor
                entry = old.get(dropped + index)
                if entry is None or entry[0] is not line or entry[1] != kind or entry[2] != is_cursor:
                    entry = (line, kind, is_cursor, self.render_line(y))
                rows[dropped + index] = entry
                strips.append(entry[3])
        finally:
            self._fill = _NO_FILL
        self._rows = rows   # only what is on screen now: a scroll or a jump drops the rest
        return self._finish_rows(strips, crop, width, fill)

    def render_line(self, y: int) -> Strip:
        (scroll_x, scroll_y), width = self._frame
        index = scroll_y + y
        base = self._style("base")
        if index >= len(self._lines):
            if index == len(self._lines) and self._partial:
                line = self._partial
                return Strip([Segment(line, base)], cell_len(line)).crop_extend(scroll_x, scroll_x + width, base)
            return Strip.blank(width, base)
        line = self._lines[index]
        kind_style = self._KIND_STYLE.get(self._kinds[index])
        style = base + self._style(kind_style) if kind_style else base
        if self.cursor is not None and self.cursor - self._dropped == index:
            base = base + self._style("loglines--cursor")   # the whole row, padding included
            style = style + self._style("loglines--cursor")
        term = self.search_term
        if term and term.lower() in line.lower():
            text = Text(line, style=style, no_wrap=True, end="")
            text.highlight_words([term], self._style("loglines--match"), case_sensitive=False)
            segments = list(text.render(self.app.console))
        elif scroll_x == 0 and line.isascii() and len(line) <= width:
            # The common row: ASCII, fits, not scrolled sideways: one padded segment, no crop,
            # and the paint's padding to the content width drawn with it.
            extra, fill_style, _ = self._fill
            if extra:
                return Strip([Segment(line, style), Segment(" " * (width - len(line)), base),
                              Segment(" " * extra, fill_style)], width + extra)
            return Strip([Segment(line, style), Segment(" " * (width - len(line)), base)], width)
        else:
            segments = [Segment(line, style)]
        return Strip(segments, cell_len(line)).crop_extend(scroll_x, scroll_x + width, base)


class LogPane(Pane, Vertical):
    """Title row (file, follow, search state), the lines, and a search box shown on '/'.

    Fed by ui/streams.py's log follower, not by the reports."""

    PANE_ID = "log"
    TITLE = "Log"
    STREAM = "log"
    KEYS = (
        PaneKey("l", "switch_log", "Log", "switch the log pane between train.log and events.jsonl", reveal=True),
        PaneKey("f", "toggle_follow", "Follow", "follow the end of the log on/off"),
        PaneKey("slash", "search", "Search", "search the log; n / N for next / previous match", reveal=True),
        PaneKey("n", "search_next", "Next match", show=False, reveal=True),
        PaneKey("N", "search_prev", "Previous match", show=False, reveal=True),
        PaneKey("e", "first_error", "Error", "jump to the first traceback or error line in the log", reveal=True),
        # Last in the footer: shown from 100 columns (it scrolls), always in ? help and the palette.
        PaneKey("g", "log_top", "Top", "top of the log (follow off)", late=True),
        PaneKey("G", "log_bottom", "End", "bottom of the log (follow on)", late=True),
    )

    class FileChosen(Message):
        """The user chose another file to show (`l`): the view follows it instead."""

    log_name: reactive[str] = reactive("train.log")
    problem: reactive[str] = reactive("")   # why the file cannot be read right now, one line
    missing: reactive[bool] = reactive(False)  # the file does not exist (yet)

    def __init__(self, max_lines: int = 5000, **kwargs) -> None:
        super().__init__(**kwargs)
        self._title = ""
        # Held, not queried: the log worker may append while the app tears the screen down.
        self.title_bar = Static(id="log-title")
        self.lines = LogLines(max_lines=max_lines, id="log-lines")
        self.search_box = Input(placeholder="search the log (enter: next match, escape: close)",
                                id="log-search")
        self.search_box.display = False

    def new_run(self, run_id: str) -> None:
        self.lines.append_marker(f"new run {run_id}")

    def reset(self) -> None:
        self.lines.clear()

    def compose(self):
        yield self.title_bar
        yield self.lines
        yield self.search_box

    def on_mount(self) -> None:
        self.watch(self.lines, "follow", lambda _: self.update_title())
        self.update_title()

    def watch_log_name(self) -> None:
        self.update_title()

    def watch_problem(self) -> None:
        self.update_title()

    def watch_missing(self) -> None:
        self.update_title()

    def update_title(self) -> None:
        if not self.is_mounted:
            return
        ll = self.lines
        parts = [self.log_name + (" (not found)" if self.missing else ""),
                 "follow on" if ll.follow else "follow off"]
        if ll.search_term:
            parts.append(f"search: {ll.search_term}")
        if ll.dropped:
            parts.append(f"last {ll.max_lines} lines kept")
        if self.problem:
            parts.append(self.problem)
        title = " · ".join(parts)
        if title != self._title:
            self._title = title   # one fixed line: never worth a relayout
            self.title_bar.update(Text(title, no_wrap=True, overflow="ellipsis"), layout=False)

    def open_search(self) -> None:
        box = self.search_box
        box.display = True
        box.value = self.lines.search_term
        box.focus()

    def close_search(self) -> None:
        box = self.search_box
        box.display = False
        self.lines.focus()

    def search(self, term: str, backwards: bool = False) -> bool:
        found = self.lines.search(term, backwards=backwards) is not None
        self.update_title()
        return found

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if not self.search(event.value):
            self.app.notify(f"no line contains {event.value!r}", severity="warning", timeout=3)

    def on_key(self, event) -> None:
        if event.key == "escape" and self.search_box.has_focus:
            event.stop()
            self.close_search()

    # -- keys (KEYS) ------------------------------------------------------------------------
    def action_switch_log(self) -> None:
        i = LOG_NAMES.index(self.log_name)
        self.log_name = LOG_NAMES[(i + 1) % len(LOG_NAMES)]
        self.lines.clear()
        self.post_message(self.FileChosen())

    def action_toggle_follow(self) -> None:
        self.lines.follow = not self.lines.follow

    def action_search(self) -> None:
        self.open_search()

    def _search_again(self, backwards: bool) -> None:
        term = self.lines.search_term
        if not term:
            self.action_search()
        elif not self.search(term, backwards=backwards):
            self.app.notify(f"no line contains {term!r}", severity="warning", timeout=3)

    def action_search_next(self) -> None:
        self._search_again(False)

    def action_search_prev(self) -> None:
        self._search_again(True)

    def action_first_error(self) -> None:
        if self.lines.first_error() is None:
            self.app.notify(f"no traceback or error line in the last {self.lines.max_lines} lines", timeout=3)

    def action_log_top(self) -> None:
        self.lines.go_top()

    def action_log_bottom(self) -> None:
        self.lines.go_bottom()
