"""Telemetry: the files the dashboard reads parse with dflash_tui.contract.rundir, status.json is
atomic and rate-limited, heartbeats keep coming while a thread compiles, and compiles are
attributed to the thread that ran them from torch's own callbacks."""

from __future__ import annotations

import io
import json
import os
import threading
import time

import pytest
import torch

from dflash_tui.contract import rundir
from dflash_tui.contract.rundir import CompileState, Phase
from dflash_train.telemetry import Telemetry


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _events(run_dir):
    with open(os.path.join(run_dir, rundir.EVENTS_JSONL)) as fh:
        batch = rundir.parse_events(fh)
    assert batch.skipped == 0
    return batch.events


def test_status_rate_limited_atomic_and_parseable(tmp_path):
    clock = FakeClock()
    tel = Telemetry(str(tmp_path), "r1", 100, clock=clock, stdout=io.StringIO())
    tel.register_thread("drafter0", "drafter", "cpu")
    assert tel.publish()
    tel.update(step=5, loss=1.5)
    assert not tel.publish()            # 0 s later: held back
    clock.t += 0.5
    assert not tel.publish(force=True)  # still held back, but remembered
    clock.t += 0.6
    assert tel.publish()
    st = rundir.parse_status((tmp_path / rundir.STATUS_JSON).read_text())
    assert st.run_id == "r1" and st.step == 5 and st.loss == 1.5
    assert st.threads[0].name == "drafter0" and st.threads[0].compile_state == "pending"
    tel.set_phase(Phase.FINISHED)       # the final write ignores the limit
    assert rundir.parse_status((tmp_path / rundir.STATUS_JSON).read_text()).phase == "finished"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
    tel.close()


def test_log_goes_to_train_log_unless_stdout_is_it(tmp_path):
    out = io.StringIO()
    tel = Telemetry(str(tmp_path), "r1", 10, stdout=out)
    tel.log("step 1 loss 2.0")
    tel.close()
    assert "step 1 loss 2.0" in out.getvalue()
    assert "step 1 loss 2.0" in (tmp_path / rundir.TRAIN_LOG).read_text()

    # the launcher's wrapper: stdout already is train.log -> written once, not twice
    d2 = tmp_path / "wrapped"
    d2.mkdir()
    with open(d2 / rundir.TRAIN_LOG, "a") as fh:
        tel2 = Telemetry(str(d2), "r2", 10, stdout=fh)
        tel2.log("only once")
        tel2.close()
    assert (d2 / rundir.TRAIN_LOG).read_text().count("only once") == 1


def test_compile_state_events(tmp_path):
    tel = Telemetry(str(tmp_path), "r1", 10, stdout=io.StringIO())
    tel.register_thread("drafter0", "drafter", "cpu")
    tel.set_compile_state("drafter0", CompileState.WARMING)
    tel.set_compile_state("drafter0", CompileState.COMPILED)
    tel.set_compile_state("drafter0", CompileState.COMPILED)   # no duplicate event
    tel.close()
    states = [e["state"] for e in _events(str(tmp_path)) if e["kind"] == "compile"]
    assert states == ["warming", "compiled"]


COMPILE_HOLD_S = 0.5


def held_aot_eager(gm, example_inputs):
    """aot_eager, after holding the compiling thread for COMPILE_HOLD_S: every run of the test
    below has a compile long enough that heartbeats must come during it (each 0.05 s)."""
    time.sleep(COMPILE_HOLD_S)
    return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)


@pytest.mark.slow
def test_heartbeat_continues_while_compiling_and_compiles_are_attributed(tmp_path):
    tel = Telemetry(str(tmp_path), "r1", 10, stdout=io.StringIO(), heartbeat_interval_s=0.05)
    tel.register_thread("drafter0", "drafter", "cpu")
    tel.register_thread("drafter1", "drafter", "cpu")
    torch._dynamo.reset()            # (reset also clears registered callbacks: install after)
    tel.install_compile_callbacks()
    tel.start_heartbeat()

    def f(x):
        for _ in range(40):          # enough Python-level tracing to take a visible moment
            x = torch.sin(x) * 1.01 + x.cos()
        return x

    cf = torch.compile(f, backend=held_aot_eager)
    with tel.attribute_compiles_to("drafter0"):     # main thread warming drafter0's device
        cf(torch.randn(8))

    def worker():
        cf(torch.randn(16))                          # a new shape, compiled by this thread
    t = threading.Thread(target=worker, name="drafter1")
    t.start(); t.join(60)
    tel.stop_heartbeat()
    tel.close()

    events = _events(str(tmp_path))
    starts = [e for e in events if e["kind"] == "compile" and e.get("state") == "start"]
    ends = [e for e in events if e["kind"] == "compile" and e.get("state") == "end"]
    assert [e["thread"] for e in ends if e["trigger"] == "DYNAMO"] == ["drafter0", "drafter1"]
    assert ends[0]["dynamo"]["unique_graphs"] >= 1
    assert tel.thread("drafter0").graphs == 1 and tel.thread("drafter1").graphs == 1
    assert tel.thread("drafter0").compile_seconds > 0
    # heartbeats kept coming while the main thread was inside the compile
    beats_during = [e for e in events if e["kind"] == "heartbeat" and starts[0]["time"] <= e["time"] <= ends[0]["time"]]
    span = ends[0]["time"] - starts[0]["time"]
    assert span >= COMPILE_HOLD_S and len(beats_during) >= 2, f"{len(beats_during)} heartbeats during a {span:.2f}s compile"
    beats = [e["time"] for e in events if e["kind"] == "heartbeat"]
    assert max(b - a for a, b in zip(beats, beats[1:])) < rundir.HEARTBEAT_INTERVAL_S
    json.loads((tmp_path / rundir.STATUS_JSON).read_text())


def test_parked_threads_stay_fresh_and_stalled_ones_do_not(tmp_path):
    clock = FakeClock()
    tel = Telemetry(str(tmp_path), "r1", 10, clock=clock, stdout=io.StringIO())
    tel.register_thread("drafter0", "drafter", "cpu")
    tel.register_thread("drafter1", "drafter", "cpu")
    with tel.parked("drafter0"):          # waiting at a barrier for drafter1
        clock.t += 30
        tel.beat()
    assert tel.thread("drafter0").last_beat_time == clock.t
    assert tel.thread("drafter1").last_beat_time == clock.t - 30   # the one that stopped
    tel.close()
