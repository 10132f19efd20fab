"""The thread pool: target threads feed bounded queues, one drafter thread per drafter device,
and `train_step` (below) is one optimizer step of one drafter replica, top to bottom.

A process holds `len(drafter_devices)` replicas; under torch.distributed every process holds
the same number, and replica r of process p is global replica `first_replica + r`.

Determinism (what makes --resume bit-for-bit and keeps every replica identical):
- global replica g at step s trains on batch index s*G + g (G replicas in all), produced by
  target thread r % n_targets, which walks its replicas in step order: who runs faster never
  changes what anyone computes;
- the anchor/noise generator of (s, g) is seeded from (seed, s, g), so a step's randomness is a
  pure function of its coordinates and nothing but the step number needs checkpointing;
- gradients are summed in replica order on one device, summed across processes by ONE
  all_reduce, divided, clipped once and copied back to every replica, so every replica applies
  bit-identical updates from bit-identical state;
- the optimizer is fused AdamW on every device (`replica_optimizer`, adamw.py): its arithmetic never
  reads `torch.compiler.is_compiling()`, a process-global flag that torch holds True for the
  whole of a compile in ANY thread. The unfused AdamW takes its bias correction from that flag
  (a float64 Python number, or a float32 tensor while the flag is up), so a replica whose step
  overlapped the step compiler's compile (step_compiler.py) drifted from one whose step did not.

The drafter threads meet twice a step; at each meeting one of them runs an action while the
others wait (`_together`):
  after backward           `sync_gradients`: average (+ all_reduce) and clip; a sum holding a
                           NaN or Inf skips this step's update on every replica of every
                           process (`grads_finite`; on_step_end says so and decides whether
                           the run goes on);
  after optimizer.step     `on_step_end(step, metrics, stopping)`: bookkeeping, eval,
                           checkpoint; every replica is quiescent, so a checkpoint is a
                           consistent snapshot; then the next step's mode, eager or compiled
                           (step_compiler.py), for every local replica alike.
So collectives are issued by one thread per process, in step order, the same on every rank
(NCCL communicators are not thread-safe). A stop (SIGTERM) is agreed inside that all_reduce:
every process ends after the same step.
Any exception in any thread aborts the barrier, the queues and the compile gate, so every other
thread unblocks and ends; the first error is kept for the caller (`error`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from dflash_train.adamw import FusedAdamW
from dflash_train.compile_gate import CompileGate, GateAborted

_POLL_S = 0.2


class PoolStopped(Exception):
    """Raised inside a worker when the pool is shutting down (not an error by itself)."""


def step_generator(seed: int, step: int, replica: int) -> torch.Generator:
    """The anchor/noise generator of (step, global replica): CPU, because anchors are drawn on the host."""
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
    optimizers: Sequence[FusedAdamW]
    # called with (step, [StepMetrics per local replica], stopping) by one drafter thread while
    # all wait; `stopping`: a stop was agreed and this is the last step. Returns True to stop
    # after this step (under torch.distributed only a decision every process makes alike).
    on_step_end: Callable[[int, list[StepMetrics], bool], bool]
    # learning rate of a step: a pure function of the step, so resume needs no scheduler state
    lr_at: Callable[[int], float] | None = None
    # True once this process was asked to stop (SIGTERM); agreed between processes each step
    stop_requested: Callable[[], bool] = lambda: False
    # torch.distributed: sums a tensor across processes in place (None: this process is alone)
    all_reduce: Callable[[torch.Tensor], None] | None = None
    first_replica: int = 0                 # global index of local replica 0
    global_replicas: int | None = None     # replicas of every process together (None: the local ones)
    on_thread_start: Callable[[str, str], None] = lambda name, role: None
    on_thread_beat: Callable[[str, int | None], None] = lambda name, step: None
    # context manager around waits released by another thread (barriers): see Telemetry.parked
    parked: Callable[[str], Any] = lambda name: contextlib.nullcontext()
    # The compiled step's graphs built in the background (step_compiler.StepCompiler, keyed by
    # (drafter device, sequence length)): until a shape's graph is built, and while any is being
    # built, steps run `eager_loss` (same signature as compute_loss, no compiled code). None:
    # every step runs compute_loss.
    compiler: Any = None
    eager_loss: Callable[[int, Any, torch.Generator], tuple[torch.Tensor, dict[str, Any]]] | None = None
    # told (first step of the new mode, compiled?) when the steps switch between eager and compiled
    on_step_mode: Callable[[int, bool], None] = lambda step, compiled: None


def drafter_thread_name(r: int) -> str:
    return f"drafter{r}"


def target_thread_name(j: int) -> str:
    return f"target{j}"


def replica_optimizer(params: Sequence[torch.nn.Parameter], lr: float, weight_decay: float) -> FusedAdamW:
    """A drafter replica's optimizer: AdamW, fused (one kernel over all parameters on CUDA;
    on every device, arithmetic that does not depend on whether another thread is compiling,
    see the module's docstring), without torch.optim's wrappers, which import torch._dynamo
    (adamw.py says why that matters before the first step)."""
    return FusedAdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)


def set_lr(opt: FusedAdamW, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


class ThreadPool:
    def __init__(self, spec: PoolSpec, gate: CompileGate) -> None:
        self.spec = spec
        self.gate = gate
        n_r = len(spec.drafter_devices)
        if n_r != len(spec.replicas) or n_r != len(spec.optimizers):
            raise ValueError("one replica and one optimizer per drafter device")
        self.n_replicas = n_r
        self.global_replicas = spec.global_replicas or n_r
        self.queues = [queue.Queue(maxsize=spec.queue_depth) for _ in range(n_r)]
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._error_thread: str | None = None
        self._error_lock = threading.Lock()
        self._metrics: list[StepMetrics | None] = [None] * n_r
        self._barrier = threading.Barrier(n_r)
        self._stopping = False              # a stop was agreed: the current step is the last
        # The averaged gradients hold a NaN or Inf: the step's update is skipped (as a loss
        # scaler does), the same on every process (read from the summed buffer).
        self.grads_finite = True
        self._stop_after_step = False
        self.last_completed_step = spec.start_step   # steps done (next step to run)
        self.all_reduce_seconds = 0.0                # wall time in the cross-process all_reduce
        self._trainable = [[p for p in m.parameters() if p.requires_grad] for m in spec.replicas]
        self.threads: list[threading.Thread] = []
        self.compiled_steps = spec.compiler is None   # the current step's mode (see step_compiler.py)
        if spec.compiler is not None:
            self._decide_step_mode(spec.start_step)

    # -- one optimizer step of drafter replica r -------------------------------------------------

    def train_step(self, r: int, step: int) -> None:
        """Batch in, forward + backward under the compile gate, gradients averaged over every
        replica of every process, optimizer step at the scheduled learning rate, step end."""
        spec, name = self.spec, drafter_thread_name(r)
        model, opt = spec.replicas[r], spec.optimizers[r]
        batch = self._next_batch(r, name).to(torch.device(spec.drafter_devices[r]))

        def forward_backward(loss_fn) -> dict[str, Any]:
            loss, metrics = loss_fn(r, batch, step_generator(spec.seed, step, spec.first_replica + r))
            loss.backward()
            return metrics

        model.zero_grad(set_to_none=True)
        shape = (spec.drafter_devices[r], int(batch.input_ids.shape[1]))
        if spec.compiler is None or (self.compiled_steps and spec.compiler.ready(shape)):
            metrics = self.gate.run(name, lambda: forward_backward(spec.compute_loss),
                                    before_retry=lambda: model.zero_grad(set_to_none=True), key=shape)
        else:
            spec.compiler.request(shape)   # no-op when built or queued
            metrics = forward_backward(spec.eager_loss)
        self._metrics[r] = StepMetrics(
            loss=float(metrics["loss"]), acc=float(metrics["acc"]),
            acc_per_pos=[float(a) for a in metrics.get("acc_per_pos", [])],
            tokens=int(batch.input_ids.numel()),
        )
        self._together(name, lambda: self.sync_gradients(name))
        if spec.lr_at is not None:
            set_lr(opt, spec.lr_at(step))
        if self.grads_finite:
            opt.step()
        else:
            model.zero_grad(set_to_none=True)
        spec.on_thread_beat(name, step + 1)
        self._together(name, lambda: self._end_step(step))

    def sync_gradients(self, name: str) -> None:
        """Every replica's gradient := the mean over all replicas of all processes, clipped.

        One flat buffer: the local replicas' gradients summed in replica order, plus one trailing
        element, this process's stop request; one all_reduce sums both across processes."""
        flat = []
        for params in self._trainable:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flat.append(torch._utils._flatten_dense_tensors(grads))
        home = flat[0].device
        total = torch.cat([flat[0], torch.zeros(1, dtype=flat[0].dtype, device=home)])
        for f in flat[1:]:
            total[:-1] += f.to(home)
        if self.spec.stop_requested():
            total[-1] = 1
        if self.spec.all_reduce is not None:
            t0 = time.perf_counter()
            with self.spec.parked(name):    # waiting for the other processes, as at a barrier
                self.spec.all_reduce(total)
                self._read_flags(total)     # on CUDA this waits for the collective's end
            self.all_reduce_seconds += time.perf_counter() - t0
        else:
            self._read_flags(total)
        total = total[:-1]
        total /= self.global_replicas
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

    def _read_flags(self, total: torch.Tensor) -> None:
        """The agreed stop and whether the summed gradients are finite, in one host read."""
        stop, finite = torch.stack([total[-1] > 0, torch.isfinite(total[:-1]).all()]).tolist()
        self._stopping, self.grads_finite = bool(stop), bool(finite)

    def _end_step(self, step: int) -> None:
        metrics = [m for m in self._metrics if m is not None]
        self.last_completed_step = step + 1
        if self.spec.on_step_end(step, metrics, self._stopping) or self._stopping:
            self._stop_after_step = True
        if self.spec.compiler is not None:
            self._decide_step_mode(step + 1)

    def _decide_step_mode(self, step: int) -> None:
        """Eager or compiled for `step`, for every local replica alike: decided while every
        drafter thread waits (or before any runs)."""
        compiled = self.spec.compiler.at_step_boundary()
        if compiled != self.compiled_steps:
            self.compiled_steps = compiled
            self.spec.on_step_mode(step, compiled)

    def _together(self, name: str, action: Callable[[], None]) -> None:
        """Every drafter thread waits here; one of them runs `action` while the others wait."""
        if self._wait(name) == 0:
            action()
        self._wait(name)

    def _wait(self, name: str) -> int:
        try:
            with self.spec.parked(name):
                return self._barrier.wait()
        except threading.BrokenBarrierError:
            raise PoolStopped() from None

    # -- failure handling --------------------------------------------------------------------

    def fail(self, name: str, exc: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error, self._error_thread = exc, name
        self.stop()

    def stop(self) -> None:
        """Ask every thread to end; blocked ones are woken."""
        self._stop.set()
        self._barrier.abort()
        self.gate.abort("the run is stopping")

    @property
    def error(self) -> tuple[str, BaseException] | None:
        return (self._error_thread or "?", self._error) if self._error is not None else None

    # -- the threads ------------------------------------------------------------------------------

    def _target_loop(self, j: int) -> None:
        spec = self.spec
        name = target_thread_name(j)
        mine = [r for r in range(self.n_replicas) if r % len(spec.target_devices) == j]
        step = spec.start_step
        while not self._stop.is_set() and step < spec.total_steps:
            for r in mine:
                tb = spec.produce(step * self.global_replicas + spec.first_replica + r, j)
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

    def _next_batch(self, r: int, name: str) -> Any:
        while True:
            if self._stop.is_set():
                raise PoolStopped()
            try:
                return self.queues[r].get(timeout=_POLL_S)
            except queue.Empty:
                self.spec.on_thread_beat(name, None)

    def _drafter_loop(self, r: int) -> None:
        step = self.spec.start_step
        while step < self.spec.total_steps and not self._stop.is_set() and not self._stop_after_step:
            self.train_step(r, step)
            step += 1

    # -- lifecycle ---------------------------------------------------------------------------

    def _guarded(self, name: str, role: str, fn: Callable[[], None]) -> None:
        self.spec.on_thread_start(name, role)
        try:
            fn()
        except (PoolStopped, GateAborted):
            pass
        except BaseException as exc:  # noqa: BLE001 - recorded and re-raised by the caller
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
