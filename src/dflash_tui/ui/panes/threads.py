"""The Threads pane: one row per trainer thread from status.json, then the run probe's threads.

Each thread's state is the engine's (run/verdict/health.py `thread_states`, carried in the report's
checklist): FAILED and STUCK rows are drawn in the error style and sorted to the top, so they
stand out among sixteen healthy ones. The pane judges nothing itself.

Below them, for any program, the run probe's view (probe/<pid>.json): every thread of every
Python process of the run, grouped by process (rank, pid), with the class of what it is in
(a collective, a GPU wait, a lock, running its own code: run/stacks/classify.py) and where in the
program's own code, both as the engine read them (the checklist's threads), for how long its
stack has stood so, and its compile state.

Above them, in a run of two or more ranks, the engine's rank groups (run/verdict/rank_groups.py):
one row per group of threads whose stacks agree across ranks, the odd ones out first; `x`
expands each group to its members (rank, pid, thread).
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static

from ...contract.rundir import CompileState, ProbeReport

from ...run.verdict.report import RunReport
from ...run.verdict.checklist import RankGroup, ThreadHealth, rank_ranges
from ..fmt import age, alarm_style, one_line
from ..widgets.cells import TextCells
from ..widgets.rows import RowTable
from .base import Pane, PaneKey
from ..widgets.tables import OnScreenOnly

# What says whether a thread is alive comes first (beat, step), so at 80 columns it is the
# compile bookkeeping at the end that scrolls off, never the heartbeat.
COLUMNS = ("thread", "beat", "step", "last step", "compile", "device", "role", "graphs/recomp",
           "compile s")
PROBE_COLUMNS = ("process", "thread", "class", "where", "for", "report", "compile", "graphs", "recomp",
                 "compile s")

GROUP_COLUMNS = ("ranks", "threads", "class", "where", "nodes")
MEMBERS_SHOWN = 64    # the members listed under one expanded group; the rest are counted


def group_rows(groups: list[RankGroup], expanded: bool) -> list[tuple[str, list[str], bool]]:
    """(row key, cells, stuck) for the rank groups' table: one row per group in the engine's
    order (odd ones out first); expanded, each group's members below it, one per thread."""
    rows = []
    for i, g in enumerate(groups):
        who = f"rank {g.ranks[0]}" if len(g.ranks) == 1 else f"ranks {rank_ranges(g.ranks)}"
        rows.append((f"g{i}", [("▾ " if expanded else "▸ ") + who, str(g.threads),
                               g.cls.value + (" STUCK" if g.stuck else ""), one_line(g.place(), 60),
                               ", ".join(g.nodes)], g.stuck))
        if expanded:
            for rank, pid, name in g.members[:MEMBERS_SHOWN]:
                rows.append((f"g{i}/{pid}/{name}", [f"    rank {rank} · pid {pid}", "", name, "", ""], g.stuck))
            if len(g.members) > MEMBERS_SHOWN:
                rows.append((f"g{i}/more", [f"    … {len(g.members) - MEMBERS_SHOWN} more threads", "", "", "", ""],
                             False))
    return rows


def _process_label(p: ProbeReport) -> str:
    rank = f"rank {p.rank} · " if p.rank is not None else ""
    return f"{rank}pid {p.pid}" + (" (ended)" if p.ended else "")


def _where(frame: str) -> str:
    """"file:line function" as py-spy prints it: "function (file.py:line)", the file's last part."""
    loc, _, func = frame.rpartition(" ")
    path, _, line = loc.rpartition(":")
    return f"{func} ({path.rsplit('/', 1)[-1]}:{line})" if loc and path else frame


def probe_rows(report: RunReport) -> list[tuple[str, list[str], bool]]:
    """(row key, cells, stuck) for the probe table: processes by rank then pid, each thread once;
    the process is named on its first row only, so the rows read as groups. Class, where and
    STUCK are the engine's (the checklist's threads with a pid); a thread it did not read (an
    ended process) shows its innermost frame."""
    now = report.time
    judged: dict[tuple[int, int], ThreadHealth] = {
        (t.pid, t.ident): t for t in report.checklist.threads if t.pid is not None and t.ident is not None}
    rows = []
    for p in report.probes:
        threads = sorted(p.threads, key=lambda t: (t.name != "MainThread", t.name, t.ident))
        for i, t in enumerate(threads or [None]):
            label = _process_label(p) if i == 0 else ""
            report_age = age(now - p.time) if i == 0 else ""
            if t is None:
                rows.append((f"{p.pid}", [label, "-", "", "", "", report_age, "", "", "", ""], False))
                continue
            state = t.compile_state or "-"
            if t.compiling_for_s is not None:
                state += f" {age(t.compiling_for_s)}"
            j = judged.get((p.pid, t.ident))
            if j is not None:
                cls = j.cls + (f" {j.doing}" if j.doing else "") + (" STUCK" if j.trouble else "")
                where = j.where or "-"
                since = age(now - j.since) if j.since is not None else ""
            else:
                cls, since = "-", ""
                where = _where(t.frames[0]) if t.frames else "-"
            rows.append((f"{p.pid}/{t.ident}", [
                label, t.name, one_line(cls, 40), one_line(where, 60), since, report_age, state, str(t.graphs),
                str(t.recompiles), f"{t.compile_seconds:.1f}"], bool(j is not None and j.trouble)))
    return rows


