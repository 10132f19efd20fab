"""The Threads pane shows the run probe's threads of every process, grouped by rank and pid, with
the class and where the engine read from each stack."""

from __future__ import annotations

import dataclasses

import pytest
from rich.text import Text
from textual.app import App
from textual.geometry import Region

from dflash_tui.contract.rundir import ProbeReport, ProbeThread
from dflash_tui.ui.widgets.rows import RowTable
from tests.support import scenarios as R
from tests.ui.test_app import SIZE, make, until

pytestmark = pytest.mark.timeout(60)


def probes() -> list[ProbeReport]:
    def main(path: str) -> ProbeThread:
        return ProbeThread(name="MainThread", ident=1, frames=[f"{path}:12 <module>"])
    return [
        ProbeReport(run_id="r", pid=11, time=R.T0 - 1, rank=0, threads=[
            ProbeThread(name="allreduce-loop", ident=2, compile_state="compiling", compiling_for_s=42.0,
                        graphs=3, recompiles=1, compile_seconds=40.5,
                        frames=["/venv/torch/_dynamo/convert_frame.py:900 _compile", "/x/train.py:30 step"]),
            main("/x/train.py")]),
        ProbeReport(run_id="r", pid=12, time=R.T0 - 2, rank=1, threads=[main("/x/train.py")]),
        ProbeReport(run_id="r", pid=10, time=R.T0 - 65, ended=True, threads=[main("/venv/bin/torchrun")]),
    ]


async def test_probe_threads_grouped_by_process_without_status_json():
    report = R.probed_program(probes())
    app, _ = make(report)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        table = app.query_one("#probe-table", RowTable)
        await until(pilot, lambda: table.row_count == 4)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(4)]
        # class and where as the engine read them; the compile bookkeeping after them
        assert rows[0] == ["rank 0 · pid 11", "MainThread", "running", "<module> (train.py:12)", "", "1s",
                           "-", "0", "0", "0.0"]
        assert rows[1] == ["", "allreduce-loop", "compiling convert_frame._compile", "step (train.py:30)", "", "",
                           "compiling 42s", "3", "1", "40.5"]
        assert rows[2][:3] == ["rank 1 · pid 12", "MainThread", "running"]
        # an ended process is not read by the engine: its innermost frame, no class
        assert rows[3][0] == "pid 10 (ended)" and rows[3][2:4] == ["-", "<module> (torchrun:12)"]
        assert not app.query_one("#threads-table", RowTable).display
        # In the user's words: their program writes none of the trainer's files, and says
        # its progress in its log; no file name of ours.
        note = str(app.query_one("#threads-note").render())
        assert note == ("the program's threads, as the run probe reads them (it does not write the "
                        "trainer's status file: its progress comes from its log)"), note


async def test_the_first_step_time_is_shown_above_healthy_threads():
    healthy = R.healthy()
    report = dataclasses.replace(healthy, status=dataclasses.replace(healthy.status, first_step_s=21.37))
    app, _ = make(report)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        note = app.query_one("#threads-note")
        await until(pilot, lambda: "first step" in str(note.render()))
        assert str(note.render()) == "first step 21.4 s after the trainer started"


async def test_stuck_probe_threads_are_counted_and_named():
    """A STALLED run's waiting threads (the engine's STUCK) are in the alarm note and the count."""
    stuck = [ProbeReport(run_id="r", pid=11, time=R.T0 - 0.5, rank=0, threads=[ProbeThread(
        name="MainThread", ident=1, frames=["/venv/lib/python3.11/site-packages/torch/distributed/"
                                            "distributed_c10d.py:3252 all_reduce", "/x/train.py:42 step"])])]
    report = R.probed_program(stuck)
    assert report.checklist.verdict.value == "STALLED", report.checklist
    app, _ = make(report)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        table = app.query_one("#probe-table", RowTable)
        await until(pilot, lambda: table.row_count == 1)
        assert [str(c) for c in table.get_row_at(0)][2:4] == ["collective all_reduce STUCK", "step (train.py:42)"]
        note = str(app.query_one("#threads-note").render())
        assert note.startswith("1 thread(s) need attention: pid 11 MainThread stuck; the program's threads"), note
        assert "status.json" not in note
        assert app.query_one("ThreadsPane").trouble_count() == 1


