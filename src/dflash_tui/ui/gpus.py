"""The GPUs pane: a row per GPU with a utilisation sparkline, the run's processes marked.

A field the driver does not support arrives as None and is shown as n/a, never as 0. When
NVML (or nvidia-smi) is unavailable the snapshot carries an error state and the pane shows
it as a banner with its one-line reason and fix; the rows of the last good sample stay.
"""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ..gpu.sample import GpuSample, GpuSnapshot
from .fmt import NA, gib, num, sparkline

HISTORY = 120          # samples of utilisation kept per GPU (2 minutes at 1 Hz)
SPARK_WIDTH = 20
COLUMNS = ("gpu", "name", "util", "history", "memory", "temp", "power", "clocks sm/mem", "run procs")


def run_processes(g: GpuSample) -> str:
    mine = [p for p in g.processes if p.is_run_process]
    if not mine:
        return f"{len(g.processes)} other" if g.processes else "-"
    pids = ",".join(str(p.container_pid or p.pid) for p in mine[:3]) + ("…" if len(mine) > 3 else "")
    used = [p.used_memory_bytes for p in mine if p.used_memory_bytes is not None]
    return f"● {pids} {gib(sum(used)) if used else NA}"


class GpuPane(Vertical):
    def compose(self):
        yield Static("waiting for the first GPU sample…", id="gpu-banner")
        table = DataTable(id="gpu-table", zebra_stripes=True, cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def on_mount(self) -> None:
        self._history: dict[int, deque[float | None]] = {}
        self.snapshot: GpuSnapshot | None = None

    @property
    def unavailable(self) -> bool:
        return self.snapshot is not None and self.snapshot.error is not None and not self.snapshot.gpus

    def show(self, snap: GpuSnapshot) -> None:
        self.snapshot = snap
        banner = self.query_one("#gpu-banner", Static)
        table = self.query_one(DataTable)
        for g in snap.gpus:
            self._history.setdefault(g.index, deque(maxlen=HISTORY)).append(
                None if g.lost else g.util_sm_pct)
        if snap.error is not None:
            banner.display = True
            banner.add_class("-error")
            where = f" (GPU {snap.error.gpu_index})" if snap.error.gpu_index is not None else ""
            banner.update(Text(f"GPU data unavailable{where}: {snap.error.message}", style="bold",
                               no_wrap=False))
        elif not snap.gpus:
            banner.display = True
            banner.remove_class("-error")
            banner.update(f"no GPUs reported by {snap.source}")
        else:
            banner.display = False
            banner.remove_class("-error")
        if not snap.gpus and snap.error is not None:
            table.display = table.row_count > 0   # keep the last good rows under the banner
            return
        table.display = True
        cursor = table.cursor_row
        table.clear()
        for g in snap.gpus:
            table.add_row(*self._cells(g), key=str(g.index))
        if cursor < table.row_count:
            table.move_cursor(row=cursor, animate=False)

    def _cells(self, g: GpuSample) -> list[Text]:
        if g.lost:
            red = "bold red"
            return [Text(str(g.index), red), Text(g.name, red), Text("LOST", red),
                    Text(sparkline(self._history[g.index], SPARK_WIDTH, 0, 100)),
                    Text("fell off the bus", red), *(Text("") for _ in range(4))]
        mine = any(p.is_run_process for p in g.processes)
        mem = (f"{gib(g.mem_used_bytes)}/{gib(g.mem_total_bytes)}"
               if g.mem_used_bytes is not None or g.mem_total_bytes is not None else NA)
        power = num(g.power_w, "{:.0f}", "W")
        if g.power_limit_w is not None:
            power += f"/{g.power_limit_w:.0f}W"
        clocks = f"{num(g.sm_clock_mhz)}/{num(g.mem_clock_mhz)}"
        return [
            Text(str(g.index), "bold" if mine else ""),
            Text(g.name, no_wrap=True, overflow="ellipsis"),
            Text(num(g.util_sm_pct, "{:.0f}", "%"), justify="right"),
            Text(sparkline(self._history[g.index], SPARK_WIDTH, 0, 100), style="cyan"),
            Text(mem),
            Text(num(g.temperature_c, "{:.0f}", "C")),
            Text(power),
            Text(clocks),
            Text(run_processes(g), style="bold green" if mine else "dim"),
        ]