def thread_trouble(report: RunReport, name: str) -> str:
    """'FAILED', 'STUCK' or '' as the engine judged thread `name` in this report."""
    judged = report.checklist.thread(name)
    return judged.state.value if judged is not None and judged.trouble else ""


# In a user's words: their own program writes none of the bundled trainer's files, and that is
# no fault of it (its progress comes from its log, its threads from the run probe).
NO_THREADS_YET = "no threads yet"
NO_THREADS = "no threads yet: neither the trainer's status file nor the run probe has reported"
PROBED = "the program's threads, as the run probe reads them"
NO_STATUS_FILE = "it does not write the trainer's status file: its progress comes from its log"


class ThreadsPane(Pane, OnScreenOnly, Vertical):
    PANE_ID = "threads"
    TITLE = "Threads"
    KEYS = (PaneKey("x", "toggle_groups", "Expand", "Threads: expand each rank group to its members, or fold them",
                    show=False, reveal=True),)

    def compose(self):
        self.note = Static(NO_THREADS_YET, id="threads-note")
        self.table = RowTable(COLUMNS, id="threads-table")
        self.probe_table = RowTable(PROBE_COLUMNS, id="probe-table")
        self.probe_table.display = False
        self.group_table = RowTable(GROUP_COLUMNS, id="rank-groups")
        self.group_table.display = False
        yield self.note
        yield self.table
        yield self.group_table
        yield self.probe_table

    def trouble_count(self) -> int:
        return self._trouble

    def tab_label(self) -> str:
        return f"Threads ({self._trouble} !)" if self._trouble else "Threads"

    def on_mount(self) -> None:
        self._trouble = 0
        self._note = ""
        self.report: RunReport | None = None
        self.cell = TextCells()   # (text, style) -> the Text drawn, from draw to draw
        self.expanded = False   # the rank groups listed with their members

    def action_toggle_groups(self) -> None:
        self.expanded = not self.expanded
        if self.on_screen:
            self.draw()

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
        names = {t.name for t in threads}
        self._trouble = sum(1 for t in threads if thread_trouble(report, t.name)) + sum(
            1 for t in report.checklist.threads if t.pid is not None and t.trouble and t.name not in names)
        if self.on_screen:
            self.draw()

    def draw(self) -> None:
        report = self.report
        if report is None:
            return
        cell = self.cell   # widgets/cells.py: a cell that says what it said last second is the same Text
        cell.new_draw()
        table = self.table
        status = report.status
        probes = report.probes
        self.probe_table.display = bool(probes)
        groups = report.checklist.rank_groups
        self.group_table.display = bool(groups)
        if groups:
            alarm = alarm_style(self.app.no_color)
            self.group_table.set_rows([(key, [cell(c, alarm if stuck else "") for c in cells])
                                       for key, cells, stuck in group_rows(groups, self.expanded)])
        if probes:
            alarm = alarm_style(self.app.no_color)
            self.probe_table.set_rows([(key, [cell(c, alarm if stuck else "") for c in cells])
                                       for key, cells, stuck in probe_rows(report)])
        stuck = [t for t in report.checklist.threads if t.pid is not None and t.trouble
                 and not (status is not None and any(s.name == t.name for s in status.threads))]
        stuck_words = ", ".join(f"pid {t.pid} {t.name} stuck" for t in stuck[:4])
        if status is None or not status.threads:
            if probes and stuck:
                self._set_note(f"{len(stuck)} thread(s) need attention: {stuck_words}; {PROBED}",
                               alarm_style(self.app.no_color))
            else:
                self._set_note(f"{PROBED} ({NO_STATUS_FILE})" if probes else NO_THREADS)
            table.display = False
            return
        now = report.time
        rows = []
        for t in status.threads:
            trouble = thread_trouble(report, t.name)
            rows.append((0 if trouble else 1, t.name, t, trouble))
        rows.sort(key=lambda r: (r[0], r[1]))
        names = ", ".join([f"{r[1]} {r[3].lower()}" for r in rows if r[3]] + ([stuck_words] if stuck_words else []))
        if self._trouble:
            self._set_note(f"{self._trouble} thread(s) need attention: {names}", alarm_style(self.app.no_color))
        else:
            first = status.first_step_s
            self._set_note(f"first step {first:.1f} s after the trainer started" if first is not None else "")
        table.display = True
        out = []
        for _, _, t, trouble in rows:
            style = alarm_style(self.app.no_color) if trouble else ""
            compile_state = t.compile_state.replace("_", " ")
            if trouble == "FAILED":
                compile_state = "FAILED" if t.compile_state == CompileState.FAILED.value else compile_state
            cells = [
                t.name + (f" {trouble}" if trouble else ""),
                age(now - t.last_beat_time) if t.last_beat_time is not None else "-",
                str(t.step),
                age(now - t.last_step_time) if t.last_step_time is not None else "-",
                compile_state + (f": {one_line(t.error, 60)}" if t.error else ""),
                t.device,
                t.role,
                f"{t.graphs}/{t.recompiles}",
                f"{t.compile_seconds:.1f}",
            ]
            out.append((t.name, [cell(c, style) for c in cells]))
        table.set_rows(out)
