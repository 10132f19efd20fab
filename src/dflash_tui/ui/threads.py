"""The Threads pane: one row per trainer thread from status.json.

A thread whose compile failed or that reported an error is marked FAILED; one whose own
heartbeat is older than the stall limit is marked STUCK. Both rows are drawn in the error
style and sorted to the top, so they stand out among sixteen healthy ones.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ..contract.rundir import CompileState, Phase, ThreadStatus

from ..run.report import RunReport
from .fmt import age, one_line
from .tables import OnScreenOnly, sync_rows

from ..run.health import Limits

# A thread in these states may legitimately be silent for the (long) compile limit; the same
# rule as the checklist's "threads" check, so STUCK here means what STALLED means in --check.
COMPILING = frozenset({CompileState.PENDING.value, CompileState.WARMING.value,
                       CompileState.COMPILING.value, CompileState.WAITING_AT_GATE.value})

COLUMNS = ("thread", "role", "device", "compile", "graphs", "recomp", "compile s", "step",
           "last step", "beat")


def thread_trouble(t: ThreadStatus, now: float, limits: Limits = Limits(), *, live: bool = True) -> str:
    """'FAILED', 'STUCK' or '' for a healthy (or not yet started) thread. A thread of a run that
    has ended is silent by nature, never STUCK: STALLED, too, needs a live pid."""
    if t.compile_state == CompileState.FAILED.value or t.error:
        return "FAILED"
    if not live:
        return ""
    limit = limits.compile_stall_after_s if t.compile_state in COMPILING else limits.stall_after_s
    if t.last_beat_time is not None and now - t.last_beat_time > limit:
        return "STUCK"
    return ""


def _run_is_live(report: RunReport) -> bool:
    status = report.status
    return report.pid_alive is not False and not (
        status is not None and status.phase in (Phase.FINISHED.value, Phase.FAILED.value))


class ThreadsPane(OnScreenOnly, Vertical):
    def __init__(self, limits: Limits = Limits(), **kwargs) -> None:
        super().__init__(**kwargs)
        self.limits = limits

    def compose(self):
        self.note = Static("no status.json yet: the trainer has not published its threads", id="threads-note")
        self.table = DataTable(id="threads-table", zebra_stripes=True, cursor_type="row")
        self.table.add_columns(*COLUMNS)
        yield self.note
        yield self.table

    def trouble_count(self) -> int:
        return self._trouble

    def on_mount(self) -> None:
        self._trouble = 0
        self._note = ""
        self.report: RunReport | None = None

    def _set_note(self, text: str, style: str = "") -> None:
        note = self.note
        note.display = bool(text)
        if text != self._note:
            self._note = text
            note.update(Text(text, style=style, no_wrap=True, overflow="ellipsis"))

    def show(self, report: RunReport) -> None:
        self.report = report
        status = report.status
        threads = status.threads if status is not None else []
        # Counted even while hidden: the tab's label says how many threads need attention.
        live = _run_is_live(report)
        self._trouble = sum(1 for t in threads if thread_trouble(t, report.time, self.limits, live=live))
        if self.on_screen:
            self.draw()

    def draw(self) -> None:
        report = self.report
        if report is None:
            return
        table = self.table
        status = report.status
        if status is None or not status.threads:
            self._set_note("no status.json yet: the trainer has not published its threads")
            table.display = False
            return
        now = report.time
        rows = []
        for t in status.threads:
            trouble = thread_trouble(t, now, self.limits, live=_run_is_live(report))
            rows.append((0 if trouble else 1, t.name, t, trouble))
        rows.sort(key=lambda r: (r[0], r[1]))
        names = ", ".join(f"{r[1]} {r[3].lower()}" for r in rows if r[3])
        self._set_note(f"{self._trouble} thread(s) need attention: {names}" if self._trouble else "",
                       "bold red")
        table.display = True
        out = []
        for _, _, t, trouble in rows:
            style = "bold red" if trouble else ""
            compile_state = t.compile_state.replace("_", " ")
            if trouble == "FAILED":
                compile_state = "FAILED" if t.compile_state == CompileState.FAILED.value else compile_state
            cells = [
                t.name + (f" {trouble}" if trouble else ""),
                t.role,
                t.device,
                compile_state + (f": {one_line(t.error, 60)}" if t.error else ""),
                str(t.graphs),
                str(t.recompiles),
                f"{t.compile_seconds:.1f}",
                str(t.step),
                age(now - t.last_step_time) if t.last_step_time is not None else "-",
                age(now - t.last_beat_time) if t.last_beat_time is not None else "-",
            ]
            out.append((t.name, [Text(c, style=style) for c in cells]))
        sync_rows(table, out)
