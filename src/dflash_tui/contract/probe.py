"""The run probe: what every Python process of a run reports about itself, with no code change.

The launcher copies this file into RUN_DIR/probe/ as ``dflash_probe.py`` (beside
``dflash_rundir.py``, a verbatim copy of the contract, and a ``sitecustomize.py`` that calls
`start()`), and the wrapper puts that directory first on PYTHONPATH. Then each Python process
of the run -- the bundled trainer, ``python train.py``, torchrun's and accelerate's workers --
runs a daemon thread that rewrites RUN_DIR/probe/<pid>.json (a `ProbeReport`) about once a
second: pid, ppid, rank, argv, CPU time, each thread's name and innermost frames (what
``py-spy dump`` shows) and since when they stand where they are, and, once the program has
imported torch, each thread's compile state, read from torch's own compile callbacks and
dynamo's counters.

Rules the probe keeps, because it runs inside programs that are not ours:
- it never raises into the program: every failure is counted and noted in probe/errors.log
  (bounded), and the report goes on without the part that failed;
- it never imports torch (or anything the program has not imported): it reads sys.modules;
- it costs well under 1 % of one core (one small file write a second);
- it keeps none of the program's objects alive: the frames a beat reads are let go before the
  beat ends, so a function's locals are freed at its return, as without the probe;
- it leaves stdout, stderr, the program's signal handlers and the exit code alone; its thread
  is a daemon; around os.fork() it stops its thread and starts it again in both parent and
  child, so a child never inherits a lock or a half-written file of ours.

Stacks when Python cannot run: a report stops being rewritten exactly when no thread can run
Python (a C call holding the GIL, a deadlock inside the compiler). For that case the probe
registers faulthandler, which dumps every thread's stack from a C signal handler, without the
GIL, into RUN_DIR/probe/<pid>.stack, on one real-time signal that no handler of the program
catches or ignores (read from /proc/self/status, so C-level handlers count too), and declares
that signal in its report. The agent sends it only to a process whose report went stale and
declares it (remote/agent_server.py `dump_stacks`). A program that later takes the signal for
itself (signal.signal) is seen at the next beat, and the report stops declaring it.

`log(step=..., loss=..., **metrics)` is the optional one-line API for exact metrics: it appends
a typed step event to RUN_DIR/events.jsonl (one O_APPEND write per line, safe from many
threads and processes).

Stdlib only. Self-contained except for the contract (``dflash_rundir`` in a run dir).
"""

from __future__ import annotations

import atexit
import faulthandler
import math
import os
import signal
import sys
import threading
import time

if __package__:   # imported inside dflash_tui (tests, tooling): the contract beside it
    from . import rundir as _rd
else:             # in a run dir: the launcher's verbatim copy of the contract beside this file
    import dflash_rundir as _rd

__all__ = ["log", "start", "stop"]

THREAD_NAME = "dflash-probe"
FRAMES_PER_THREAD = 6         # innermost frames kept per thread
_STACK_WALK_MAX = 512         # frames looked at per thread to tell whether it is compiling
_MAX_THREADS = 256
_BEAT_THREADS = 8             # non-daemon threads kept per beat in the report's recent beats
_BEAT_STACKS = 32             # distinct stacks those beats may name
_MAX_ARGV = 64
_MAX_TEXT = 400               # characters kept of one argv item or one frame line
_ERRORS_MAX_BYTES = 64 << 10
_ERRORS_PER_KIND = 3          # the same failure is noted this often, then only counted
_EVENT_MAX_BYTES = 64 << 10
_DIST_DIR = os.sep + os.path.join("torch", "distributed") + os.sep
# Real-time signals the probe may take for stack dumps, the first free one wins. High ones:
# libraries that use real-time signals (timers, profilers, MPI) count up from SIGRTMIN.
_STACK_SIGNALS = tuple(range(getattr(signal, "SIGRTMAX", 0) - 2, getattr(signal, "SIGRTMAX", 0) - 10, -1)
                       ) if hasattr(signal, "SIGRTMAX") else ()
