"""Memory runway in a real podman container with a memory limit: a program whose host memory grows
2 MiB a step, launched into the container through a profile, reaches the `memory` warn through
`dflash-tui --check --json` with the container's own cgroup limit (512 MiB) as its limit, and
with a forecast, well before that limit is reached.

The container is this module's own (tests/support/realct.py's PodmanContainer with `--memory`):
the other container tests' containers have no limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.realct import PodmanContainer, need_runtime

pytestmark = pytest.mark.timeout(240)

MEM_GROW = str(Path(__file__).resolve().parents[1] / "programs" / "mem_grow.py")
MB = 1 << 20
LIMIT = 512 * MB


@pytest.fixture(scope="module")
def limited_ct(tmp_path_factory):
    why = need_runtime("podman")
    if why:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("ct-mem")
    share = base / "share"
    share.mkdir()
    ct = PodmanContainer(base, f"memlim-{os.getpid()}", share)
    try:
        ct.create("--memory", "512m", "--memory-swap", "512m")
        ct.start()
    except RuntimeError as exc:
        ct.destroy()
        pytest.skip(f"podman cannot start a container with a memory limit here: {exc}")
    yield ct
    ct.destroy()


def test_a_leak_in_a_limited_container_warns_against_its_cgroup_limit(limited_ct, tmp_path):
    ct = limited_ct
    run_dir = ct.share / "leak"
    # 2 MiB a step, 5 steps a second, up to 320 MiB: well under the 512 MiB limit, never OOM.
    fields = {"container": ct.spec, "run_dir": str(run_dir), "python": sys.executable,
              "command": [sys.executable, MEM_GROW, "2", "0.2", "320"],
              "stop_grace_s": 2, "min_free_gb": 0}
    cfg = tmp_path / "config.toml"
    cfg.write_text("[profile.ct]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items()))
    env = {**ct.env, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}

    def cli(*args: str) -> dict:
        res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--profile", "ct", *args],
                             capture_output=True, text=True, env=env, timeout=90)
        assert "Traceback" not in res.stderr, res.stderr
        return json.loads(res.stdout)

    try:
        assert cli("--launch", "--json", "--wait", "20")["verdict"] in ("RUNNING", "STARTING")
        deadline = time.monotonic() + 150
        out = mem = None
        while time.monotonic() < deadline:
            out = cli("--check", "--json")
            mem = {c["id"]: c for c in out["checks"]}.get("memory")
            if mem is not None and mem["state"] == "warn":
                break
        assert mem is not None and mem["state"] == "warn", (out and out.get("runway"), mem)
        assert out["verdict"] == "RUNNING"
        host = out["runway"]["memory"]["host"]
        # The container's own cgroup limit, read from inside it: v2's memory.max where the
        # container sees a unified hierarchy, v1's memory.limit_in_bytes where it sees v1's.
        assert host["limit_source"] in ("cgroup memory.max", "cgroup memory.limit_in_bytes"), host
        assert host["limit_bytes"] == LIMIT, host
        growth = host["growth"]
        assert 180 * MB <= growth["bytes_per_100_steps"] <= 230 * MB, host
        # Warned with a forecast, before the limit: the run holds less than it, full later.
        assert host["used_bytes"] < LIMIT and growth["full_at_step"] > host["step"], host
        assert growth["full_in_s"] is not None and 0 < growth["full_in_s"] < 3600, host
        assert mem["cause"].startswith("host: +") and f"of 512.0 MiB, {host['limit_source']})" in mem["cause"], mem
    finally:
        subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--profile", "ct", "--stop", "--json"],
                       capture_output=True, env=env, timeout=60)
