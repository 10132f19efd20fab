"""Dashboard cost under load, measured side by side with `tail -F` on the same file.

    .venv/bin/python benchmarks/dashboard_cost.py [--seconds 30] [--rate 1000] [--threads 16] [--gpus 8] [--ranks N]

What runs (all real product code, on this machine):
- a "trainer" launched through the product's own wrapper (Session.launch on a local profile):
  it writes --rate lines a second to stdout (= train.log), a step event every 10 ms to
  events.jsonl, and status.json with --threads threads at 1 Hz; it runs under the run probe
  (the profile's default), with --threads Python threads of its own, so probe reports with every
  thread's stack reach the dashboard each second (the script fails if none did);
- with --ranks N, N more processes beside it, each a rank (RANK, LOCAL_RANK, WORLD_SIZE in its
  environment, as torchrun sets them) with a loop of its own and two helper threads, each under
  the run probe: N more probe reports rewritten every second (the writer is then their launcher);
- the dashboard (DashboardApp + WatchSource: HostWatch through the persistent agent, looking
  every second, every STEADY_INTERVAL_S (watch/host.py) while the run is steady as the dashboard does
  (DFLASH_BENCH_EVERY_SECOND=1: every second regardless), LogFollower, GpuStream over a fake
  NVML with --gpus GPUs), headless, in its own process at 120x40;
- `tail -F train.log > /dev/null`, started at the same moment.

Measured over the same window after a warm-up: CPU seconds of the dashboard process plus its
agent child, and of tail; peak RSS of both; the log pane's lag behind the file (every line
carries the time it was written; read in the dashboard process each time the pane takes new
lines, just before, as now - time of the pane's last line: the most it was behind; nothing of the
measuring wakes up inside it, and RSS is read from this process).
Targets: <= 2% of one core on every tab, <= 80 MB RSS, lag never above 1 s.
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

COLS, ROWS = 120, 40
CPU_TARGET_PCT = 2.0
RSS_TARGET_MB = 80.0
LAG_TARGET_S = 1.0


# -- the fake trainer (runs under launch.sh) ----------------------------------------------------

def writer(rate: int, n_threads: int, ranks: int = 0) -> int:
    from dflash_tui.contract.rundir import (EVENTS_JSONL, STATUS_JSON, Phase, ThreadStatus, TrainStatus,
                                     atomic_write_text, make_event, to_json)
    run_dir = Path(os.environ["DFLASH_RUN_DIR"])
    run_id = os.environ["DFLASH_RUN_ID"]
    out = sys.stdout
    events = open(run_dir / EVENTS_JSONL, "a", buffering=1)
    start_ranks(ranks)   # ended with the run: the stop signals the whole process group

    def drafter() -> None:   # threads with stacks of their own for the probe to report
        while True:
            time.sleep(0.25)
    for i in range(n_threads):
        threading.Thread(target=drafter, name=f"drafter-{i}", daemon=True).start()
    tick = 0.01                      # write in 10 ms batches, like a busy trainer flushing
    per_tick = max(1, round(rate * tick))
    n = 0
    next_t = time.time()
    next_status = 0.0
    start = time.time()
    while True:
        now = time.time()
        for k in range(per_tick):
            out.write(f"{now:.6f} step {n} loss 2.3456 acc 0.4567 tau 3.21 tok/s 18450 "
                      f"thread drafter-{k % n_threads}\n")
            n += 1
        out.flush()
        events.write(to_json(make_event("step", now, step=n, loss=2.0 + (n % 97) / 100,
                                        accuracy=0.4, tau=3.2, tokens_per_s=18450.0)) + "\n")
        if now >= next_status:
            threads = [ThreadStatus(name=f"drafter-{i}", role="drafter", device=f"cuda:{i % 8}",
                                    compile_state="compiled", graphs=6, compile_seconds=40.0,
                                    step=n, last_step_time=now, last_beat_time=now)
                       for i in range(n_threads)]
            atomic_write_text(run_dir / STATUS_JSON, to_json(TrainStatus(
                run_id=run_id, pid=os.getpid(), time=now, phase=Phase.TRAINING.value, step=n,
                total_steps=0, loss=2.3, accuracy=0.45, tau=3.2, tokens_per_s=18450.0,
                heartbeat_time=now, threads=threads)))
            next_status = now + 1.0
        next_t += tick
        time.sleep(max(0.0, next_t - time.time()))
        if now - start > 3600:
            return 0


def rank_child() -> int:
    """One rank beside the writer: a step loop in its own function and two helper threads, so
    its probe report carries three stacks, rewritten every second, as a rank's would."""
    def helper() -> None:
        while True:
            time.sleep(0.5)
    for name in ("pin_memory", "watchdog"):
        threading.Thread(target=helper, name=name, daemon=True).start()

    def train_step() -> None:
        time.sleep(0.5)
    while True:
        train_step()


