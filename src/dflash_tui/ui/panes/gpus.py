"""The GPUs pane, as dense as nvitop: a card per GPU, every process on them, a history graph.

- A card per GPU: utilisation and memory as bars, temperature, power against its limit,
  SM clock against its top and the memory clock, throttle reasons, Xid and uncorrected-ECC
  counts, the PCIe link, and the node-health faults of run/verdict/gpu_health.py ("! PCIe link
  x8 of x16", "a row remap is pending"); a GPU busy on too little power is marked "! spins (11 % power)" (a kernel that
  spins, not compute: run/verdict/gpu_facts.py). One line per GPU
  where space is short (8 GPUs at 80x24), two where it is not (8 GPUs at 160x48).
- Every process on every GPU: host pid, the pid in the run's container, its user, command
  and GPU memory; the run's own are marked ● run and sorted first, so a foreign job
  squatting on a GPU stands out.
- Utilisation of each GPU over the last HISTORY seconds, on a time axis (textual-plotext),
  shown when the pane has the height for it.

A field the driver does not support arrives as None and is shown as n/a, never as 0. When
NVML (or nvidia-smi) is unavailable the snapshot carries an error state and the pane shows
it as a banner with its one-line reason and fix; the cards of the last good sample stay. A
host with no NVIDIA GPU at all is said once, plainly, as information (no alarm style).
"""

from __future__ import annotations

import time
from collections import deque

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static

from ...gpu.sample import GpuErrorKind, GpuSample, GpuSnapshot
from ...run.verdict.gpu_facts import facts_of
from ...run.verdict.gpu_health import gpu_faults
from ..fmt import NA, alarm_style, gib, num
from ..widgets.rows import RowTable
from .base import Pane
from ..widgets.charts import TimedPlot, redraw_interval
from ..widgets.tables import OnScreenOnly

HISTORY = 300              # seconds of utilisation kept per GPU (1 Hz samples)
# The history graph's share of a core for its build (widgets/charts.redraw_interval): twice the Metrics
# charts' together, as it is one graph of what the tab is about; 8 GPUs' five minutes build in
# ~45 ms, so it is redrawn about every 18 s (the cards above it follow every sample).
GRAPH_CPU_SHARE = 0.0025
WIDE = 120                 # from this width on, a card has room for clocks and throttle reasons
GRAPH_MIN_ROWS = 10        # the history graph is shown only with at least this many rows
PROC_COLUMNS = ("gpu", "pid", "ctr pid", "user", "command", "GPU mem", "")


def short_name(name: str) -> str:
    """'NVIDIA H200' -> 'H200': every row says NVIDIA; the model is what differs."""
    return name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name


