"""Rows of a Line-API widget drawn without Textual's per-line styles pass, where it adds nothing.

Textual draws each line of a widget through its styles cache: border, outline, padding, tint,
text opacity, hatch and opacity, then the app's line filters. For a box with none of those (the
log's and RowTable's own CSS set none) that pass only pads a row to the content width, filters
it and cuts it to the crop, and that is done here, once per paint instead of once per line: the
rows of a paint are a widget's own (`render_line`), cached by the widget as it sees fit. A box
that a theme or stylesheet gives any of those takes Textual's path (`_plain_box` says which).
"""

from __future__ import annotations

from rich.segment import Segment
from textual.filter import ANSIToTruecolor, DimFilter, LineFilter, Monochrome, NoColor
from textual.geometry import Region
from textual.strip import Strip
from textual.style import Style as VisualStyle

# Textual's own line filters map each segment's style alone, given the background. Through these
# a row whose every style the filter leaves as it is (the theme's truecolor styles under
# ANSIToTruecolor) is the row itself: at 1,000 log lines a second every row on screen is new each
# frame, and a filtered copy of each was half the cost of drawing the log.
_BY_STYLE = (ANSIToTruecolor, DimFilter, Monochrome, NoColor)
_KEPT_STYLES_MAX = 1024   # (filter, style, background) answers kept per widget


class PlainRows:
    """Mixin for a Line-API widget (a ScrollView) that draws its rows itself when its box is
    plain: its render_lines asks `_plain_box()`, and if so returns `_finish_rows(...)` of its
    own rows instead of Textual's render_lines."""

    def _plain_box(self) -> bool:
        """True when Textual's per-line styling would add nothing to the rows `render_line`
        draws: no border, outline, padding, tint, hatch, text opacity or opacity."""
        styles = self.styles
        return (not any(edge for edge, _ in styles.border) and not any(edge for edge, _ in styles.outline)
                and not any(styles.padding) and not styles.tint.a and styles.text_opacity == 1.0
                and styles.hatch in (None, "none") and self.opacity == 1.0)

    def _row_fill(self, width: int) -> tuple[int, object, tuple]:
        """What `_finish_rows` pads a row of `width` cells with: (cells, style), and the box's
        background colours. A widget may draw its rows with this fill already (one Strip a row
        instead of two); the padding then finds them at the content width and keeps them."""
        colors = self.background_colors
        extra = self.content_region.width - width
        if extra <= 0:
            return 0, None, colors
        base_background, background = colors
        return extra, VisualStyle(background=base_background + background).rich_style, colors

    def _finish_rows(self, strips: list[Strip], crop: Region, width: int, fill: tuple | None = None) -> list[Strip]:
        """What Textual's styles cache does to a plain box's rows (_styles_cache.render_widget):
        padded from `width` (the rows' own) to the content width with the background, filtered
        (NO_COLOR, ANSI colours), cut to the crop's columns. `fill`: `_row_fill(width)`, if
        the caller has it."""
        extra, inner, (_, background) = fill or self._row_fill(width)
        region_width = self.region.width
        if extra:
            content_width = width + extra
            strips = [strip.adjust_cell_length(content_width, inner) for strip in strips]
        for line_filter in self.app.get_line_filters():
            strips = self._filtered(strips, line_filter, background)
        if crop.column_span != (0, region_width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _filtered(self, strips: list[Strip], line_filter: LineFilter, background) -> list[Strip]:
        """`strip.apply_filter(line_filter, background)` of each strip, where a strip whose
        styles the filter all leaves unchanged is returned as it is instead of copied."""
        if type(line_filter) not in _BY_STYLE:
            return [strip.apply_filter(line_filter, background) for strip in strips]
        kept = getattr(self, "_kept_styles", None)
        if kept is None or len(kept) > _KEPT_STYLES_MAX:
            kept = self._kept_styles = {}
        out = []
        for strip in strips:
            for segment in strip:
                key = (line_filter, segment.style, background)
                same = kept.get(key)
                if same is None:
                    probe = Segment(" ", segment.style)
                    same = kept[key] = line_filter.apply([probe], background)[0].style == segment.style
                if not same or segment.control is not None:
                    out.append(strip.apply_filter(line_filter, background))
                    break
            else:
                out.append(strip)
        return out
