"""The step compiler: the compiled step's graphs are built in a thread of their own while the
drafter threads already train with the eager step.

Why. Compiling the whole step (inductor, forward and backward) costs 20-30 s per (device, shape
bucket) from cold caches; compiling them all before the first step kept a user waiting minutes
for a first number. Here the drafter threads start at once with the eager step (no compiled
code: SDPA attention, the step's Python as written), and each step whose shape has a graph
switches to it once every graph of the warm-up is built.

The FX-tracing race (compile_gate.py) stays impossible: this thread compiles only while no
thread can be inside compiled code, because
- it compiles only under the gate's exclusive hold, and every compiled step holds the gate
  shared (`CompileGate.run`);
- it may only START a compile while the steps run eager: the mode of the next step is decided
  at a step boundary (`at_step_boundary`, called while every drafter thread waits), compiled
  only if nothing is queued or being compiled, and that same call grants or withdraws this
  thread's permission to start. A compiled step that meets a shape with no graph runs that
  replica's step eager and queues the shape (`request`); the compile starts after the next
  boundary, which makes the following steps eager until it is built.
So the switch, either way, happens for every local replica at the same step. A step in which
one replica runs eager and another compiled (a new shape met mid-run) still leaves the replicas
bit-identical: gradients are averaged into one buffer and copied to every replica, and the
optimizer's arithmetic does not depend on a compile being in flight (pool.replica_optimizer).

The trainer starts this thread held (`start(hold=True)`) and releases it at the first step's
end: dynamo's tracing holds the GIL for most of a compile, so a first step that shares the
interpreter with it takes several times longer, and a user waits for that first number.

This module keeps torch out (`compile_shape` does the work): the tests drive it with stand-ins.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Callable, Hashable, Iterable

from dflash_train.compile_gate import CompileGate, GateAborted

COMPILER_THREAD = "compiler"
COMPILE_CACHE_DIR = "compile_cache"


def keep_compile_cache_in(run_dir: str, environ: dict[str, str] = os.environ) -> str | None:
    """Point inductor's on-disk caches (FX graphs, AOT autograd, Triton kernels: the Triton
    cache lives under inductor's unless TRITON_CACHE_DIR says otherwise) at RUN_DIR/compile_cache,
    so a relaunch of the run finds them even where /tmp did not survive. A directory the user
    chose (TORCHINDUCTOR_CACHE_DIR) wins. Must run before torch._dynamo is imported: its import
    fixes the directory (and writes it into the environment). Returns the directory now in use,
    or None if the user's."""
    if environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return None
    path = os.path.join(os.path.abspath(run_dir), COMPILE_CACHE_DIR)
    environ["TORCHINDUCTOR_CACHE_DIR"] = path
    return path


class StepCompiler:
    """Builds graphs for shape keys ((device, length) in the trainer) in one background thread.

    `compile_shape(key)` builds one key's graphs (the trainer runs a forward and backward of the
    compiled step on that shape); it runs under the gate's exclusive hold. `on_compiled(key,
    seconds)` is told after each; `on_error(exc)` once, if a compile fails (the thread ends and
    the steps stay eager: the caller decides whether the run goes on).
    """

    def __init__(self, gate: CompileGate, compile_shape: Callable[[Hashable], None], *,
                 on_compiled: Callable[[Hashable, float], None] = lambda key, seconds: None,
                 on_error: Callable[[BaseException], None] = lambda exc: None) -> None:
        self._gate = gate
        self._compile_shape = compile_shape
        self._on_compiled = on_compiled
        self._on_error = on_error
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._ready: set[Hashable] = set()
        self._busy: Hashable | None = None      # the key being compiled
        self._permit = True                     # no step runs compiled code yet
        self._held = False                      # start(hold=True) until release()
        self._stopping = False
        self.failed: BaseException | None = None
        self._thread: threading.Thread | None = None

    # -- called by the trainer and the drafter threads ------------------------------------------

    def start(self, keys: Iterable[Hashable], *, hold: bool = False) -> None:
        """Queue `keys` (the warm-up) and start the thread; `hold`: no compile starts until
        `release()`."""
        with self._cond:
            self._held = hold
            for key in keys:
                self._enqueue(key)
        self._thread = threading.Thread(target=self._loop, name=COMPILER_THREAD, daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Compiles may start (after `start(hold=True)`; a no-op otherwise)."""
        with self._cond:
            if self._held:
                self._held = False
                self._cond.notify_all()

    def ready(self, key: Hashable) -> bool:
        with self._cond:
            return key in self._ready

    def request(self, key: Hashable) -> None:
        """A step met `key` without a graph: build one (no-op if built, queued or building)."""
        with self._cond:
            self._enqueue(key)

    def at_step_boundary(self) -> bool:
        """Called between steps while every drafter thread waits: may the next step run
        compiled code? Yes only when nothing is queued or being compiled; while the answer is
        no, this thread may start compiles."""
        with self._cond:
            compiled = not self._queue and self._busy is None and self.failed is None
            self._permit = not compiled
            self._cond.notify_all()
            return compiled

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._queue and self._busy is None

    def stop(self, wait: bool = True) -> None:
        """No further compile starts. `wait`: also wait for the one in progress (an in-process
        caller that compiles next must, or the two would race); a process about to exit need
        not: a compile takes up to half a minute, longer than a stop's grace before SIGKILL."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # -- the thread -----------------------------------------------------------------------------

    def _enqueue(self, key: Hashable) -> None:
        if key not in self._ready and key != self._busy and key not in self._queue and self.failed is None:
            self._queue.append(key)
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (self._held or not (self._queue and self._permit)):
                    self._cond.wait(0.5)
                if self._stopping:
                    return
                key = self._busy = self._queue.popleft()
            t0 = time.monotonic()
            try:
                with self._gate.exclusive(COMPILER_THREAD):
                    self._compile_shape(key)
            except GateAborted:
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who decides
                with self._cond:
                    self.failed = exc
                    self._busy = None
                    self._queue.clear()
                self._on_error(exc)
                return
            with self._cond:
                self._ready.add(key)
                self._busy = None
            self._on_compiled(key, time.monotonic() - t0)
