"""The Timeline screen: one profile's recorded verdicts as bands over time, with their causes.

It reads the watcher's store (recording/store/store.py; `dflash-tui --watch` writes it) read-only,
again every few seconds while it is shown. Per run (run id: runs moved to history/ included),
one strip of bands, each as wide as the time it lasted (at least one cell, so a short STALLED
never vanishes), coloured by severity as the fleet screen colours rows; under it, every change
with its time, how long the state held, the check that made it, the cause, and the evidence
(step, loss, rate, where a stall sits, the last traceback line). Above the strips, goodput
(recording/goodput/goodput.py's result, from the same changes and the recovery's stop times: this
screen only shows it), and the energy and cost the watcher recorded (recording/goodput/spend.py).
Escape goes back.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable, Sequence

from rich.text import Text
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from ...recording.goodput.goodput import Goodput, goodput
from ...recording.recovery.recovery_log import RecoveryLog, stop_times
from ...recording.store.store import ChangeStore, default_store_path
from ...recording.goodput.timeline import Band, bands, runs
from ...recording.goodput.spend import spend_words
from ...verdicts import State, TargetState, Verdict
from ...words import compact
from ..fmt import one_line, verdict_class

REFRESH_S = 2.0
STYLE = {"-ok": "black on green", "-fail": "white on red", "-wait": "black on yellow", "-down": "white on magenta"}
WORD_STYLE = {"-ok": "bold green", "-fail": "bold red", "-wait": "bold yellow", "-down": "bold magenta"}


def state_class(state: State) -> str:
    if isinstance(state, Verdict):
        return verdict_class(state)
    return "-down" if state is TargetState.UNREACHABLE else "-wait"


def strip(group: Sequence[Band], start: float, end: float, width: int) -> Text:
    """`group`'s bands on one line of `width` cells spanning start..end; each band's label
    is written into it where it fits."""
    out = Text()
    span = max(end - start, 1e-9)
    edges = [round((b.start - start) / span * width) for b in group] + [width]
    used = edges[0]
    out.append(" " * used)
    for i, b in enumerate(group):
        cells = max(1, edges[i + 1] - max(edges[i], used)) if i < len(group) - 1 else max(1, width - used)
        cells = min(cells, max(1, width - used - (len(group) - 1 - i)))
        label = b.state if len(b.state) + 2 <= cells else b.state[: max(0, cells - 1)]
        out.append(f" {label}".ljust(cells)[:cells], style=STYLE[state_class(b.state)])
        used += cells
    return out


def _read(path: Path, profile: str) -> tuple[list, dict[str, float]]:
    """The profile's changes and its recovery's stop times (run id -> when it was stopped)."""
    if not path.exists():
        return [], {}
    with ChangeStore(path, readonly=True) as store:
        changes = store.changes(profile)
    with RecoveryLog(path, readonly=True) as rl:
        return changes, stop_times(rl.actions(profile))


class TimelineScreen(Screen[None]):
    DEFAULT_CSS = """
    TimelineScreen { layout: vertical; }
    TimelineScreen #tl-title { height: 1; background: $panel; text-style: bold; }
    TimelineScreen #tl-goodput { height: auto; padding: 0 1; }
    TimelineScreen #tl-bands { height: auto; max-height: 50%; padding: 0 1; }
    TimelineScreen #tl-changes { height: 1fr; }
    TimelineScreen #tl-cause { height: 3; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape,q", "back", "Back", tooltip="back to where the timeline was opened"),
        Binding("r", "reload", "Reload", tooltip="read the store again now"),
    ]

    def __init__(self, profile: str, store: str | Path | None = None, *,
                 clock: Callable[[], float] = time.time, stall_after_s: float = 60.0) -> None:
        super().__init__()
        self.profile = profile
        self.store_path = Path(store) if store is not None else default_store_path()
        self.clock = clock
        self.stall_after_s = stall_after_s   # the profile's: goodput's silence before a STALLED
        self.bands: list[Band] = []
        self.goodput: Goodput | None = None
        self.spent = ""   # the recorded energy and cost in words (recording/goodput/spend.py)
        self.error = ""

    def compose(self):
        yield Static(id="tl-title")
        yield Static(id="tl-goodput")
        yield Static(id="tl-bands")
        table = DataTable(id="tl-changes", cursor_type="row", zebra_stripes=True)
        table.add_columns("When", "State", "Held", "Check", "Cause", "Evidence")
        yield table
        yield Static(id="tl-cause")
        yield Footer()

    async def on_mount(self) -> None:
        await self.reload()
        self.set_interval(REFRESH_S, self.reload)

    async def action_reload(self) -> None:
        await self.reload()

    def action_back(self) -> None:
        self.app.pop_screen()

    async def reload(self) -> None:
        try:
            changes, stops = await asyncio.to_thread(_read, self.store_path, self.profile)
            self.error = ""
        except Exception as exc:   # a store mid-write or unreadable: say so, keep the last view
            self.error = one_line(str(exc), 200)
            changes = None
        if changes is not None:
            now = self.clock()
            self.bands = bands(changes, now)
            self.goodput = goodput(changes, now, self.stall_after_s, stops) if changes else None
            self.spent = spend_words(changes, self.goodput) if self.goodput is not None else ""
        self.render_timeline()

    def on_resize(self) -> None:
        self.render_timeline()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_cause(event.cursor_row)

    def _show_cause(self, index: int | None) -> None:
        cause = self.query_one("#tl-cause", Static)
        if index is None or not 0 <= index < len(self.bands):
            cause.update("")
            return
        b = self.bands[index]
        text = Text()
        text.append(f" {b.state} ", style=STYLE[state_class(b.state)])
        text.append(f" {b.change.cause or '-'}")
        if b.change.evidence.traceback:
            text.append("\n" + "\n".join(b.change.evidence.traceback[-2:]), style="dim")
        cause.update(text)

    def render_timeline(self) -> None:
        title = self.query_one("#tl-title", Static)
        if self.error:
            title.update(f" Timeline · {self.profile} · cannot read {self.store_path}: {self.error}")
        elif not self.bands:
            title.update(f" Timeline · {self.profile} · no changes recorded in {self.store_path}; "
                         "start the watcher: dflash-tui --watch")
        else:
            title.update(f" Timeline · {self.profile} · {len(self.bands)} changes since "
                         f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(self.bands[0].start))} · "
                         f"{self.store_path.name}")
        words = [self.goodput.words()] if self.goodput is not None else []
        self.query_one("#tl-goodput", Static).update("\n".join(words + ([self.spent] if self.spent else [])))
        self._render_bands()
        self._render_table()

    def _render_bands(self) -> None:
        out = Text()
        if self.bands:
            start, end = self.bands[0].start, self.bands[-1].end
            width = max(10, self.size.width - 2)
            groups = runs(self.bands)
            for i, (run_id, group) in enumerate(groups):
                out.append(f"run {run_id or '(no launch.json)'}", style="bold")
                out.append(f"  {compact(sum(b.seconds for b in group))}\n", style="dim")
                out.append_text(strip(group, start, end, width))
                out.append("\n")
            left = time.strftime("%H:%M:%S", time.localtime(start))
            right = time.strftime("%H:%M:%S", time.localtime(end))
            out.append(left + right.rjust(max(1, width - len(left))), style="dim")
        self.query_one("#tl-bands", Static).update(out)

    def _render_table(self) -> None:
        table = self.query_one("#tl-changes", DataTable)
        cursor = table.cursor_row
        table.clear()
        for b in self.bands:
            c, e = b.change, b.change.evidence
            ev = []
            if e.step is not None:
                ev.append(f"step {e.step}")
            if e.loss is not None:
                ev.append(f"loss {e.loss:.4g}")
            if e.stuck_at:
                ev.append(f"at {e.stuck_at}")
            if e.traceback:
                ev.append(e.traceback[-1])
            table.add_row(time.strftime("%m-%d %H:%M:%S", time.localtime(b.start)),
                          Text(c.state, style=WORD_STYLE[state_class(c.state)]),
                          compact(b.seconds) + ("+" if b.open else ""), c.check or "-",
                          one_line(c.cause, 64) or "-", one_line(", ".join(ev), 36))
        if self.bands:
            table.move_cursor(row=min(cursor, len(self.bands) - 1) if cursor else len(self.bands) - 1)
            self._show_cause(table.cursor_row)
