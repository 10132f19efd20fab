"""The Ranks pane: one row per rank, odd ones first, as run/verdict/rank_rows.py decides; usable
at 1,024 ranks (only the rows on screen are drawn; `w` filters)."""

from __future__ import annotations

import pytest

from dflash_tui.run.verdict.rank_rows import rank_rows
from dflash_tui.ui.panes.ranks import RanksPane, shown
from dflash_tui.ui.widgets.rows import RowTable
from tests.support import scenarios as R
from tests.ui.test_app import SIZE, make, until

pytestmark = pytest.mark.timeout(60)


def test_the_rows_put_the_stuck_odd_rank_first_then_stragglers():
    rows = rank_rows(R.ranks(64, stuck=7))
    assert [r.rank for r in rows[:2]] == [7, 0] and rows[0].state == "STUCK" and rows[0].odd
    assert rows[0].group == "lock threading.wait (data.py:40)" and rows[0].node == "h1"
    slow = rank_rows(R.ranks(64, slow=9))
    assert slow[0].cells() == ["9", "h2", "60009", "1527", "1.4 s", "7 %", "slow", "running forward (model.py:51)"]
    assert slow[1].cells()[5:7] == ["57 %", "ok"]
    assert [r.rank for r in shown(slow, "H2")] == [9, 8, *range(10, 16)]
    assert [r.rank for r in shown(slow, "h2 forward")] == [9] and len(shown(slow, "  ")) == 64


async def test_a_thousand_ranks_page_and_filter_with_w():
    app, _ = make(R.ranks(1024, stuck=777))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("5")
        table = app.query_one("#ranks-table", RowTable)
        await until(pilot, lambda: table.row_count == 1024)
        assert [str(c) for c in table.get_row_at(0)][:3] == ["777", "h98", "60777"]
        note = str(app.query_one("#ranks-note").render())
        assert "1024 ranks on 128 nodes · 1024 STUCK: ranks 0-1023 · 1 odd one(s) out: rank 777" in note
        assert app.query_one(RanksPane).tab_label() == "Ranks (1024 !)"
        table.focus()
        await pilot.press("pagedown")
        await until(pilot, lambda: table.scroll_y > 0)
        await pilot.press("w")
        box = app.query_one("#ranks-filter")
        await until(pilot, lambda: box.has_focus)
        await pilot.press(*"h2", "enter")
        await until(pilot, lambda: table.row_count == 8)
        assert [str(table.get_row_at(i)[0]) for i in range(8)] == [str(r) for r in range(8, 16)]
        assert "filter 'h2': 8 shown" in str(app.query_one("#ranks-note").render())
        await pilot.press("w", "escape")
        assert not box.display and table.row_count == 8


async def test_a_straggler_is_named_above_the_rows():
    app, _ = make(R.ranks(16, slow=9))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("w")   # the filter's key shows the tab
        await pilot.press("escape")
        table = app.query_one("#ranks-table", RowTable)
        await until(pilot, lambda: table.row_count == 16)
        note = str(app.query_one("#ranks-note").render())
        assert "rank 9 (node h2) is slow: the other ranks wait for it in all_reduce 57 % of the time" in note
        assert str(table.get_row_at(0)[6]) == "slow"
