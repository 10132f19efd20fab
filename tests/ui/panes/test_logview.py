"""The Log pane's ring buffer, classification, search and first-error jump."""

from __future__ import annotations

import tracemalloc

import pytest
from textual.app import App

from dflash_tui.ui.fmt import age, sparkline
from dflash_tui.ui.panes.logview import ERROR, MARKER, PLAIN, TRACEBACK, LineClassifier, LogLines, clean

pytestmark = pytest.mark.timeout(60)

CRASH = """step 10 loss 2.5
Traceback (most recent call last):
  File "a.py", line 1, in <module>
    main()
ValueError: boom

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 3, in <module>
RuntimeError: worse
step 11 loss 2.4
[2026-06-01 04:12:00] ERROR drafter-1: nan
{"kind":"error","v":1,"time":1.0}
no errors here, 0 failures""".splitlines()


def test_classifier_marks_traceback_blocks_and_error_lines():
    classify = LineClassifier()
    kinds = [classify(line) for line in CRASH]
    assert kinds == [PLAIN, TRACEBACK, TRACEBACK, TRACEBACK, ERROR, PLAIN,  # blank after the error: plain
                     PLAIN, PLAIN, TRACEBACK, TRACEBACK, ERROR, PLAIN, ERROR, ERROR, PLAIN]


def test_chained_traceback_stays_one_block():
    classify = LineClassifier()
    lines = ["Traceback (most recent call last):", '  File "x"', "KeyError: 1", "",
             "The above exception was the direct cause of the following exception:", "",
             "Traceback (most recent call last):", '  File "y"', "ValueError: 2"]
    assert [classify(x) for x in lines] == [TRACEBACK, TRACEBACK, ERROR, PLAIN, PLAIN, PLAIN,
                                            TRACEBACK, TRACEBACK, ERROR]


def test_clean_strips_escapes_controls_and_caps_length():
    assert clean("\x1b[31mred\x1b[0m\tx\n") == "red x"
    assert clean("10%\r50%\r100% done") == "100% done"
    assert clean("a\x00b\x07c") == "abc"
    long = clean("x" * 10_000)
    assert len(long) == 2000 and long.endswith("…")
    # 8-bit C1 controls (a one-byte CSI, an OSC), separators and lone surrogates: shown, inert.
    assert clean("a\x9b31mb\x9d0;t\x9c\u2028\ud800") == "a\\x9b31mb\\x9d0;t\\x9c\\u2028\\ud800"


def test_a_batch_is_classified_as_line_by_line_and_printable_as_isprintable():
    """LogLines.append's batch tests (a character pre-test before the error words, printable()
    for str.isprintable) decide as the per-line ones: each kind found inside a batch of
    plain lines, and every ASCII character and a few others judged as isprintable does."""
    from dflash_tui.ui.panes import logview
    for c in map(chr, [*range(0x80), 0x85, 0xA0, 0x2028, 0x4E00, 0xD800]):
        assert logview.printable(f"ab{c}cd") == f"ab{c}cd".isprintable(), hex(ord(c))
    assert logview.printable("")
    for hint in (*logview._ERROR_HINTS, logview._TB_START, logview._FOLLOWER_NOTE):
        assert any(c in hint for c in logview._HINT_CHARS), hint
    plain = [f"1796456656.{k:06d} step {k} loss 2.3456 acc 0.4567 tok/s 18450" for k in range(200)]
    for odd in (*CRASH, "[dflash-tui: train.log was truncated; following it from its start]",
                "a FATAL one", "bell\x07 and \x1b[31mcolour\x1b[0m"):
        batch = plain[:100] + [odd] + plain[100:]
        ll = LogLines(max_lines=500)
        ll._after_change = lambda *a, **k: None    # no app: the buffer alone
        ll.append(batch)
        classify = LineClassifier()
        assert ll.kinds() == [classify(line) for line in map(clean, batch)], odd


def test_helpers():
    assert age(None) == "n/a" and age(-3) == "0s" and age(59) == "59s" and age(754) == "12m34s"
    assert age(7300) == "2h01m" and age(90000) == "1d1h"
    assert sparkline([0, 50, 100, None], 4, 0, 100) == "▁▅█ "
    assert sparkline([None, None], 2) == "  "
    assert sparkline([1, 2, 4, 8], 4) == "▂▃▅█"   # own maximum as the top


class LogApp(App):
    def __init__(self, max_lines: int = 100) -> None:
        super().__init__()
        self.max_lines = max_lines

    def compose(self):
        yield LogLines(max_lines=self.max_lines)


