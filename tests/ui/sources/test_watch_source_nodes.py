"""The dashboard on a run of two nodes (this machine + the loopback sshd, real gloo processes):
one verdict in the header, the checklist per node, the Threads pane grouped by node, every
node's log lines, and the stop key stopping every node."""

from __future__ import annotations

import pytest
from dflash_tui.ui.widgets.rows import RowTable

from dflash_tui.gpu.sample import GpuErrorKind, GpuSample, GpuSnapshot, GpuError
from dflash_tui.watch import NodesWatch
from dflash_tui.run.verdict.combine import merge_gpu_snapshots
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.sources.watch_source import WatchSource
from dflash_tui.watch import open_watch

from tests.support.runs import alive
from tests.watch.test_nodes_session import LOCAL, nodes_profile
from tests.ui.sources.test_watch_source import header, until

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]


async def test_dashboard_shows_one_run_of_two_nodes_and_stops_both(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    profile = nodes_profile(sshd, tmp_path, "--interval=0.2")
    async with NodesWatch(profile) as nodes:
        out = await nodes.launch()
        assert out.launched, out.report.checklist.summary
    pids = [o.evidence.launch.pid for o in out.outcomes.values()]
    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "two")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.run_view.report is not None and app.run_view.report.checklist.verdict is Verdict.RUNNING, 90)
            text = header(app)
            assert "RUNNING" in text and f"nodes {LOCAL},{sshd.alias}" in text
            assert app.run_view.report.checklist.summary == f"2 nodes running: {LOCAL}, {sshd.alias}"
            labels = [c.label for c in app.run_view.report.checklist.checks]
            assert labels[0] == f"node {LOCAL} (rank 0)" and f"node {sshd.alias} (rank 1)" in labels
            assert f"{sshd.alias} · Process" in labels and f"{LOCAL} · Heartbeat" in labels

            await pilot.press("2")
            table = app.query_one("#threads-table", RowTable)
            await until(pilot, lambda: table.row_count == 2, 10)
            assert [str(table.get_row_at(i)[0]) for i in range(2)] == [f"{sshd.alias}/rank1", f"{LOCAL}/rank0"]

            lines = app.run_view.log_pane.lines
            await until(pilot, lambda: any(line.startswith(f"[{sshd.alias}] step ") for line in lines.lines())
                        and any(line.startswith(f"[{LOCAL}] step ") for line in lines.lines()), 15)

            await pilot.press("s")
            await pilot.press("y")
            await until(pilot, lambda: not any(alive(p) for p in pids), 30)
            await until(pilot, lambda: app.run_view.report.checklist.verdict is Verdict.STOPPED, 15)
    finally:
        async with NodesWatch(profile) as nodes:
            await nodes.stop()


def test_gpus_of_every_node_in_one_snapshot_grouped_by_node():
    a = GpuSnapshot(time=1.0, source="nvml", gpus=(GpuSample(0, "NVIDIA H200", "u0"), GpuSample(1, "NVIDIA H200", "u1")))
    b = GpuSnapshot(time=2.0, source="nvml", gpus=(GpuSample(0, "NVIDIA H200", "u2", lost=True),))
    merged = merge_gpu_snapshots([("gpu1", a), ("gpu2", b)])
    assert [(g.index, g.name, g.lost) for g in merged.gpus] == [
        (0, "gpu1:0 H200", False), (1, "gpu1:1 H200", False), (2, "gpu2:0 H200", True)]
    assert merged.time == 2.0 and merged.error is None
    none = GpuSnapshot(time=3.0, source="none", error=GpuError(GpuErrorKind.LIBRARY_NOT_FOUND, "no NVML; install it"))
    merged = merge_gpu_snapshots([("gpu1", a), ("gpu2", none)])
    assert len(merged.gpus) == 2 and merged.error.message == "node gpu2: no NVML; install it"
