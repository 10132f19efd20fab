"""A run's energy and cost as a user meets them: a real `--launch` whose preflight reads the
host's GPUs through the NVML stand-in (its counters agree across processes, as the driver's
do), a real stand-in run, then `--check --json` seconds later; a GPU without a counter; the cost
keys of a profile, good and bad."""

from __future__ import annotations

import json
import time

import pytest

from tests.test_cli_gpu_check import FAKE, cli, run_pid
from tests.test_cli_modes import local, one_line_error, write_config

pytestmark = pytest.mark.timeout(120)

IDLE_W = 72.0     # the stand-in's power of a GPU without work (fake_nvml.nvmlDeviceGetPowerUsage)


def launch_then_check(tmp_path, env: dict, **profile) -> tuple[dict, float]:
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, gpu=local(run_dir, "beat", "--device=cuda:0", **profile))
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "15", env=env)
    out = json.loads(res.stdout)
    assert out["verdict"] in ("RUNNING", "STARTING") and out["run_id"], res.stdout + res.stderr
    try:
        time.sleep(3)
        on_gpu0 = {**env, "DFLASH_FAKE_NVML_PROCS": f"0:{run_pid(run_dir)}:{1 << 30}"}
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json", env=on_gpu0)
        out = json.loads(res.stdout)
        launched = json.loads((run_dir / "launch.json").read_text())["start_time"]
        return out, time.time() - launched
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


def test_check_reports_the_runs_energy_since_its_launch_and_its_cost(tmp_path):
    out, elapsed = launch_then_check(tmp_path, FAKE, cost_per_gpu_hour=3.6)
    e = out["energy"]
    assert e["gpus"] == [0] and e["missing"] == [], e
    # GPU 0 idled at 72 W from the preflight to the check: energy = power x time.
    assert 0.5 * IDLE_W * elapsed < e["joules"] < 1.5 * IDLE_W * (elapsed + 2), (e, elapsed)
    assert e["kwh"] == pytest.approx(e["joules"] / 3.6e6, rel=1e-3)
    assert e["j_per_token"] is None      # the stand-in reports no tokens
    c = out["cost"]
    # 3.6 per GPU-hour on one GPU: 0.001 a second.
    assert 0.001 * (elapsed - 10) < c["so_far"] <= 0.001 * elapsed + 0.01, (c, elapsed)
    res = cli(tmp_path, "--config", str(tmp_path / "config.toml"), "--check", env=FAKE)
    assert "no reading at the launch" in res.stdout or "kWh" in res.stdout, res.stdout


def test_a_gpu_without_a_counter_is_named_never_zero(tmp_path):
    out, _ = launch_then_check(tmp_path, {**FAKE, "DFLASH_FAKE_NVML_FAULTS": "0:no_energy"})
    e = out["energy"]
    assert e["joules"] is None and e["kwh"] is None, e
    assert e["missing"] == [{"gpu": 0, "why": "no energy counter"}], e
    assert out["cost"] is None      # no price set


@pytest.mark.parametrize("key, value, ok", [
    ("cost_per_gpu_hour", "2.5", True), ("cost_per_kwh", "0", True),
    ("cost_per_gpu_hour", "-1", False), ("cost_per_kwh", '"cheap"', False), ("cost_per_kwh", "nan", False),
])
def test_cost_keys_in_the_profile(tmp_path, key, value, ok):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = "{tmp_path / "run"}"\ncommand = ["true"]\n{key} = {value}\n')
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
    if ok:
        assert "Traceback" not in res.stderr and json.loads(res.stdout)["profile"] == "p", res.stderr
    else:
        line = one_line_error(res)
        assert key in line and ("range" in line or "price" in line), line
