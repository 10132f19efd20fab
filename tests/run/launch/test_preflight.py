"""A relative `python` or command[0] is resolved the way the wrapper runs it — from the run
dir — and the launch runs that absolute path; found only next to the caller, it is refused by
preflight with the run dir named (it used to pass preflight and then CRASH with exit 127)."""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.run_standins import PROGRAM
from tests.test_cli_modes import write_config

pytestmark = pytest.mark.timeout(120)


def cli_in(cwd: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    return subprocess.run([sys.executable, "-m", "dflash_tui", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=90)


def program_at(where: Path) -> None:
    (where / "bin").mkdir(parents=True, exist_ok=True)
    (where / "bin" / "prog").symlink_to(sys.executable)


@pytest.mark.parametrize("key", ["command", "python"])
def test_relative_program_only_beside_the_caller_is_refused(tmp_path, key):
    caller = tmp_path / "caller"
    program_at(caller)
    run = tmp_path / "run"
    prof = {"run_dir": str(run), "min_free_gb": 0}
    prof.update({"command": ["bin/prog", PROGRAM, "beat"]} if key == "command" else {"python": "bin/prog"})
    res = cli_in(caller, tmp_path, "--config", str(write_config(tmp_path, p=prof)), "--launch", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["verdict"] == "NOT LAUNCHED", (res.stdout, res.stderr)
    assert f"'bin/prog' not found in {run}: a relative path is resolved from the run dir" in out["summary"], out
    assert not (run / "launch.sh").exists()


def test_relative_command_in_the_run_dir_launches_its_absolute_path(tmp_path):
    run = tmp_path / "run"
    program_at(run)
    cfg = write_config(tmp_path, p={"run_dir": str(run), "min_free_gb": 0, "stop_grace_s": 2,
                                    "command": ["bin/prog", PROGRAM, "beat"]})
    res = cli_in(tmp_path, tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "20")
    try:
        out = json.loads(res.stdout)
        assert res.returncode == 0 and out["verdict"] == "RUNNING", (res.stdout, res.stderr)
        found = next(c for c in out["checks"] if c["id"] == "pre_python")
        assert found["cause"] == str(run / "bin" / "prog"), found
        files = next(c for c in out["checks"] if c["id"] == "pre_args")
        assert files["state"] == "ok" and files["cause"] == f"1 found: {PROGRAM}", files
        launch = json.loads((run / "launch.json").read_text())
        assert launch["argv"][0] == str(run / "bin" / "prog")
    finally:
        cli_in(tmp_path, tmp_path, "--config", str(cfg), "--stop")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_run_file_that_is_not_regular_is_refused_before_the_launch(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    if kind == "fifo":
        os.mkfifo(run / "train.log")     # the wrapper's `exec >>train.log` would block on it forever
    else:
        (run / "exit.json").mkdir()
    cfg = write_config(tmp_path, p={"run_dir": str(run), "min_free_gb": 0, "command": [sys.executable, PROGRAM, "beat"]})
    t0 = time.monotonic()
    res = cli_in(tmp_path, tmp_path, "--config", str(cfg), "--launch", "--json")
    assert time.monotonic() - t0 < 20
    out = json.loads(res.stdout)
    name = "train.log" if kind == "fifo" else "exit.json"
    assert res.returncode == 1 and out["verdict"] == "NOT LAUNCHED", out
    assert f"{run}/{name} is a {'FIFO' if kind == 'fifo' else 'directory'}, not a regular file" in out["summary"], out
    assert not (run / "launch.sh").exists()


def test_run_dir_behind_a_symlink_into_a_system_dir_is_refused(tmp_path):
    (tmp_path / "data").symlink_to("/etc")
    cfg = write_config(tmp_path, p={"run_dir": str(tmp_path / "data" / "dflash-run"), "min_free_gb": 0,
                                    "command": ["true"]})
    res = cli_in(tmp_path, tmp_path, "--config", str(cfg), "--launch", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 1 and "/etc/dflash-run on the target (through a symlink)" in out["summary"], out
    assert not os.path.exists("/etc/dflash-run")


def test_a_script_argument_missing_from_the_run_dir_is_refused_with_where_it_looked(tmp_path):
    """`command = ["python3", "t.py"]`: t.py is looked for where the wrapper will run it (the
    run dir), not beside the caller; preflight names the absolute path it looked at and the
    run dir, before anything is launched. A missing file that is not a script (maybe an
    output) is named too."""
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "t.py").write_text("print('hi')\n")
    run = tmp_path / "run"
    cfg = write_config(tmp_path, p={"run_dir": str(run), "min_free_gb": 0,
                                    "command": [sys.executable, "t.py", "--config=conf/a.yaml", "-m", "x.py",
                                                "meta-llama/Llama-3-8B", "https://example.org/d.json"]})
    res = cli_in(caller, tmp_path, "--config", str(cfg), "--launch", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["verdict"] == "NOT LAUNCHED", (res.stdout, res.stderr)
    check = next(c for c in out["checks"] if c["id"] == "pre_args")
    assert check["state"] == "fail", check
    assert check["cause"] == (f"'t.py' not found at {run}/t.py; 'conf/a.yaml' not found at {run}/conf/a.yaml "
                              f"(a relative path is resolved from the run dir {run}, where the wrapper runs "
                              "the command)"), check
    assert "absolute path" in check["hint"] and f"{run}/t.py" in out["summary"], out
    assert not (run / "launch.sh").exists()


def test_path_like_arguments():
    from dflash_tui.run.launch.preflight import path_like_arguments
    assert path_like_arguments(["t.py", "-m", "pkg.mod", "--lr", "0.1", "--out=./o", "data/x.JSONL", "/abs/file",
                                "../up", "meta-llama/Llama-3-8B", "s3://b/k.json", "-c", "print(1)", "x"]) == \
        ["t.py", "./o", "data/x.JSONL", "/abs/file", "../up"]


def test_a_target_without_awk_is_refused_before_the_wrapper_runs(tmp_path):
    """launch.sh writes launch.json and exit.json through awk and tr: where they are missing (a
    container whose awk is a dangling alternatives link), a launch would run the program and
    leave records naming no run, so a crash would read KILLED. Preflight refuses it by name."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "true", "mkdir", "rm", "dirname", "df", "tr", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "awk").symlink_to(tmp_path / "gone" / "awk")     # dangling, as a broken alternatives link
    run = tmp_path / "run"
    cfg = write_config(tmp_path, p={"run_dir": str(run), "min_free_gb": 0, "command": [sys.executable, PROGRAM, "beat"]})
    env = {**os.environ, "PATH": str(bin_dir), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--launch"], capture_output=True,
                         text=True, env=env, timeout=90)
    assert res.returncode != 0, res.stdout
    assert "awk not found on local: the launch wrapper writes its records with them" in res.stdout, res.stdout
    assert "apt-get install mawk" in res.stdout
    assert not (run / "launch.json").exists() and not (run / "launch.sh").exists()
