"""What a thread is doing, from its stack: the class of wait it is in and where in the program.

Pure. A thread's frames come as the run probe reports them ("file:line function", innermost
first, `ProbeThread.frames`), or from a stack dump of a process whose report went stale
(faulthandler, py-spy; run/stacks/records.py). `classify` reads them innermost first: the first
frame that belongs to a known kind of wait decides; a thread whose innermost frame is the
program's own code is running it. `where` names the innermost frame of the program's own code
(not the standard library, site-packages or torch) as "function (file.py:line)", the place a
person looks at.

What the Python frames cannot show: a C call made from the program's own line (`lock.acquire()`
on a plain Lock, `time.sleep`, `tensor.item()`) leaves that line as the innermost frame. Native
frames (py-spy --native) name such calls and are read too; without them the verdict engine
tells a blocked thread from a running one by the CPU (run/verdict/hang.py), never by the frame.

Three classes are read anywhere in the frames kept, not only innermost: the compiler, the
DataLoader's wait for its workers and the import machinery exist on a stack only while the
thread is in them, whatever they wait in below (a lock, a pipe, dlopen). The compiler's files
are also run when they are imported (`import lightning` imports torch._dynamo): their code
run by an import (below a library module's top level) is importing, not compiling.

A thread with no frame of the program's own code is a library's helper (tqdm's monitor,
rich's refresh thread, a thread pool's workers): `helper` names the library function that
runs it ("tqdm monitor (tqdm/_monitor.py:69)"), never threading's bootstrap, and `idle` says
it is parked, waiting for work on a condition, an event, a queue or a future: such a thread is
no party of a hang (run/verdict/hang.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from enum import Enum

from ...contract.rundir import FRAME_LINE_DIGITS


class ThreadClass(str, Enum):
    """What a thread waits for (`--check --json` threads[].class)."""

    COMPILING = "compiling"        # dynamo, inductor, triton, or waiting for inductor's workers
    IMPORTING = "importing"        # loading modules (import torch takes seconds)
    GPU = "gpu"                    # synchronize, event and stream waits, a copy to the host
    COLLECTIVE = "collective"      # torch.distributed ops, wait, barrier, the rendezvous
    DATALOADER = "dataloader"      # the main process waiting for DataLoader workers
    LOCK = "lock"                  # a lock, condition, event, join, queue or future
    SLEEP = "sleep"
    IO = "io"                      # sockets, pipes, subprocesses, files, HTTP
    RUNNING = "running"            # its innermost frame is the program's own code
    LIBRARY = "library"            # inside a library, in none of the waits above
    BLOCKED = "blocked"            # the verdict's: own code whose stack stands still, CPU idle
    UNKNOWN = "unknown"            # no frames

    @property
    def words(self) -> str:
        return _WORDS[self]

    @property
    def waits(self) -> bool:
        """A thread of this class waits for something else (a peer, the GPU, a lock, I/O) or runs
        no Python that can be seen (no frames): it stood still since its frames last changed,
        a library's stack of it that changes is a polling loop going round, and while the run
        is STALLED it is stuck. The others run: their own code, a library's, the compiler, the
        imports."""
        return self in _WAITING

    @property
    def compiles(self) -> bool:
        """The compiler or the imports of start-up: work, but no step (stuck once past
        compile_stall_after_s)."""
        return self in (ThreadClass.COMPILING, ThreadClass.IMPORTING)


_WAITING = frozenset({ThreadClass.GPU, ThreadClass.COLLECTIVE, ThreadClass.DATALOADER, ThreadClass.LOCK,
                      ThreadClass.SLEEP, ThreadClass.IO, ThreadClass.BLOCKED, ThreadClass.UNKNOWN})

_WORDS = {
    ThreadClass.COMPILING: "compiling",
    ThreadClass.IMPORTING: "importing modules",
    ThreadClass.GPU: "waiting on the GPU",
    ThreadClass.COLLECTIVE: "in a collective",
    ThreadClass.DATALOADER: "waiting for DataLoader workers",
    ThreadClass.LOCK: "waiting on a lock",
    ThreadClass.SLEEP: "sleeping",
    ThreadClass.IO: "in I/O",
    ThreadClass.RUNNING: "running its own code",
    ThreadClass.LIBRARY: "in library code",
    ThreadClass.BLOCKED: "blocked in a C call",
    ThreadClass.UNKNOWN: "no stack",
}


@dataclass(frozen=True)
class Frame:
    path: str
    line: int | None
    function: str

    @property
    def file(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def place(self) -> str:
        """ "function (file.py:line)" """
        return f"{self.function} ({self.file}:{self.line})" if self.line is not None else self.function


_FRAME = re.compile(r"^(?P<path>.*):(?P<line>\d+) (?P<func>\S+)$")


def parse_frame(text: str) -> Frame:
    """ "file:line function" -> Frame; a native frame ("cudaStreamSynchronize") keeps its text as
    the function, with no file. A line number longer than FRAME_LINE_DIGITS is no line (and
    never reaches int(), which refuses 4,300 digits)."""
    m = _FRAME.match(text.strip())
    if m is None:
        return Frame("", None, text.strip())
    line = m["line"]
    return Frame(m["path"], int(line) if len(line) <= FRAME_LINE_DIGITS else None, m["func"])


@functools.lru_cache(maxsize=1024)
def frame_place(text: str) -> str:
    """`parse_frame(text).place`, kept: a run's threads share their innermost frames, and each
    poll reads every thread of every rank."""
    return parse_frame(text).place


# Paths that are not the program's own code.
_LIBRARY = ("/site-packages/", "/dist-packages/", "/torch/", "/torchinductor_", "/triton/")
_STDLIB = re.compile(r"/lib/python\d+(\.\d+)?t?/")
_PROBE_FILES = ("dflash_probe.py", "sitecustomize.py", "dflash_rundir.py")


def own_code(f: Frame) -> bool:
    """A frame of the program itself: a file that is not the standard library, an installed
    package, torch, a generated kernel, nor the probe."""
    p = f.path
    if not p or p.startswith("<") or f.file in _PROBE_FILES:
        return False
    return not (any(s in p for s in _LIBRARY) or _STDLIB.search(p))


def where(frames: list[Frame]) -> str:
    """The innermost frame of the program's own code, "function (file.py:line)"; "" if none."""
    own = next((f for f in frames if own_code(f)), None)
    return own.place if own is not None else ""


