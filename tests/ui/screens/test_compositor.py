"""The run view's and the fleet's compositor draws only widgets that can appear in an update, and
every update it draws is, byte for byte, the one Textual's own compositor draws from the same
state (each partial update of a scripted session drawn both ways and compared)."""

from __future__ import annotations

import pytest
from rich.console import Console
from textual._compositor import Compositor

from dflash_tui.ui.screens.compositor import ChangedOnlyCompositor
from dflash_tui.ui.screens.dialogs import HelpScreen
from dflash_tui.ui.screens.fleet import FleetScreen
from tests.support import scenarios as R
from tests.ui.test_app import SIZE, make, until
from tests.ui.screens.test_fleet_snapshots import fleet_app

pytestmark = pytest.mark.timeout(60)


class Checked(ChangedOnlyCompositor):
    """Draws each partial update twice, its own way and Textual's, from one state, and keeps
    what differed and how many widgets each way drew."""

    compared: list
    mismatches: list

    def render_partial_update(self):
        regions = set(self._dirty_regions)
        drawn = self._drawn = []
        ours = super().render_partial_update()
        if ours is None:
            return None
        ours_drawn = len(drawn)
        self._dirty_regions.update(regions)
        self.__class__ = Stock
        try:
            stock = Compositor.render_partial_update(self)
        finally:
            self.__class__ = Checked
        console = Console(width=SIZE[0], color_system="truecolor", force_terminal=True)
        a, b = ours.render_segments(console), stock.render_segments(console)
        self.compared.append((ours_drawn, len(drawn) - ours_drawn, len(a)))
        if a != b:
            self.mismatches.append((sorted(regions), a, b))
        return ours

    def _get_renders(self, crop=None):
        for render in super()._get_renders(crop):
            self._drawn.append(render[0])
            yield render


class Stock(Compositor):
    """Textual's own `_get_renders`, counting into the same list."""

    def _get_renders(self, crop=None):
        for render in super()._get_renders(crop):
            self._drawn.append(render[0])
            yield render


async def test_every_partial_update_is_textuals_and_a_log_frame_draws_fewer_widgets():
    app, sources = make()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.run_view
        assert type(screen._compositor) is ChangedOnlyCompositor
        screen._compositor.__class__ = Checked
        comp = screen._compositor
        comp.compared, comp.mismatches = [], []
        lines = screen.log_pane.lines
        await until(pilot, lambda: screen.report is not None and lines.line_count > 0)
        # The log flowing (rows and the scrollbar), a search (the title row and the matched
        # rows), the health checks changing, a tab and back, a dialog over the screen and closed.
        for k in range(6):
            sources["h200"].push_log("train.log", [f"step {3000 + 10 * k + i} loss 1.{i}" for i in range(10)])
            await until(pilot, lambda: lines.lines()[-1].startswith(f"step {3009 + 10 * k}"))
            await pilot.pause(0.05)
        await pilot.press("slash", *"loss 1.3", "enter", "escape")
        stalled = R.stalled()
        sources["h200"].push_report(stalled)
        await until(pilot, lambda: screen.report is stalled)
        await pilot.press("2")
        await pilot.pause(0.1)
        await pilot.press("1", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        sources["h200"].push_log("train.log", ["step 4000 loss 0.9"])
        await until(pilot, lambda: lines.lines()[-1] == "step 4000 loss 0.9")
        await pilot.pause(0.1)

    assert comp.mismatches == []
    assert len(comp.compared) >= 8
    # A log frame draws the log's widgets, not the footer, the tabs and the screen's background.
    assert any(ours < stock for ours, stock, _ in comp.compared)
    assert all(ours <= stock for ours, stock, _ in comp.compared)


async def test_the_fleet_screen_draws_textuals_updates_too():
    app = fleet_app()
    async with app.run_test(size=(130, 20)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.shown)
        screen = app.screen
        assert type(screen._compositor) is ChangedOnlyCompositor
        screen._compositor.__class__ = Checked
        comp = screen._compositor
        comp.compared, comp.mismatches = [], []
        # The cursor down the rows, the attention view and back, a filter typed and cleared.
        await pilot.press("down", "down", "down", "up")
        await pilot.pause(0.05)
        await pilot.press("exclamation_mark")
        await pilot.pause(0.05)
        await pilot.press("exclamation_mark", "slash", "g", "p", "escape")
        await pilot.pause(0.1)
    assert comp.mismatches == []
    assert len(comp.compared) >= 3
    assert any(ours < stock for ours, stock, _ in comp.compared)
