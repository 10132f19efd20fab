"""The compiled step in the real trainer (a subprocess, CPU, tiny preset, as the dashboard
launches it): its graphs are warmed in the main thread and counted in the compile telemetry,
an unwarmed length recompiles through the gate and is counted too, and every step reports its
wall time and MFU (against the peak it assumed) in status.json and the step events."""

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


@pytest.mark.slow
def test_step_graphs_are_warmed_counted_and_report_mfu(tmp_path):
    proc = _run(tmp_path, "--cold-buckets", "96", "--peak-tflops", "0.5")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events = _events(tmp_path)
    warm = [e for e in events if e.get("state") == "warmup_done"]
    # one compiled step unit: one graph per warmed bucket, shared by both replicas
    assert len(warm) == 1 and warm[0]["graphs"] == 2
    ends = [e["thread"] for e in events if e["kind"] == "compile" and e.get("state") == "end"
            and e.get("trigger") == "DYNAMO"]
    assert ends.count("drafter0") == 2 and len(ends) == 3        # + the cold length, once
    exit_ev = [e for e in events if e["kind"] == "exit"][-1]
    assert exit_ev["gate"]["recompiles"] == 1 and exit_ev["gate"]["fx_race_errors"] == 0

    st = rundir.parse_status((tmp_path / rundir.STATUS_JSON).read_text())
    threads = {t.name: t for t in st.threads}
    assert threads["drafter0"].graphs + threads["drafter1"].graphs == 3
    assert sum(t.recompiles for t in st.threads) == 1
    assert st.peak_tflops == 0.5 and st.step_time_s > 0 and 0 < st.mfu < 1

    steps = [e for e in events if e["kind"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 17))
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
