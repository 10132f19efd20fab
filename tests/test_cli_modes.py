"""The headless CLI as a user runs it: a real `python -m dflash_tui` process per command, real
config files, real runs (locally and over the loopback sshd + pct stand-in), exit codes 0-4."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.run_standins import PROGRAM

pytestmark = pytest.mark.timeout(120)


def toml_str(s: str) -> str:
    return json.dumps(s)   # a JSON string is a valid TOML basic string


def write_config(tmp_path: Path, **profiles: dict) -> Path:
    lines = []
    for name, fields in profiles.items():
        lines.append(f"[profile.{name}]")
        for k, v in fields.items():
            if isinstance(v, (list, tuple)):
                lines.append(f"{k} = [{', '.join(toml_str(x) for x in v)}]")
            elif isinstance(v, str):
                lines.append(f"{k} = {toml_str(v)}")
            else:
                lines.append(f"{k} = {v}")
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def cli(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    return subprocess.run([sys.executable, "-m", "dflash_tui", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def local(run_dir: Path, mode: str, *args: str, **kw) -> dict:
    d = {"run_dir": str(run_dir), "command": [sys.executable, PROGRAM, mode], "train_args": list(args),
         "stall_after_s": 2, "stop_grace_s": 2, "min_free_gb": 0}
    d.update(kw)
    return d


def one_line_error(res: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_launch_check_refuse_stop_local(tmp_path):
    cfg = write_config(tmp_path, beat=local(tmp_path / "run", "beat"))
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
    assert res.returncode == 4 and json.loads(res.stdout)["verdict"] == "NO RUN"

    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "15")
    assert res.returncode == 0, (res.stdout, res.stderr)
    out = json.loads(res.stdout)
    assert out["verdict"] == "RUNNING" and out["run_dir"] == str(tmp_path / "run") and out["pid"] > 0
    ids = [c["id"] for c in out["checks"]]
    assert ids[:2] == ["pre_reachable", "pre_run_dir"], ids
    assert all(set(c) >= {"id", "label", "state", "cause", "hint", "since"} for c in out["checks"])
    # The log's first step can make it RUNNING before the stand-in's first status.json; the
    # heartbeat check comes with that file.
    for _ in range(30):
        if "heartbeat" in ids:
            break
        time.sleep(0.5)
        ids = [c["id"] for c in json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json").stdout)["checks"]]
    assert "heartbeat" in ids, ids
    pid = out["pid"]

    res = cli(tmp_path, "--config", str(cfg), "--check")
    assert res.returncode == 0 and res.stdout.splitlines()[1].startswith("RUNNING: step"), res.stdout

    res = cli(tmp_path, "--config", str(cfg), "--launch")
    assert res.returncode == 1 and f"(pid {pid}) is still running" in res.stdout, res.stdout

    res = cli(tmp_path, "--config", str(cfg), "--stop", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["stop"]["outcome"] == "terminated" and out["pid"] == pid

    res = cli(tmp_path, "--config", str(cfg), "--check")
    # A stop the user asked for ends healthy: STOPPED, exit 0.
    assert res.returncode == 0 and "STOPPED: stopped by" in res.stdout and "killed by SIGTERM" in res.stdout, res.stdout


def test_crash_at_start_and_text_output(tmp_path):
    cfg = write_config(tmp_path, crash=local(tmp_path / "run", "crash"))
    t0 = time.monotonic()
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--wait", "10")
    assert res.returncode == 1, res.stdout + res.stderr
    assert time.monotonic() - t0 < 10
    assert "CRASHED: exit code 1: RuntimeError: CUDA error: device-side assert triggered" in res.stdout
    assert "FAIL" in res.stdout and "→" in res.stdout      # failing checks carry a hint line


def test_usage_and_config_errors_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[profile.x]\ncontainer = "lxc:1"\n')
    res = cli(tmp_path, "--config", str(bad), "--check")
    assert res.returncode == 2 and str(bad) in one_line_error(res) and "container" in res.stderr
    res = cli(tmp_path, "--config", str(tmp_path / "missing.toml"), "--check")
    assert res.returncode == 2 and "no such config file" in one_line_error(res)
    cfg = write_config(tmp_path, a=local(tmp_path / "r", "beat"))
    res = cli(tmp_path, "--config", str(cfg), "--profile", "nope", "--check")
    assert res.returncode == 2 and "no profile named 'nope'" in one_line_error(res)
    res = cli(tmp_path, "--check", "--stop")
    assert res.returncode == 2 and "not allowed with" in one_line_error(res)
    res = cli(tmp_path, "--check", "--wait", "-1")
    assert res.returncode == 2 and "--wait" in one_line_error(res)
    res = cli(tmp_path, "--config", str(cfg), "--list-profiles")
    assert res.returncode == 0 and "a " in res.stdout and "local" in res.stdout
    # With a config file, the built-in `local` is listed, and said to be left out of --watch / --check --all.
    listed = {line.split()[1 if line.startswith("*") else 0]: line for line in res.stdout.splitlines()}
    assert listed["local"].endswith("(built-in: not in --watch or --check --all)") and "built-in" not in listed["a"]
    assert "built-in" not in cli(tmp_path, "--list-profiles").stdout        # no file: it is the profile


def test_unreachable_exits_3(tmp_path):
    with socket.socket() as s:          # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_config(tmp_path, gone={"host": "127.0.0.1", "port": port, "user": "root",
                                       "run_dir": "/tmp/dflash-unreachable"})
    for mode in ("--check", "--launch", "--stop"):
        res = cli(tmp_path, "--config", str(cfg), mode)
        assert res.returncode == 3, (mode, res.stdout, res.stderr)
        line = one_line_error(res)
        assert "127.0.0.1" in line, line
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 3 and out["exit_code"] == 3 and out["verdict"] is None and "127.0.0.1" in out["error"]


@pytest.mark.sshd
def test_cli_over_ssh_and_pct(sshd, standin, tmp_path):
    standin.container("pct:200", mode="hup")
    prof = {**sshd.profile(), **local(tmp_path / "run", "beat"), "container": "pct:200",
            "python": sys.executable}
    cfg = write_config(tmp_path, gpu=prof)
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "20")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["verdict"] == "RUNNING" and out["target"] == f"root@127.0.0.1:{sshd.port} · pct:200"

    res = cli(tmp_path, "--config", str(cfg), "--canary", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["canary"] == "ok"

    res = cli(tmp_path, "--config", str(cfg), "--stop")
    assert res.returncode == 0, res.stdout + res.stderr

    standin.set_mode("pct:200", "noop")       # the incident's transport
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json")
    assert res.returncode == 1
    out = json.loads(res.stdout)
    assert out["verdict"] == "NOT LAUNCHED" and "did not run the command" in out["summary"]

    standin.stop("pct:200")
    res = cli(tmp_path, "--config", str(cfg), "--check")
    assert res.returncode == 3 and "pct start 200" in one_line_error(res)
