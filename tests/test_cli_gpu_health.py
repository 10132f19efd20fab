"""The "gpu_health" check as a user meets it: a real `python -m dflash_tui --launch` whose
preflight reads the host's GPUs through a real agent process (the NVML stand-in, shaped by
DFLASH_FAKE_NVML_FAULTS), a real stand-in run, `--no-preflight`, and `--check` during the run."""

from __future__ import annotations

import json

import pytest

from tests.test_cli_gpu_check import FAKE, cli, run_pid
from tests.test_cli_modes import local, write_config

pytestmark = pytest.mark.timeout(120)


def health_of(out: dict, cid: str = "gpu_health") -> dict:
    found = [c for c in out["checks"] if c["id"] == cid]
    assert len(found) == 1, out["checks"]
    return found[0]


@pytest.mark.parametrize("fault, words", [
    ("1:ecc", "GPU 1 on local: 1 uncorrectable ECC error(s) since the driver loaded"),
    ("0:pcie_x8", "GPU 0 on local: PCIe link x8 of x16"),
    ("1:xid=79", "GPU 1 on local: Xid 79 (fell off the bus)"),
    ("0:remap", "GPU 0 on local: a row remap is pending"),
])
def test_a_failing_gpu_refuses_the_launch_naming_it(tmp_path, fault, words):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, gpu=local(run_dir, "beat", "--device=cuda:0"))
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json",
              env={**FAKE, "DFLASH_FAKE_NVML_FAULTS": fault})
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["verdict"] == "NOT LAUNCHED", res.stdout + res.stderr
    h = health_of(out, "pre_gpu_health")
    assert h["state"] == "fail" and h["cause"] == words and h["hint"], h
    assert out["summary"] == words
    assert not (run_dir / "launch.sh").exists() and not (run_dir / "launch.json").exists()


def test_no_preflight_overrides_and_the_run_shows_the_fault(tmp_path):
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, gpu=local(run_dir, "beat", "--device=cuda:0"))
    sick = {**FAKE, "DFLASH_FAKE_NVML_FAULTS": "1:ecc"}
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", "--wait", "15", env=sick)
    out = json.loads(res.stdout)
    assert res.returncode == 0 and out["verdict"] in ("RUNNING", "STARTING"), res.stdout + res.stderr
    try:
        # The run's process on GPU 1, the sick one: the check fails; the verdict stays the run's.
        on_sick = {**sick, "DFLASH_FAKE_NVML_PROCS": f"1:{run_pid(run_dir)}:{1 << 30}"}
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json", env=on_sick)
        out = json.loads(res.stdout)
        assert res.returncode == 0 and out["verdict"] == "RUNNING", res.stdout
        h = health_of(out)
        assert h["state"] == "fail" and h["cause"] == "GPU 1: 1 uncorrectable ECC error(s) since the driver loaded"
        assert out["checks"][-1]["id"] == "gpus"
        # On GPU 0 instead: the node is sick, the run is not on that GPU.
        on_good = {**sick, "DFLASH_FAKE_NVML_PROCS": f"0:{run_pid(run_dir)}:{1 << 30}"}
        out = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json", env=on_good).stdout)
        h = health_of(out)
        assert h["state"] == "warn" and "(no process of the run on it)" in h["cause"], h
        # Healthy GPUs: ok.
        out = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json", env=FAKE).stdout)
        assert health_of(out)["state"] == "ok", out["checks"]
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


def test_a_recent_node_xid_in_the_hosts_kernel_log_warns_in_the_preflight(tmp_path):
    # A `dmesg` stand-in first on the host's PATH, printing what the NVIDIA driver logs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text('#!/bin/sh\nt=$(date -u -d "@$(( $(date +%s) - 300 ))" +%Y-%m-%dT%H:%M:%S)\n'
                     'echo "$t,000000+00:00 usb 1-1: new device"\n'
                     'echo "$t,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 94, pid=812, Contained: SM (0x1)."\n')
    dmesg.chmod(0o755)
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path, gpu=local(run_dir, "beat", "--device=cuda:0"))
    import os
    env = {**FAKE, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", env=env)
    out = json.loads(res.stdout)
    try:
        # A warn: the log tells history, NVML the present; the launch goes ahead and says it.
        assert out["verdict"] in ("STARTING", "RUNNING") and out["run_id"], res.stdout + res.stderr
        h = health_of(out, "pre_gpu_health")
        assert h["state"] == "warn" and h["cause"] == (
            "local: Xid 94 (contained ECC error) on PCI 0000:3b:00 in the kernel log 5 min ago"), h
        assert health_of(out)["state"] == "ok"   # the run's own check reads NVML only
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")
