"""End to end, as a person would: the real dashboard in a real terminal (tmux), over the
loopback sshd, watching a real detached run; press r, confirm, and see the run replaced.

The "trainer" is tests/support/run_standins.py in `beat` mode (the real run-dir schema, heartbeats and
steps), launched through the product's own wrapper and SSH transport.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.run_standins import PROGRAM
from tests.support.runs import alive

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(180)]

COLS, ROWS = 100, 32
CLI = [sys.executable, "-m", "dflash_tui"]


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tmux is required in CI (make system-tools installs it)")
        pytest.skip("tmux is not installed (make system-tools installs it)")
    # A private tmux server (own socket): nothing of anyone else's tmux is touched.
    sock = f"dflash-e2e-{os.getpid()}"
    yield Tmux(sock)
    subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)


class Tmux:
    def __init__(self, sock: str) -> None:
        self.sock = sock

    def cmd(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, f"tmux {args[0]}: {r.stderr.strip()}"
        return r.stdout

    def start(self, argv: list[str], env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={_sh(v)}" for k, v in env.items())
        # Keep the pane open after the app exits, so its last words can be read.
        line = f"env {exports} {' '.join(_sh(a) for a in argv)}; echo '[exited]'; sleep 600"
        self.cmd("new-session", "-d", "-s", "ui", "-x", str(COLS), "-y", str(ROWS), line)

    def screen(self) -> str:
        return self.cmd("capture-pane", "-p", "-t", "ui")

    def keys(self, *keys: str) -> None:
        self.cmd("send-keys", "-t", "ui", *keys)

    def wait(self, pattern: str, timeout: float = 30.0) -> re.Match:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            m = re.search(pattern, screen)
            if m:
                return m
            time.sleep(0.2)
        raise AssertionError(f"screen never showed {pattern!r}; last screen:\n{screen}")


def _sh(s: str) -> str:
    import shlex
    return shlex.quote(s)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def test_relaunch_from_the_dashboard_over_ssh(sshd, tmux, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"""
[profile.e2e]
host = "{sshd.host}"
port = {sshd.port}
user = "{sshd.user}"
identity_file = "{sshd.client_key}"
known_hosts = "{sshd.known_hosts}"
run_dir = "{run_dir}"
python = "{sys.executable}"
command = ["{sys.executable}", "{PROGRAM}", "beat"]
train_args = ["--interval=0.3"]
stop_grace_s = 5.0
""")
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(Path(__file__).parents[2] / "src"),
           "TERM": "xterm-256color", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    run_env = {**os.environ, **env}
    base = [*CLI, "--config", str(cfg), "--profile", "e2e"]

    # A run is already going when the user opens the dashboard.
    r = subprocess.run([*base, "--launch", "--wait", "20", "--json"], capture_output=True, text=True,
                       timeout=60, env=run_env)
    assert r.returncode == 0, f"launch failed: {r.stdout} {r.stderr}"
    try:
        tmux.start(base, env)
        # The header's pid (its first line): the folded checklist does not repeat it, and the
        # log below may name other pids.
        m = tmux.wait(r"RUNNING[^\n]*?pid (\d+)", timeout=40)
        old = int(m.group(1))
        assert alive(old) and "launch.sh" in cmdline(old)

        tmux.keys("r")
        tmux.wait(r"Relaunch the run\?")
        tmux.wait(rf"Stops pid {old}")
        tmux.keys("y")
        # The checklist resets and fills in again, now for a new pid.
        m = tmux.wait(rf"RUNNING[^\n]*?pid (?!{old}\b)(\d+)", timeout=60)
        new = int(m.group(1))
        assert new != old
        assert alive(new) and "launch.sh" in cmdline(new), "the new run is not running"
        deadline = time.monotonic() + 10
        while alive(old) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(old), f"old run pid {old} still alive after the relaunch"

        tmux.keys("q")
        tmux.wait(rf"the run keeps running \(pid {new}", timeout=20)
        tmux.wait(r"\[exited\]")
        assert alive(new), "quitting the dashboard must not stop the run"
    finally:
        subprocess.run([*base, "--stop"], capture_output=True, text=True, timeout=60, env=run_env)