# -- the rules: (class, path fragment or None, function names or None, what it waits in) -------

_Rule = tuple[ThreadClass, tuple[str, ...], frozenset[str] | None]


def _rule(cls: ThreadClass, paths: tuple[str, ...], functions: tuple[str, ...] | None = None) -> _Rule:
    return cls, paths, frozenset(functions) if functions is not None else None


_COLLECTIVE_PATHS = ("/torch/distributed/distributed_c10d.py", "/torch/distributed/c10d_logger.py",
                     "/torch/distributed/_functional_collectives.py", "/torch/distributed/rendezvous.py",
                     "/torch/distributed/elastic/rendezvous/", "/torch/distributed/utils.py",
                     "/torch/distributed/fsdp/", "/torch/distributed/_composable/",
                     "/torch/nn/parallel/distributed.py", "/deepspeed/comm/", "/accelerate/utils/operations.py")

# Order matters only within one frame: the innermost frame that matches any rule decides.
_RULES: tuple[_Rule, ...] = (
    _rule(ThreadClass.COMPILING, ("/torch/_dynamo/convert_frame.py", "/torch/_dynamo/symbolic_convert.py",
                                  "/torch/_dynamo/output_graph.py", "/torch/_dynamo/variables/",
                                  "/torch/_dynamo/guards.py", "/torch/_inductor/compile_fx.py",
                                  "/torch/_inductor/graph.py", "/torch/_inductor/scheduler.py",
                                  "/torch/_inductor/lowering.py", "/torch/_inductor/codegen/",
                                  "/torch/_inductor/codecache.py", "/torch/_inductor/async_compile.py",
                                  "/torch/_inductor/compile_worker/", "/torch/_inductor/select_algorithm.py",
                                  "/torch/_inductor/autotune_process.py", "/torch/_functorch/aot_autograd.py",
                                  "/torch/_functorch/_aot_autograd/", "/triton/compiler/", "/triton/runtime/jit.py",
                                  "/torch/_subclasses/fake_tensor.py", "/torch/fx/experimental/symbolic_shapes.py")),
    _rule(ThreadClass.GPU, ("/torch/cuda/__init__.py", "/torch/cuda/streams.py", "/torch/cuda/memory.py",
                            "/torch/xpu/__init__.py", "/torch/mps/__init__.py"),
          ("synchronize", "wait_event", "wait_stream", "query", "elapsed_time", "empty_cache")),
    _rule(ThreadClass.COLLECTIVE, _COLLECTIVE_PATHS),
    _rule(ThreadClass.DATALOADER, ("/torch/utils/data/dataloader.py",),
          ("_try_get_data", "_get_data", "_shutdown_workers")),
    _rule(ThreadClass.SLEEP, ("/asyncio/tasks.py",), ("sleep",)),
    _rule(ThreadClass.LOCK, ("/threading.py", "/queue.py", "/concurrent/futures/", "/multiprocessing/synchronize.py",
                             "/multiprocessing/queues.py", "/multiprocessing/pool.py", "/asyncio/locks.py",
                             "/multiprocessing/managers.py")),
    _rule(ThreadClass.IO, ("/socket.py", "/ssl.py", "/selectors.py", "/subprocess.py", "/multiprocessing/connection.py",
                           "/http/client.py", "/urllib/request.py", "/urllib3/", "/requests/", "/shutil.py",
                           "/_pyio.py", "/gzip.py", "/tarfile.py", "/zipfile", "/fsspec/", "/s3fs/", "/boto",
                           "/huggingface_hub/", "/safetensors/", "/torch/serialization.py", "/pickle.py",
                           "/asyncio/base_events.py", "/asyncio/selector_events.py")),
)

