"""Memory runway, for real: a program whose host memory grows 2 MiB a step reaches the `memory`
warn through `dflash-tui --check --json` (each call a new process: the trend goes on from the
samples the earlier ones kept), under a profile whose `memory_limit_mb` stands in for a small
cgroup limit; a flat program beside it never warns. And the GPU part: the fake NVML's process
memory growing with the run's steps, noted as the dashboard notes each GPU sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.gpu import fake_nvml
from dflash_tui.gpu.codec import snapshot_from_dict
from dflash_tui.gpu.fake_nvml import FakeGpu, FakeNvml
from dflash_tui.gpu.nvml_reader import NvmlReader
from dflash_tui.run.evidence.memory_runway import run_step
from dflash_tui.run.verdict.checklist import CheckState, Verdict
from dflash_tui.run.verdict.health import with_gpu_check
from tests.run.verdict.test_verdicts_programs import program_profile
from tests.test_cli_modes import write_config

pytestmark = pytest.mark.timeout(240)

MEM_GROW = str(Path(__file__).resolve().parents[1] / "programs" / "mem_grow.py")
MB = 1 << 20


def test_a_leak_warns_through_check_json_and_a_flat_run_does_not(tmp_path):
    common = {"min_free_gb": 0, "stop_grace_s": 2, "memory_limit_mb": 2048}
    # 2 MiB a step, 5 steps a second, up to 600 MiB: ~1 min of growth toward a 2 GiB budget.
    cfg = write_config(tmp_path,
                       leak={**common, "run_dir": str(tmp_path / "leak"),
                             "command": [sys.executable, MEM_GROW, "2", "0.2", "600"]},
                       flat={**common, "run_dir": str(tmp_path / "flat"),
                             "command": [sys.executable, MEM_GROW, "0", "0.2"]})
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}

    def cli(profile: str, *args: str) -> dict:
        res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--profile", profile, *args],
                             capture_output=True, text=True, env=env, timeout=90)
        return json.loads(res.stdout)
    try:
        for p in ("leak", "flat"):
            assert cli(p, "--launch", "--json", "--wait", "20")["verdict"] in ("RUNNING", "STARTING")
        deadline = time.monotonic() + 150
        leak = flat = None
        flat_states = []
        while time.monotonic() < deadline:
            leak, flat = cli("leak", "--check", "--json"), cli("flat", "--check", "--json")
            flat_states.append({c["id"]: c for c in flat["checks"]}.get("memory", {}).get("state"))
            if {c["id"]: c for c in leak["checks"]}.get("memory", {}).get("state") == "warn":
                break
        while len(flat_states) < 10:      # the flat one, as long again at least
            flat = cli("flat", "--check", "--json")
            flat_states.append({c["id"]: c for c in flat["checks"]}.get("memory", {}).get("state"))
        checks = {c["id"]: c for c in leak["checks"]}
        mem = checks.get("memory")
        assert mem is not None and mem["state"] == "warn", (leak["runway"], mem)
        assert leak["verdict"] == "RUNNING"
        assert mem["cause"].startswith("host: +") and " per 100 steps since step " in mem["cause"], mem
        assert "; full at about step " in mem["cause"] and "of 2.0 GiB, memory_limit_mb)" in mem["cause"], mem
        host = leak["runway"]["memory"]["host"]
        growth = host["growth"]
        # 2 MiB a step: the PSS the trend sees grows by 200 MiB per 100 steps (Python's own
        # allocations beside the kept bytes add a little).
        assert 180 * MB <= growth["bytes_per_100_steps"] <= 230 * MB, host
        assert host["limit_bytes"] == 2048 * MB and host["limit_source"] == "memory_limit_mb"
        assert growth["full_in_s"] is not None and 0 < growth["full_in_s"] < 3600, host
        assert growth["full_at_step"] > host["step"] > growth["since_step"] >= 0, host
        assert leak["runway"]["disk"] is None
        # The flat run: read each time, never a warn.
        assert all(s == "ok" for s in flat_states), flat_states
        fhost = flat["runway"]["memory"]["host"]
        assert fhost["growth"] is None and 0 < fhost["used_bytes"] < 200 * MB, fhost
        assert {c["id"]: c for c in flat["checks"]}["memory"]["cause"].endswith(
            "(memory_limit_mb): no steady growth"), flat["checks"]
    finally:
        for p in ("leak", "flat"):
            subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--profile", p, "--stop", "--json"],
                           capture_output=True, env=env, timeout=60)


def gpu_snapshot(fake: FakeNvml, run_pid: int):
    d = NvmlReader(fake_nvml.loader(fake)).sample()
    for g in d["gpus"]:
        for p in g["processes"]:
            p["is_run_process"] = p["pid"] == run_pid
    return snapshot_from_dict(d)


async def test_a_gpu_whose_run_memory_grows_with_the_steps_warns(sessions, tmp_path):
    run = tmp_path / "run"
    s = sessions(program_profile(run, (sys.executable, MEM_GROW, "0", "0.1")))
    out = await s.launch()
    assert out.preflight.ok, out.preflight.checks
    # GPU 1 of 2 (8 GiB) holds the run's process: 40 MiB more with every step, from 1 GiB.
    fake = FakeNvml([FakeGpu(mem_total=8 << 30), FakeGpu(mem_total=8 << 30)])
    fake.set_processes(0, [(4242, 3 << 30)])          # a neighbour's, flat: not the run's
    deadline = time.monotonic() + 90
    cl = ev = None
    while time.monotonic() < deadline:
        ev, cl = await s.check()
        step = run_step(ev)
        if step is None or ev.memory is None or ev.launch is None:
            continue
        fake.set_processes(1, [(ev.launch.pid, (1 << 30) + step * 40 * MB)])
        snap = gpu_snapshot(fake, ev.launch.pid)
        s.note_gpus(ev, snap)                             # as the dashboard notes its GPU sample
        cl = with_gpu_check(cl, ev, snap)
        mem = next(c for c in cl.checks if c.id == "memory")
        if mem.state is CheckState.WARN:
            break
    assert cl is not None and cl.verdict is Verdict.RUNNING, cl
    mem = next(c for c in cl.checks if c.id == "memory")
    assert mem.state is CheckState.WARN, (mem, ev.memory)
    assert mem.cause.startswith("GPU 1: +3.9 GiB per 100 steps since step "), mem.cause
    assert "GPU total)" in mem.cause and "GPU 0" not in mem.cause
    (g,) = ev.memory.gpus
    assert g.gpu == 1 and g.limit == 8 << 30 and round(g.trend.bytes_per_step / MB) == 40
    assert ev.memory.host is not None and ev.memory.host.trend is None     # the host stays flat
    # A later process (a --check) goes on from the kept series.
    again = sessions(program_profile(run, (sys.executable, MEM_GROW, "0", "0.1")))
    assert len(again.progress.memory.gpus[1].samples) >= 6
