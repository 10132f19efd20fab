"""The step compiler with the real thread pool and a small real model: the drafter threads train
eagerly while the compiled step is built, all switch at the same step, no compiled code ever
runs while a compile is in progress (the FX-tracing race stays impossible), a shape first met
mid-run is compiled in the background while its steps run eager, and the replicas stay
bitwise identical throughout."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import torch

from dflash_train.compile_gate import CompileGate
from dflash_train.pool import PoolSpec, ThreadPool, replica_optimizer
from dflash_train.step_compiler import StepCompiler, keep_compile_cache_in

WIDE = 12   # the "cold" shape: met mid-run, never warmed


@dataclass
class Item:
    input_ids: torch.Tensor   # [4, 8] or [4, WIDE]: the shape the pool keys graphs by
    y: torch.Tensor

    def to(self, device):
        return Item(self.input_ids.to(device), self.y.to(device))


class Hazard:
    """The process-global tracing flag of compile_gate.py, as a stand-in: entering compiled code
    while a compile runs is the race."""

    def __init__(self) -> None:
        self.tracing = False
        self.races = 0


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _run(n_replicas=3, steps=200, cold_from=None, release_at=3, with_compiler=True):
    """One pool run. The warm-up compile of shape 8 is held until step `release_at` ended (0:
    built before the first step); items from step `cold_from` on alternate with the WIDE shape."""
    replicas = [_model() for _ in range(n_replicas)]
    opts = [replica_optimizer(m.parameters(), lr=1e-2, weight_decay=0.01) for m in replicas]
    w_true = torch.randn(8, 1, generator=torch.Generator().manual_seed(1))
    hazard = Hazard()
    release = threading.Event()
    compiled_shapes: list[tuple[str, int]] = []
    modes: dict[int, dict[int, str]] = {}     # step -> replica -> "compiled" | "eager"
    switches: list[tuple[int, bool]] = []
    seen = []

    def produce(index, j):
        g = torch.Generator().manual_seed(index)
        x = torch.randn(4, 8, generator=g)
        step = index // n_replicas
        wide = cold_from is not None and step >= cold_from and index % 2 == 0
        ids = torch.cat([x, torch.zeros(4, WIDE - 8)], dim=1) if wide else x
        return Item(ids, x @ w_true)

    def loss_of(r, item, gen, mode):
        step = len(seen)
        modes.setdefault(step, {})[r] = mode
        noise = torch.randn(item.y.shape, generator=gen) * 0.01
        loss = ((replicas[r](item.input_ids[:, :8]) - item.y - noise) ** 2).mean()
        return loss, {"loss": loss.item(), "acc": 0.0}

    def compute_loss(r, item, gen):
        if hazard.tracing:
            hazard.races += 1
        return loss_of(r, item, gen, "compiled")

    def compile_shape(key):
        if key == ("cpu", 8):
            release.wait(30)
        hazard.tracing = True
        try:
            threading.Event().wait(0.05)      # the "compile"
        finally:
            hazard.tracing = False
        compiled_shapes.append(key)

    def on_step_end(step, metrics, stopping):
        seen.append((step, [m.loss for m in metrics]))
        if step + 1 == release_at:
            release.set()
        return False

    gate = CompileGate()
    compiler = StepCompiler(gate, compile_shape) if with_compiler else None
    if compiler is not None:
        compiler.start([("cpu", 8)])
        if release_at == 0:
            release.set()
            while not compiler.idle:
                threading.Event().wait(0.01)
    spec = PoolSpec(
        seed=3, start_step=0, total_steps=steps, target_devices=["cpu"], drafter_devices=["cpu"] * n_replicas,
        queue_depth=2, max_grad_norm=1.0, produce=produce, compute_loss=compute_loss,
        replicas=replicas, optimizers=opts, on_step_end=on_step_end,
        compiler=compiler, eager_loss=lambda r, item, gen: loss_of(r, item, gen, "eager"),
        on_step_mode=lambda step, compiled: switches.append((step, compiled)),
    )
    pool = ThreadPool(spec, gate)
    pool.start()
    pool.join()
    if compiler is not None:
        compiler.stop()
    assert pool.error is None, pool.error
    return dict(replicas=replicas, hazard=hazard, compiled_shapes=compiled_shapes, modes=modes,
                switches=switches, seen=seen, gate=gate)


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def _identical(replicas):
    p0 = _params(replicas[0])
    return all(all(torch.equal(a, b) for a, b in zip(p0, _params(m))) for m in replicas[1:])


def test_eager_until_compiled_then_every_replica_switches_at_one_step():
    out = _run(release_at=3)
    modes, switches = out["modes"], out["switches"]
    assert out["hazard"].races == 0
    assert out["compiled_shapes"] == [("cpu", 8)]
    # the first steps ran eager (the compile was held until step 3 ended), then one switch
    assert all(set(modes[s].values()) == {"eager"} for s in range(3))
    assert len(switches) == 1 and switches[0][1] is True and switches[0][0] >= 3
    first = switches[0][0]
    for s, by_replica in modes.items():
        assert set(by_replica.values()) == {"compiled" if s >= first else "eager"}, (s, by_replica)
    assert _identical(out["replicas"])


def test_switching_changes_nothing_the_steps_compute():
    """Here the compiled and eager steps are the same function, so the run equals a run
    without a compiler, bit for bit: the switch itself adds no state."""
    a = _run(steps=20, release_at=2)
    b = _run(steps=20, with_compiler=False)
    assert all(torch.equal(x, y) for x, y in zip(_params(a["replicas"][0]), _params(b["replicas"][0])))
    assert a["seen"] == b["seen"]


def test_a_shape_met_mid_run_compiles_in_the_background_while_its_steps_run_eager():
    out = _run(steps=300, cold_from=15, release_at=0)
    modes, switches = out["modes"], out["switches"]
    assert out["hazard"].races == 0
    assert out["compiled_shapes"] == [("cpu", 8), ("cpu", WIDE)]     # each shape compiled once
    assert out["gate"].stats.recompiles == 0 and out["gate"].stats.fx_race_errors == 0
    # compiled from the first step -> eager (the wide shape queued) -> compiled again, each for
    # every replica at once
    assert switches == [(0, True), (switches[1][0], False), (switches[2][0], True)]
    back_to_eager, compiled_again = switches[1][0], switches[2][0]
    assert 15 < back_to_eager < compiled_again
    for s in range(back_to_eager, compiled_again):
        assert set(modes[s].values()) == {"eager"}
    # in the step that met the wide shape first, that replica alone ran eager
    met = back_to_eager - 1
    assert set(modes[met].values()) == {"eager", "compiled"}
    assert _identical(out["replicas"])


def test_the_compiler_starts_only_between_steps_that_run_eager():
    gate = CompileGate()
    started = threading.Event()
    compiler = StepCompiler(gate, lambda key: started.set())
    compiler.start([])
    assert compiler.at_step_boundary() is True        # nothing to build: compiled steps
    compiler.request(("cpu", 5))                       # met mid-step: must wait for the boundary
    assert not started.wait(0.3)
    assert compiler.at_step_boundary() is False       # the next step runs eager; the compile may start
    assert started.wait(5)
    for _ in range(100):
        if compiler.idle:
            break
        threading.Event().wait(0.02)
    assert compiler.ready(("cpu", 5)) and compiler.at_step_boundary() is True
    compiler.stop()


def test_a_held_compiler_starts_nothing_until_released():
    """The trainer holds the compiler until the first step ended (that step would share the
    interpreter with dynamo's tracing otherwise)."""
    started = threading.Event()
    compiler = StepCompiler(CompileGate(), lambda key: started.set())
    compiler.start([("cpu", 5)], hold=True)
    assert compiler.at_step_boundary() is False       # steps run eager, compiles may start...
    assert not started.wait(0.3)                      # ...but not while held
    compiler.release()
    assert started.wait(5)
    compiler.stop()


def test_a_failed_compile_is_reported_and_the_steps_stay_eager():
    failures = []

    def broken(key):
        raise RuntimeError("inductor: out of resources")

    compiler = StepCompiler(CompileGate(), broken, on_error=failures.append)
    compiler.start([("cuda:0", 1024)])
    for _ in range(250):
        if failures:
            break
        threading.Event().wait(0.02)
    assert [str(e) for e in failures] == ["inductor: out of resources"]
    assert compiler.at_step_boundary() is False and not compiler.ready(("cuda:0", 1024))
    compiler.stop()


def test_compile_caches_go_to_the_run_dir_unless_the_user_chose_one(tmp_path):
    env: dict[str, str] = {}
    assert keep_compile_cache_in(str(tmp_path), env) == str(tmp_path / "compile_cache")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "compile_cache")
    mine = {"TORCHINDUCTOR_CACHE_DIR": "/data/inductor"}
    assert keep_compile_cache_in(str(tmp_path), mine) is None and mine["TORCHINDUCTOR_CACHE_DIR"] == "/data/inductor"


