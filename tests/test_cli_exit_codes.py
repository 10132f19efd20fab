"""Every row of the README's exit-code table, produced by a real `dflash-tui` process in the
situation the row names (local runs of the stand-in programs; a closed loopback port for 3)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_cli_modes import cli, local, one_line_error, write_config
from tests.run.launch.test_claim import kill_each, trainers
from tests.support.signals import default_sigint

pytestmark = pytest.mark.timeout(240)

README = Path(__file__).resolve().parent.parent / "README.md"
COVERED: set[int] = set()


def readme_codes() -> dict[int, str]:
    text = README.read_text()
    table = text[text.index("## Exit codes"):]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.*) \|$", table, re.M)}


def expect(code: int, res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert res.returncode == code, (code, res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stdout + res.stderr, res.stderr
    COVERED.add(code)
    return res


def verdict(res: subprocess.CompletedProcess) -> str:
    return json.loads(res.stdout)["verdict"]


def test_0_healthy_and_1_failing(tmp_path):
    tag = f"--tag={os.getpid()}-{time.monotonic_ns()}"
    cfg = write_config(tmp_path, beat=local(tmp_path / "beat", "beat", tag),
                       fin=local(tmp_path / "fin", "finish", "--steps=2"),
                       crash=local(tmp_path / "crash", "crash"),
                       lost=local(tmp_path / "lost", "beat", command=["no-such-program-dflash"]))
    c = ["--config", str(cfg)]
    try:
        assert verdict(expect(0, cli(tmp_path, *c, "-p", "beat", "--launch", "--json", "--wait", "20"))) == "RUNNING"
        assert verdict(expect(0, cli(tmp_path, *c, "-p", "beat", "--check", "--json"))) == "RUNNING"
        res = expect(1, cli(tmp_path, *c, "-p", "beat", "--launch"))   # refused: still running
        said = res.stdout + res.stderr
        assert "is still running in" in said, said
        out = json.loads(expect(0, cli(tmp_path, *c, "-p", "beat", "--stop", "--json")).stdout)
        assert out["stop"]["outcome"] == "terminated"
        out = json.loads(expect(0, cli(tmp_path, *c, "-p", "beat", "--stop", "--json")).stdout)
        assert out["stop"]["outcome"] == "not-running"     # "or was not running"
    finally:
        kill_each(trainers(tag))
    expect(0, cli(tmp_path, *c, "-p", "fin", "--launch", "--wait", "20"))
    deadline = time.monotonic() + 30
    while verdict(cli(tmp_path, *c, "-p", "fin", "--check", "--json")) != "FINISHED":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    expect(0, cli(tmp_path, *c, "-p", "fin", "--check"))
    assert verdict(expect(1, cli(tmp_path, *c, "-p", "crash", "--launch", "--json", "--wait", "20"))) == "CRASHED"
    assert verdict(expect(1, cli(tmp_path, *c, "-p", "lost", "--launch", "--json"))) == "NOT LAUNCHED"


def test_canary_passes_0_and_fails_1(tmp_path):
    cfg = write_config(tmp_path, p=local(tmp_path / "run", "beat"))
    res = expect(0, cli(tmp_path, "--config", str(cfg), "--canary", "--json"))
    pid = json.loads(res.stdout)["pid"]
    kill_each([pid] if pid else [])
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / "canary").write_text("a file where the canary's run dir goes")
    cfg = write_config(tmp_path, p=local(tmp_path / "run2", "beat"))
    expect(1, cli(tmp_path, "--config", str(cfg), "--canary"))


def test_1_stop_of_a_reused_pid(tmp_path):
    from tests.run.launch.test_stop import fake_launch, foreign_process
    proc = foreign_process()
    try:
        fake_launch(tmp_path / "run", proc.pid, 1)        # start time 1: not that process
        cfg = write_config(tmp_path, p=local(tmp_path / "run", "beat"))
        out = json.loads(expect(1, cli(tmp_path, "--config", str(cfg), "--stop", "--json")).stdout)
        assert out["stop"]["outcome"] == "mismatch" and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_1_bad_run_dir_data_is_a_verdict_not_unreachable(tmp_path):
    run = tmp_path / "run"
    (run / "launch.sh").mkdir(parents=True)
    cfg = write_config(tmp_path, p=local(run, "beat"))
    # launch.sh is a directory an hour old and no launch.json: past every launch deadline,
    # nothing started here (a fresh one would be STARTING until the deadline).
    an_hour_ago = time.time() - 3600
    os.utime(run / "launch.sh", (an_hour_ago, an_hour_ago))
    res = expect(1, cli(tmp_path, "--config", str(cfg), "--check", "--json"))
    assert verdict(res) == "NEVER STARTED", res.stdout
    for pid in (0, -5):
        (run / "launch.json").write_text(json.dumps({
            "v": 1, "run_id": "r", "pid": pid, "pgid": pid, "start_ticks": 1, "start_time": 1.0, "argv": ["x"]}))
        res = expect(1, cli(tmp_path, "--config", str(cfg), "--check", "--json"))
        assert "'pid'" in json.dumps(json.loads(res.stdout)), res.stdout   # a check names the field
        expect(1, cli(tmp_path, "--config", str(cfg), "--stop"))


def test_2_usage_and_config_errors(tmp_path):
    good = write_config(tmp_path, p=local(tmp_path / "run", "beat"))
    cases = [
        (["--bogus"], "unrecognized arguments"),
        (["--config", str(tmp_path / "missing.toml"), "--check"], "no such config file"),
        (["--config", str(good), "--profile", "nope", "--check"], "no profile named 'nope'"),
        (["--config", str(good), "--check", "--wait", "nan"], "--wait"),
        (["--config", "/dev/zero", "--check"], "not a regular file"),
    ]
    bad = {"nan": "stop_grace_s = nan", "dotdot": 'run_dir = "/x/../../etc"',
           "nul": 'python = "py\\u0000"', "ssh": 'host = "127.0.0.1"\nssh_config = "/dev/zero"'}
    for name, line in bad.items():
        path = tmp_path / f"{name}.toml"
        body = line if "run_dir" in line else f'run_dir = "{tmp_path / "r"}"\n{line}'
        path.write_text(f"[profile.p]\n{body}\n")
        cases.append((["--config", str(path), "--check"], line.split("\n")[-1].split(" = ")[0]))
    name_nl = tmp_path / "nl.toml"
    name_nl.write_text('[profile."a\\nb"]\nrun_dir = "/srv/r"\n')
    cases.append((["--config", str(name_nl), "--check"], "profile names"))
    for args, said in cases:
        line = one_line_error(expect(2, cli(tmp_path, *args, timeout=30)))
        assert said in line, (args, line)


def test_3_unreachable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_config(tmp_path, gone={"host": "127.0.0.1", "port": port, "user": "root", "run_dir": "/srv/gone"})
    assert "127.0.0.1" in one_line_error(expect(3, cli(tmp_path, "--config", str(cfg), "--check")))


def test_4_no_verdict_yet(tmp_path):
    tag = f"--tag={os.getpid()}-{time.monotonic_ns()}"
    cfg = write_config(tmp_path, p=local(tmp_path / "run", "stall", "--beats=0", tag, stall_after_s=60))
    assert verdict(expect(4, cli(tmp_path, "--config", str(cfg), "--check", "--json"))) == "NO RUN"
    try:
        res = expect(4, cli(tmp_path, "--config", str(cfg), "--launch", "--json"))
        assert verdict(res) == "STARTING", res.stdout
    finally:
        kill_each(trainers(tag))


def test_130_interrupted(tmp_path):
    cfg = write_config(tmp_path, p=local(tmp_path / "run", "beat"))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--check", "--wait", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_sigint)
    time.sleep(3)                                   # inside the --wait loop: NO RUN is undecided
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, (out, err)
    COVERED.add(130)


def test_every_row_of_the_readme_table_was_produced():
    rows = readme_codes()
    assert set(rows) == {0, 1, 2, 3, 4, 130}, rows
    assert COVERED == set(rows), f"rows never produced by the tests above: {set(rows) - COVERED}"
