"""The thread pool on its own, with a small real model: replicas stay bitwise identical (also
when one replica's optimizer step overlaps a torch.compile in another thread), the same run
twice is bitwise identical whatever the thread timing, and a failure in any thread stops every
thread and surfaces the error."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest
import torch

from dflash_train.compile_gate import CompileGate
from dflash_train.pool import PoolSpec, ThreadPool, drafter_thread_name, replica_optimizer


@dataclass
class Item:
    input_ids: torch.Tensor
    y: torch.Tensor

    def to(self, device):
        return Item(self.input_ids.to(device), self.y.to(device))


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _spec(n_replicas=2, steps=25, fail_at=None, jitter=False, on_step_end=None, lr_at=None, on_thread_beat=None):
    replicas = [_model() for _ in range(n_replicas)]
    opts = [replica_optimizer(m.parameters(), lr=1e-2, weight_decay=0.01) for m in replicas]   # as the trainer
    w_true = torch.randn(8, 1, generator=torch.Generator().manual_seed(1))

    def produce(index, j):
        g = torch.Generator().manual_seed(index)
        x = torch.randn(4, 8, generator=g)
        if jitter:
            time.sleep(0.002 * (index % 3))
        return Item(x, x @ w_true)

    def compute_loss(r, item, gen):
        if fail_at is not None and r == 1:
            if compute_loss.calls.setdefault(r, 0) >= fail_at:
                raise ValueError("injected failure")
            compute_loss.calls[r] += 1
        noise = torch.randn(item.y.shape, generator=gen) * 0.01   # uses the step generator
        pred = replicas[r](item.input_ids)
        loss = ((pred - item.y - noise) ** 2).mean()
        return loss, {"loss": loss.item(), "acc": 0.0}
    compute_loss.calls = {}

    seen = []
    spec = PoolSpec(
        seed=3, start_step=0, total_steps=steps, target_devices=["cpu"], drafter_devices=["cpu"] * n_replicas,
        queue_depth=2, max_grad_norm=1.0, produce=produce, compute_loss=compute_loss,
        replicas=replicas, optimizers=opts,
        on_step_end=on_step_end or (lambda step, metrics, stopping: seen.append((step, [m.loss for m in metrics])) and False),
        lr_at=lr_at, on_thread_beat=on_thread_beat or (lambda name, step: None),
    )
    return spec, seen


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def test_replicas_stay_bitwise_identical_and_learn():
    spec, seen = _spec(n_replicas=3, steps=30)
    before = _params(spec.replicas[0])
    pool = ThreadPool(spec, CompileGate())
    pool.start()
    pool.join()
    assert pool.error is None
    assert [s for s, _ in seen] == list(range(30))
    p0 = _params(spec.replicas[0])
    for m in spec.replicas[1:]:
        assert all(torch.equal(a, b) for a, b in zip(p0, _params(m)))
    assert not all(torch.equal(a, b) for a, b in zip(before, p0))
    first, last = sum(seen[0][1]), sum(seen[-1][1])
    assert last < first


class CompileInFlight:
    """A real torch.compile in a thread of its own, held inside its backend (torch's compile
    session open, as while the step compiler builds a graph) until released."""

    def __init__(self) -> None:
        self.inside, self.release = threading.Event(), threading.Event()

        def backend(gm, example_inputs):
            self.inside.set()
            self.release.wait(60)
            return gm.forward

        fn = torch.compile(lambda x: x * 2 + 1, backend=backend)
        self.thread = threading.Thread(target=fn, args=(torch.ones(3),), name="compiler")

    def __enter__(self) -> "CompileInFlight":
        self.thread.start()
        assert self.inside.wait(60)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.thread.join(60)


def test_replicas_stay_identical_when_one_steps_while_another_thread_compiles():
    """torch holds torch.compiler.is_compiling() True, process-wide, for the whole of a compile
    in any thread, and the unfused AdamW computes its bias correction differently while it is
    up: replica 1's optimizer step here runs inside another thread's compile, replica 0's just
    before it. The replicas must still be bit-identical."""
    STEP = 2
    zero_stepped = threading.Event()
    compile_in_flight: list[CompileInFlight] = []

    def lr_at(step):
        if step == STEP and threading.current_thread().name == drafter_thread_name(1):
            assert zero_stepped.wait(60)
            compile_in_flight.append(CompileInFlight().__enter__())
            assert torch.compiler.is_compiling()   # seen from this thread too: the hazard
        return 1e-2

    def on_thread_beat(name, step):
        if step == STEP + 1:
            if name == drafter_thread_name(0):
                zero_stepped.set()
            elif name == drafter_thread_name(1):
                compile_in_flight[0].__exit__()

    spec, _ = _spec(n_replicas=2, steps=STEP + 2, lr_at=lr_at, on_thread_beat=on_thread_beat)
    pool = ThreadPool(spec, CompileGate())
    pool.start()
    pool.join()
    assert pool.error is None and compile_in_flight and not compile_in_flight[0].thread.is_alive()
    a, b = (_params(m) for m in spec.replicas)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_same_run_twice_is_bitwise_identical_whatever_the_timing():
    results = []
    for jitter in (False, True):
        spec, seen = _spec(n_replicas=2, steps=20, jitter=jitter)
        pool = ThreadPool(spec, CompileGate())
        pool.start()
        pool.join()
        results.append((_params(spec.replicas[0]), seen))
    (pa, sa), (pb, sb) = results
    assert all(torch.equal(a, b) for a, b in zip(pa, pb))
    assert sa == sb


def test_a_failing_thread_stops_every_thread():
    spec, _ = _spec(n_replicas=2, steps=1000, fail_at=3)
    pool = ThreadPool(spec, CompileGate())
    t0 = time.monotonic()
    pool.start()
    pool.join()
    assert time.monotonic() - t0 < 10
    name, exc = pool.error
    assert name == "drafter1" and isinstance(exc, ValueError)
    assert not any(t.is_alive() for t in pool.threads)
    assert pool.last_completed_step <= 4


def test_stop_request_ends_after_a_whole_step():
    stop_at = 7

    def on_step_end(step, metrics, stopping):
        return step + 1 == stop_at

    spec, _ = _spec(n_replicas=2, steps=1000, on_step_end=on_step_end)
    pool = ThreadPool(spec, CompileGate())
    pool.start()
    pool.join()
    assert pool.error is None and pool.last_completed_step == stop_at
    p0 = _params(spec.replicas[0])
    assert all(torch.equal(a, b) for a, b in zip(p0, _params(spec.replicas[1])))
