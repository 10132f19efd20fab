"""The compile gate: no thread runs compiled code while another thread compiles.

Why it exists. In torch 2.9-2.13 the FX tracing flag is process-global. While one thread traces
a frame for torch.compile, any other thread that enters a dynamo-optimized function sees the flag
and dies with "Detected that you are using FX to symbolically trace a dynamo-optimized
function". The trainer therefore:

1. builds every (device, shape bucket) before any worker runs compiled code: the step compiler
   (step_compiler.py) compiles them under this gate's EXCLUSIVE hold, in its own thread, while
   the workers run the eager step (no compiled code at all);
2. switches to torch.compiler.set_stance("fail_on_recompile"), so an unforeseen recompile in a
   worker raises at the entry of the compiled frame, before anything is traced;
3. runs a worker's FIRST compiled call of each shape under the EXCLUSIVE hold, alone: a thread's
   first entry into a compiled frame is not safe beside another thread inside compiled code
   (its thread-local dynamo state is set up, the frame's cache entries are looked up and
   reordered, guards that no thread of its own has passed are evaluated; PyTorch issues
   #105943, #136833, #123177: "torch.compile'd models aren't thread safe"). Seen here as
   "Unexpected recompilation: runtime guards failed even though they passed during
   recompilation-reason analysis" when both drafter threads entered the freshly built step
   together, at the step where they switch to it;
4. runs each worker's later compiled compute (one step's forward+backward) under a SHARED hold of this
   gate; a worker that hits the recompile error drops its shared hold and asks for the EXCLUSIVE
   hold: new shared holds are refused (other workers pause at their next step boundary), it waits
   until the running ones finish, flips the stance back to "default", recompiles by re-running
   its compute, restores "fail_on_recompile" and releases.

The stance is process-global (torch keeps it in a module global), which is exactly why it is only
flipped by the holder of the exclusive gate. Dynamo config overrides, in contrast, are
thread-local since torch 2.12, so every worker applies them itself (`apply_thread_compile_config`).

This module keeps torch out of the gate itself (the hazard test drives it with a stand-in);
`TorchCompileControl` is the torch binding.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, TypeVar

from dflash_tui.contract.rundir import CompileState

T = TypeVar("T")

RECOMPILE_MARKER = "Detected recompile when torch.compile stance is 'fail_on_recompile'"
FX_RACE_MARKER = "Detected that you are using FX to symbolically trace a dynamo-optimized function"


def is_recompile_error(exc: BaseException) -> bool:
    return RECOMPILE_MARKER in str(exc)


def is_fx_race_error(exc: BaseException) -> bool:
    return FX_RACE_MARKER in str(exc)


class GateAborted(RuntimeError):
    """The run is stopping (another thread failed, or SIGTERM): stop waiting at the gate."""


@dataclass
class GateStats:
    recompiles: int = 0           # recompile errors caught and compiled under the exclusive gate
    fx_race_errors: int = 0       # FX-tracing race errors seen (must stay 0 with the gate)
    exclusive_seconds: float = 0.0
    waits: int = 0                # times a worker paused because another held the gate
    first_entries: int = 0        # (worker, key) first runs, each alone under the exclusive hold
    per_worker_recompiles: dict[str, int] = field(default_factory=dict)


StateCallback = Callable[[str, CompileState], None]


class CompileGate:
    """Shared/exclusive gate with writer preference.

    `allow_compile` is a context-manager factory entered by the exclusive holder around its
    retry (for torch: set_stance("default")). `on_state(worker, state)` reports waiting /
    compiling / compiled transitions to telemetry. `on_recompile(worker, exc)` is told about
    every caught error before the retry.
    """

    def __init__(
        self,
        *,
        allow_compile: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
        on_state: StateCallback | None = None,
        on_recompile: Callable[[str, BaseException], None] | None = None,
        parked: Callable[[str], ContextManager[Any]] | None = None,
    ) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._owner: str | None = None
        self._exclusive_waiting = 0
        self._aborted: str | None = None
        self._allow_compile = allow_compile
        self._on_state = on_state or (lambda w, s: None)
        self._on_recompile = on_recompile or (lambda w, e: None)
        self._parked = parked or (lambda w: contextlib.nullcontext())
        self._entered: set[tuple[str, Any]] = set()   # (worker, key) that ran compiled code once
        self.stats = GateStats()

    # -- holds -------------------------------------------------------------------------------

    def _check_abort(self) -> None:
        if self._aborted is not None:
            raise GateAborted(self._aborted)

    @contextlib.contextmanager
    def shared(self, worker: str) -> Iterator[None]:
        """Held while running (already compiled) code; paused while someone compiles."""
        with self._cond:
            self._check_abort()
            if self._owner is not None or self._exclusive_waiting:
                self.stats.waits += 1
                self._on_state(worker, CompileState.WAITING_AT_GATE)
                with self._parked(worker):
                    while self._owner is not None or self._exclusive_waiting:
                        self._cond.wait(0.5)
                        self._check_abort()
                self._on_state(worker, CompileState.COMPILED)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self, worker: str) -> Iterator[None]:
        """Held while compiling: no other thread is inside compiled code meanwhile."""
        with self._cond:
            self._check_abort()
            self._exclusive_waiting += 1
            try:
                if self._owner is not None or self._shared:
                    self.stats.waits += 1
                    self._on_state(worker, CompileState.WAITING_AT_GATE)
                with self._parked(worker):
                    while self._owner is not None or self._shared:
                        self._cond.wait(0.5)
                        self._check_abort()
            finally:
                self._exclusive_waiting -= 1
            self._owner = worker
        t0 = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                self._owner = None
                self.stats.exclusive_seconds += time.monotonic() - t0
                self._cond.notify_all()

    def abort(self, reason: str) -> None:
        """Wake every waiter with GateAborted (holders finish what they are running)."""
        with self._cond:
            self._aborted = reason
            self._cond.notify_all()

    # -- the one call workers use --------------------------------------------------------------

    def run(self, worker: str, fn: Callable[[], T], *, before_retry: Callable[[], None] | None = None,
            key: Any = None) -> T:
        """Run `fn` (one step's compiled compute) under the gate.

        `key` (the shape, in the trainer): the first run of each (worker, key) holds the gate
        EXCLUSIVE, so a thread's first entry into a compiled frame never overlaps another
        thread's compiled code (the module's docstring, point 3); later runs hold it shared.
        On a recompile error (or an FX-tracing race error, which must not happen with the gate
        but is retried rather than fatal, and counted) `fn` is re-run under the exclusive hold.
        `before_retry` restores whatever `fn` consumed (RNG state, zeroed grads) so the retry
        computes exactly what the first attempt would have.
        """
        if (worker, key) not in self._entered:
            with self.exclusive(worker):
                self._on_state(worker, CompileState.COMPILED)   # it may have waited at the gate
                self.stats.first_entries += 1
                result = self._first_or_retry(worker, fn, before_retry)
            self._entered.add((worker, key))
            return result
        with self.shared(worker):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - filtered just below
                if not self._count_retryable(worker, exc):
                    raise
                caught = exc
        self._on_recompile(worker, caught)
        with self.exclusive(worker):
            self._on_state(worker, CompileState.COMPILING)
            return self._compile(worker, fn, before_retry)

    def _first_or_retry(self, worker: str, fn: Callable[[], T], before_retry: Callable[[], None] | None) -> T:
        """A first entry, under the exclusive hold already: a recompile it meets compiles here."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - filtered just below
            if not self._count_retryable(worker, exc):
                raise
            self._on_recompile(worker, exc)
        self._on_state(worker, CompileState.COMPILING)
        return self._compile(worker, fn, before_retry)

    def _count_retryable(self, worker: str, exc: Exception) -> bool:
        if is_recompile_error(exc):
            self.stats.recompiles += 1
            self.stats.per_worker_recompiles[worker] = self.stats.per_worker_recompiles.get(worker, 0) + 1
            return True
        if is_fx_race_error(exc):
            self.stats.fx_race_errors += 1
            return True
        return False

    def _compile(self, worker: str, fn: Callable[[], T], before_retry: Callable[[], None] | None) -> T:
        """Re-run `fn` with compiling allowed (the caller holds the gate exclusive)."""
        if before_retry is not None:
            before_retry()
        try:
            with self._allow_compile():
                result = fn()
        except Exception:
            self._on_state(worker, CompileState.FAILED)
            raise
        self._on_state(worker, CompileState.COMPILED)
        return result


