"""The compile gate, proven against an injected hazard.

The stand-in below behaves like torch 2.9-2.13's compiled functions on the one point that
matters: while one thread compiles (traces) a new shape, a process-global "tracing" flag is up,
and any other thread entering a compiled function at that moment fails with the FX-tracing
error. Without the gate, threads that meet new shapes crash each other; with the gate (warm-up in
the main thread, fail_on_recompile in workers, exclusive recompiles) the hazard never fires.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from dflash_train.compile_gate import (
    FX_RACE_MARKER,
    RECOMPILE_MARKER,
    CompileGate,
    GateAborted,
    is_fx_race_error,
    is_recompile_error,
)
from dflash_tui.contract.rundir import CompileState


class RacyCompiledFn:
    """A compiled-function stand-in with torch's process-global tracing flag."""

    def __init__(self, compile_s: float = 0.004, run_s: float = 0.0005) -> None:
        self.compile_s = compile_s
        self.run_s = run_s
        self.stance = "default"
        self._lock = threading.Lock()
        self._tracing_threads: set[int] = set()   # the process-global flag, made observable
        self._cache: set[tuple] = set()
        self.hazards = 0                          # times the race fired
        self.compiles = 0

    def __call__(self, key: tuple) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._tracing_threads - {me}:
                self.hazards += 1
                raise RuntimeError(FX_RACE_MARKER)
            hit = key in self._cache
            if not hit and self.stance == "fail_on_recompile":
                raise RuntimeError(f"{RECOMPILE_MARKER}. guard failure: {key}")
            if not hit:
                self._tracing_threads.add(me)
        if not hit:
            time.sleep(self.compile_s)   # tracing: the flag is up for this long
            with self._lock:
                self._cache.add(key)
                self._tracing_threads.discard(me)
                self.compiles += 1
        time.sleep(self.run_s)

    @contextlib.contextmanager
    def allow_compile(self):
        self.stance = "default"
        try:
            yield
        finally:
            self.stance = "fail_on_recompile"


N_THREADS = 4
STEPS = 24
LAYERS = 3                   # compiled calls per step, like attention in every drafter layer
WARM_BUCKETS = (64, 128)
NEW_BUCKETS = (96, 192)      # lengths never seen in warm-up: each forces a recompile mid-run


def _bucket(worker: int, step: int) -> int:
    buckets = WARM_BUCKETS + NEW_BUCKETS
    return buckets[(step * 7 + worker * 3) % len(buckets)]


def _run_workers(fn: RacyCompiledFn, gate: CompileGate | None) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(N_THREADS)

    def worker(i: int) -> None:
        name = f"drafter{i}"
        device = f"dev{i}"   # guards include the device: every thread has its own cache entries
        start.wait()
        try:
            for step in range(STEPS):
                key = (device, _bucket(i, step))

                def compute() -> None:
                    for _ in range(LAYERS):
                        fn(key)

                if gate is None:
                    compute()
                else:
                    gate.run(name, compute)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), name=f"drafter{i}") for i in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_naive_pattern_hits_the_hazard():
    """No warm-up, no gate: threads compiling new shapes crash the others (most trials)."""
    trials = 5
    failed_trials = 0
    for _ in range(trials):
        fn = RacyCompiledFn()
        errors = _run_workers(fn, gate=None)
        if errors:
            assert all(is_fx_race_error(e) for e in errors)
            failed_trials += 1
    assert failed_trials >= trials - 1, f"hazard fired in only {failed_trials}/{trials} trials"


def test_gate_never_hits_the_hazard():
    """Warm-up in main + fail_on_recompile + exclusive gate: zero hazards, every recompile handled."""
    trials = 5
    for _ in range(trials):
        fn = RacyCompiledFn()
        for i in range(N_THREADS):                 # main-thread warm-up of (device, bucket)
            for b in WARM_BUCKETS:
                fn((f"dev{i}", b))
        fn.stance = "fail_on_recompile"
        states: list[tuple[str, CompileState]] = []
        gate = CompileGate(allow_compile=fn.allow_compile, on_state=lambda w, s: states.append((w, s)))
        errors = _run_workers(fn, gate)
        assert errors == []
        assert fn.hazards == 0
        assert gate.stats.fx_race_errors == 0
        # every (device, new bucket) that was met was compiled exactly once, under the gate
        assert gate.stats.recompiles == fn.compiles - N_THREADS * len(WARM_BUCKETS) > 0
        assert any(s == CompileState.COMPILING for _, s in states)
        assert any(s == CompileState.WAITING_AT_GATE for _, s in states)