# Native frames (py-spy --native, or a dump that names the C function) that say the wait.
_NATIVE = (
    (ThreadClass.GPU, re.compile(r"cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|"
                                 r"cuStreamSynchronize|cuEventSynchronize|cuCtxSynchronize|cudaMemcpy|"
                                 r"_local_scalar_dense|cudaStreamWaitEvent")),
    (ThreadClass.COLLECTIVE, re.compile(r"ProcessGroup(NCCL|Gloo|MPI)|c10d::|gloo::|nccl|Work(NCCL|Gloo)")),
    (ThreadClass.LOCK, re.compile(r"acquire_lock|PyThread_acquire|lock_PyThread|pthread_mutex_lock|"
                                  r"pthread_cond_(timed)?wait|sem_(timed)?wait|pthread_join")),
    (ThreadClass.SLEEP, re.compile(r"clock_nanosleep|\bnanosleep|time_sleep|pysleep")),
    (ThreadClass.IO, re.compile(r"\b(__)?(libc_)?(read|recv|recvfrom|recvmsg|poll|epoll_wait|select|"
                                r"accept|connect|pread64|fsync|write|open64)\b")),
)


@dataclass(frozen=True)
class Classified:
    cls: ThreadClass
    doing: str = ""      # the call it is in: "all_reduce", "torch.cuda.synchronize", "Lock.acquire"
    where: str = ""      # the innermost own frame, "function (file.py:line)"; "" if none
    helper: str = ""     # no own frame: the library function that runs the thread, "tqdm monitor (tqdm/_monitor.py:69)"
    idle: bool = False   # no own frame, parked on a condition, event, queue or future: waits for work
    acquiring: bool = False   # a LOCK wait that takes a lock (a semaphore), not a wait for a signal or for work


def classify(frames: list[str], compile_state: str = "") -> Classified:
    """The class of one thread from its frames ("file:line function", innermost first) and the
    probe's compile state for it ("compiling" when the compiler is anywhere on its stack)."""
    return _classify(tuple(frames), compile_state)


# A stack stays where it is for many polls, and each poll classifies every thread more than
# once (the progress tracker, the verdict's views, the hang's diagnosis): the answer for a
# stack is kept. Bounded, since a running thread's frames carry line numbers and keep changing.
@functools.lru_cache(maxsize=1024)
def _classify(frames: tuple[str, ...], compile_state: str) -> Classified:
    parsed = [parse_frame(f) for f in frames]
    c = _class_of(parsed, compile_state)
    if c.cls is ThreadClass.LOCK and _acquiring(parsed):
        c = replace(c, acquiring=True)
    if c.where or not parsed:
        return c
    # No frame of the program's own: a library's helper thread.
    return replace(c, helper=_helper(parsed), idle=c.cls is ThreadClass.LOCK and not c.acquiring)


def _class_of(parsed: list[Frame], compile_state: str) -> Classified:
    here = where(parsed)
    # The compiler anywhere on the stack decides, whatever it waits in (a lock: inductor's
    # compile workers; I/O: its cache): frames of dynamo/inductor only exist while compiling,
    # unless an import runs them. So do DataLoader's waits for its workers (a queue below
    # them) and the import machinery.
    inner = next((f for i, f in enumerate(parsed) if _match(f) is ThreadClass.COMPILING
                  and not _imported(parsed, i)), None)
    if compile_state == "compiling" or inner is not None:
        return Classified(ThreadClass.COMPILING, _doing(ThreadClass.COMPILING, inner) if inner else "", here)
    loader = next((f for f in parsed if _match(f) is ThreadClass.DATALOADER), None)
    if loader is not None:
        return Classified(ThreadClass.DATALOADER, _doing(ThreadClass.DATALOADER, loader), here)
    # The import machinery, or the compiler's files run by an import (their top level may be
    # all the frames kept: a dataclass being built at it, say).
    if any(f.path.startswith("<frozen importlib") or _match(f) is ThreadClass.COMPILING for f in parsed):
        return Classified(ThreadClass.IMPORTING, "import", here)
    if not parsed:
        return Classified(ThreadClass.UNKNOWN)
    if all(_bootstrap(f) for f in parsed):
        # Only threading's own frames: the thread's target is a C function (or it is starting).
        what = "a C call, the thread's target" if parsed[0].function == "run" else "starting or ending"
        return Classified(ThreadClass.LIBRARY, what, here)
    for f in parsed:
        if own_code(f):
            return Classified(ThreadClass.RUNNING, "", here)
        cls = _match(f)
        if cls is not None:
            return Classified(cls, _doing(cls, f, parsed), here)
    return Classified(ThreadClass.LIBRARY, parsed[0].place, here)


