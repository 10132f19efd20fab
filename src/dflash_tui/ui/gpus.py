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
from .tables import OnScreenOnly, sync_rows

HISTORY = 120          # samples of utilisation kept per GPU (2 minutes at 1 Hz)
SPARK_WIDTH = 12       # fixed: the column is as wide from the first sample on, so nothing shifts
COLUMNS = ("gpu", "name", "util", "history", "memory", "temp", "power", "sm/mem MHz", "run procs")


def short_name(name: str) -> str:
    """'NVIDIA H200' -> 'H200': every row says NVIDIA; the model is what differs."""
    return name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name


def run_processes(g: GpuSample) -> str:
    mine = [p for p in g.processes if p.is_run_process]
    if not mine:
        return f"{len(g.processes)} other" if g.processes else "-"
    pids = ",".join(str(p.container_pid or p.pid) for p in mine[:3]) + ("…" if len(mine) > 3 else "")
    used = [p.used_memory_bytes for p in mine if p.used_memory_bytes is not None]
    return f"● {pids} {gib(sum(used)) if used else NA}"


class GpuPane(OnScreenOnly, Vertical):
    def compose(self):
        self.banner = Static("waiting for the first GPU sample…", id="gpu-banner")
        self.table = DataTable(id="gpu-table", zebra_stripes=True, cursor_type="row")
        self.table.add_columns(*COLUMNS)
        yield self.banner
        yield self.table

    def on_mount(self) -> None:
        self._history: dict[int, deque[float | None]] = {}
        self.snapshot: GpuSnapshot | None = None
        self._banner: tuple[str, bool] | None = None
        self._last_good: GpuSnapshot | None = None

    def _set_banner(self, text: str, error: bool) -> None:
        banner = self.banner
        banner.display = bool(text)
        if (text, error) != self._banner:
            self._banner = (text, error)
            banner.set_class(error, "-error")
            banner.update(Text(text, style="bold" if error else ""))

    @property
    def unavailable(self) -> bool:
        return self.snapshot is not None and self.snapshot.error is not None and not self.snapshot.gpus

    def show(self, snap: GpuSnapshot) -> None:
        self.snapshot = snap
        for g in snap.gpus:   # history grows while hidden too: the sparkline is there when shown
            self._history.setdefault(g.index, deque(maxlen=HISTORY)).append(
                None if g.lost else g.util_sm_pct)
        if snap.gpus:
            self._last_good = snap
        if self.on_screen:
            self.draw()

    def draw(self) -> None:
        snap = self.snapshot
        if snap is None:
            return
        table = self.table
        if snap.error is not None:
            where = f" (GPU {snap.error.gpu_index})" if snap.error.gpu_index is not None else ""
            self._set_banner(f"GPU data unavailable{where}: {snap.error.message}", True)
        elif not snap.gpus:
            self._set_banner(f"no GPUs reported by {snap.source}", False)
        else:
            self._set_banner("", False)
        if not snap.gpus:
            last = self._last_good   # keep the last good rows under the banner
            table.display = last is not None
            if last is None:
                return
            snap = last
        table.display = True
        sync_rows(table, [(str(g.index), self._cells(g)) for g in snap.gpus])

    def _cells(self, g: GpuSample) -> list[Text]:
        if g.lost:
            red = "bold red"
            return [Text(str(g.index), red), Text(short_name(g.name), red), Text("LOST", red),
                    Text(sparkline(self._history[g.index], SPARK_WIDTH, 0, 100).rjust(SPARK_WIDTH)),
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
            Text(short_name(g.name), no_wrap=True, overflow="ellipsis"),
            Text(num(g.util_sm_pct, "{:.0f}", "%"), justify="right"),
            Text(sparkline(self._history[g.index], SPARK_WIDTH, 0, 100).rjust(SPARK_WIDTH), style="cyan"),
            Text(mem),
            Text(num(g.temperature_c, "{:.0f}", "C")),
            Text(power),
            Text(clocks),
            Text(run_processes(g), style="bold green" if mine else "dim"),
        ]