_TORCH_WATCH_S = 0.05         # how often to look for torch._dynamo until its callbacks are ours
# The first report a moment after start-up, not during it: a process that lives less (a
# `python -c ...` from a shell script) leaves no report, and start-up never waits on the probe.
FIRST_BEAT_S = 0.25

# A thread whose stack passes through one of these is compiling now, whether or not torch's
# callbacks told us (they fire once for overlapping compiles of several threads).
_OWN_FILE = __file__
_COMPILE_FRAMES = (os.sep + os.path.join("torch", "_dynamo", "convert_frame.py"),
                   os.sep + os.path.join("torch", "_inductor", "compile_fx.py"))


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of `data` to `fd` (one os.write may take less than it is given), then closes it."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _float_env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "").strip() or default)
    except ValueError:
        return default


# How long a thread may sit in torch.distributed before the probe dumps the Flight Recorder
# (tests shorten it through the environment).
_FR_AFTER_S = _float_env("DFLASH_FR_DUMP_AFTER_S", _rd.FR_DUMP_AFTER_S)


def _signal_mask(status: str, key: str) -> int:
    for line in status.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1], 16)
    raise ValueError("no %s line in /proc/self/status" % key)


def _own_start_ticks() -> int | None:
    try:
        with open("/proc/self/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _free_stack_signal() -> int | None:
    """A real-time signal that this process neither catches (Python or C handler) nor ignores,
    or None. Without /proc to prove it, none: a signal the program handles is never taken."""
    try:
        with open("/proc/self/status") as fh:
            status = fh.read()
        taken = _signal_mask(status, "SigCgt") | _signal_mask(status, "SigIgn")
    except (OSError, ValueError):
        return None
    for sig in _STACK_SIGNALS:
        if not taken & (1 << (sig - 1)) and signal.getsignal(sig) == signal.SIG_DFL:
            return sig
    return None


def _initialised(module) -> bool:
    """A module some thread of the program has finished importing (never one mid-import)."""
    if module is None:
        return False
    spec = getattr(module, "__spec__", None)
    return not getattr(spec, "_initializing", False)


def _recompile(compile_id: str) -> bool:
    """Dynamo's compile ids read "frame/attempt" (maybe "!0/3_1"): attempt > 0 recompiles a frame."""
    try:
        return int(compile_id.rsplit("/", 1)[1].split("_", 1)[0]) > 0
    except (IndexError, ValueError):
        return False


class _ThreadCompiles:
    __slots__ = ("graphs", "recompiles", "seconds", "started")

    def __init__(self) -> None:
        self.graphs = 0
        self.recompiles = 0
        self.seconds = 0.0
        self.started: float | None = None    # monotonic start of the compile in progress


class _Probe:
    def __init__(self, run_dir: str, run_id: str, interval_s: float) -> None:
        self.run_dir = run_dir
        self.run_id = run_id
        self.interval_s = interval_s
        self.probe_dir = os.path.join(run_dir, _rd.PROBE_DIR)
        self._write_lock = threading.Lock()     # report writes (may wait on a slow disk)
        self._compile_lock = threading.Lock()   # compile bookkeeping: held for microseconds
        self._events_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._events_fd: int | None = None
        self._torch_done = False             # dynamo's callbacks registered (or that failed)
        self._fork_hooked = False
        self._paused = False                 # the thread was stopped for a fork in progress
        self._due = 0.0                      # when the next beat is due (monotonic)
        self._stack_fd: int | None = None    # probe/<pid>.stack, held by faulthandler
        # ident -> (where its stack is, since when: target clock, monotonic); `_stack_key`
        self._stacks: dict[int, tuple[tuple, float, float]] = {}
        self._fr_dumped_at: float | None = None
        self.stack_signal: int | None = None
        self._reset_for_this_process()

    # -- process identity (again after a fork) -----------------------------------------------

    def _reset_for_this_process(self) -> None:
        self.pid = os.getpid()
        self.ppid = os.getppid()
        self.start_time = time.time()
        self.seq = 0
        self.errors = 0
        self._error_kinds: dict[str, int] = {}
        self._compiles: dict[int, _ThreadCompiles] = {}
        self._probe_cpu_before = 0.0         # CPU of this process's earlier probe threads
        self._thread_cpu = 0.0               # the current probe thread's, at its last beat
        self.step: int | None = None
        self.step_time: float | None = None
        self.log_calls = 0
        self._stacks = {}
        self._beats: list[tuple[int, tuple]] = []   # (seq, its non-daemon threads' stacks): `_recent_beats`
        self.report_path = os.path.join(self.probe_dir, _rd.probe_report_name(self.pid))
        self.tmp_path = os.path.join(self.probe_dir, ".%d.tmp" % self.pid)
        self.rank = _int_env("RANK")
        self.local_rank = _int_env("LOCAL_RANK")
        self.world_size = _int_env("WORLD_SIZE")
        # The launcher's name for the node (a Slurm node's, an SSH node's): what a scheduler is
        # told to avoid; the host name elsewhere.
        self.node = os.environ.get("DFLASH_NODE") or os.uname().nodename
        self.start_ticks = _own_start_ticks()
        self.stack_path = os.path.join(self.probe_dir, _rd.probe_stack_name(self.pid))

    # -- failures: swallowed, counted, noted ---------------------------------------------------

    def note_error(self, where: str, exc: BaseException) -> None:
        try:
            self.errors += 1
            kind = where + ":" + type(exc).__name__
            seen = self._error_kinds.get(kind, 0)
            self._error_kinds[kind] = seen + 1
            if seen >= _ERRORS_PER_KIND:
                return
            path = os.path.join(self.probe_dir, _rd.PROBE_ERRORS_LOG)
            try:
                if os.stat(path).st_size >= _ERRORS_MAX_BYTES:
                    return
            except OSError:
                pass
            line = "%s pid %d %s: %s: %s\n" % (
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), self.pid, where,
                type(exc).__name__, str(exc)[:300].replace("\n", " "))
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, line.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except Exception:   # noqa: BLE001 - nowhere left to note it; the count says it happened
            pass

    # -- the heartbeat thread -------------------------------------------------------------------

    def start_thread(self, first_beat_after_s: float = 0.0) -> None:
        self._probe_cpu_before += self._thread_cpu
        self._thread_cpu = 0.0
        self._stop = threading.Event()
        thread = threading.Thread(target=self._loop, args=(first_beat_after_s,), name=THREAD_NAME, daemon=True)
        self._thread = thread
        thread.start()

    def stop_thread(self, timeout: float = 1.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    def _loop(self, first_beat_after_s: float) -> None:
        stop = self._stop
        if first_beat_after_s and stop.wait(first_beat_after_s):
            return
        while True:
            self.beat()
            self._thread_cpu = time.thread_time()
            deadline = self._due = time.monotonic() + self.interval_s
            # Once torch is imported and until dynamo's callbacks are registered, look often:
            # a compile that starts before they are misses its start (dict lookups: ~free).
            while not self._torch_done and "torch" in sys.modules:
                if stop.wait(_TORCH_WATCH_S):
                    return
                self._try_watch_torch()
                if time.monotonic() >= deadline:
                    break
            else:
                if stop.wait(max(0.0, deadline - time.monotonic())):
                    return

    def _try_watch_torch(self) -> None:
        try:
            self._watch_torch()
        except Exception as exc:   # noqa: BLE001 - the probe never raises into the program
            self._torch_done = True   # a torch unlike the one we know: report without callbacks
            self.note_error("torch", exc)

    def beat(self, ended: bool = False) -> None:
        self._try_watch_torch()
        if not ended:
            self._keep_stack_dump()
        try:
            report = self.report(ended)
            text = _rd.to_json(report) + "\n"
        except Exception as exc:   # noqa: BLE001
            self.note_error("report", exc)
            return
        # At exit, never wait long for a heartbeat thread stuck in a write (a hung mount).
        if not self._write_lock.acquire(timeout=0.5 if ended else -1):
            return
        try:
            self._write(text)
        except Exception as exc:   # noqa: BLE001
            self.note_error("write", exc)
        finally:
            self._write_lock.release()

    def _write(self, text: str) -> None:
        data = text.encode("utf-8")
        fd = os.open(self.tmp_path, _NEW_FILE, 0o644)
        try:
            _write_all(fd, data)
            os.replace(self.tmp_path, self.report_path)
        except BaseException:
            try:
                os.unlink(self.tmp_path)
            except OSError:
                pass
            raise
        self.seq += 1

    # -- stack dumps from C, for when no thread can run Python ---------------------------------

    def _keep_stack_dump(self) -> None:
        """Arm the dump at the first beat (a process that lives less leaves no file behind);
        disarm it for good if the program has since put a handler of its own on the signal."""
        try:
            if self.stack_signal is None:
                if self._stack_fd is None:
                    self._arm_stack_dump()
            elif signal.getsignal(self.stack_signal) != signal.SIG_DFL:
                self.stack_signal = None       # theirs now: never declared again
        except Exception as exc:   # noqa: BLE001
            self.stack_signal = None
            if self._stack_fd is None:
                self._stack_fd = -1            # not armed (e.g. the run dir is read-only): not again
            self.note_error("stack_dump", exc)

    def _arm_stack_dump(self) -> None:
        sig = _free_stack_signal()
        if sig is None:
            self._stack_fd = -1                # looked once: nothing free, no dumps
            return
        # O_APPEND: the agent empties the file before each request, and a dump then starts at 0.
        fd = os.open(self.stack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            faulthandler.register(sig, file=fd, all_threads=True, chain=False)
        except BaseException:
            os.close(fd)
            raise
        self._stack_fd = fd
        self.stack_signal = sig

    def _remove_stack_file(self) -> None:
        """At exit: the file goes, the handler and its fd stay (closing the fd could let a late
        dump write into a file the program opens under the same number)."""
        if self._stack_fd is not None and self._stack_fd >= 0:
            try:
                os.unlink(self.stack_path)
            except OSError:
                pass

    # -- what one report holds -----------------------------------------------------------------

    def report(self, ended: bool = False):
        now = time.time()
        times = os.times()
        me = self._thread.ident if self._thread is not None else None
        threads = self._threads(me, now)
        dynamo = self._dynamo_counters()
        torch_mod = sys.modules.get("torch")
        torch_version = getattr(torch_mod, "__version__", "") if _initialised(torch_mod) else ""
        in_thread = self._thread is not None and threading.current_thread() is self._thread
        probe_cpu = self._probe_cpu_before + (time.thread_time() if in_thread else self._thread_cpu)
        totals = list(self._compiles.values())
        if not ended:
            self._watch_collectives(threads)
        beats, beat_stacks = self._recent_beats(threads)
        return _rd.ProbeReport(
            run_id=self.run_id, pid=self.pid, time=now, ppid=self.ppid, start_time=self.start_time,
            seq=self.seq, node=self.node, rank=self.rank, local_rank=self.local_rank,
            world_size=self.world_size, argv=[str(a)[:_MAX_TEXT] for a in sys.argv[:_MAX_ARGV]],
            executable=sys.executable or "", python=sys.version.split()[0],
            cpu_s=round(times.user + times.system, 3), probe_cpu_s=round(probe_cpu, 4),
            threads=threads, torch=str(torch_version or ""),
            graphs=sum(c.graphs for c in totals), recompiles=sum(c.recompiles for c in totals),
            compile_seconds=round(sum(c.seconds for c in totals), 3),
            unique_graphs=dynamo[0], graph_breaks=dynamo[1],
            step=self.step, step_time=self.step_time, ended=ended, errors=self.errors,
            start_ticks=self.start_ticks, stack_signal=None if ended else self.stack_signal,
            beats=beats, beat_stacks=beat_stacks)

    def _recent_beats(self, threads: list) -> tuple[list, list]:
        """This beat's non-daemon threads' stacks beside the last BEAT_HISTORY - 1 beats', as
        ProbeReport.beats says. A beat whose report was not written (seq did not move) is
        replaced; past _BEAT_STACKS distinct stacks, the older beats are left out."""
        now = tuple((tuple(t.frames), t.compile_state) for t in threads if not t.daemon)[:_BEAT_THREADS]
        if self._beats and self._beats[-1][0] == self.seq:
            self._beats[-1] = (self.seq, now)
        else:
            self._beats.append((self.seq, now))
            del self._beats[:-_rd.BEAT_HISTORY]
        index: dict = {}
        beats: list = []
        for seq, stacks in reversed(self._beats):
            if seq != self.seq - len(beats):
                break   # not consecutive (a fork restarted the count): older beats say nothing
            if len(index) + len({st for st in stacks if st not in index}) > _BEAT_STACKS:
                break
            beats.append([index.setdefault(st, len(index)) for st in stacks])
        beats.reverse()
        return beats, [_rd.BeatStack(frames=list(frames), compile_state=state) for frames, state in index]

    def _threads(self, me: int | None, wall: float) -> list:
        """Each thread's innermost frames, compile state, and since when its stack stands where
        it is: the frames kept, compared with the last beat's of the same thread, the innermost
        one without its line (a loop inside one function is one place, as `py-spy` users read a
        busy function). Seen first at this beat: since this beat. `frames_since`: since when
        the frames kept are exactly these, lines included.

        Past _MAX_THREADS threads, the main thread and the oldest are kept: the program's own
        threads come before the pools it starts (CPython lists the newest first)."""
        order = list(sys._current_frames().items())
        try:
            return self._read_frames(order, me, wall)
        finally:
            # `order` holds this very frame, and so every thread's frames with it: kept past the
            # return (a cycle), a function's frame read here would keep its locals alive after
            # it returned, until the cyclic GC ran at some allocation (inside a fork, in a forked
            # child), and the program's objects would be finalized there: a DataLoader iterator
            # left at `break`, after its queues' finalizers, hangs joining its workers.
            order.clear()

    def _read_frames(self, order: list, me: int | None, wall: float) -> list:
        """`_threads` of the frames `sys._current_frames` gave, as (ident, frame)."""
        before = self._stacks
        stacks = {}
        known = {t.ident: t for t in threading.enumerate()}
        now = time.monotonic()
        out = []
        main = threading.main_thread().ident
        if len(order) > _MAX_THREADS:
            order.reverse()
            order.sort(key=lambda kv: kv[0] != main)     # stable: the main thread first
        for ident, frame in order:
            if ident == me:
                continue
            if len(out) >= _MAX_THREADS:
                break
            t = known.get(ident)
            lines: list[str] = []
            innermost = None      # its code object: the function, whatever line it is at
            compiling_in_stack = False
            f, depth = frame, 0
            while f is not None and f.f_code.co_filename == _OWN_FILE:   # the probe itself, at exit
                f = f.f_back
            while f is not None and depth < _STACK_WALK_MAX:
                code = f.f_code
                if depth == 0:
                    innermost = code
                if depth < FRAMES_PER_THREAD:
                    lines.append(("%s:%s %s" % (code.co_filename, f.f_lineno, code.co_name))[:_MAX_TEXT])
                if code.co_name == "<module>":
                    # The compiler's files run by an import (`import lightning` imports
                    # torch._dynamo) compile nothing; a compile the script's top level started does.
                    if compiling_in_stack and f.f_globals.get("__name__") != "__main__":
                        compiling_in_stack = False
                elif code.co_filename.endswith(_COMPILE_FRAMES):
                    compiling_in_stack = True
                f = f.f_back
                depth += 1
            del f, frame
            key = (innermost, *lines[1:])
            exact = tuple(lines)
            seen = before.get(ident)
            if seen is None or seen[0] != key:
                stood = (key, wall, now, exact, wall)
            elif seen[3] != exact:
                stood = (*seen[:3], exact, wall)     # the same place, at another line now
            else:
                stood = seen
            stacks[ident] = stood
            comp = self._compiles.get(ident)
            started = comp.started if comp is not None else None
            if started is not None or compiling_in_stack:
                state = _rd.CompileState.COMPILING.value
            elif comp is not None and comp.graphs:
                state = _rd.CompileState.COMPILED.value
            else:
                state = ""
            out.append(_rd.ProbeThread(
                name=str(t.name)[:_MAX_TEXT] if t is not None else "<not a threading.Thread>",
                ident=ident, native_id=getattr(t, "native_id", None), daemon=bool(getattr(t, "daemon", False)),
                frames=lines, compile_state=state,
                compiling_for_s=round(now - started, 3) if started is not None else None,
                stack_since=stood[1], frames_since=stood[4],
                graphs=comp.graphs if comp is not None else 0,
                recompiles=comp.recompiles if comp is not None else 0,
                compile_seconds=round(comp.seconds, 3) if comp is not None else 0.0))
        self._stacks = stacks
        return out

    # -- the Flight Recorder, when a thread waits in torch.distributed ------------------------

    def _watch_collectives(self, threads: list) -> None:
        """Dump PyTorch's Flight Recorder (where every collective of this rank stands) when a
        thread has sat in the same torch.distributed frame for _FR_AFTER_S: the collective hang
        that NCCL's watchdog reports only after its timeout (30 min by default). The waiting
        thread has released the GIL, so this thread runs; torch's own watchdog thread reads the
        same buffer the same way."""
        now = time.monotonic()
        # Its innermost frame: a wait inside torch.distributed (all_reduce, barrier, wait), not
        # a program that merely runs under a decorator of it (elastic's @record).
        waits = [self._stacks[t.ident][2] for t in threads
                 if t.frames and _DIST_DIR in t.frames[0] and t.ident in self._stacks]
        if not waits or min(waits) > now - _FR_AFTER_S:
            return
        if self._fr_dumped_at is not None and now - self._fr_dumped_at < _rd.FR_DUMP_EVERY_S:
            return
        self._fr_dumped_at = now
        try:
            self._dump_flight_recorder()
        except Exception as exc:   # noqa: BLE001
            self.note_error("flight_recorder", exc)

    def _dump_flight_recorder(self) -> None:
        prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
        c10d = sys.modules.get("torch._C._distributed_c10d")
        dist = sys.modules.get("torch.distributed")
        if not prefix or not _initialised(c10d) or not _initialised(dist) or not dist.is_initialized():
            return
        # The backend-neutral Flight Recorder of newer torch, else NCCL's (torch < 2.12).
        dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
        if dump is None:
            return
        data = dump()
        path = prefix + str(dist.get_rank())
        tmp = "%s.%d.tmp" % (path, self.pid)
        _write_all(os.open(tmp, _NEW_FILE, 0o644), data)
        os.replace(tmp, path)

    # -- torch, once the program imported it ----------------------------------------------------

    def _watch_torch(self) -> None:
        if self._torch_done:
            return
        module = sys.modules.get("torch._dynamo.callback")
        if not _initialised(module):
            return
        handler = getattr(module, "callback_handler", None)
        if handler is None:
            return
        handler.register_start_callback(self._on_compile_start)
        handler.register_end_callback(self._on_compile_end)
        self._torch_done = True

    def _dynamo_counters(self) -> tuple[int, int]:
        module = sys.modules.get("torch._dynamo.utils")
        counters = getattr(module, "counters", None) if _initialised(module) else None
        if counters is None:
            return 0, 0
        try:
            # .get, never [...]: counters is a defaultdict, and a read must not add keys to
            # a dict that dynamo's threads iterate.
            stats = counters.get("stats") or {}
            breaks = counters.get("graph_break") or {}
            return int(stats.get("unique_graphs", 0)), int(sum(list(breaks.values())))
        except RuntimeError:    # changed size while we summed: the next beat reads it
            return 0, 0

    # Both run inside torch's compile, under its callback lock: quick, and never raise.
    def _on_compile_start(self, args=None) -> None:
        try:
            with self._compile_lock:
                comp = self._compiles.setdefault(threading.get_ident(), _ThreadCompiles())
                comp.started = time.monotonic()
        except Exception as exc:   # noqa: BLE001
            self.note_error("compile_start", exc)

    def _on_compile_end(self, args=None) -> None:
        try:
            trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
            compile_id = str(getattr(args, "compile_id", ""))
            with self._compile_lock:
                comp = self._compiles.get(threading.get_ident())
                if comp is None or comp.started is None:
                    # Overlapping compiles: torch ends them in the last thread to finish; the
                    # compile belongs to the thread that started it.
                    comp = next((c for c in self._compiles.values() if c.started is not None), None)
                if comp is None:   # began before the callbacks were registered
                    comp = self._compiles.setdefault(threading.get_ident(), _ThreadCompiles())
                if comp.started is not None:
                    comp.seconds += time.monotonic() - comp.started
                    comp.started = None
                if trigger == "DYNAMO":
                    comp.graphs += 1
                    comp.recompiles += _recompile(compile_id)
        except Exception as exc:   # noqa: BLE001
            self.note_error("compile_end", exc)

    # -- os.fork --------------------------------------------------------------------------------

    def hook_fork(self) -> None:
        if self._fork_hooked or not hasattr(os, "register_at_fork"):
            return
        os.register_at_fork(before=self._before_fork, after_in_parent=self._after_fork_parent,
                            after_in_child=self._after_fork_child)
        self._fork_hooked = True

    def _before_fork(self) -> None:
        try:
            if self._thread is not None:
                self.stop_thread(timeout=0.5)
                self._paused = True
            else:
                self._paused = False
        except Exception as exc:   # noqa: BLE001
            self.note_error("fork", exc)

    def _after_fork_parent(self) -> None:
        try:
            if self._paused:
                # The next beat when it was due, not an interval after this fork: a program
                # that forks more often than it beats (a DataLoader's workers, every epoch)
                # would otherwise never beat at all.
                self.start_thread(first_beat_after_s=max(0.0, self._due - time.monotonic()))
        except Exception as exc:   # noqa: BLE001
            self.note_error("fork", exc)

    def _after_fork_child(self) -> None:
        try:
            # The parent's locks may have been held at the fork by a thread the child lacks.
            self._write_lock = threading.Lock()
            self._compile_lock = threading.Lock()
            self._events_lock = threading.Lock()
            # The parent's dump file and handler: the child arms its own at its first beat.
            sig, fd = self.stack_signal, self._stack_fd
            self.stack_signal, self._stack_fd = None, None
            if sig is not None:
                faulthandler.unregister(sig)
            if fd is not None and fd >= 0:
                os.close(fd)
            self._reset_for_this_process()
            if self._paused:
                # A child that lives less than a beat (fork, then exec or os._exit: most of
                # them) leaves no report behind.
                self.start_thread(first_beat_after_s=self.interval_s)
        except Exception as exc:   # noqa: BLE001
            self.note_error("fork", exc)

    # -- exit -----------------------------------------------------------------------------------

    def at_exit(self) -> None:
        try:
            if self.pid != os.getpid():
                return
            self.stop_thread(timeout=0.5)
            if self.seq:   # it has reported: its last report says it ended
                self.beat(ended=True)
            self._remove_stack_file()
        except Exception as exc:   # noqa: BLE001
            self.note_error("exit", exc)

    # -- the one-line API -----------------------------------------------------------------------

    def log_step(self, step, loss, metrics: dict) -> bool:
        self.log_calls += 1
        if step is None:
            step = self.log_calls - 1
        fields: dict = {}
        nonfinite: list[str] = []
        for name, value in (("step", step), ("loss", loss), *metrics.items()):
            if name in _RESERVED:
                self.note_error("log", ValueError("metric name %r is reserved; rename it" % name))
                continue
            value = _plain(value)
            if isinstance(value, float) and not math.isfinite(value):
                nonfinite.append(name)
                value = None
            fields[name] = value
        if isinstance(fields.get("step"), float) and fields["step"].is_integer():
            fields["step"] = int(fields["step"])
        if nonfinite:
            fields["nonfinite"] = nonfinite
        now = time.time()
        # Every event names its writer: rank (0 outside torch.distributed, as the trainer's) and node.
        event = _rd.make_event(_rd.EventKind.STEP, now, pid=os.getpid(), rank=self.rank or 0, node=self.node,
                               **fields)
        data = (_rd.to_json(event) + "\n").encode("utf-8")
        if len(data) > _EVENT_MAX_BYTES:
            raise ValueError("step event of %d bytes, more than %d" % (len(data), _EVENT_MAX_BYTES))
        fd = self._events()
        os.write(fd, data)   # one write on an O_APPEND fd: lines from many writers never interleave
        self.step, self.step_time = fields["step"], now
        return True

    def _events(self) -> int:
        with self._events_lock:
            if self._events_fd is None:
                self._events_fd = os.open(os.path.join(self.run_dir, _rd.EVENTS_JSONL),
                                          os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            return self._events_fd


_RESERVED = frozenset({"v", "kind", "time", "pid", "rank", "node", "nonfinite"})


def _plain(value):
    """A JSON-able value: numbers, strings, booleans and None as they are; a tensor or numpy
    scalar through .item(); a list of numbers item by item; anything else as its str()."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value[:4096]]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            got = item()
            if isinstance(got, (bool, int, float)):
                return got
        except Exception:   # noqa: BLE001 - e.g. a tensor of many elements: its str() below
            pass
    return str(value)[:_MAX_TEXT]


_probe: _Probe | None = None
_start_lock = threading.Lock()


def start(interval_s: float | None = None) -> bool:
    """Start the probe in this process if it runs as part of a run ($DFLASH_RUN_DIR set).
    Idempotent; never raises. True when the probe runs."""
    global _probe
    try:
        with _start_lock:
            if _probe is not None:
                return True
            run_dir = os.environ.get("DFLASH_RUN_DIR", "")
            if not run_dir:
                return False
            probe = _Probe(run_dir, os.environ.get("DFLASH_RUN_ID", ""),
                           interval_s if interval_s is not None else _rd.PROBE_INTERVAL_S)
            _probe = probe
        try:
            probe.hook_fork()
            atexit.register(probe.at_exit)
            probe.start_thread(first_beat_after_s=FIRST_BEAT_S)
        except Exception as exc:   # noqa: BLE001
            probe.note_error("start", exc)
        return True
    except Exception:   # noqa: BLE001 - not even the run dir is known: nowhere to note it
        return False


def stop() -> None:
    """Stop the heartbeat thread (the report stays as last written)."""
    try:
        if _probe is not None:
            _probe.stop_thread()
    except Exception as exc:   # noqa: BLE001
        _probe.note_error("stop", exc)


def log(step: int | None = None, loss: float | None = None, **metrics) -> bool:
    """Append one typed step event to RUN_DIR/events.jsonl, with this process's pid and rank:

        import dflash_probe; dflash_probe.log(step=s, loss=l, lr=lr, tokens_per_s=tps)

    `step` defaults to the number of earlier calls; tensors are read with .item(); a NaN or
    infinite value is written as null and named in "nonfinite". Never raises: False when
    nothing was written (not part of a run, or the write failed: probe/errors.log says why)."""
    probe = _probe
    if probe is None:
        if not start() or _probe is None:
            return False
        probe = _probe
    try:
        return probe.log_step(step, loss, metrics)
    except Exception as exc:   # noqa: BLE001
        probe.note_error("log", exc)
        return False