def _imported(parsed: list[Frame], i: int) -> bool:
    """Frame i runs because a module is being imported: a library module's top level (its
    `<module>` frame, a class body in it) is at or outside it. A compile started by the
    program's own top level (its script's `<module>`) is no import. A class body is named for
    its class (CamelCase, where functions are snake_case): the compiler's classes are defined at
    their module's top level, which may sit deeper than the frames kept (a dataclass built there)."""
    return parsed[i].function[:1].isupper() or any(
        f.function == "<module>" and not own_code(f) for f in parsed[i:])


# threading's frames that start every thread and run its target: no wait of their own.
_BOOTSTRAP = frozenset({"_bootstrap", "_bootstrap_inner", "run"})


def _bootstrap(f: Frame) -> bool:
    return f.path.endswith("/threading.py") and f.function in _BOOTSTRAP


# The functions of a wait that takes a lock: Semaphore.acquire, asyncio.Lock.acquire, and the
# `with` of a Condition or a multiprocessing Lock (its C acquire leaves `__enter__` innermost).
_ACQUIRE = frozenset({"acquire", "__enter__"})


def _acquiring(parsed: list[Frame]) -> bool:
    """The wait (the innermost run of known wait frames) takes a lock, as opposed to a wait
    for a signal or for work (a condition's wait, an event, a queue, a future, a join)."""
    for f in parsed:
        if _match(f) is not ThreadClass.LOCK:
            return False
        if f.function in _ACQUIRE:
            return True
    return False


# Library helper threads a person knows by name, by the file of the function that runs them.
_HELPERS = (("/tqdm/_monitor.py", "tqdm monitor"), ("/rich/live.py", "rich refresh"),
            ("/rich/progress.py", "rich progress"), ("/concurrent/futures/thread.py", "thread pool worker"),
            ("/concurrent/futures/process.py", "process pool manager"),
            ("/multiprocessing/pool.py", "multiprocessing pool"), ("/multiprocessing/queues.py", "queue feeder"),
            ("/torch/utils/data/_utils/pin_memory.py", "DataLoader pin-memory thread"),
            ("/asyncio/base_events.py", "asyncio event loop"))
_INSTALLED = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?t?)/")


def _helper(parsed: list[Frame]) -> str:
    """The library function that runs a thread with no frame of the program's own: the
    outermost frame kept that is not threading's bootstrap, with its file as installed
    ("tqdm monitor (tqdm/_monitor.py:69)", "run (somelib/worker.py:12)")."""
    runs = [f for f in parsed if not _bootstrap(f) and f.path]
    f = runs[-1] if runs else parsed[0]
    if not f.path:
        return f.function
    rel = _INSTALLED.sub("", f.path)
    name = next((label for suffix, label in _HELPERS if f.path.endswith(suffix)),
                f"Thread.{f.function}" if _bootstrap(f) else f.function)
    return f"{name} ({rel}:{f.line})" if f.line is not None else f"{name} ({rel})"


def _match(f: Frame) -> ThreadClass | None:
    if _bootstrap(f):
        return None
    if not f.path:
        return next((cls for cls, rx in _NATIVE if rx.search(f.function)), None)
    for cls, paths, functions in _RULES:
        if any(p in f.path for p in paths) and (functions is None or f.function in functions):
            return cls
    return None


# Wrappers of the distributed API whose own name says nothing of the op.
_WRAPPERS = frozenset({"wrapper", "inner", "_fn", "wrapped", "decorate_context", "__call__"})


def _doing(cls: ThreadClass, f: Frame, parsed: list[Frame] = ()) -> str:
    """What the thread is in, in the words a user knows: the API call, not the helper inside it."""
    if cls is ThreadClass.GPU:
        mod = "torch.cuda" if "/torch/cuda/" in f.path else f.file.removesuffix(".py")
        return f"{mod}.{f.function}" if f.path else f.function
    if cls is ThreadClass.COLLECTIVE:
        # The outermost frame of the distributed API below the program's own: the op it called.
        op = f.function
        for g in parsed:
            if own_code(g):
                break
            if any(p in g.path for p in _COLLECTIVE_PATHS) and g.function not in _WRAPPERS:
                op = g.function
        return op
    if cls is ThreadClass.LOCK:
        base = f.file.removesuffix(".py")
        if base == "threading" and f.function == "_wait_for_tstate_lock":
            return "Thread.join"
        return f"{base}.{f.function}" if f.path else f.function
    return f.function if not f.path else f"{f.file.removesuffix('.py')}.{f.function}"
