"""The compiled step in the real trainer (a subprocess, CPU, tiny preset, as the dashboard
launches it): its graphs are built by the step compiler and counted in the compile telemetry,
the first step does not wait for them (unless --wait-for-compile), an unwarmed length is
compiled once in the background instead of through the gate, and every step reports its wall
time and MFU (against the peak it assumed) in status.json and the step events, the first one
also the seconds since the process started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dflash_train.config import ModelConfig
from dflash_train.perf import drafter_step_flops
from dflash_tui.contract import rundir


def _run(run_dir, *extra):
    cmd = [sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), "--drafter-devices", "cpu,cpu",
           "--steps", "16", "--eval-every", "0", "--log-every", "8", "--batch-size", "2",
           "--buckets", "64,128", *extra]
    proc = subprocess.run(cmd, env={**os.environ, "DFLASH_RUN_ID": "step-telemetry"}, capture_output=True,
                          text=True, timeout=300)
    return proc


def _events(run_dir):
    with open(run_dir / rundir.EVENTS_JSONL) as fh:
        batch = rundir.parse_events(fh)
    assert batch.skipped == 0
    return batch.events


def _shape_recompiles(events):
    """Recompiles through the gate caused by a shape. The gate also retries dynamo's "runtime
    guards failed even though they passed during recompilation-reason analysis", seen now and
    then with several threads before this trainer built its graphs in the background too."""
    return [e["reason"] for e in events if e.get("state") == "recompile" and "size mismatch" in e.get("reason", "")]


@pytest.mark.slow
def test_step_graphs_are_built_counted_and_report_mfu(tmp_path):
    proc = _run(tmp_path, "--wait-for-compile", "--peak-tflops", "0.5")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = _events(tmp_path)
    warm = [e for e in events if e.get("state") == "warmup_done"]
    # one compiled step unit: one graph per warmed bucket, shared by both replicas
    assert len(warm) == 1 and warm[0]["graphs"] == 2
    ends = [e["thread"] for e in events if e["kind"] == "compile" and e.get("state") == "end"
            and e.get("trigger") == "DYNAMO"]
    assert ends == ["drafter0", "drafter0"]
    # --wait-for-compile: every step compiled, switched to before the first
    modes = [(e["mode"], e["step"]) for e in events if e.get("state") == "step_mode"]
    assert modes == [("compiled", 0)]
    exit_ev = [e for e in events if e["kind"] == "exit"][-1]
    assert exit_ev["gate"]["fx_race_errors"] == 0
    assert not _shape_recompiles(events)

    st = rundir.parse_status((tmp_path / rundir.STATUS_JSON).read_text())
    threads = {t.name: t for t in st.threads}
    assert threads["drafter0"].graphs == 2 and threads["drafter1"].graphs == 0
    assert {threads["drafter0"].compile_state, threads["drafter1"].compile_state} == {"compiled"}
    assert st.peak_tflops == 0.5 and st.step_time_s > 0 and 0 < st.mfu < 1

    steps = [e for e in events if e["kind"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 17))
    # the first step says how long after the process's start it ended; it waited for the compile
    assert 0 < steps[0]["first_step_s"] == st.first_step_s < 300
    assert all(e["first_step_s"] is None for e in steps[1:])
    assert steps[0]["time"] > warm[0]["time"]
    for e in steps:
        assert e["step_time_s"] > 0 and e["peak_tflops"] == 0.5 and 0 < e["mfu"] < 1
    # MFU x time x peak gives back the step's FLOPs: two replicas' steps on one device, between
    # the cheapest and the dearest step the buckets and anchors allow
    cfg = ModelConfig.preset("tiny")
    blk, a = cfg.block_size, cfg.anchors_per_seq
    lo = 2 * drafter_step_flops(cfg, 2, 64, a, 2 * a * blk * (1 + blk)).total
    hi = 2 * drafter_step_flops(cfg, 2, 128, a, 2 * a * blk * 128).total
    for e in steps:
        assert 0.98 * lo <= e["mfu"] * e["step_time_s"] * 0.5e12 <= 1.02 * hi


@pytest.mark.slow
def test_the_first_step_runs_eager_while_the_step_compiles(tmp_path):
    """By default the first step never waits for a compile: it runs eager, and the compiler
    thread starts its first compile only once that step ended (it would share the interpreter
    with the step otherwise); a cold length is compiled in the background, not through the
    gate, and no compile ever raced a step."""
    proc = _run(tmp_path, "--cold-buckets", "96", "--steps", "300", "--log-every", "100")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = _events(tmp_path)
    steps = [e for e in events if e["kind"] == "step"]
    first_compile_start = min(e["time"] for e in events if e["kind"] == "compile" and e.get("state") == "start")
    assert steps[0]["time"] < first_compile_start and steps[0]["first_step_s"] > 0
    modes = [(e["mode"], e["step"]) for e in events if e.get("state") == "step_mode"]
    assert modes and modes[0][0] == "compiled" and modes[0][1] > 0   # eager steps came first
    exit_ev = [e for e in events if e["kind"] == "exit"][-1]
    assert exit_ev["gate"]["fx_race_errors"] == 0
    assert not _shape_recompiles(events)      # the cold length never went through the gate
    ends = [e["thread"] for e in events if e["kind"] == "compile" and e.get("state") == "end"
            and e.get("trigger") == "DYNAMO"]
    assert 2 <= len(ends) <= 3 and set(ends) == {"drafter0"}   # + the cold length, once, if met in time


@pytest.mark.slow
def test_without_a_known_peak_there_is_no_mfu(tmp_path):
    proc = _run(tmp_path, "--compile", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    st = rundir.parse_status((tmp_path / rundir.STATUS_JSON).read_text())
    assert st.step_time_s > 0 and st.mfu is None and st.peak_tflops is None
    assert all(e["mfu"] is None and e["step_time_s"] > 0 for e in _events(tmp_path) if e["kind"] == "step")


def test_a_bad_peak_fails_fast_with_one_line(tmp_path):
    proc = _run(tmp_path, "--peak-tflops", "-3")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "--peak-tflops must be a number >= 0" in proc.stderr