async def test_table_rows_drawn_directly_equal_textuals_pipeline():
    """RowTable draws its rows itself (no per-line pass through Textual's styles cache): what
    reaches the compositor is the same, header, styled, justified, spanned and wide cells
    included, scrolled sideways and cropped."""
    class TableApp(App):
        def compose(self):
            yield RowTable(("thread", "beat", "state", "where"))

    app = TableApp()
    async with app.run_test(size=(40, 8)) as pilot:
        table = app.query_one(RowTable)
        spanned = Text("ok then ")
        spanned.append("STUCK", "bold red")
        table.set_rows([
            ("a", [Text("drafter0"), Text("1s", justify="right"), spanned, Text("step (train.py:12)")]),
            ("b", [Text("drafter1 STUCK", style="bold reverse"), Text("5m05s", style="bold reverse"),
                   Text("lock", style="bold reverse"), Text("漢字かな wait (x.py:3)", style="bold reverse")]),
            *((f"r{i}", [Text(f"target{i}"), Text(f"{i}s"), Text("-"), Text("x" * 50)]) for i in range(10)),
        ])
        await pilot.pause()

        def both(crop: Region):
            fast = [list(s) for s in table.render_lines(crop)]
            table._plain_box = lambda: False   # Textual's own path, from a clean cache
            table._styles_cache.clear()
            slow = [list(s) for s in table.render_lines(crop)]
            del table._plain_box
            return fast, slow

        size = table.region.size
        for scroll in ((0, 0), (9, 0), (0, 3)):
            table.scroll_to(*scroll, animate=False, immediate=True, force=True)
            await pilot.pause()
            for crop in (Region(0, 0, size.width, size.height), Region(3, 1, size.width - 10, 4)):
                fast, slow = both(crop)
                assert fast == slow, (scroll, crop)


async def test_rank_groups_lead_the_threads_tab_and_expand_to_their_members():
    """64 ranks, rank 7 on a queue while the others wait in all_reduce: the group rows come first,
    rank 7's on top in the alarm style; x lists each group's members under it."""
    app, _ = make(R.ranks(64, stuck=7))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        groups = app.query_one("#rank-groups", RowTable)
        await until(pilot, lambda: groups.row_count == 3)
        first = [str(c) for c in groups.get_row_at(0)]
        assert first == ["▸ rank 7", "1", "lock STUCK", "threading.wait (data.py:40)", "h1"]
        assert [str(c) for c in groups.get_row_at(1)][:3] == ["▸ ranks 0-6, 8-63", "63", "collective STUCK"]
        assert groups.get_row_at(0)[0].style
        await pilot.press("x")
        await until(pilot, lambda: groups.row_count > 3)
        rows = [[str(c) for c in groups.get_row_at(i)] for i in range(groups.row_count)]
        assert rows[0][0] == "▾ rank 7" and rows[1] == ["    rank 7 · pid 60007", "", "MainThread", "", ""]
        assert rows[2][0] == "▾ ranks 0-6, 8-63" and rows[3][0] == "    rank 0 · pid 60000"
        # 64 members of the helper threads' group: listed up to MEMBERS_SHOWN, the rest counted
        assert rows[-1][0] == "    … 0 more threads" or len(rows) == 1 + 1 + 1 + 63 + 1 + 64
        await pilot.press("x")
        await until(pilot, lambda: groups.row_count == 3)


async def test_one_rank_has_no_group_rows():
    app, _ = make(R.probed_program(probes()[:1]))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.press("2")
        await until(pilot, lambda: app.query_one("#probe-table", RowTable).row_count == 2)
        assert not app.query_one("#rank-groups", RowTable).display