def test_other_workers_wait_while_one_compiles():
    gate = CompileGate()
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def holder():
        with gate.exclusive("a"):
            inside.set()
            release.wait(5)
            order.append("a-done")

    def waiter():
        inside.wait(5)
        with gate.shared("b"):
            order.append("b-ran")

    ta, tb = threading.Thread(target=holder), threading.Thread(target=waiter)
    ta.start(); tb.start()
    inside.wait(5)
    time.sleep(0.05)
    assert order == []            # b is paused at its step boundary
    release.set()
    ta.join(5); tb.join(5)
    assert order == ["a-done", "b-ran"]
    assert gate.stats.waits == 1


def test_exclusive_waits_for_running_shared_holders():
    gate = CompileGate()
    running = threading.Event()
    finish = threading.Event()
    order: list[str] = []

    def runner():
        with gate.shared("b"):
            running.set()
            finish.wait(5)
            order.append("b-finished")

    tb = threading.Thread(target=runner)
    tb.start()
    running.wait(5)
    ta = threading.Thread(target=lambda: gate.exclusive("a").__enter__() or order.append("a-compiling"))
    ta.start()
    time.sleep(0.05)
    assert order == []
    finish.set()
    tb.join(5); ta.join(5)
    assert order == ["b-finished", "a-compiling"]


def test_non_compile_errors_propagate_and_retry_restores_state():
    gate = CompileGate()
    with pytest.raises(ValueError):
        gate.run("w", lambda: (_ for _ in ()).throw(ValueError("boom")))

    attempts = []
    restored = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError(RECOMPILE_MARKER)
        return 42

    assert gate.run("w", flaky, before_retry=lambda: restored.append(1)) == 42
    assert len(attempts) == 2 and restored == [1]
    assert gate.stats.per_worker_recompiles == {"w": 1}


def test_abort_wakes_waiters():
    gate = CompileGate()
    got: list[BaseException] = []
    with gate.exclusive("a"):
        t = threading.Thread(target=lambda: _try(lambda: gate.shared("b").__enter__(), got))
        t.start()
        time.sleep(0.05)
        gate.abort("run failed")
        t.join(5)
    assert len(got) == 1 and isinstance(got[0], GateAborted)


def _try(fn, sink):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001
        sink.append(exc)


def test_error_classifiers():
    assert is_recompile_error(RuntimeError("x " + RECOMPILE_MARKER + " y"))
    assert not is_recompile_error(RuntimeError("size mismatch"))
    assert is_fx_race_error(RuntimeError(FX_RACE_MARKER))


class FirstEntryRacyFn:
    """A compiled-function stand-in whose FIRST call in a thread (per shape) is unsafe while
    another thread is inside compiled code, as torch's is (compile_gate.py, point 3): such an
    overlap is counted as a hazard."""

    def __init__(self, run_s: float = 0.002) -> None:
        self.run_s = run_s
        self._lock = threading.Lock()
        self._inside: set[int] = set()
        self._entered: set[tuple[int, tuple]] = set()
        self.hazards = 0

    def __call__(self, key: tuple) -> None:
        me = threading.get_ident()
        with self._lock:
            if (me, key) not in self._entered and self._inside - {me}:
                self.hazards += 1
            self._entered.add((me, key))
            self._inside.add(me)
        time.sleep(self.run_s)
        with self._lock:
            self._inside.discard(me)


def test_a_threads_first_entry_into_compiled_code_runs_alone():
    """Every worker meets both warm shapes at once, as the drafter threads do at the step they
    switch to the compiled step: each first entry (worker, shape) holds the gate exclusive, later
    ones share it."""
    fn = FirstEntryRacyFn()
    gate = CompileGate()
    start = threading.Barrier(N_THREADS)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        start.wait()
        try:
            for step in range(STEPS):
                key = ("cpu", WARM_BUCKETS[step % 2])
                gate.run(f"drafter{i}", lambda: fn(key), key=key)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert fn.hazards == 0
    assert gate.stats.first_entries == N_THREADS * len(WARM_BUCKETS)
