"""A run's energy and cost as a user meets them: a real `--launch` whose preflight reads the
host's GPUs through the NVML stand-in (its counters agree across processes, as the driver's
do), a real stand-in run, then `--check --json` seconds later; a GPU without a counter, a
counter that went back (the driver reloaded); the cost keys of a profile, good and bad; the
cost of the time the watcher's recorded changes say was lost."""

from __future__ import annotations

import json
import re
import time

import pytest

from dflash_tui.recording.store.change import Evidence, VerdictChange
from dflash_tui.recording.store.store import ChangeStore
from tests.test_cli_gpu_check import FAKE, cli, run_pid
from tests.test_cli_modes import local, one_line_error, write_config

pytestmark = pytest.mark.timeout(120)

IDLE_W = 72.0     # the stand-in's power of a GPU without work (fake_nvml.nvmlDeviceGetPowerUsage)


def launch_then_check(tmp_path, env: dict, *args: str, check_env: dict | None = None, before_check=None,
                      **profile) -> tuple[dict, float, str]:
    """(--check --json, seconds since the launch, --check's text) of a stand-in run on GPU 0."""
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, gpu=local(run_dir, "beat", "--device=cuda:0", *args, **profile))
    if before_check is not None:
        with cfg.open("a") as f:
            f.write(f'[watch]\nstore = "{tmp_path / "watch.sqlite3"}"\n')
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "15", env=env)
    out = json.loads(res.stdout)
    assert out["verdict"] in ("RUNNING", "STARTING") and out["run_id"], res.stdout + res.stderr
    try:
        time.sleep(3)
        if before_check is not None:
            before_check(out["run_id"])
        on_gpu0 = {**env, "DFLASH_FAKE_NVML_PROCS": f"0:{run_pid(run_dir)}:{1 << 30}", **(check_env or {})}
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json", env=on_gpu0)
        out = json.loads(res.stdout)
        launched = json.loads((run_dir / "launch.json").read_text())["start_time"]
        text = cli(tmp_path, "--config", str(cfg), "--check", env=on_gpu0).stdout
        return out, time.time() - launched, text
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


def test_check_reports_the_runs_energy_since_its_launch_and_its_cost(tmp_path):
    out, elapsed, text = launch_then_check(tmp_path, FAKE, "--tokens-per-s=2000", cost_per_gpu_hour=3.6)
    e = out["energy"]
    assert e["gpus"] == [0] and e["missing"] == [], e
    # GPU 0 idled at 72 W from the preflight to the check: energy = power x time.
    assert 0.5 * IDLE_W * elapsed < e["joules"] < 1.5 * IDLE_W * (elapsed + 2), (e, elapsed)
    assert e["kwh"] == pytest.approx(e["joules"] / 3.6e6, rel=1e-3)
    assert e["j_per_step"] == pytest.approx(e["joules"] / out["progress"]["step"], rel=0.5), (e, out["progress"])
    # The run's power now over the tokens per second the trainer reports: about 72 W / 2000.
    assert 0.5 * IDLE_W / 2000 < e["j_per_token"] < 2 * IDLE_W / 2000, e
    c = out["cost"]
    # 3.6 per GPU-hour on one GPU: 0.001 a second; no watcher recorded anything: since the launch.
    assert c["per_hour"] == 3.6 and c["since"] == "launch" and c["badput"] is None, c
    assert 0.001 * (elapsed - 10) < c["so_far"] <= 0.001 * elapsed + 0.01, (c, elapsed)
    assert c["to_finish"] is None                      # no total steps: no ETA to price
    assert "kWh" in text and "on 1 GPU" in text and "cost 0.0" in text and "3.60 an hour" in text, text


def test_a_gpu_without_a_counter_is_named_never_zero(tmp_path):
    out, _, text = launch_then_check(tmp_path, {**FAKE, "DFLASH_FAKE_NVML_FAULTS": "0:no_energy"},
                                     cost_per_kwh=0.3)
    e = out["energy"]
    assert e["joules"] is None and e["kwh"] is None, e
    assert e["missing"] == [{"gpu": 0, "why": "no energy counter"}], e
    assert out["cost"] is None      # priced per kWh only, and no kWh known: no cost, never 0
    assert "no energy counter on GPU 0" in text and "0.000 kWh" not in text, text


def test_a_counter_that_went_back_is_said_and_the_energy_not_priced(tmp_path):
    # The check's NVML: the driver "reloaded" a second ago, so GPU 0's counter is below its launch reading.
    reloaded = {"DFLASH_FAKE_NVML_DRIVER_LOADED_AT": str(time.time() - 1)}
    out, elapsed, _ = launch_then_check(tmp_path, FAKE, check_env=reloaded, cost_per_gpu_hour=3.6,
                                        cost_per_kwh=0.3)
    e = out["energy"]
    assert e["joules"] is None and e["missing"][0]["gpu"] == 0 and "went back" in e["missing"][0]["why"], e
    c = out["cost"]
    assert c["per_hour"] == 3.6 and "not priced" in c["unpriced"], c      # the GPU-hours still are


def test_the_cost_of_the_time_the_watcher_saw_lost(tmp_path):
    """A profile whose earlier run stalled and was killed before this one: the cost since the
    first launch, and what of it the stalls and the restart cost."""
    store = tmp_path / "watch.sqlite3"

    def seed(run_id: str) -> None:
        t0 = time.time() - 400
        with ChangeStore(store) as s:
            for t, run, state, prev in ((t0, "old", "RUNNING", ""), (t0 + 200, "old", "STALLED", "RUNNING"),
                                        (t0 + 300, "old", "KILLED", "STALLED"),
                                        (time.time() - 3, run_id, "RUNNING", "KILLED")):
                s.record(VerdictChange("gpu", run, t, state, prev, f"cause of {state}", "progress", Evidence()))

    out, _, text = launch_then_check(tmp_path, FAKE, before_check=seed, cost_per_gpu_hour=3.6)
    c, good = out["cost"], out["goodput"]
    assert c["since"] == "first_launch" and c["seconds"] == pytest.approx(good["wall_s"], abs=5), (c, good)
    assert c["so_far"] == pytest.approx(0.001 * good["wall_s"], abs=0.02), c      # 3.6 an hour
    lost = c["badput_by_cause"]
    assert lost["stalled"] == pytest.approx(0.001 * good["badput_s"]["stalled"], abs=0.01), (c, good)
    assert lost["down"] == pytest.approx(0.001 * good["badput_s"]["down"], abs=0.01), (c, good)
    assert c["badput"] == pytest.approx(sum(lost.values()), abs=0.01) and c["badput"] < c["so_far"], c
    assert re.search(r"\d\.\d\d of \d\.\d\d lost to stalls and restarts", text), text


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