class TorchCompileControl:
    """The torch side of the gate: stance switching and per-thread dynamo config."""

    def __init__(self, recompile_limit: int = 64) -> None:
        self.recompile_limit = recompile_limit

    def apply_thread_compile_config(self) -> None:
        """Set the dynamo overrides this thread compiles with.

        Thread-local since torch 2.12 (a ContextVar per thread), so every worker calls this
        itself; on older torch the same values land in the global config, which is harmless
        because every thread sets the same ones.
        - automatic_dynamic_shapes=False: one static graph per shape bucket, exactly the graphs
          warm-up compiled, instead of a dynamic graph appearing mid-run.
        - recompile_limit: guards include the device index and grad mode, so one compiled
          function legitimately holds devices x buckets x modes entries; the default (8) would
          silently drop an 8-GPU run to eager.
        """
        import torch._dynamo.config as dcfg

        dcfg.automatic_dynamic_shapes = False
        for name in ("recompile_limit", "cache_size_limit"):  # renamed in torch 2.6; keep both
            if hasattr(dcfg, name):
                setattr(dcfg, name, self.recompile_limit)
        if hasattr(dcfg, "accumulated_recompile_limit"):
            dcfg.accumulated_recompile_limit = max(dcfg.accumulated_recompile_limit, self.recompile_limit * 4)

    @staticmethod
    def fail_on_recompile() -> None:
        import torch

        torch.compiler.set_stance("fail_on_recompile")

    @staticmethod
    def default_stance() -> None:
        import torch

        torch.compiler.set_stance("default")

    @staticmethod
    @contextlib.contextmanager
    def allow_compile() -> Iterator[None]:
        """Entered only by the exclusive holder of the gate (the stance is process-global)."""
        import torch

        torch.compiler.set_stance("default")
        try:
            yield
        finally:
            torch.compiler.set_stance("fail_on_recompile")