def start_ranks(n: int) -> list[subprocess.Popen]:
    """`n` rank processes, children of the writer: the probe starts in each (PYTHONPATH and
    DFLASH_RUN_DIR come with the environment)."""
    return [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--rank-child"],
                             env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r % 8), "WORLD_SIZE": str(n)},
                             stdout=subprocess.DEVNULL)
            for r in range(n)]


# -- the measured dashboard process -------------------------------------------------------------

def dashboard(profile_json: str, seconds: float, warmup: float, gpus: int, out: str) -> int:
    import psutil

    from dflash_tui.config import Profile
    from dflash_tui.gpu.fake_nvml import FakeNvml, loader
    from dflash_tui.gpu.sources import LocalNvmlSource
    from dflash_tui.ui.app import DashboardApp
    from dflash_tui.ui.sources.watch_source import WatchSource
    from dflash_tui.watch import STEADY_INTERVAL_S, open_watch

    profile = Profile(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(profile_json).items()})
    breakdown = _instrument() if os.environ.get("DFLASH_BENCH_BREAKDOWN") else None
    layouts = _count_layouts() if os.environ.get("DFLASH_BENCH_LAYOUTS") else None
    follower_polls = _count_follower_polls()
    bytes_decoded = _count_chunk_bytes()

    def fake_gpu_source(profile) -> WatchSource:
        """The live source, except that NVML is the fake one with `gpus` busy GPUs."""
        watch = open_watch(profile, steady_interval=None if os.environ.get("DFLASH_BENCH_EVERY_SECOND") else STEADY_INTERVAL_S)

        async def fake_nvml():
            if os.environ.get("DFLASH_BENCH_NOGPU"):   # experiment knob: the GPU stream's share
                await asyncio.Event().wait()
            return LocalNvmlSource(load=loader(FakeNvml([_busy_gpu(i) for i in range(gpus)])))
        watch.gpus.open_source = fake_nvml
        return WatchSource(watch)

    result: dict = {}

    class MeasuredApp(DashboardApp):
        def on_mount(self) -> None:
            # Textual calls DashboardApp.on_mount itself (its handlers run for each class of the
            # MRO): calling it here too would start a second header timer and the streams twice.
            self.run_worker(self.measure(), group="bench")

        async def measure(self) -> None:
            tab = os.environ.get("DFLASH_BENCH_TAB", "tab-log")   # which pane is on screen
            # TabbedContent applies its `initial` tab after the app's on_mount, so a switch
            # made right away is undone: switch once the first frame is up, and check it held.
            # On a loaded machine the first frame can take seconds: switch until it holds.
            for _ in range(40):
                await asyncio.sleep(0.5)
                self.run_view.action_show_tab(tab)
                await asyncio.sleep(0.5)
                if self.run_view.tabs.active == tab:
                    break
            me = psutil.Process()
            await asyncio.sleep(warmup)
            # The agent works for the dashboard: its CPU counts. Listed once, so the
            # measuring itself does not scan /proc ten times a second.
            helpers = me.children(recursive=True)

            def cpu(procs=None) -> float:
                total = 0.0
                for p in (procs if procs is not None else (me, *helpers)):
                    try:
                        t = p.cpu_times()
                        total += t.user + t.system
                    except psutil.NoSuchProcess:
                        pass
                return total

            prof = None
            if os.environ.get("DFLASH_BENCH_CPROFILE"):   # where the steady state's time goes
                import cProfile
                # The main thread's CPU clock: on a loaded box, wall time would charge the
                # waits for a core to whatever was running when the scheduler took it away.
                prof = cProfile.Profile(time.thread_time)
                prof.enable()
            frames = _count_frames(self.screen)
            if os.environ.get("DFLASH_BENCH_NOPAINT"):   # experiment: everything but the frames
                self.screen._compositor_refresh = lambda *a, **k: None
            if breakdown is not None:
                breakdown.clear()
            wakeups = _count_wakeups() if os.environ.get("DFLASH_BENCH_WAKEUPS") else None
            if layouts is not None:
                layouts.clear()
            gc0 = [g["collections"] for g in gc.get_stats()]
            c0, a0, w0 = cpu(), cpu(helpers), time.monotonic()
            bytes0 = dict(bytes_decoded)
            main0 = time.thread_time()   # the event loop's share (the rest: Textual's writer, NVML)
            # The lag is read when the pane takes new lines, just before it does: how far behind
            # the file the pane was at its most. Nothing of the measuring wakes up in here (a
            # wake-up of this event loop costs ~0.2 ms of CPU on a small VM), and RSS is sampled
            # by the parent process, so the figure is the product's.
            lags = []
            pane_lines = self.run_view.log_pane.lines
            append = pane_lines.append

            def read_lag():
                last = pane_lines.last_line()
                if last:
                    try:
                        lags.append(time.time() - float(last.split()[0]))
                    except ValueError:
                        pass   # a marker line

            def append_timed(new):
                read_lag()
                return append(new)
            pane_lines.append = append_timed
            await asyncio.sleep(seconds)
            del pane_lines.append
            read_lag()   # once more at the end: a pane that stopped taking lines is as far behind as this
            c1, a1, w1 = cpu(), cpu(helpers), time.monotonic()
            main_cpu = time.thread_time() - main0
            result["gc_passes"] = [g["collections"] - n for g, n in zip(gc.get_stats(), gc0)]
            if prof is not None:
                prof.disable()
                prof.dump_stats(os.environ["DFLASH_BENCH_CPROFILE"])
            lags.sort()
            if os.environ.get("DFLASH_BENCH_SCREEN"):   # what was on screen at the end, as text
                Path(os.environ["DFLASH_BENCH_SCREEN"]).write_text(
                    "\n".join(strip.text for strip in self.screen._compositor.render_strips()))
            if breakdown is not None:
                result["breakdown"] = {k: round(v, 4) for k, v in breakdown.items()}
            result["follower_polls"] = dict(follower_polls)
            if wakeups is not None:
                result["wakeups"] = {k: round(v / seconds, 1) for k, v in wakeups.most_common(16)}
            if _FRAME_KINDS:
                result["frames_by_kind"] = {k: f"{n} frames, {1000 * t / n:.2f} ms each, {w / n:.1f} widget types"
                                            for k, (n, t, w) in _FRAME_KINDS.items()}
            if layouts is not None:
                result["layouts"] = dict(layouts.most_common(24))
            result["bytes_decoded"] = {k: v - bytes0.get(k, 0) for k, v in bytes_decoded.items()}
            result.update(tab=self.run_view.tabs.active, frames=frames[0], cpu_s=c1 - c0, main_cpu_s=main_cpu, agent_cpu_s=a1 - a0, wall_s=w1 - w0,
                          lag_max=lags[-1] if lags else None,
                          lag_p50=lags[len(lags) // 2] if lags else None,
                          lag_p99=lags[int(len(lags) * 0.99)] if lags else None,
                          lag_samples=len(lags), helpers=[" ".join(h.cmdline()[:2]) for h in helpers
                                                            if h.is_running()],
                          lines_kept=self.run_view.log_pane.lines.line_count,
                          verdict=self.run_view.report.checklist.verdict.value if self.run_view.report else None,
                          gpus_shown=len(self.run_view.gpu_pane.snapshot.gpus) if self.run_view.gpu_pane.snapshot else 0,
                          threads_shown=len(self.run_view.report.status.threads) if self.run_view.report and self.run_view.report.status else 0,
                          probes_shown=len(self.run_view.report.probes) if self.run_view.report else 0,
                          stack_frames=sum(len(t.frames) for pr in (self.run_view.report.probes if self.run_view.report else ())
                                           for t in pr.threads))
            self.exit()

    app = MeasuredApp(lambda name: fake_gpu_source(profile), profile.name)
    # In a real terminal (the pty the orchestrator gives it): painting includes writing the
    # escape sequences, which a headless run would skip.
    app.run(headless=not sys.stdout.isatty())
    Path(out).write_text(json.dumps(result))
    return 0


def _count_wakeups():
    """DFLASH_BENCH_WAKEUPS=1: the event loop's turns and the callbacks it ran, by name."""
    import asyncio.base_events
    import asyncio.events
    import collections
    counts: collections.Counter = collections.Counter()
    run = asyncio.events.Handle._run

    def counted(self):
        cb = self._callback
        task = getattr(cb, "__self__", None)
        if isinstance(task, asyncio.Task):
            coro = task.get_coro()
            name = f"task {getattr(coro, '__qualname__', coro)}"
        else:
            name = getattr(cb, "__qualname__", repr(cb))
        counts[name] += 1
        return run(self)
    asyncio.events.Handle._run = counted
    run_once = asyncio.base_events.BaseEventLoop._run_once

    def turn(self):
        counts["(loop turns)"] += 1
        return run_once(self)
    asyncio.base_events.BaseEventLoop._run_once = turn
    return counts


def _count_layouts():
    """DFLASH_BENCH_LAYOUTS=1: which widgets ask for a layout (each one repaints the screen)."""
    import collections

    from textual.widget import Widget
    counts: collections.Counter = collections.Counter()
    refresh = Widget.refresh

    def counted(self, *regions, repaint=True, layout=False, recompose=False):
        if layout:
            counts[f"{type(self).__name__}#{self.id}"] += 1
        elif repaint and os.environ.get("DFLASH_BENCH_LAYOUTS") == "all":   # repaints too
            counts[f"repaint {type(self).__name__}#{self.id}"] += 1
        return refresh(self, *regions, repaint=repaint, layout=layout, recompose=recompose)
    Widget.refresh = counted
    return counts


def _count_follower_polls() -> dict:
    """Log polls (train.log, events.jsonl) in all, and those a look's read answered (a tree
    whose LogFollower has no `shared` reads counts none of those)."""
    from dflash_tui.run.evidence import logtail
    counts = {"polls": 0, "shared": 0}
    poll = logtail.LogFollower.poll

    async def counted(self):
        counts["polls"] += 1
        before = getattr(self, "shared_polls", 0)
        try:
            return await poll(self)
        finally:
            counts["shared"] += getattr(self, "shared_polls", 0) - before
    logtail.LogFollower.poll = counted
    return counts


def _count_chunk_bytes() -> dict:
    """Bytes of file data the app decoded from its agent's answers (base64 in JSON), by file
    name: what the agent read, encoded and sent for each."""
    import collections

    from dflash_tui.remote import agent
    from dflash_tui.run.evidence import first_look
    counts: collections.Counter = collections.Counter()
    decode = agent.chunk_from

    def counted(d: dict):
        chunk = decode(d)
        counts[os.path.basename(chunk.path)] += len(chunk.data)
        return chunk
    agent.chunk_from = first_look.chunk_from = counted
    return counts


def _instrument() -> dict:
    """DFLASH_BENCH_BREAKDOWN=1: seconds spent in the dashboard's synchronous stages."""
    import collections
    import functools

    from dflash_tui.run.verdict import health
    from dflash_tui.run.evidence import observe
    from dflash_tui.run.evidence import tracebacks
    from dflash_tui.ui.screens import run as run_screen
    from dflash_tui.ui.panes import logview, metrics
    from textual.screen import Screen
    spent: dict = collections.Counter()

    def wrap(owner, name, label):
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - t
        setattr(owner, name, timed)

    wrap(Screen, "_compositor_refresh", "paint (compositor)")
    from textual.widget import Widget
    render_lines = Widget.render_lines

    def per_widget(self, crop):
        t = time.thread_time()
        try:
            return render_lines(self, crop)
        finally:
            spent[f"  render {type(self).__name__}#{self.id}"] += time.thread_time() - t
            spent[f"  renders of {type(self).__name__}#{self.id}"] += 1
    Widget.render_lines = per_widget
    wrap(Screen, "_refresh_layout", "layout")
    wrap(logview.LogLines, "append", "log append")
    wrap(metrics.MetricsPane, "add_lines", "metrics parse")
    wrap(run_screen.RunScreen, "on_report", "report -> panes")
    wrap(run_screen.RunScreen, "on_gpu_snapshot", "gpu -> pane")
    wrap(health, "evaluate", "checklist (run/health)")
    wrap(tracebacks, "last_traceback", "traceback scan (run/)")
    # The look's and the log poll's synchronous pieces.
    from dflash_tui.gpu import sources as gpu_sources
    from dflash_tui.run.evidence import log_series, logtail, progress
    from dflash_tui.run.launch import launcher
    wrap(launcher.Launcher, "judge", "judge (evaluate)")
    wrap(progress.ProgressParser, "feed", "train.log progress parse")
    wrap(log_series.LogSeries, "feed", "train.log metric series parse")
    wrap(logtail.LogFollower, "_lines", "log follower lines")
    wrap(gpu_sources, "snapshot_from_dict", "gpu snapshot decode")
    import gc
    started: list[float] = []

    def collecting(phase, info):   # the cyclic garbage collector's pauses, by generation
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            spent[f"gc gen{info['generation']}"] += time.perf_counter() - started.pop()
    gc.callbacks.append(collecting)
    return spent


def _terminal(cols: int, rows: int) -> tuple[int, int]:
    """A pseudo-terminal of cols x rows for the dashboard to draw into."""
    import fcntl
    import struct
    import termios
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return master, slave


def _drain(fd: int) -> bytearray:
    """Read everything the dashboard writes to its terminal, in a thread, keeping the last 64 KiB."""
    import threading
    seen = bytearray()

    def run() -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return   # the dashboard closed its side
            if not chunk:
                return
            seen.extend(chunk)
            del seen[:-65536]
    threading.Thread(target=run, daemon=True).start()
    return seen


def _count_frames(screen) -> list[int]:
    """Count the screen's repaints from now on (a diagnostic printed beside the CPU figure).
    DFLASH_BENCH_FRAMES=1: also each frame's CPU by its kind (which widgets it rendered),
    in result["frames_by_kind"]."""
    n = [0]
    paint = screen._compositor_refresh
    kinds = _FRAME_KINDS if os.environ.get("DFLASH_BENCH_FRAMES") else None
    if kinds is not None:
        from textual.widget import Widget
        rendered: set = set()
        render_lines = Widget.render_lines

        def noted(self, crop):
            rendered.add(type(self).__name__)
            return render_lines(self, crop)
        Widget.render_lines = noted

    def counted(*args, **kwargs):
        n[0] += 1
        if kinds is None:
            return paint(*args, **kwargs)
        rendered.clear()
        t = time.thread_time()
        try:
            return paint(*args, **kwargs)
        finally:
            kind = "with HealthPane" if "HealthPane" in rendered else (
                "log only" if rendered else "nothing")
            k = kinds.setdefault(kind, [0, 0.0, 0])
            k[0] += 1
            k[1] += time.thread_time() - t
            k[2] += len(rendered)
    screen._compositor_refresh = counted
    return n


_FRAME_KINDS: dict = {}


def _busy_gpu(i: int):
    from dflash_tui.gpu.fake_nvml import FakeGpu
    return FakeGpu(load_pct=90.0 + i, mem_used=(60 + i) << 30, processes=[(100_000 + i, 60 << 30)])


# -- the orchestrator ---------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=1000, help="log lines per second")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=0, help="rank processes beside the writer, each with its probe report")
    ap.add_argument("--writer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dashboard", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        return writer(args.rate, args.threads, args.ranks)
    if args.rank_child:
        return rank_child()
    if args.dashboard:
        return dashboard(args.dashboard, args.seconds, args.warmup, args.gpus, args.out)
    if shutil.which("tail") is None:
        print("dashboard_cost: `tail` not found; it is the comparison, install coreutils", file=sys.stderr)
        return 2

    import psutil

    from dflash_tui.config import Profile
    from dflash_tui.watch.session import Session

    tmp = Path(tempfile.mkdtemp(prefix="dflash-dash-bench-"))
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    run_dir = tmp / "run"
    profile = Profile(name="bench", run_dir=str(run_dir), python=sys.executable,
                      command=(sys.executable, str(Path(__file__).resolve()), "--writer",
                               "--rate", str(args.rate), "--threads", str(args.threads), "--ranks", str(args.ranks)),
                      stop_grace_s=3.0, min_free_gb=0.0)

    async def launch() -> None:
        async with Session(profile) as s:
            out = await s.launch()
            if out.checklist.verdict.failing or not out.run_id:
                raise SystemExit(f"dashboard_cost: the load run did not start: {out.checklist.summary}")

    async def stop() -> None:
        async with Session(profile) as s:
            await s.stop()

    asyncio.run(launch())
    log = run_dir / "train.log"
    try:
        profile_json = json.dumps({f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)})
        out = tmp / "dashboard.json"
        master, slave = _terminal(COLS, ROWS)
        dash = subprocess.Popen([sys.executable, __file__, "--dashboard", profile_json, "--out", str(out),
                                 "--seconds", str(args.seconds), "--warmup", str(args.warmup),
                                 "--gpus", str(args.gpus)],
                                stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                env={**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor"})
        os.close(slave)
        screen_bytes = _drain(master)   # the terminal emulator's side: read and discard
        tail = subprocess.Popen(["tail", "-F", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tp = psutil.Process(tail.pid)
        time.sleep(args.warmup)
        t0 = sum(tp.cpu_times()[:2])
        w0 = time.monotonic()
        # Peak RSS of tail (every 0.1 s) and of the dashboard and its agent (every 0.5 s), read
        # from here: nothing of the measuring runs in the measured process but its lag read.
        dp = psutil.Process(dash.pid)
        agents = dp.children(recursive=True)
        tail_rss = rss = agent_rss = tick = 0
        while time.monotonic() - w0 < args.seconds:
            time.sleep(0.1)
            tail_rss = max(tail_rss, tp.memory_info().rss)
            tick += 1
            if tick % 5:
                continue
            try:
                rss = max(rss, dp.memory_info().rss)
                agents = agents or dp.children(recursive=True)   # the agent starts with the app
            except psutil.NoSuchProcess:
                pass
            for h in agents:
                try:
                    agent_rss = max(agent_rss, h.memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
        t1, w1 = sum(tp.cpu_times()[:2]), time.monotonic()
        tail.terminate()
        tail.wait(10)
        dash.wait(timeout=args.seconds + 120)
        if dash.returncode != 0 or not out.exists() or "cpu_s" not in json.loads(out.read_text() or "{}"):
            tail_of_screen = bytes(screen_bytes[-4000:]).decode(errors="replace")
            print(f"dashboard_cost: the dashboard process failed (exit {dash.returncode}); "
                  f"the end of its terminal output:\n{tail_of_screen}", file=sys.stderr)
            return 1
        r = json.loads(out.read_text())
        r.update(rss=rss, agent_rss=agent_rss)
    finally:
        asyncio.run(stop())

    dash_pct = 100 * r["cpu_s"] / r["wall_s"]
    tail_pct = 100 * (t1 - t0) / (w1 - w0)
    lines_written = sum(1 for _ in open(log, "rb"))
    print(f"load: {args.rate} lines/s into train.log ({lines_written} lines, {log.stat().st_size >> 20} MiB), "
          f"{args.threads} threads in status.json, {args.ranks} rank processes, {args.gpus} fake-NVML GPUs, 1 Hz refresh; "
          f"{args.seconds:.0f} s measured after {args.warmup:.0f} s warm-up")
    print(f"of which the agent: {100 * r['agent_cpu_s'] / r['wall_s']:.2f}% of one core, the app's event loop: "
          f"{100 * r['main_cpu_s'] / r['wall_s']:.2f}%")
    print(f"repaints: {r['frames'] / r['wall_s']:.1f} a second; garbage collector passes by generation: "
          f"{'/'.join(map(str, r['gc_passes']))}; load average during the run: "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    fp = r.get("follower_polls", {})
    print(f"log followers: {fp.get('polls', 0)} polls from the start, {fp.get('shared', 0)} of them answered by "
          f"the look's own read of the file")
    bd = r.get("bytes_decoded", {})
    print("file bytes from the agent, per second measured: " + ", ".join(
        f"{name} {n / 1024 / r['wall_s']:.1f} KiB" for name, n in sorted(bd.items(), key=lambda kv: -kv[1])[:4]))
    if "wakeups" in r:
        print("event loop, a second: " + ", ".join(f"{k} {v}" for k, v in r["wakeups"].items()))
    if "frames_by_kind" in r:
        print("frames by kind: " + "; ".join(f"{k}: {v}" for k, v in r["frames_by_kind"].items()))
    if "layouts" in r:
        print("layouts asked for (widget: count in the window): " + ", ".join(f"{k} {v}" for k, v in r["layouts"].items()))
    if "breakdown" in r:
        print("breakdown (seconds in the window): " + ", ".join(f"{k} {v}" for k, v in r["breakdown"].items()))
    print(f"dashboard saw: {r['tab']} on screen, verdict {r['verdict']}, {r['gpus_shown']} GPUs, {r['threads_shown']} threads, "
          f"{r['probes_shown']} probe reports ({r['stack_frames']} stack frames), {r['lines_kept']} log lines kept")
    if not r["probes_shown"]:
        print("dashboard_cost: no probe report reached the dashboard; the load is not the one asked for",
              file=sys.stderr)
        return 1
    print()
    print("| | CPU (% of one core) | peak RSS | log lag p50 / p99 / max |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| dashboard (app + its agent) | {dash_pct:.2f}% | {r['rss'] / 2**20:.0f} MB (+ agent "
          f"{r['agent_rss'] / 2**20:.0f} MB) | {r['lag_p50']:.3f} / {r['lag_p99']:.3f} / {r['lag_max']:.3f} s |")
    print(f"| `tail -F` on the same file | {tail_pct:.2f}% | {tail_rss / 2**20:.1f} MB | - |")
    print(f"| ratio dashboard / tail | {dash_pct / tail_pct if tail_pct else float('inf'):.1f}x | "
          f"{r['rss'] / max(tail_rss, 1):.0f}x | |")
    want_tab = os.environ.get("DFLASH_BENCH_TAB", "tab-log")
    if r["tab"] != want_tab:
        print(f"dashboard_cost: {want_tab} was asked for but {r['tab']} was on screen; "
              f"these figures are for {r['tab']}", file=sys.stderr)
        return 1
    ok = (dash_pct <= CPU_TARGET_PCT and r["rss"] / 2**20 <= RSS_TARGET_MB
          and r["lag_max"] is not None and r["lag_max"] <= LAG_TARGET_S)
    print()
    print(f"targets: CPU <= {CPU_TARGET_PCT}% -> {dash_pct:.2f}%, RSS <= {RSS_TARGET_MB:.0f} MB -> "
          f"{r['rss'] / 2**20:.0f} MB, lag <= {LAG_TARGET_S} s -> max {r['lag_max']:.3f} s: "
          f"{'PASS' if ok else 'FAIL'}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