def test_inductor_takes_the_run_dir_cache_when_set_before_dynamo_is_imported(tmp_path):
    """The trainer sets it before its first torch._dynamo import (which fixes the directory)."""
    code = ("import sys; from dflash_train.step_compiler import keep_compile_cache_in; "
            "keep_compile_cache_in(sys.argv[1]); import torch._dynamo; "
            "from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir; "
            "print(cache_dir()); print(triton_cache_dir(0))")
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    inductor, triton = out.stdout.split()
    assert inductor == str(tmp_path / "compile_cache") and triton.startswith(inductor + os.sep)


def test_stop_without_waiting_leaves_the_compile_in_progress_and_starts_no_other():
    """A process that ends may leave a compile behind (it cannot be interrupted, and may take
    longer than a stop's grace); nothing queued starts after the stop."""
    inside, release, done = threading.Event(), threading.Event(), []

    def slow(key):
        inside.set()
        release.wait(30)
        done.append(key)

    compiler = StepCompiler(CompileGate(), slow)
    compiler.start([("cuda:0", 1024), ("cuda:0", 2048)])
    assert inside.wait(5)
    t0 = time.monotonic()
    compiler.stop(wait=False)
    assert time.monotonic() - t0 < 0.5
    release.set()
    compiler.stop(wait=True)
    assert done == [("cuda:0", 1024)]