def bar(frac: float | None, width: int) -> Text:
    """A bar of `width` cells: full blocks for the fraction, a light shade for the rest."""
    if frac is None:
        return Text(NA.center(width), "italic")
    frac = min(1.0, max(0.0, frac))
    eighths = round(frac * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
    style = "bold" if frac >= 0.9 else ""
    return Text(s.ljust(width, "░")[:width], style)


def _pct(v: float | None) -> str:
    return NA if v is None else f"{v:3.0f}%"


def run_mark(g: GpuSample, memory: bool = True) -> Text:
    mine = [p for p in g.processes if p.is_run_process]
    others = len(g.processes) - len(mine)
    out = Text()
    if mine:
        used = [p.used_memory_bytes for p in mine if p.used_memory_bytes is not None]
        out.append(f"● run {gib(sum(used)) if used else NA}" if memory else "● run", "bold")
    if others:
        out.append((" " if mine else "") + f"+{others} other", "bold underline")
    if not g.processes:
        out.append("idle", "italic")
    return out


def card_lines(g: GpuSample, width: int, two_lines: bool, no_color: bool = False) -> list[Text]:
    """One GPU as one or two lines of at most `width` cells."""
    head = Text(no_wrap=True, overflow="ellipsis")
    head.append(f"{g.index:>2} ", "bold")
    wide = width >= WIDE
    head.append(f"{short_name(g.name)[:8]:<8} " if wide or two_lines else f"{short_name(g.name)[:5]:<5} ")
    if g.lost:
        head.append(f"LOST: fell off the bus (Xid {g.last_xid or 79})", alarm_style(no_color))
        return [head] + ([Text("")] if two_lines else [])
    bar_w = 16 if wide else max(4, (width - 72) // 2 + 4)
    head.append("util " if wide else "")
    head.append_text(bar(None if g.util_sm_pct is None else g.util_sm_pct / 100, bar_w))
    head.append(f" {_pct(g.util_sm_pct)} ")
    frac = (g.mem_used_bytes / g.mem_total_bytes
            if g.mem_used_bytes is not None and g.mem_total_bytes else None)
    head.append("mem " if wide else "")
    head.append_text(bar(frac, bar_w))
    if wide:
        head.append(f" {gib(g.mem_used_bytes)}/{gib(g.mem_total_bytes)} ")
    else:
        head.append(f" {_pct(None if frac is None else frac * 100)} ")
    head.append(f"{num(g.temperature_c, '{:.0f}', 'C'):>4} ")
    power = num(g.power_w, "{:.0f}", "W")
    if g.power_limit_w is not None:
        power += f"/{g.power_limit_w:.0f}W"
    head.append(f"{power:>9} ")
    trouble = _trouble(g)
    detail = Text(no_wrap=True, overflow="ellipsis")
    top = f"/{g.sm_clock_max_mhz}" if g.sm_clock_max_mhz is not None and g.sm_clock_mhz is not None else ""
    detail.append(f"SM {num(g.sm_clock_mhz)}{top} MEM {num(g.mem_clock_mhz)} MHz")
    detail.append("  throttle ")
    detail.append(", ".join(g.throttle_reasons) if g.throttle_reasons else "none",
                  "bold" if g.throttle_reasons else "")
    detail.append(f"  Xid {num(g.xid_errors)}  ECC {num(g.ecc_errors_uncorrected)}")
    if g.pcie_width is not None:
        detail.append(f"  PCIe {num(g.pcie_gen)}x{g.pcie_width}")
    if trouble:
        detail.append(f"  {trouble}", alarm_style(no_color))
    mark = run_mark(g, memory=wide or two_lines or not (trouble or g.processes and len(g.processes) > 1))
    if two_lines:
        head.append_text(mark)
        line2 = Text("   " + " " * 9, no_wrap=True, overflow="ellipsis")
        line2.append_text(detail)
        return [head, line2]
    if wide:
        head.append_text(detail)
        head.append(" ")
    elif trouble:
        head.append(f"{trouble} ", alarm_style(no_color))
    head.append_text(mark)
    return [head]


_SAID_BY_COUNTS = frozenset(("lost", "ecc", "xid"))


def _trouble(g: GpuSample) -> str:
    parts = []
    facts = facts_of(g)
    if facts.spinning and facts.power_share is not None:
        # Busy on too little power: a kernel that spins (a collective waiting for a peer).
        parts.append(f"spins ({facts.power_share * 100:.0f} % power)")
    if g.xid_errors:
        parts.append(f"{g.xid_errors} Xid")
    if g.ecc_errors_uncorrected:
        parts.append(f"{g.ecc_errors_uncorrected} ECC")
    # The node-health faults the counts above do not already say (run/verdict/gpu_health.py).
    parts.extend(f.reason for f in gpu_faults(g) if f.kind not in _SAID_BY_COUNTS)
    return "! " + ", ".join(parts) if parts else ""


def process_rows(snap: GpuSnapshot) -> list[tuple[str, list[Text]]]:
    rows: list[tuple[tuple, str, list[Text]]] = []
    for g in snap.gpus:
        for p in g.processes:
            style = "bold" if p.is_run_process else ""
            cells = [
                Text(str(g.index), style),
                Text(str(p.pid), style),
                Text(str(p.container_pid) if p.container_pid is not None else "-", style),
                Text(p.user or "?", style),
                Text(p.name or "?", style, no_wrap=True, overflow="ellipsis"),
                Text(gib(p.used_memory_bytes), style, justify="right"),
                Text("● run" if p.is_run_process else "other", style or "underline"),
            ]
            rows.append(((g.index, not p.is_run_process, p.pid), f"{g.index}:{p.pid}", cells))
    rows.sort(key=lambda r: r[0])
    return [(key, cells) for _, key, cells in rows]


class GpuHistory(TimedPlot):
    """Utilisation of every GPU over time: x in seconds before the newest sample. Rebuilt as
    often as its share of a core allows (GRAPH_CPU_SHARE through widgets/charts.redraw_interval): a
    plotext build of 8 lines of 300 points is 15-50 ms, every 5 s still 0.3-1 % of a core."""

    def draw(self, history: dict[int, deque[tuple[float, float | None]]]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("SM utilisation %")
        plt.xlabel("seconds ago")
        newest = max((h[-1][0] for h in history.values() if h), default=None)
        oldest = min((h[0][0] for h in history.values() if h), default=None)
        if newest is None:
            self.refresh()
            return
        for index, h in sorted(history.items()):
            pts = [(t - newest, v) for t, v in h if v is not None]
            if pts:
                plt.plot([x for x, _ in pts], [y for _, y in pts], marker="braille", label=str(index))
        plt.ylim(0, 100)
        # The span held so far, at least a minute: the axis does not stretch a few seconds.
        span = max(60.0, min(float(HISTORY), newest - oldest))
        plt.xlim(-span, 0)
        plt.xticks([-span + k * span / 4 for k in range(5)],
                   [f"{span - k * span / 4:.0f}s" if k < 4 else "now" for k in range(5)])
        self.refresh()


class GpuPane(Pane, OnScreenOnly, Vertical):
    PANE_ID = "gpus"
    TITLE = "GPUs"
    STREAM = "gpus"

    def compose(self):
        self.banner = Static("waiting for the first GPU sample…", id="gpu-banner")
        self.cards = Static("", id="gpu-cards")
        self.procs = RowTable(PROC_COLUMNS, id="gpu-procs")
        self.graph = GpuHistory(id="gpu-history")
        yield self.banner
        yield self.cards
        yield self.procs
        yield self.graph

    def on_mount(self) -> None:
        self._history: dict[int, deque[tuple[float, float | None]]] = {}
        self.snapshot: GpuSnapshot | None = None
        self._banner: tuple[str, bool] | None = None
        self._last_good: GpuSnapshot | None = None
        self._cards: tuple | None = None
        self._layout: tuple | None = None
        self._graph_at = 0.0

    def _set_banner(self, text: str, error: bool) -> None:
        banner = self.banner
        if banner.display != bool(text):
            banner.display = bool(text)
        if (text, error) != self._banner:
            self._banner = (text, error)
            banner.set_class(error, "-error")
            banner.update(Text(text, style="bold" if error else ""))

    @property
    def unavailable(self) -> bool:
        return self.snapshot is not None and self.snapshot.error is not None and not self.snapshot.gpus

    def tab_label(self) -> str:
        snap = self.snapshot
        if snap is None:
            return "GPUs"
        if snap.error is not None and not snap.gpus:
            return "GPUs (none)" if snap.error.kind is GpuErrorKind.NO_GPU else "GPUs (n/a)"
        lost = sum(1 for g in snap.gpus if g.lost)
        return f"GPUs ({lost} lost)" if lost else "GPUs"

    def show_snapshot(self, snap: GpuSnapshot) -> None:
        """This pane's feed: the GPU stream's snapshots, not the reports."""
        self.snapshot = snap
        for g in snap.gpus:   # history grows while hidden too: the graph is there when shown
            self._history.setdefault(g.index, deque(maxlen=HISTORY)).append(
                (snap.time, None if g.lost else g.util_sm_pct))
        if snap.gpus:
            self._last_good = snap
        if self.on_screen:
            self.draw()

    def on_resize(self) -> None:
        if self.on_screen:
            self.draw()

    def _plan(self, n_gpus: int, n_procs: int) -> tuple[bool, int, bool]:
        """(two lines per GPU, rows for the process table, history graph shown) for the
        pane's size: the cards first, then the processes, then the graph if it still fits."""
        height = self.size.height - (1 if self.banner.display else 0)
        two = self.size.width >= WIDE and height >= 2 * n_gpus + 4 + GRAPH_MIN_ROWS
        left = height - n_gpus * (2 if two else 1)
        procs = max(2, min(n_procs + 1, left - GRAPH_MIN_ROWS if left - GRAPH_MIN_ROWS >= 4 else left))
        graph = left - procs >= GRAPH_MIN_ROWS
        return two, procs, graph

    def draw(self) -> None:
        snap = self.snapshot
        if snap is None:
            return
        if snap.error is not None and snap.error.kind is GpuErrorKind.NO_GPU:
            self._set_banner(snap.error.message, False)
        elif snap.error is not None:
            where = f" (GPU {snap.error.gpu_index})" if snap.error.gpu_index is not None else ""
            self._set_banner(f"GPU data unavailable{where}: {snap.error.message}", True)
        elif not snap.gpus:
            self._set_banner(f"no GPUs reported by {snap.source}", False)
        else:
            self._set_banner("", False)
        if not snap.gpus:
            snap = self._last_good   # keep the last good cards under the banner
        shown = snap is not None
        for w in (self.cards, self.procs):
            if w.display != shown:
                w.display = shown
        if snap is None:
            self.graph.display = False
            return
        rows = process_rows(snap)
        two, proc_rows, graph = self._plan(len(snap.gpus), len(rows))
        layout = (two, proc_rows, graph)
        if layout != self._layout:
            self._layout = layout
            self.procs.styles.height = proc_rows
            self.graph.display = graph
        width = self.size.width
        no_color = self.app.no_color
        # Samples that read the same draw nothing (a steady GPU repaints no cell), and only a
        # change in the number of lines costs a relayout.
        cards = (width, two, no_color, snap.gpus)
        if cards != self._cards:
            relayout = self._cards is None or self._cards[:2] != cards[:2] or len(self._cards[3]) != len(snap.gpus)
            self._cards = cards
            lines = [line for g in snap.gpus for line in card_lines(g, width, two, no_color)]
            text = Text("\n").join(lines)
            text.no_wrap, text.overflow = True, "ellipsis"
            self.cards.update(text, layout=relayout)
        self.procs.set_rows(rows)
        if graph and time.monotonic() - self._graph_at >= redraw_interval(self.graph.render_s, GRAPH_CPU_SHARE):
            self._graph_at = time.monotonic()
            self.graph.draw(self._history)