async def test_ring_buffer_is_bounded_and_keeps_the_view_stable():
    app = LogApp(max_lines=100)
    async with app.run_test(size=(80, 20)) as pilot:
        ll = app.query_one(LogLines)
        ll.append([f"line {i}" for i in range(250)])
        await pilot.pause()
        assert ll.line_count == 100 and ll.dropped == 150
        assert ll.lines()[0] == "line 150" and ll.lines()[-1] == "line 249"
        assert ll.scroll_y == ll.max_scroll_y
        ll.go_top()
        ll.scroll_to(y=40, animate=False, immediate=True, force=True)
        top_line = ll.lines()[int(ll.scroll_y)]
        ll.append([f"more {i}" for i in range(10)])    # 10 fall off the top
        await pilot.pause()
        assert ll.lines()[int(ll.scroll_y)] == top_line  # same text still at the top of the view


async def test_memory_stays_bounded_for_a_huge_log():
    app = LogApp(max_lines=5000)
    async with app.run_test(size=(80, 20)) as pilot:
        ll = app.query_one(LogLines)
        line = "step 123456 loss 2.3456 acc 0.4567 tau 3.21 tok/s 18450 " + "x" * 60
        ll.append([line] * 5000)
        await pilot.pause()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(40):                          # 200,000 more lines through the ring
            ll.append([line] * 5000)
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert ll.line_count == 5000 and ll.dropped == 200_000
        assert grown < 4 * 2**20, f"ring grew by {grown / 2**20:.1f} MiB"


async def test_search_wraps_and_first_error_finds_the_traceback():
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        ll = app.query_one(LogLines)
        ll.append(CRASH)
        await pilot.pause()
        assert ll.first_error() == 1 and ll.cursor == 1 and not ll.follow
        assert ll.search("STEP") == 11          # after the cursor, case-insensitive
        assert ll.search("step") == 0           # wraps around
        assert ll.search("step", backwards=True) == 11
        assert ll.search("nothing like this") is None
        ll.append_marker("file truncated")
        assert ll.kinds()[-1] == MARKER and ll.lines()[-1] == "── file truncated ──"
        # Rendering the current hit and the error lines works at any scroll offset.
        strip = ll.render_line(0)
        assert strip.cell_length == ll.scrollable_content_region.width


async def test_first_error_none_when_clean():
    app = LogApp()
    async with app.run_test(size=(80, 10)) as pilot:
        ll = app.query_one(LogLines)
        ll.append(["step 1", "step 2"])
        await pilot.pause()
        assert ll.first_error() is None and ll.follow


def _segments(strips) -> list[list]:
    return [list(strip) for strip in strips]


@pytest.mark.parametrize("filters", ["theme", "no-color", "monochrome", "dim", "ansi-theme"])
async def test_rows_drawn_directly_equal_textuals_pipeline(filters):
    """The log draws its rows itself (no per-line pass through Textual's styles cache, a row the
    line filters leave unchanged not copied): what reaches the compositor is the same, for every
    kind of row and scroll state, under each of Textual's line filters."""
    from textual.filter import ANSIToTruecolor, DimFilter, Monochrome, NoColor
    from textual.geometry import Region
    app = LogApp(max_lines=200)
    async with app.run_test(size=(60, 12)) as pilot:
        if filters == "no-color":
            app._filters.append(NoColor())
        elif filters == "monochrome":
            app._filters.append(Monochrome())
        elif filters == "dim":
            app._filters.append(DimFilter())
        elif filters == "ansi-theme":   # the log's colours as ANSI ones: the filter changes every row
            app._filters = [ANSIToTruecolor(app.ansi_theme)]
            app.query_one(LogLines).styles.color = "ansi_red"
        ll = app.query_one(LogLines)
        ll.append(CRASH + ["wide: 漢字かな " * 3, "tab\tand ünïcödé", "x" * 150] + [f"step {i}" for i in range(30)])
        ll.show_partial("47%|████▋     | 47/100")
        await pilot.pause()

        def both(crop: Region):
            fast = _segments(ll.render_lines(crop))
            ll._plain_box = lambda: False   # Textual's own path, from a clean cache
            ll._styles_cache.clear()
            slow = _segments(ll.render_lines(crop))
            del ll._plain_box
            return fast, slow

        size = ll.region.size
        states = [lambda: None,                                   # following, the partial row last
                  lambda: ll.search("step 2"),                    # a cursor row and matches
                  lambda: ll.first_error(),                       # error and traceback rows on screen
                  lambda: ll.scroll_to(x=7, animate=False, immediate=True, force=True),   # sideways
                  lambda: setattr(ll, "search_term", "")]
        for change in states:
            change()
            await pilot.pause()
            for crop in (Region(0, 0, size.width, size.height), Region(3, 2, size.width - 10, 5)):
                fast, slow = both(crop)
                assert fast == slow, crop


