"""Modal screens: confirm an action, pick a profile, and the key help."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, OptionList, Static


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no for an action that touches the run. y/enter confirms, n/escape cancels."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, detail: str) -> None:
        super().__init__()
        self._title, self._detail = title, detail

    def compose(self):
        with Vertical(id="dialog"):
            yield Static(Text(self._title, style="bold"), id="dialog-title")
            yield Static(self._detail, id="dialog-detail")
            with Horizontal(id="dialog-buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class ProfileScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, profiles: list[str], current: str) -> None:
        super().__init__()
        self._profiles, self._current = profiles, current

    def compose(self):
        with Vertical(id="dialog"):
            yield Static(Text("Switch profile (the current run keeps running)", style="bold"),
                         id="dialog-title")
            options = OptionList(*[f"{p}  (current)" if p == self._current else p
                                   for p in self._profiles], id="profiles")
            yield options

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        if self._current in self._profiles:
            options.highlighted = self._profiles.index(self._current)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self._profiles[event.option_index])


class HelpScreen(ModalScreen[None]):
    """Every key of the dashboard, built from the app's own bindings (one source of truth)."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss(None)", "Close")]

    def __init__(self, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = bindings

    def compose(self):
        # Every key must be on screen at 80x24: where one row per key (with what it does)
        # does not fit the height, the keys go in two columns with their short names, and
        # the long descriptions stay in the command palette.
        width, height = self.app.size
        one_column = height - 8 >= len(self.rows)
        # The keys are never cut ("esc" is three cells): only what they do gives way.
        key_w = max((len(key) for key, _, _ in self.rows), default=1)
        if one_column:
            table = Table.grid(padding=(0, 2), expand=True)
            table.add_column("key", style="bold", no_wrap=True, min_width=key_w)
            table.add_column("what it does", no_wrap=True, overflow="ellipsis", ratio=1)
            for key, description, tooltip in self.rows:
                table.add_row(key, description + (f": {tooltip}" if tooltip else ""))
        else:
            table = Table.grid(padding=(0, 1))
            for _ in range(2):
                table.add_column("key", style="bold", no_wrap=True, justify="right", min_width=key_w)
                table.add_column("what", no_wrap=True, overflow="ellipsis", ratio=1)
            half = -(-len(self.rows) // 2)
            left, right = self.rows[:half], self.rows[half:]
            for i, (key, description, _) in enumerate(left):
                other = right[i] if i < len(right) else ("", "", "")
                table.add_row(key, description, other[0], other[1])
        with Vertical(id="dialog", classes="-compact" if not one_column else ""):
            yield Static(Text("dflash-tui keys", style="bold"), id="dialog-title")
            yield Static(table)
            yield Static(Text("ctrl+p: the command palette, with what each key does. "
                              "q leaves the run running.", style="italic"))
