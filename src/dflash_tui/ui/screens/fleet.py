"""The fleet screen: every profile in one table, k9s-style, live.

Rows come from a fleet (fleet/poller.py `FleetPoller`: `snapshot()`, `changes()`, `poke()`),
which polls each target on its own schedule; this screen only renders FleetRows and passes
keys on. One row per profile: name, host, container, verdict (colour and word; its one-line
cause on the detail line under the table), step/total, loss, tau, rate (the trainer's tokens/s, a
log's it/s; from status.json, else the log's progress, kept once the run ended), the run's GPUs
(util and memory, from the host's NVML), the run's kWh and cost so far (run/verdict/energy.py),
uptime and the age of the data. An unreachable
target is UNREACHABLE with the reason and the next retry.

Keys: Enter opens the profile in the single-run view (Escape there comes back), / filters,
! (or t) shows only the rows that need attention, o / O sort by the next column / reverse (or
click a header), r s c relaunch, stop and canary the selected row with the single-run view's
confirmations and guards, h lists its history, T shows the watcher's timeline of it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Callable, Sequence

from rich.text import Text
from textual import work
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from ...remote.base import TargetError
from ...run.launch.request import LaunchRequest
from ...fleet.row import DOWN, FAIL, OK, SEVERITY_RANK, WAIT, FleetRow
from ..fmt import NA, age, gib, num, one_line
from .relaunch import RESUME, RelaunchScreen, relaunch_detail, stop_detail
from .compositor import changed_only
from .dialogs import ConfirmScreen
from .fleet_table import FleetHeader, FleetTable
from ..sources.source import ActionError, run_action
from .timeline import TimelineScreen

STYLE = {OK: "bold green", FAIL: "bold white on red", DOWN: "bold magenta", WAIT: "bold yellow"}
# (key, header, sort key). The verdict sorts worst first; numbers sort missing last.
COLUMNS: Sequence[tuple[str, str]] = (
    ("profile", "Profile"), ("host", "Host"), ("container", "Container"), ("verdict", "Verdict"),
    ("step", "Step"), ("loss", "Loss"), ("tau", "τ"), ("rate", "Rate"), ("gpu", "GPU util·mem"),
    ("spend", "kWh·cost"), ("uptime", "Up"), ("age", "Age"),
)
_BIG = float("inf")
COALESCE_S = 0.4   # well inside the 2 s a failure may take to turn its row red


def _sort_value(row: FleetRow, key: str, now: float):
    if key == "verdict":
        return (SEVERITY_RANK[row.severity], row.state, row.profile)
    num_of = {"step": row.step, "loss": row.loss, "tau": row.tau, "rate": row.rate,
              "gpu": row.gpus.util_pct, "spend": row.cost if row.cost is not None else row.kwh,
              "uptime": row.uptime_s, "age": row.age_s(now)}
    if key in num_of:
        v = num_of[key]
        return (v is None, v if v is not None else _BIG, row.profile)
    return (str(getattr(row, key, "")).lower(), row.profile)


def _rate_cell(row: FleetRow) -> str:
    """The rate with its unit: tokens/s is the trainer's, it/s or s/it a progress bar's."""
    if row.rate is None:
        return NA
    text = f"{row.rate:.0f}" if abs(row.rate) >= 100 else f"{row.rate:.3g}"
    return f"{text} {row.rate_unit}".strip()


def _gpu_cell(row: FleetRow) -> str:
    g = row.gpus
    if not g.count:
        return "-"
    util = NA if g.util_pct is None else f"{g.util_pct:.0f}%"
    return f"{g.count}× {util}·{gib(g.mem_bytes)}"


def _spend_cell(row: FleetRow) -> str:
    """"0.412·3.10": the run's kWh since its launch and its cost so far; a GPU without an
    energy counter says so ("no counter·3.10"), never 0 kWh."""
    if row.kwh is None and row.cost is None and not row.energy_note:
        return "-"
    kwh = NA if row.kwh is None else f"{row.kwh:.3g}" + ("*" if row.energy_note else "")
    if row.kwh is None and row.energy_note:
        kwh = row.energy_note
    return kwh if row.cost is None else f"{kwh}·{row.cost:,.2f}"


def uptime(seconds: float | None) -> str:
    """Minutes, not seconds, past the first minute: a column of 50 uptimes that each tick every
    second would redraw every row every second for nothing a person reads."""
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return age(s)


def _data_age(seconds: float | None, polled_every_s: float) -> str:
    """Data younger than its target's poll pause and one second more is as fresh as it gets:
    "<2s" at 1 s polls, "<4s" at a steady target's 3 s, so the cell does not flip 0s/1s/2s
    between polls (a column of 50 that each changed every second would redraw every row)."""
    if seconds is None:
        return "never"
    fresh_s = polled_every_s + 1.0
    return f"<{fresh_s:.0f}s" if seconds < fresh_s else age(seconds)


def row_cells(row: FleetRow, now: float) -> list[tuple[str, str]]:
    """(text, style) per column: the verdict in its colour, as a word too."""
    state = row.state + (f" ({row.busy}…)" if row.busy else "")
    step = NA if row.step is None else (f"{row.step}/{row.total_steps}" if row.total_steps else str(row.step))
    data_age = _data_age(row.age_s(now), row.polled_every_s)
    cells = [row.profile, row.host, row.container or "-", state, step, num(row.loss, "{:.3f}"),
             num(row.tau, "{:.2f}"), _rate_cell(row), _gpu_cell(row), _spend_cell(row),
             uptime(row.uptime_s), data_age]
    styles = {0: "bold", 3: STYLE[row.severity]}
    return [(c, styles.get(i, "")) for i, c in enumerate(cells)]


def detail_line(row: FleetRow, now: float) -> Text:
    """The selected row's one-line cause, and how fresh it is."""
    out = Text()
    out.append(f" {row.state} ", style=STYLE[row.severity])
    out.append(f" {row.profile}: {one_line(row.cause, 400) or '-'}")
    bits = []
    if row.polled_at is not None:
        bits.append(f"polled {age(now - row.polled_at)} ago" + (f" in {row.poll_s * 1000:.0f} ms" if row.poll_s else ""))
    if row.gpus.note and row.verdict is not None:
        bits.append(f"GPUs: {one_line(row.gpus.note, 120)}")
    if bits:
        out.append("  ·  " + "  ·  ".join(bits), style="dim")
    return out