async def test_a_row_that_only_moved_is_not_drawn_again():
    app = LogApp(max_lines=200)
    async with app.run_test(size=(60, 12)) as pilot:
        ll = app.query_one(LogLines)
        ll.append([f"step {i}" for i in range(100)])
        await pilot.pause()
        drawn = []
        render_line = ll.render_line
        ll.render_line = lambda y: drawn.append(y) or render_line(y)
        ll.append(["step 100", "step 101"])          # every row moves up two
        await pilot.pause()
        assert len(drawn) == 2, drawn                 # only the two new rows were drawn


# What a run can print into train.log that a terminal acts on: 8-bit CSI and OSC (U+009B,
# U+009D), a string terminator, NEL, a line separator, a lone surrogate.
C1 = ["\x9b2J", "\x9d0;pwned\x9c", "\x85", "\u2028", "\ud800"]


def _drawn(ll: LogLines) -> str:
    return "".join(seg.text for y in range(ll.scrollable_content_region.height) for seg in ll.render_line(y))


async def test_no_c1_control_reaches_the_screen_from_any_kind_of_row():
    """Lines in one batch, a redrawn display (cursor up), the partial line a bar rewrites, a
    search for the text: whatever the row, what is drawn holds no C1 control, its escape instead."""
    app = LogApp(max_lines=200)
    async with app.run_test(size=(100, 16)) as pilot:
        ll = app.query_one(LogLines)
        ll.append([f"step {i} {c}" for i, c in enumerate(C1)])
        ll.append(["Traceback (most recent call last):", f"ValueError: {C1[0]}{C1[1]}"])
        ll.append([f"bar 1 {C1[0]}", f"\x1b[1Abar 2 {C1[1]}"])          # rich's redraw in place
        ll.show_partial(f"47%|####   | 47/100 {C1[2]}\r48%|####   | 48/100 {C1[1]}")
        await pilot.pause()
        drawn = _drawn(ll) + app.export_screenshot()
        bad = sorted({hex(ord(c)) for c in drawn if 0x80 <= ord(c) <= 0x9f or 0xd800 <= ord(c) <= 0xdfff
                      or c in "\u2028\u2029"})
        assert not bad, bad
        assert "step 0 \\x9b2J" in ll.lines() and "\\x9d0;pwned\\x9c" in ll.partial
        assert ll.search("x9b2J") is not None


class TabbedLogApp(App):
    """The log behind another tab, as on the dashboard while the Metrics tab is shown."""

    def compose(self):
        from textual.widgets import Static, TabbedContent, TabPane
        with TabbedContent():
            with TabPane("Log", id="log"):
                yield LogLines(max_lines=1000)
            with TabPane("Other", id="other"):
                yield Static("charts")


async def test_a_growing_log_behind_another_tab_asks_for_no_layout():
    # A log that grows (a line a second, its ring far from full) while another tab is shown
    # must not make Textual lay out and repaint that tab's screen every time.
    app = TabbedLogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        ll = app.query_one(LogLines)
        ll.append([f"step {i}" for i in range(5)])
        await pilot.pause()
        app.query_one("TabbedContent").active = "other"
        await pilot.pause()
        await pilot.pause()
        layouts = []
        refresh_layout = app.screen._refresh_layout

        def counted(*args, **kwargs):
            layouts.append(1)
            return refresh_layout(*args, **kwargs)
        app.screen._refresh_layout = counted
        for i in range(5, 40):
            ll.append([f"step {i}"])
            await pilot.pause()
        assert layouts == []
        app.query_one("TabbedContent").active = "log"     # shown: sized and at its end at once
        await pilot.pause()
        await pilot.pause()
        assert ll.virtual_size.height == 40
        assert ll.scroll_y == ll.max_scroll_y > 0
        assert "step 39" in "\n".join(s.text for s in app.screen._compositor.render_strips())
        # A key that reveals the pane jumps before its Show: to the row asked for all the same.
        app.query_one("TabbedContent").active = "other"
        await pilot.pause()
        await pilot.pause()
        ll.append([f"step {i}" for i in range(40, 200)] + ["RuntimeError: boom"] + [f"step {i}" for i in range(200, 260)])
        await pilot.pause()
        app.query_one("TabbedContent").active = "log"
        assert ll.first_error() == 200
        await pilot.pause()
        await pilot.pause()
        assert "RuntimeError: boom" in "\n".join(s.text for s in app.screen._compositor.render_strips())
