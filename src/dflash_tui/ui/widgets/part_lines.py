"""Text drawn part by part, each part rendered once: a line that did not change keeps its strips.

The checklist and the header's second column redraw every second because a few words in them
move (an age, the uptime); rendering them whole through rich each time costs ~1 ms a frame for
lines that are, all but one or two, the same. `PartLines` is a Static whose content is a list of
parts, each a key (a value that says what the part shows) and a way to build its renderable:
a part is built and rendered only when its key is new at that width and style, its strips kept
while it stays on screen. When only one-line parts changed in place, only their lines are
refreshed, so Textual repaints those lines and not the box.

Each part renders exactly as it did as a piece of the whole: the rich renderables of a
`rich.console.Group` (`RICH`, the checklist), or the lines of one `Text` (`TEXT`, the header's
Content path), so the screen is the same cell for cell (tests/ui's snapshots hold it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

from rich.console import Group, RenderableType
from rich.text import Text
from textual.content import Content
from textual.css.styles import RulesMap
from textual.geometry import Region
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, RichVisual, Visual
from textual.widget import Widget
from textual.widgets import Static

RICH, TEXT = "rich", "text"   # how a part is drawn: as a piece of a Group, or as lines of a Text


class Part(NamedTuple):
    key: Hashable                            # equal keys draw equal lines (at one width)
    build: Callable[[int], RenderableType]   # (width) -> what to draw; called only for a new key
    one_line: bool = False                   # the producer knows it draws exactly one line


class _Parts(Visual):
    """The parts of a PartLines, one after another, through its strip cache."""

    def __init__(self, owner: PartLines) -> None:
        self.owner = owner

    def render_strips(self, width: int, height: int | None, style: Style,
                      options: RenderOptions) -> list[Strip]:
        strips = self.owner._strips(width, style, options)
        return strips if height is None else strips[:height]

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        owner = self.owner
        return max((owner._visual(p, container_width).get_optimal_width(rules, container_width)
                    for p in owner.parts), default=0)

    def get_height(self, rules: RulesMap, width: int) -> int:
        owner = self.owner
        return len(owner._strips(width, owner.visual_style, owner._options(None)))


class PartLines(Static):
    DRAW = RICH

    def __init__(self, content: str = "", **kwargs) -> None:
        super().__init__(content, **kwargs)
        # The parts are text built from plain strings, never links: without this, each render
        # runs the link-style pass over every line, the kept ones too.
        self.set_reactive(Widget.auto_links, False)
        self.parts: list[Part] = []
        self._parts_visual = _Parts(self)
        # (key, width, style) -> strips of the parts on screen; the lines each part took at the
        # last render, in order (None: not rendered since the parts changed shape).
        self._cache: dict[tuple, list[Strip]] = {}
        self._heights: list[int] | None = None

    def render(self):
        return self._parts_visual if self.parts else super().render()

    @property
    def content(self):
        """What is shown, as one renderable (as a Static's content reads)."""
        if not self.parts:
            return Static.content.fget(self)
        width = self.content_size.width
        built = [part.build(width) for part in self.parts]
        if self.DRAW == TEXT:
            return Text("\n").join(r if isinstance(r, Text) else Text(str(r)) for r in built)
        return Group(*built)

    @content.setter
    def content(self, content) -> None:
        self.parts = []
        Static.content.fset(self, content)

    def show_parts(self, parts: Sequence[Part], *, layout: bool) -> None:
        """Draw `parts` from now on. `layout`: the box's height may change."""
        old, self.parts = self.parts, list(parts)
        if layout or not old or len(old) != len(parts) or self._heights is None:
            self._heights = None
            self.refresh(layout=layout or not old)
            return
        changed = [i for i, (a, b) in enumerate(zip(old, parts)) if a.key != b.key]
        if not changed:
            return
        if not all(parts[i].one_line and self._heights[i] == 1 for i in changed):
            self._heights = None
            self.refresh()
            return
        starts = [0]
        for h in self._heights:
            starts.append(starts[-1] + h)
        width = self.content_size.width
        self.refresh(*(Region(0, starts[i], width, 1) for i in changed))

    def _visual(self, part: Part, width: int) -> Visual:
        renderable = part.build(width)
        if self.DRAW == TEXT:
            return Content.from_rich_text(renderable if isinstance(renderable, Text) else Text(str(renderable)),
                                          console=self.app.console)
        return RichVisual(self, Group(renderable))

    def _options(self, options: RenderOptions | None) -> RenderOptions:
        return options if options is not None else RenderOptions(self._get_style, self.styles)

    def _strips(self, width: int, style: Style, options: RenderOptions) -> list[Strip]:
        cache, kept = self._cache, {}
        out: list[Strip] = []
        heights = []
        for part in self.parts:
            key = (part.key, width, style)
            strips = cache.get(key) if options.selection is None else None
            if strips is None:
                strips = self._visual(part, width).render_strips(width, None, style, options)
            if options.selection is None:
                kept[key] = strips
            out.extend(strips)
            heights.append(len(strips))
        if options.selection is None:
            self._cache = kept    # only the parts on screen: bounded by what is shown
        self._heights = heights
        return out