def _set_line(bar: Static, text: Text) -> None:
    """A one-line bar's new text, redrawn only when it changed and without a relayout (its
    height is fixed)."""
    if getattr(bar, "_shown", None) != text.markup:
        bar._shown = text.markup
        bar.update(text, layout=False)


class FleetScreen(Screen[None]):
    CSS_PATH = "fleet.tcss"
    BINDINGS = [
        Binding("enter", "open", "Open", tooltip="open the selected profile in the single-run view"),
        Binding("slash", "filter", "Filter", tooltip="show only rows whose name, host, container or verdict contain the text"),
        Binding("exclamation_mark,t", "toggle_attention", "Attention", tooltip="show only the rows that are not healthy"),
        Binding("o", "sort_next", "Sort", tooltip="sort by the next column (click a header to sort by it)"),
        Binding("O", "sort_reverse", "Reverse", show=False),
        Binding("r", "relaunch", "Relaunch", tooltip="relaunch the selected row's run (asks first)"),
        Binding("s", "stop", "Stop", tooltip="stop the selected row's run by pid (asks first)"),
        Binding("c", "canary", "Canary", tooltip="canary launch through the selected row's transport"),
        Binding("h", "history", "History", tooltip="the selected profile's earlier runs (history/)"),
        Binding("T", "timeline", "Timeline", show=False, tooltip="the selected profile's recorded verdicts over time"),
        Binding("escape", "clear_filter", "Clear", show=False),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, fleet, source_for: Callable[[str], object],
                 on_open: Callable[[str], object], on_history: Callable[[str], object],
                 *, clock: Callable[[], float] = time.time) -> None:
        """`fleet`: a FleetPoller (or anything with its snapshot/changes/poke);
        `source_for(name)`: the profile's DashboardSource, through which r/s/c act;
        `on_open(name)` / `on_history(name)`: what Enter / h do."""
        super().__init__()
        changed_only(self)   # a row's change draws that row, not the whole screen
        self.fleet = fleet
        self.source_for = source_for
        self.on_open = on_open
        self.on_history = on_history
        self.clock = clock
        self.filter_text = ""
        self.attention = False
        self.sort_key = "verdict"
        self.sort_reverse = False
        self.busy: dict[str, str] = {}
        self._sources: dict[str, object] = {}
        self.shown: list[FleetRow] = []
        self._rendered_at = 0.0
        self._behind = False                                    # rows changed since the last draw
        self._verdicts_shown: dict[str, tuple[str, str]] = {}   # profile -> (severity, state) drawn

    def compose(self):
        yield Static("", id="fleet-title")
        table = FleetTable([label for _, label in COLUMNS], id="fleet-table")
        yield FleetHeader(table, id="fleet-header")
        yield table
        yield Static("", id="fleet-detail")
        yield Input(placeholder="filter: part of a name, host, container or verdict (Enter keeps it, Escape clears)",
                    id="fleet-filter")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        # Held references: the screen stays installed (and refreshing) while the run view is on top.
        self.table = self.query_one("#fleet-table", FleetTable)
        self.filter_input = self.query_one("#fleet-filter", Input)
        self.title_bar = self.query_one("#fleet-title", Static)
        self.detail_bar = self.query_one("#fleet-detail", Static)
        self.filter_input.display = False
        self.table.focus()
        self.render_rows()
        self.watch_fleet()
        self.set_interval(1.0, self._tick)   # ages keep ticking between polls

    @work(exclusive=True, group="fleet")
    async def watch_fleet(self) -> None:
        async for _names in self.fleet.changes():
            # Changes of the other targets' polls in the next moment join this redraw: one
            # table update for many rows, still well inside a second of the poll.
            await asyncio.sleep(COALESCE_S)
            if self._verdicts_moved():
                self.render_rows()
            else:
                # Only numbers moved (a step, a loss): the next tick draws them with every other
                # row's, one frame a second instead of one per target's poll.
                self._behind = True

    def _verdicts_moved(self) -> bool:
        """A row's verdict (its severity, its words) is not what the screen shows: drawn now,
        so a failure turns its row red as soon as its poll says so."""
        return any(self._verdicts_shown.get(r.profile) != (r.severity, r.state) for r in self.fleet.snapshot())

    # -- rendering ----------------------------------------------------------------------------
    def visible_rows(self, now: float) -> list[FleetRow]:
        rows = self.fleet.snapshot()
        if self.busy:
            rows = [replace(r, busy=self.busy[r.profile]) if r.profile in self.busy else r for r in rows]
        if self.attention:
            rows = [r for r in rows if not r.healthy]
        if self.filter_text:
            needle = self.filter_text.lower()
            rows = [r for r in rows if any(needle in s.lower() for s in (r.profile, r.host, r.container, r.state))]
        rows.sort(key=lambda r: _sort_value(r, self.sort_key, now), reverse=self.sort_reverse)
        return rows

    def _tick(self) -> None:
        if self._behind or time.monotonic() - self._rendered_at > 0.9:   # else a poll's redraw did it
            self.render_rows()

    def render_rows(self) -> None:
        if not hasattr(self, "table"):
            return   # not mounted yet
        self._rendered_at = time.monotonic()
        self._behind = False
        self._verdicts_shown = {r.profile: (r.severity, r.state) for r in self.fleet.snapshot()}
        now = self.clock()
        selected = self.selected_name()
        rows = self.visible_rows(now)
        self.shown = rows
        self.table.set_rows([(r.profile, row_cells(r, now)) for r in rows])
        names = [r.profile for r in rows]
        if selected in names and self.table.cursor_row != names.index(selected):
            self.table.move_cursor(row=names.index(selected))
        self._render_title(now)
        self._render_detail(now)

    def _render_title(self, now: float) -> None:
        every = self.fleet.snapshot()
        trouble = sum(1 for r in every if not r.healthy)
        down = sum(1 for r in every if r.severity == DOWN)
        parts = [f"Fleet · {len(every)} profiles", f"{trouble} need attention"]
        if down:
            parts.append(f"{down} unreachable")
        if self.attention:
            parts.append("showing attention only (! for all)")
        if self.filter_text:
            parts.append(f"filter {self.filter_text!r}")
        label = dict(COLUMNS)[self.sort_key]
        parts.append(f"sorted by {label}{' (reversed)' if self.sort_reverse else ''}")
        _set_line(self.title_bar, Text(" · ".join(parts), style="bold"))

    def _render_detail(self, now: float) -> None:
        row = self.selected_row()
        if row is None:
            _set_line(self.detail_bar, Text("no rows match" if (self.filter_text or self.attention) else "",
                                            style="dim"))
        else:
            _set_line(self.detail_bar, detail_line(row, now))

    def selected_name(self) -> str | None:
        if not self.shown or not hasattr(self, "table"):
            return None
        i = self.table.cursor_row
        return self.shown[i].profile if 0 <= i < len(self.shown) else None

    def selected_row(self) -> FleetRow | None:
        name = self.selected_name()
        return next((r for r in self.shown if r.profile == name), None)

    def on_fleet_table_cursor_moved(self, event: FleetTable.CursorMoved) -> None:
        self._render_detail(self.clock())

    def on_fleet_table_selected(self, event: FleetTable.Selected) -> None:
        self.action_open()

    def on_fleet_header_clicked(self, event: FleetHeader.Clicked) -> None:
        key = COLUMNS[event.column][0]
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, False
        self.render_rows()

    # -- keys ---------------------------------------------------------------------------------
    def action_open(self) -> None:
        name = self.selected_name()
        if name is not None:
            self.on_open(name)

    def action_history(self) -> None:
        name = self.selected_name()
        if name is not None:
            self.on_history(name)

    def action_timeline(self) -> None:
        """The watcher's record of the selected row's run (ui/screens/timeline.py)."""
        name = self.selected_name()
        if name is not None:
            profile = self.fleet.profiles.get(name)
            self.app.push_screen(TimelineScreen(name, getattr(self.app, "timeline_store", None), clock=self.clock,
                                                **({"stall_after_s": profile.stall_after_s} if profile else {})))

    def action_filter(self) -> None:
        self.filter_input.display = True
        self.filter_input.value = self.filter_text
        self.filter_input.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.render_rows()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.filter_input.display = bool(self.filter_text)
        self.table.focus()

    def action_clear_filter(self) -> None:
        if self.filter_text or self.filter_input.display:
            self.filter_text = ""
            self.filter_input.value = ""
            self.filter_input.display = False
            self.table.focus()
            self.render_rows()

    def action_toggle_attention(self) -> None:
        self.attention = not self.attention
        self.render_rows()

    def action_sort_next(self) -> None:
        keys = [k for k, _ in COLUMNS]
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.sort_reverse = False
        self.render_rows()

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.render_rows()

    # -- run actions on the selected row --------------------------------------------------------
    def _source(self, name: str):
        src = self._sources.get(name)
        if src is None:
            src = self._sources[name] = self.source_for(name)
        return src

    def _guard(self, name: str | None) -> bool:
        if name is None:
            return False
        if name in self.busy:
            self.notify(f"{name}: a {self.busy[name]} is already in flight; wait for it",
                        severity="warning", timeout=4)
            return False
        return True

    def _pid_text(self, name: str) -> str:
        watch = self.fleet.watches.get(name)
        last = watch.last if watch is not None else None
        return f"pid {last.launch.pid}" if last and last.launch and last.pid_alive else ""

    def _run_dir(self, name: str) -> str:
        profile = self.fleet.profiles.get(name)
        return profile.run_dir if profile is not None else "the profile's run dir"

    def action_relaunch(self) -> None:
        name = self.selected_name()
        if self._guard(name):
            self._ask_relaunch(name)

    @work(group="ask")
    async def _ask_relaunch(self, name: str) -> None:
        source = self._source(name)
        checkpoint = None
        if source.resumable:
            try:
                checkpoint = await source.newest_checkpoint()
            except (TargetError, OSError):   # no answer about checkpoints: offer the plain relaunch
                checkpoint = None
        detail = relaunch_detail(name, self._pid_text(name), self._run_dir(name))
        self.app.push_screen(RelaunchScreen(detail, checkpoint),
                             lambda answer: (self._act(name, "relaunch", LaunchRequest(
                                                 relaunch=True, resume=answer == RESUME)) if answer else None))

    def action_stop(self) -> None:
        name = self.selected_name()
        if self._guard(name):
            self.app.push_screen(ConfirmScreen("Stop the run?", stop_detail(name, self._pid_text(name))),
                                 lambda yes: self._act(name, "stop") if yes else None)

    def action_canary(self) -> None:
        name = self.selected_name()
        if self._guard(name):
            self._act(name, "canary")

    @work(group="actions")
    async def _act(self, name: str, action: str, request: LaunchRequest | None = None) -> None:
        self.busy[name] = action
        self.render_rows()
        try:
            outcome = await run_action(self._source(name), action, request)
        except (ActionError, TargetError, OSError) as exc:
            self.notify(one_line(str(exc), 300), title=f"{name}: {action} failed", severity="error", timeout=10)
        else:
            self.notify(one_line(outcome, 300), title=f"{name}: {action}", timeout=6)
        finally:
            self.busy.pop(name, None)
            self.fleet.poke(name)
            self.render_rows()
