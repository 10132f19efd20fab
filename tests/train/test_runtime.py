"""The CI run of the whole trainer on CPU: 1 target thread + 2 drafter threads (cpu,cpu), tiny
preset, 300 steps on the synthetic corpus, as the dashboard launches it.

Stated margins: the step loss falls by more than 40% from the first logged step to the last;
acceptance length tau starts at ~1 (untrained drafter: 1.00 measured) and ends at >= 1.5
(measured: 3.09 at step 300 with seed 0). Every telemetry file parses with dflash_tui.contract.rundir.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dflash_tui.contract import rundir

STEPS = 300


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_drafter_threads_learn_and_telemetry_parses(tmp_path):
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", str(tmp_path),
           "--target-devices", "cpu", "--drafter-devices", "cpu,cpu",
           "--steps", str(STEPS), "--eval-every", "150", "--log-every", "50", "--seed", "0"]
    env = {**os.environ, "DFLASH_RUN_ID": "ci-learn"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=880)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    with open(tmp_path / rundir.EVENTS_JSONL) as fh:
        batch = rundir.parse_events(fh)
    assert batch.skipped == 0
    events = batch.events
    steps = [e for e in events if e["kind"] == "step"]
    evals = [e for e in events if e["kind"] == "eval"]
    assert [e["step"] for e in steps] == list(range(1, STEPS + 1))
    first = sum(e["loss"] for e in steps[:10]) / 10
    last = sum(e["loss"] for e in steps[-10:]) / 10
    assert last < 0.6 * first, (first, last)
    assert [e["step"] for e in evals] == [0, 150, 300]
    assert evals[0]["tau"] < 1.2
    assert evals[-1]["tau"] >= 1.5, evals
    assert len(steps[-1]["acc_per_pos"]) == 15

    st = rundir.parse_status((tmp_path / rundir.STATUS_JSON).read_text())
    assert st.run_id == "ci-learn" and st.phase == "finished" and st.step == STEPS
    assert st.tau == evals[-1]["tau"] or abs(st.tau - evals[-1]["tau"]) < 1e-3
    threads = {t.name: t for t in st.threads}
    assert set(threads) == {"main", "target0", "drafter0", "drafter1"}
    for name in ("drafter0", "drafter1"):
        assert threads[name].compile_state == "compiled" and threads[name].step == STEPS
    assert threads["drafter0"].graphs >= 1 and threads["drafter0"].compile_seconds > 0

    compile_events = [e for e in events if e["kind"] == "compile"]
    states = [(e["thread"], e["state"]) for e in compile_events]
    assert ("drafter0", "warming") in states and ("drafter0", "compiled") in states
    assert any(e["state"] == "end" and e["thread"] == "drafter0" for e in compile_events)

    beats = [e["time"] for e in events if e["kind"] == "heartbeat"]
    assert beats and max(b - a for a, b in zip(beats, beats[1:])) <= rundir.HEARTBEAT_INTERVAL_S + 0.5
    assert events[-1]["kind"] in ("exit", "heartbeat")
    assert [e for e in events if e["kind"] == "exit"][-1]["reason"] == "finished"

    log = (tmp_path / rundir.TRAIN_LOG).read_text()
    assert f"step {STEPS}/{STEPS} loss" in log and " tau " in log and "tok/s" in log
    assert "compile: built the step for length 64 on cpu" in log and "first step: " in log
    assert "compile: steps from " in log and " run the compiled step" in log
