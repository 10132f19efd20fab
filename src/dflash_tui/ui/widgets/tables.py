"""OnScreenOnly: the panes behind a tab take their data always and draw it only when shown."""

from __future__ import annotations


class OnScreenOnly:
    """Mixin for a pane behind a tab: keep taking data, draw only while it is on screen.

    A hidden table or chart that is updated every second still costs style and repaint work;
    the pane instead keeps its latest data and draws it when shown.
    """

    on_screen = False

    def on_show(self) -> None:
        self.on_screen = True
        self.draw()

    def on_hide(self) -> None:
        self.on_screen = False

    def draw(self) -> None:   # pragma: no cover - every pane overrides it
        raise NotImplementedError
