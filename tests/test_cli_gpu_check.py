"""The "gpus" check in the headless modes, as a user runs them: a real `python -m dflash_tui`
per command, a real stand-in run, and GPUs from this machine's real (absent) NVML or from the
fake NVML (DFLASH_TUI_NVML + DFLASH_FAKE_NVML_*) read by a real agent process on the host."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dflash_tui.gpu.nvml_reader import nvidia_gpu_present
from tests.test_cli_modes import local, write_config

pytestmark = pytest.mark.timeout(120)

FAKE = {"DFLASH_TUI_NVML": "dflash_tui.gpu.fake_nvml:from_env", "DFLASH_FAKE_NVML_GPUS": "2"}


def cli(tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 60):
    base = {k: v for k, v in os.environ.items()
            if k != "DFLASH_TUI_NVML" and not k.startswith("DFLASH_FAKE_NVML")}
    base.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "dflash_tui", *args], capture_output=True, text=True,
                          env=base, timeout=timeout)


def gpus_of(out: dict) -> dict:
    found = [c for c in out["checks"] if c["id"] == "gpus"]
    assert len(found) == 1, out["checks"]
    return found[0]


def run_pid(run_dir: Path) -> int:
    """The stand-in trainer's own pid (a child of the wrapper that launch.json names)."""
    return int(re.search(r"standin beat pid (\d+)", (run_dir / "train.log").read_text()).group(1))


def test_check_carries_the_gpu_check_on_a_cpu_run(tmp_path):
    cfg = write_config(tmp_path, cpu=local(tmp_path / "run", "beat"))
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 4 and out["verdict"] == "NO RUN", res.stdout + res.stderr
    if shutil.which("nvidia-smi") is None and nvidia_gpu_present() is False:
        # This machine: no NVIDIA GPU on its PCI bus, no driver. Said once, as information: no
        # warning asking for driver utilities a host without a GPU does not need.
        g = gpus_of(out)
        assert g["state"] == "ok" and g["cause"] == f"no NVIDIA GPU on {os.uname().nodename}", g
        text = cli(tmp_path, "--config", str(cfg), "--check").stdout
        assert text.count("no NVIDIA GPU") == 1 and "driver" not in text, text

    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "15")
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
        out = json.loads(res.stdout)
        assert res.returncode == 0 and out["verdict"] == "RUNNING", res.stdout
        g = gpus_of(out)
        assert g["state"] == "ok" and g["cause"] == "no GPU in use: the run uses only CPU devices", g
        assert out["checks"][-1]["id"] == "gpus"

        # A lost GPU on the host of a CPU-only run: said, but not the run's failure.
        res = cli(tmp_path, "--config", str(cfg), "--check", env={**FAKE, "DFLASH_FAKE_NVML_LOST": "1"})
        assert res.returncode == 0 and res.stdout.splitlines()[1].startswith("RUNNING"), res.stdout
        line = next(l for l in res.stdout.splitlines() if "GPUs in use by the run" in l)
        assert line.split()[0] == "warn" and "fell off the bus" in line and "only CPU devices" in line
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


