"""`dflash-tui --watch` end to end: a real run (tests/programs/stall_resume_crash.py) goes
RUNNING -> STALLED -> RUNNING -> CRASHED under a real watcher process, which is SIGKILLed
mid-run and restarted; notifications go through Apprise to a real HTTP receiver."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.recording.service import UNIT_NAME
from dflash_tui.recording.store.store import ChangeStore
from tests.support.receivers import HttpReceiver
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(120)

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
PY = sys.executable
SILENT_S = 5.0        # the program's silence, well past stall_after_s (2 s)
# Its steps after the silence: 8 s, so the restarted watcher (started when the stall is
# notified) sees the recovery last past hold_s even when this machine is slow to start it.
RESUMED_STEPS = 40


def env_for(tmp_path: Path) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}


def write_config(tmp_path: Path, port: int) -> Path:
    common = 'stall_after_s = 2\nstop_grace_s = 2\nmin_free_gb = 0\n'
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\n'
        f'command = ["{PY}", "{PROGRAMS / "stall_resume_crash.py"}", "{SILENT_S}", "{RESUMED_STEPS}"]\n{common}'
        f'[profile.q]\nrun_dir = "{tmp_path / "q"}"\n'
        f'command = ["{PY}", "{PROGRAMS / "crash_after_steps.py"}", "3"]\n{common}'
        # a host where nothing listens: UNREACHABLE from the first poll, notified only after 300 s
        f'[profile.r]\nhost = "127.0.0.1"\nport = 9\nuser = "nobody"\nrun_dir = "/srv/nowhere/r"\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        f'[notify]\nhold_s = 1\nurls = ["json://127.0.0.1:{port}/hook"]\n'
        '[notify.profile.q]\nenabled = false\n')
    return cfg


def start_watcher(tmp_path: Path, cfg: Path) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "dflash_tui", "--config", str(cfg), "--watch"], env=env_for(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def titles(http: HttpReceiver) -> list[str]:
    return [json.loads(r.body)["title"] for r in http.requests if r.path == "/hook"]


def wait_title(http: HttpReceiver, title: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while title not in titles(http):
        assert time.monotonic() < deadline, (title, titles(http))
        time.sleep(0.1)


def test_a_run_through_stall_recovery_and_crash_across_a_sigkilled_watcher(tmp_path, http):
    cfg = write_config(tmp_path, http.port)
    a = start_watcher(tmp_path, cfg)
    try:
        for name in ("p", "q"):
            res = cli(tmp_path, "--config", str(cfg), "--profile", name, "--launch", "--no-preflight")
            assert res.returncode in (0, 4), res.stdout + res.stderr
        wait_title(http, "dflash-tui: p STALLED", 25)
        a.send_signal(signal.SIGKILL)
        _, a_err = a.communicate(timeout=10)
    finally:
        a.kill()
    # Every change the killed watcher had logged (it logs after the commit) is in the store.
    logged = re.findall(r"--watch: (\w+): (?:\(first seen\)|[A-Z ]+) -> ([A-Z ]+?)(?: \[| ?:)", a_err)
    with ChangeStore(tmp_path / "watch.sqlite3", readonly=True) as store:
        before_restart = store.changes()
    assert [(c.profile, c.state) for c in before_restart] == logged, a_err
    assert ("p", "STALLED") in logged

    b = start_watcher(tmp_path, cfg)
    try:
        wait_title(http, "dflash-tui: p CRASHED", 30)
        time.sleep(2.0)    # past the hold: anything else due would have gone out by now
    finally:
        b.send_signal(signal.SIGTERM)
        _, b_err = b.communicate(timeout=15)
    assert b.returncode == 0, b_err

    assert titles(http) == ["dflash-tui: p STALLED", "dflash-tui: p recovered: RUNNING", "dflash-tui: p CRASHED"], a_err + b_err
    crashed = json.loads(http.requests[-1].body)["message"]
    assert "RuntimeError: NCCL error" in crashed and "open it: dflash-tui --config" in crashed
    stalled = json.loads(http.requests[0].body)["message"]
    assert "stuck at: " in stalled and "stall_resume_crash.py" in stalled

    with ChangeStore(tmp_path / "watch.sqlite3", readonly=True) as store:
        after = store.changes()
        p = store.changes("p")
        q = store.changes("q")
    assert after[: len(before_restart)] == before_restart                  # nothing recorded was lost
    for one in (p, q):
        pairs = [(c.state, c.run_id) for c in one]
        assert all(x != y for x, y in zip(pairs, pairs[1:])), pairs           # and nothing twice
    run = [c.state for c in p if c.run_id and c.state != "STARTING"]
    assert run == ["RUNNING", "STALLED", "RUNNING", "CRASHED"], [(c.state, c.cause) for c in p]
    assert q[-1].state == "CRASHED"                                        # recorded, not notified
    with ChangeStore(tmp_path / "watch.sqlite3", readonly=True) as store:
        r = store.changes("r")
    assert [(c.state, c.check) for c in r] == [("UNREACHABLE", "transport")], r   # once, across the restart

    out = cli(tmp_path, "--config", str(cfg), "--profile", "p", "--timeline", "--json")
    assert out.returncode == 0, out.stderr
    bands = json.loads(out.stdout)["bands"]
    assert [b["state"] for b in bands if b["run_id"] and b["state"] != "STARTING"] == run
    assert bands[-1]["open"] and "ValueError" not in bands[-1]["cause"]
    assert bands[-1]["evidence"]["traceback"][-1].startswith("RuntimeError: NCCL error")
    text = cli(tmp_path, "--config", str(cfg), "--profile", "p", "--timeline")
    assert "STALLED" in text.stdout and "stuck at" in text.stdout


def test_install_service_writes_the_unit_and_says_when_systemd_is_missing(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()          # a PATH with no systemctl in it
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PATH": str(bin_dir)}
    env.pop("XDG_CONFIG_HOME", None)
    res = subprocess.run([PY, "-m", "dflash_tui", "--config", str(cfg), "--watch", "--install-service",
                          "--store", str(tmp_path / "my store.db")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 1 and res.stdout == "", res.stderr
    line, = res.stderr.splitlines()
    assert "systemd --user is not available here" in line
    unit = (tmp_path / "home" / ".config" / "systemd" / "user" / UNIT_NAME).read_text()
    exec_start, = [l for l in unit.splitlines() if l.startswith("ExecStart=")]
    assert exec_start == (f'ExecStart="{PY}" "-m" "dflash_tui" "--watch" "--config" "{cfg}" '
                          f'"--store" "{tmp_path / "my store.db"}"')
    for must in ("[Unit]", "[Service]", "Restart=on-failure", "[Install]", "WantedBy=default.target"):
        assert must in unit


def test_install_service_keeps_a_path_with_newlines_one_argument(tmp_path):
    """A newline or CR in the config path would end ExecStart= and start a directive of its own."""
    odd = tmp_path / "a\nExecStartPost=/bin/touch /tmp/dflash-pwned\rb%$x"
    odd.mkdir(parents=True)
    cfg = odd / "config.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PATH": str(bin_dir)}
    env.pop("XDG_CONFIG_HOME", None)
    res = subprocess.run([PY, "-m", "dflash_tui", "--config", str(cfg), "--watch", "--install-service"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
    unit_path = tmp_path / "home" / ".config" / "systemd" / "user" / UNIT_NAME
    lines = unit_path.read_text().splitlines()
    assert not [l for l in lines if l.startswith("ExecStartPost")]
    exec_start, = [l for l in lines if l.startswith("ExecStart")]
    assert f'"--config" "{tmp_path}/a\\x0aExecStartPost=/bin/touch /tmp/dflash-pwned\\x0db%%$$x/config.toml"' in exec_start
    analyze = shutil.which("systemd-analyze")
    if analyze:   # systemd's own parser takes the unit as it is, the path as one argument
        check = subprocess.run([analyze, "verify", str(unit_path)], capture_output=True, text=True, timeout=60)
        assert check.returncode == 0 and "ExecStartPost" not in check.stderr, check.stderr


def test_news_per_run_id_under_a_real_watcher(tmp_path, http):
    """A run that finished before the watcher started is recorded, not notified; a relaunched run
    that crashes again, within hold_s of its start, is notified again."""
    store = tmp_path / "watch.sqlite3"

    def config(name: str, command: list[str]) -> Path:
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f'[profile.f]\nrun_dir = "{tmp_path / "f"}"\ncommand = {json.dumps(command)}\n'
                       'stall_after_s = 2\nstop_grace_s = 2\nmin_free_gb = 0\n'
                       f'[watch]\ninterval_s = 0.3\nstore = "{store}"\n'
                       f'[notify]\nhold_s = 1\nurls = ["json://127.0.0.1:{http.port}/news"]\n')
        return cfg

    finishing = config("finishing", [PY, "-c", "print('step 1 loss 0.5')"])
    crashing = config("crashing", [PY, str(PROGRAMS / "crash_after_steps.py"), "2"])
    res = cli(tmp_path, "--config", str(finishing), "--launch", "--no-preflight", "--wait", "20")
    assert res.returncode == 0, res.stdout + res.stderr
    # A loaded machine may look once before the one-line program has exited (RUNNING, up 0 s).
    deadline = time.monotonic() + 20
    while "FINISHED" not in res.stdout and time.monotonic() < deadline:
        time.sleep(0.3)
        res = cli(tmp_path, "--config", str(finishing), "--check")
    assert "FINISHED" in res.stdout, res.stdout + res.stderr

    def news() -> list[str]:
        return [json.loads(r.body)["title"] for r in http.requests if r.path == "/news"]

    w = start_watcher(tmp_path, finishing)
    try:
        deadline = time.monotonic() + 30
        while not store.exists() or not ChangeStore(store, readonly=True).changes("f"):
            assert time.monotonic() < deadline and w.poll() is None
            time.sleep(0.1)
        time.sleep(2.5)                                   # past hold_s: nothing is due
        assert news() == []
        for n in (1, 2):
            res = cli(tmp_path, "--config", str(crashing), "--launch", "--no-preflight")
            assert res.returncode in (0, 4), res.stdout + res.stderr
            deadline = time.monotonic() + 30
            while news().count("dflash-tui: f CRASHED") < n:
                assert time.monotonic() < deadline, (n, news())
                time.sleep(0.1)
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    assert news() == ["dflash-tui: f CRASHED", "dflash-tui: f CRASHED"], err
    with ChangeStore(store, readonly=True) as s:
        runs = {c.run_id for c in s.changes("f") if c.state == "CRASHED"}
    assert len(runs) == 2
