"""The trainer's half of the run-directory contract: train.log lines, events.jsonl, status.json.

One `Telemetry` object per process, shared by every thread (all mutation under one lock). Under
torch.distributed each rank has its own, writing the per-rank names of these files
(rundir.rank_file: status.rank1.json, ...) with its rank and node in every record:
- `log(msg)`       a human line on stdout, and in RUN_DIR/train.log unless stdout already is it
                   (the launcher's wrapper points stdout there; a hand-started trainer does not);
- `event(kind,..)` one JSON line appended to events.jsonl;
- `publish()`      status.json, atomically, at most once a second unless forced;
- a heartbeat thread that beats every second (the contract promises <= 2 s) whatever the other
  threads do, compiling included: dynamo tracing is Python and drops the GIL every few ms, and
  inductor's C++/Triton builds run in subprocesses;
- compile callbacks: torch's own on_compile_start/on_compile_end attribute each compile to the
  thread that ran it (or to the worker whose device the main thread is warming), with graph
  counts and wall seconds, plus dynamo's global counters in every compile event.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterator

from dflash_tui.contract import rundir
from dflash_tui.contract.rundir import CompileState, EventKind, Phase, ThreadStatus, TrainStatus


_IMPORTED_AT = time.time()


def process_start_time() -> float:
    """When this process started (epoch seconds), as the kernel recorded it, so the
    interpreter's start and torch's import count; where /proc has no answer, when this module
    was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            after_name = fh.read().rsplit(")", 1)[1].split()
        since_boot = int(after_name[19]) / os.sysconf("SC_CLK_TCK")   # field 22: starttime
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED_AT


def new_run_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid()}"