def test_lost_gpu_fails_the_check_and_a_live_run(tmp_path):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, gpu=local(run_dir, "beat", "--device=cuda:0"))
    lost = {**FAKE, "DFLASH_FAKE_NVML_LOST": "1"}

    # The preflight's "gpu_health" refuses a launch onto a host with a lost GPU, naming it.
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", env=lost)
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["verdict"] == "NOT LAUNCHED", res.stdout
    assert out["summary"] == "GPU 1 on local: fell off the bus (Xid 79)"

    # Past the preflight, --launch's final check and its --wait loop: a lost GPU decides at once.
    t0 = time.monotonic()
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", "--wait", "30", env=lost)
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["exit_code"] == 1 and out["verdict"] == "GPU LOST", res.stdout
    assert time.monotonic() - t0 < 20
    g = gpus_of(out)
    assert g["state"] == "fail" and "GPU 1" in g["cause"] and "fell off the bus" in g["cause"]
    assert "reset" in g["hint"] and "still alive" in out["summary"]
    try:
        res = cli(tmp_path, "--config", str(cfg), "--check", "--wait", "5", env=lost)
        assert res.returncode == 1 and res.stdout.splitlines()[1].startswith("GPU LOST: GPU 1"), res.stdout
        assert "FAIL  GPUs in use by the run" in res.stdout

        # Healthy GPUs: a warn (the run's process is on none of them) never changes the verdict.
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json", env=FAKE)
        out = json.loads(res.stdout)
        assert res.returncode == 0 and out["verdict"] == "RUNNING", res.stdout
        g = gpus_of(out)
        assert g["state"] == "warn" and "no GPU shows a process of the run" in g["cause"], g

        # The run's trainer on GPU 0: marked as the run's (process group of launch.json's pid).
        procs = {"DFLASH_FAKE_NVML_PROCS": f"0:{run_pid(run_dir)}:{20 << 30}"}
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json", env={**FAKE, **procs})
        out = json.loads(res.stdout)
        assert res.returncode == 0 and out["verdict"] == "RUNNING", res.stdout
        assert gpus_of(out)["state"] == "ok" and gpus_of(out)["cause"] == (
            "run processes on 1 GPU(s) (0), 20.0 GiB, 0 % SM (the run's processes), 72 W of 700 W, "
            "SM 345 of 1980 MHz")
        # Every GPU of the sample in the JSON: power against its limit, SM clock against its top.
        g0, g1 = out["gpus"]
        assert g0["run_pids"] == [run_pid(run_dir)] and g1["run_pids"] == []
        assert (g0["power_w"], g0["power_limit_w"], g0["power_pct"]) == (72.0, 700.0, 10.3)
        assert (g1["util_sm_pct"], g1["sm_clock_mhz"], g1["sm_clock_max_mhz"]) == (37.0, 1980, 1980)
        assert not g0["spinning"] and not g1["spinning"]

        # The run's GPU busy on a kernel that spins: 100 % busy, but the power says it.
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json",
                  env={**FAKE, **procs, "DFLASH_FAKE_NVML_SPIN": "0"})
        out = json.loads(res.stdout)
        assert out["verdict"] == "RUNNING" and out["gpus"][0]["spinning"], res.stdout
        assert gpus_of(out)["cause"].endswith(
            "100 % SM (the whole device) but drawing 76 W of 700 W: a kernel that spins, not compute"), gpus_of(out)
        # Another program's kernel spins on the GPU the run shares: not the run's spinning, and said shared.
        other = {"DFLASH_FAKE_NVML_PROCS": f"0:{run_pid(run_dir)}:{20 << 30},0:{os.getpid()}:{1 << 30}"}
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json",
                  env={**FAKE, **other, "DFLASH_FAKE_NVML_SPIN": "0"})
        out = json.loads(res.stdout)
        assert out["verdict"] == "RUNNING" and not out["gpus"][0]["spinning"] and out["gpus"][0]["shared"], res.stdout
        assert gpus_of(out)["cause"].endswith("shared with another program's processes"), gpus_of(out)
        assert "spins" not in gpus_of(out)["cause"], gpus_of(out)
        # A driver that gives neither power nor the clock's top: left out, no error, never "spins".
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json",
                  env={**FAKE, **procs, "DFLASH_FAKE_NVML_SPIN": "0",
                       "DFLASH_FAKE_NVML_UNSUPPORTED": "power,max_clocks"})
        out = json.loads(res.stdout)
        assert gpus_of(out)["state"] == "ok" and not out["gpus"][0]["spinning"], res.stdout
        assert gpus_of(out)["cause"].endswith("100 % SM (the whole device), SM 1980 MHz"), gpus_of(out)
        assert (out["gpus"][0]["power_w"], out["gpus"][0]["power_pct"], out["gpus"][0]["sm_clock_max_mhz"]) == \
            (None, None, None)
    finally:
        res = cli(tmp_path, "--config", str(cfg), "--stop")
    assert res.returncode == 0, res.stdout + res.stderr

    # A run that already ended keeps the verdict its own evidence gives; the check still fails.
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json", env=lost)
    out = json.loads(res.stdout)
    assert out["verdict"] == "STOPPED" and gpus_of(out)["state"] == "fail", res.stdout


def _agents_with(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any("dflash-agent" in a for a in p.info["cmdline"] or ()) and \
                    p.environ().get("DFLASH_FAKE_NVML_HANG_S") == marker:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def test_hung_nvml_cannot_hang_the_check(tmp_path):
    cfg = write_config(tmp_path, gpu=local(tmp_path / "run", "beat", "--device=cuda:0"))
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--wait", "15", env=FAKE)
    assert res.returncode == 0, res.stdout + res.stderr
    marker = "97.5"     # every NVML power reading hangs this long; also finds our agents below
    try:
        t0 = time.monotonic()
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json",
                  env={**FAKE, "DFLASH_FAKE_NVML_HANG_S": marker})
        took = time.monotonic() - t0
        out = json.loads(res.stdout)
        assert took < 8, f"--check took {took:.1f} s with a hung NVML"
        # A hung probe is a warn with the reason: the verdict and exit code are the run's own.
        assert res.returncode == 0 and out["verdict"] == "RUNNING", res.stdout + res.stderr
        g = gpus_of(out)
        assert g["state"] == "warn" and "has not answered for 3 s" in g["cause"] and "Xid" in g["cause"], g
        # The probe's agent on the host was closed with the command, hung call and all.
        deadline = time.monotonic() + 3
        while _agents_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _agents_with(marker)
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")
