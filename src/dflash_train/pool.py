"""The thread pool: target threads feed bounded queues, one drafter thread per drafter device,
gradients averaged across drafter replicas every step.

Determinism (what makes --resume bit-for-bit and keeps replicas identical):
- drafter replica r at step s trains on batch index s*R + r, produced by target thread
  r % n_targets, which walks its replicas in step order: who runs faster never changes what
  anyone computes;
- the anchor/noise generator of (s, r) is seeded from (seed, s, r), so a step's randomness is a
  pure function of its coordinates and nothing but the step number needs checkpointing;
- gradients are summed in replica order on one device, divided, clipped once, and copied back
  to every replica, so every replica applies bit-identical updates from bit-identical state.

Synchronisation per step, two barriers:
  grads  (after backward)        action: average + clip gradients
  end    (after optimizer.step)  action: `on_step_end(step, metrics)` — bookkeeping, eval,
                                 checkpoint, stop decision; every drafter replica is quiescent
                                 while it runs, so a checkpoint is a consistent snapshot.
Any exception in any thread aborts the barriers, the queues and the compile gate, so every other
thread unblocks and ends; the first error is re-raised by `run()`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from dflash_train.compile_gate import CompileGate, GateAborted

_POLL_S = 0.2


class PoolStopped(Exception):
    """Raised inside a worker when the pool is shutting down (not an error by itself)."""


def step_generator(seed: int, step: int, replica: int) -> torch.Generator:
    """The anchor/noise generator of (step, replica): CPU, because anchors are drawn on the host."""
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + step * 1009 + replica) % (2**63 - 1))
    return g


@dataclass
class StepMetrics:
    loss: float
    acc: float
    acc_per_pos: list[float]
    tokens: int


@dataclass
class PoolSpec:
    """Everything the threads need; built by train.py."""

    seed: int
    start_step: int
    total_steps: int
    target_devices: Sequence[str]
    drafter_devices: Sequence[str]
    queue_depth: int
    max_grad_norm: float
    # (batch_index, target_thread_index) -> a TargetBatch on the target device
    produce: Callable[[int, int], Any]
    # (replica, target_batch_on_drafter_device, generator) -> (loss tensor, metrics dict); runs backward-able compute
    compute_loss: Callable[[int, Any, torch.Generator], tuple[torch.Tensor, dict[str, Any]]]
    replicas: Sequence[torch.nn.Module]
    optimizers: Sequence[torch.optim.Optimizer]
    # called with (step, [StepMetrics per replica]) by one drafter thread while all wait; returns True to stop
    on_step_end: Callable[[int, list[StepMetrics]], bool]
    # learning rate of a step: a pure function of the step, so resume needs no scheduler state
    lr_at: Callable[[int], float] | None = None
    on_thread_start: Callable[[str, str], None] = lambda name, role: None
    on_thread_beat: Callable[[str, int | None], None] = lambda name, step: None
    # context manager around waits released by another thread (barriers): see Telemetry.parked
    parked: Callable[[str], Any] = lambda name: contextlib.nullcontext()


def drafter_thread_name(r: int) -> str:
    return f"drafter{r}"


def target_thread_name(j: int) -> str:
    return f"target{j}"


class ThreadPool:
    def __init__(self, spec: PoolSpec, gate: CompileGate) -> None:
        self.spec = spec
        self.gate = gate
        n_r = len(spec.drafter_devices)
        if n_r != len(spec.replicas) or n_r != len(spec.optimizers):
            raise ValueError("one replica and one optimizer per drafter device")
        self.n_replicas = n_r
        self.queues = [queue.Queue(maxsize=spec.queue_depth) for _ in range(n_r)]
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._error_thread: str | None = None
        self._error_lock = threading.Lock()
        self._metrics: list[StepMetrics | None] = [None] * n_r
        self._grad_barrier = threading.Barrier(n_r, action=self._average_grads)
        self._end_barrier = threading.Barrier(n_r, action=self._step_end)
        self._current_step = spec.start_step
        self._stop_after_step = False
        self.last_completed_step = spec.start_step   # steps done (next step to run)
        self._trainable = [[p for p in m.parameters() if p.requires_grad] for m in spec.replicas]
        self.threads: list[threading.Thread] = []

    # -- failure handling --------------------------------------------------------------------

    def fail(self, name: str, exc: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error, self._error_thread = exc, name
        self.stop()

    def stop(self) -> None:
        """Ask every thread to end; blocked ones are woken."""
        self._stop.set()
        self._grad_barrier.abort()
        self._end_barrier.abort()
        self.gate.abort("the run is stopping")

    @property
    def error(self) -> tuple[str, BaseException] | None:
        return (self._error_thread or "?", self._error) if self._error is not None else None

    # -- target threads -------------------------------------------------------------------------

    def _target_loop(self, j: int) -> None:
        spec = self.spec
        name = target_thread_name(j)
        mine = [r for r in range(self.n_replicas) if r % len(spec.target_devices) == j]
        step = spec.start_step
        while not self._stop.is_set() and step < spec.total_steps:
            for r in mine:
                tb = spec.produce(step * self.n_replicas + r, j)
                while True:
                    if self._stop.is_set():
                        return
                    try:
                        self.queues[r].put(tb, timeout=_POLL_S)
                        break
                    except queue.Full:
                        spec.on_thread_beat(name, None)   # blocked on a full queue is healthy
            spec.on_thread_beat(name, step)
            step += 1

    # -- drafter threads ------------------------------------------------------------------------

    def _next_batch(self, r: int, name: str) -> Any:
        while True:
            if self._stop.is_set():
                raise PoolStopped()
            try:
                return self.queues[r].get(timeout=_POLL_S)
            except queue.Empty:
                self.spec.on_thread_beat(name, None)

    def _drafter_loop(self, r: int) -> None:
        spec = self.spec
        name = drafter_thread_name(r)
        device = torch.device(spec.drafter_devices[r])
        model, opt = spec.replicas[r], spec.optimizers[r]
        step = spec.start_step
        while step < spec.total_steps and not self._stop.is_set():
            tb = self._next_batch(r, name).to(device)
            model.zero_grad(set_to_none=True)

            def compute() -> dict[str, Any]:
                gen = step_generator(spec.seed, step, r)
                loss, metrics = spec.compute_loss(r, tb, gen)
                loss.backward()
                return metrics

            def before_retry() -> None:
                model.zero_grad(set_to_none=True)

            metrics = self.gate.run(name, compute, before_retry=before_retry)
            self._metrics[r] = StepMetrics(
                loss=float(metrics["loss"]), acc=float(metrics["acc"]),
                acc_per_pos=[float(a) for a in metrics.get("acc_per_pos", [])],
                tokens=int(tb.input_ids.numel()),
            )
            self._wait(self._grad_barrier, name)
            if spec.lr_at is not None:
                lr = spec.lr_at(step)
                for group in opt.param_groups:
                    group["lr"] = lr
            opt.step()
            spec.on_thread_beat(name, step + 1)
            self._wait(self._end_barrier, name)
            step += 1
            if self._stop_after_step:
                return

    def _wait(self, barrier: threading.Barrier, name: str) -> None:
        try:
            with self.spec.parked(name):
                barrier.wait()
        except threading.BrokenBarrierError:
            raise PoolStopped() from None

    # -- barrier actions (run by one drafter thread while the others wait) -----------------------

    def _average_grads(self) -> None:
        try:
            flat = []
            for params in self._trainable:
                grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
                flat.append(torch._utils._flatten_dense_tensors(grads))
            home = flat[0].device
            total = flat[0].clone()
            for f in flat[1:]:
                total += f.to(home)
            total /= self.n_replicas
            if self.spec.max_grad_norm > 0:
                norm = torch.linalg.vector_norm(total.float())
                scale = (self.spec.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
                total.mul_(scale.to(total.dtype))
            for params in self._trainable:
                dev = params[0].device
                mine = total.to(dev) if dev != home else total
                for p, g in zip(params, torch._utils._unflatten_dense_tensors(mine, params)):
                    if p.grad is None:
                        p.grad = g.clone()
                    else:
                        p.grad.copy_(g)
        except BaseException as exc:
            self.fail(threading.current_thread().name, exc)
            raise

    def _step_end(self) -> None:
        step = self._current_step
        try:
            metrics = [m for m in self._metrics if m is not None]
            self.last_completed_step = step + 1
            self._current_step = step + 1
            if self.spec.on_step_end(step, metrics):
                self._stop_after_step = True
        except BaseException as exc:
            self.fail(threading.current_thread().name, exc)
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    def _guarded(self, name: str, role: str, fn: Callable[[], None]) -> None:
        self.spec.on_thread_start(name, role)
        try:
            fn()
        except (PoolStopped, GateAborted):
            pass
        except BaseException as exc:  # noqa: BLE001 - recorded and re-raised by run()
            self.fail(name, exc)

    def start(self) -> None:
        spec = self.spec
        for j in range(len(spec.target_devices)):
            name = target_thread_name(j)
            self.threads.append(threading.Thread(
                target=self._guarded, args=(name, "target", lambda j=j: self._target_loop(j)), name=name, daemon=True))
        for r in range(self.n_replicas):
            name = drafter_thread_name(r)
            self.threads.append(threading.Thread(
                target=self._guarded, args=(name, "drafter", lambda r=r: self._drafter_loop(r)), name=name, daemon=True))
        for t in self.threads:
            t.start()

    def drafters_alive(self) -> bool:
        return any(t.is_alive() for t in self.threads if t.name.startswith("drafter"))

    def join(self, poll: Callable[[], None] = lambda: None) -> None:
        """Wait for the drafters to finish (or fail), calling `poll` in between (main thread)."""
        while self.drafters_alive():
            for t in self.threads:
                if t.name.startswith("drafter"):
                    t.join(_POLL_S)
            poll()
        # drafters are done: target threads may be blocked on a full queue
        self._stop.set()
        for t in self.threads:
            t.join(10)
        poll()