class Telemetry:
    def __init__(
        self,
        run_dir: str,
        run_id: str,
        total_steps: int,
        *,
        clock: Callable[[], float] = time.time,
        stdout: Any = None,
        heartbeat_interval_s: float = rundir.HEARTBEAT_INTERVAL_S / 2,
        rank: int = 0,
        world_size: int = 1,
        node: str = "",
    ) -> None:
        self.run_dir = run_dir
        self.clock = clock
        self.rank = rank
        self._origin = {"rank": rank, "node": node}
        # torchrun gives every rank of a node one stdout: say whose line it is
        self._prefix = f"[rank {rank}] " if world_size > 1 else ""
        self._lock = threading.RLock()
        self._stdout = stdout if stdout is not None else sys.stdout
        self._status = TrainStatus(run_id=run_id, pid=os.getpid(), time=clock(), total_steps=total_steps,
                                   rank=rank, world_size=world_size, node=node)
        self._threads: dict[str, ThreadStatus] = {}
        self._last_publish = float("-inf")
        self._dirty = False
        self._status_path = os.path.join(run_dir, rundir.rank_file(rundir.STATUS_JSON, rank))
        self._events = open(os.path.join(run_dir, rundir.rank_file(rundir.EVENTS_JSONL, rank)), "a", encoding="utf-8")
        self._log_path = os.path.join(run_dir, rundir.rank_file(rundir.TRAIN_LOG, rank))
        self._log_file = None if self._stdout_is_train_log() else open(self._log_path, "a", encoding="utf-8")
        self._beat_interval = heartbeat_interval_s
        self._beat_stop = threading.Event()
        self._beat_thread: threading.Thread | None = None
        # compile attribution
        self._parked: dict[str, int] = {}
        self._attribute_to: dict[int, str] = {}   # thread ident -> the worker its compiles count for
        self._compile_started: dict[str, float] = {}
        self._compile_owner: dict[str, str] = {}
        self._callbacks_installed: tuple[Callable, Callable] | None = None

    @property
    def run_id(self) -> str:
        return self._status.run_id

    def _stdout_is_train_log(self) -> bool:
        try:
            return os.path.samestat(os.fstat(self._stdout.fileno()), os.stat(self._log_path))
        except (OSError, AttributeError, ValueError):
            return False

    # -- human log -------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        line = time.strftime("%H:%M:%S ", time.localtime(self.clock())) + self._prefix + msg
        with self._lock:
            for fh in (self._stdout, self._log_file):
                if fh is None:
                    continue
                try:
                    fh.write(line + "\n")
                    fh.flush()
                except (OSError, ValueError):
                    pass

    def log_exception(self, where: str, exc: BaseException) -> None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
        self.log(f"error in {where}: {type(exc).__name__}: {exc}\n{tb}")

    # -- events ----------------------------------------------------------------------------

    def event(self, kind: EventKind | str, **fields: Any) -> None:
        line = rundir.to_json(rundir.make_event(kind, self.clock(), **self._origin, **fields))
        with self._lock:
            self._events.write(line + "\n")
            self._events.flush()

    # -- threads ---------------------------------------------------------------------------

    def register_thread(self, name: str, role: str, device: str) -> None:
        with self._lock:
            self._threads[name] = ThreadStatus(name=name, role=role, device=device, last_beat_time=self.clock())
            self._status.threads = list(self._threads.values())

    def thread(self, name: str) -> ThreadStatus:
        return self._threads[name]

    def set_compile_state(self, name: str, state: CompileState, **extra: Any) -> None:
        with self._lock:
            ts = self._threads.get(name)
            if ts is None or ts.compile_state == state.value and not extra:
                return
            previous = ts.compile_state
            ts.compile_state = state.value
            ts.last_beat_time = self.clock()
            if state == CompileState.FAILED and "error" in extra:
                ts.error = str(extra["error"])
        self.event(EventKind.COMPILE, thread=name, state=state.value, previous=previous, **extra)
        self.publish(force=state in (CompileState.WAITING_AT_GATE, CompileState.COMPILING, CompileState.FAILED))

    def thread_beat(self, name: str, step: int | None = None) -> None:
        with self._lock:
            ts = self._threads.get(name)
            if ts is None:
                return
            now = self.clock()
            ts.last_beat_time = now
            if step is not None:
                ts.step = step
                ts.last_step_time = now

    @contextlib.contextmanager
    def parked(self, name: str) -> Iterator[None]:
        """The thread waits on a barrier or the compile gate, to be released by another thread.

        While parked, the heartbeat keeps its last_beat_time fresh: a parked thread is as alive
        as the thread it waits for, so a stall shows up on the thread that stopped, not on every
        thread queued behind it.
        """
        with self._lock:
            self._parked[name] = self._parked.get(name, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._parked[name] -= 1
                if not self._parked[name]:
                    del self._parked[name]
                ts = self._threads.get(name)
                if ts is not None:
                    ts.last_beat_time = self.clock()

    def thread_failed(self, name: str, exc: BaseException) -> None:
        with self._lock:
            ts = self._threads.get(name)
            if ts is not None:
                ts.error = f"{type(exc).__name__}: {exc}"
                if ts.compile_state in (CompileState.WARMING.value, CompileState.COMPILING.value, CompileState.PENDING.value):
                    ts.compile_state = CompileState.FAILED.value

    def count_recompile(self, name: str) -> None:
        with self._lock:
            ts = self._threads.get(name)
            if ts is not None:
                ts.recompiles += 1

    # -- run-level status --------------------------------------------------------------------

    def update(self, **fields: Any) -> None:
        with self._lock:
            for k, v in fields.items():
                setattr(self._status, k, v)

    def set_phase(self, phase: Phase) -> None:
        self.update(phase=phase.value)
        self.publish(final=phase in (Phase.FINISHED, Phase.FAILED), force=True)

    @property
    def status(self) -> TrainStatus:
        return self._status

    def publish(self, force: bool = False, final: bool = False) -> bool:
        """Rewrite status.json (atomic), never more than once per STATUS_MIN_INTERVAL_S.

        `force` marks a change worth showing now: if the rate limit holds it back, the next
        heartbeat (within a second) writes it. `final` (the last write of the run) ignores the
        limit, so the phase the run ended in is never lost.
        """
        with self._lock:
            now = self.clock()
            if not final and now - self._last_publish < rundir.STATUS_MIN_INTERVAL_S:
                self._dirty = self._dirty or force
                return False
            self._dirty = False
            self._status.time = now
            self._status.threads = list(self._threads.values())
            text = rundir.to_json(self._status)
            self._last_publish = now
            rundir.atomic_write_text(self._status_path, text + "\n")
            return True

    # -- heartbeat ---------------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        self._beat_stop.clear()
        self._beat_thread = threading.Thread(target=self._beat_loop, name="heartbeat", daemon=True)
        self._beat_thread.start()

    def _beat_loop(self) -> None:
        while not self._beat_stop.wait(self._beat_interval):
            self.beat()

    def beat(self) -> None:
        now = self.clock()
        with self._lock:
            self._status.heartbeat_time = now
            for name in self._parked:
                if name in self._threads:
                    self._threads[name].last_beat_time = now
            st = self._status
            states = {t.name: t.compile_state for t in self._threads.values()}
        self.event(EventKind.HEARTBEAT, phase=st.phase, step=st.step, threads=states)
        self.publish(force=True)

    def stop_heartbeat(self) -> None:
        self._beat_stop.set()
        if self._beat_thread is not None:
            self._beat_thread.join(5)
            self._beat_thread = None

    # -- torch compile callbacks --------------------------------------------------------------

    @contextlib.contextmanager
    def attribute_compiles_to(self, name: str) -> Iterator[None]:
        """While this thread (the step compiler) builds a worker's graphs, its compiles count
        for that worker."""
        me = threading.get_ident()
        with self._lock:
            self._attribute_to[me] = name
        try:
            yield
        finally:
            with self._lock:
                self._attribute_to.pop(me, None)

    def _compile_thread_name(self) -> str:
        return self._attribute_to.get(threading.get_ident()) or threading.current_thread().name

    def _on_compile_start(self, args: Any = None) -> None:
        cid = str(getattr(args, "compile_id", "?"))
        trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
        with self._lock:
            name = self._compile_thread_name()
            self._compile_started[cid] = time.monotonic()
            self._compile_owner[cid] = name
        self.event(EventKind.COMPILE, thread=name, state="start", compile_id=cid, trigger=trigger)

    def _on_compile_end(self, args: Any = None) -> None:
        cid = str(getattr(args, "compile_id", "?"))
        trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
        with self._lock:
            t0 = self._compile_started.pop(cid, None)
            name = self._compile_owner.pop(cid, None) or self._compile_thread_name()
            seconds = time.monotonic() - t0 if t0 is not None else 0.0
            ts = self._threads.get(name)
            if ts is not None:
                ts.compile_seconds += seconds
                if trigger == "DYNAMO":
                    ts.graphs += 1
        self.event(
            EventKind.COMPILE, thread=name, state="end", compile_id=cid, trigger=trigger,
            seconds=round(seconds, 4), dynamo=dynamo_counters(),
        )

    def install_compile_callbacks(self) -> None:
        # Imported here, not at the top: torch._dynamo takes ~2.7 s to import (measured on the
        # loaded 2-core CI box), and this module is imported before the heartbeat starts.
        from torch._dynamo.callback import callback_handler

        start, end = self._on_compile_start, self._on_compile_end
        callback_handler.register_start_callback(start)
        callback_handler.register_end_callback(end)
        self._callbacks_installed = (start, end)

    def remove_compile_callbacks(self) -> None:
        if self._callbacks_installed is None:
            return
        from torch._dynamo.callback import callback_handler  # see install_compile_callbacks

        start, end = self._callbacks_installed
        with contextlib.suppress(ValueError):
            callback_handler.remove_start_callback(start)
        with contextlib.suppress(ValueError):
            callback_handler.remove_end_callback(end)
        self._callbacks_installed = None

    def close(self) -> None:
        self.stop_heartbeat()
        self.remove_compile_callbacks()
        with self._lock:
            self._events.close()
            if self._log_file is not None:
                self._log_file.close()


def dynamo_counters() -> dict[str, int]:
    """The headline numbers from torch._dynamo.utils.counters (process-wide)."""
    try:
        from torch._dynamo.utils import counters  # see install_compile_callbacks
    except Exception:  # noqa: BLE001 - telemetry must never take the run down
        return {}
    return {
        "unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "frames_ok": int(counters["frames"].get("ok", 0)),
        "frames_total": int(counters["frames"].get("total", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }
