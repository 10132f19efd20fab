"""A screen compositor that draws, for a partial update, only the widgets the update can show.

Textual's compositor asks every widget whose *clip* (its container's region) meets the changed
area for all its lines, then keeps the changed rows. A widget docked on the screen (the footer,
the health box) has the whole screen as its clip, so each log frame at 1,000 lines a second also
re-rendered the footer, the tabs, the title rows and the screen's own 40 background lines: about
a third of a log frame's CPU, for rows no frame wrote. Only a widget whose visible part (region
within clip) meets the changed area can own a cell the update writes: the update writes chops
(spans between widget edges, all of them cuts) on changed rows, and a chop's frontmost widget
covers it, so it overlaps the changed area. Skipping the others gives the same escape sequences
(tests/ui/screens/test_compositor.py compares them with Textual's on the dashboard's own screens).

Used by the screens that repaint continuously (the run view, the fleet). Should a Textual release
rename the hook, `_get_renders` is absent and Textual's own path runs unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual._compositor import Compositor
from textual.geometry import Region
from textual.strip import Strip

# The hook this overrides; checked once so a Textual without it is left alone.
HOOKED = callable(getattr(Compositor, "_get_renders", None))


class ChangedOnlyCompositor(Compositor):
    """Compositor whose partial updates render only widgets that can appear in them."""

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if not crop:   # a full update: every widget, as Textual draws it
            yield from super()._get_renders(crop)
            return
        overlaps = crop.overlaps
        for widget, (region, clip) in self.visible_widgets.items():
            visible = region.intersection(clip)
            if not (visible.width and visible.height and overlaps(visible)):
                continue
            if visible == region:
                yield region, clip, widget.render_lines(Region(0, 0, region.width, region.height))
            else:
                yield region, clip, widget.render_lines(
                    Region(visible.x - region.x, visible.y - region.y, visible.width, visible.height))


def changed_only(screen) -> None:
    """Give `screen` the compositor above (before it is first laid out)."""
    if HOOKED:
        screen._compositor = ChangedOnlyCompositor()
