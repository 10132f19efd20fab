"""End to end, as a person would: the real dashboard in a real terminal (tmux) with three
profiles on two loopback sshd hosts, each running a real detached run. The fleet screen is the
home; the two profiles of one host share one SSH connection; one run is stopped from its row
mid-test (s, y) and only that row changes; Enter opens a run view and Escape comes back; a host
that goes down turns its row UNREACHABLE while the other host's rows stay live.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.run_standins import PROGRAM
from tests.support.runs import alive
from tests.support.sshd import start_sshd
from tests.e2e.test_tmux import CLI, tmux  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(240)]

COLS, ROWS = 140, 30


def profile_toml(name: str, server, run_dir: Path) -> str:
    return f"""
[profile.{name}]
host = "{server.host}"
port = {server.port}
user = "{server.user}"
identity_file = "{server.client_key}"
known_hosts = "{server.known_hosts}"
run_dir = "{run_dir}"
python = "{sys.executable}"
command = ["{sys.executable}", "{PROGRAM}", "beat"]
train_args = ["--interval=0.3"]
stop_grace_s = 3.0
stall_after_s = 30.0
"""


def row(screen: str, name: str) -> str:
    m = re.search(rf"^\s*{name}\s.*$", screen, re.M)
    return m.group(0) if m else ""


def test_fleet_over_two_hosts(sshd, tmux, tmp_path):  # noqa: F811
    second = start_sshd(tmp_path / "sshd2")
    cfg = tmp_path / "config.toml"
    runs = {n: tmp_path / f"run-{n}" for n in ("alpha", "bravo", "charlie")}
    cfg.write_text(profile_toml("alpha", sshd, runs["alpha"]) + profile_toml("bravo", sshd, runs["bravo"])
                   + profile_toml("charlie", second, runs["charlie"]))
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(Path(__file__).parents[2] / "src"),
           "TERM": "xterm-256color", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           # Textual takes COLUMNS/LINES over the terminal's size: the pane's own, not pytest's.
           "COLUMNS": str(COLS), "LINES": str(ROWS)}
    run_env = {**os.environ, **env}
    base = [*CLI, "--config", str(cfg)]
    pids = {}
    try:
        for name in runs:
            r = subprocess.run([*base, "--profile", name, "--launch", "--wait", "20", "--json"],
                               capture_output=True, text=True, timeout=60, env=run_env)
            assert r.returncode == 0, f"launch {name} failed: {r.stdout} {r.stderr}"
            pids[name] = json.loads(r.stdout)["pid"]
        before = sshd.accepted_connections()

        tmux.cmd("new-session", "-d", "-s", "ui", "-x", str(COLS), "-y", str(ROWS),
                 "env " + " ".join(f"{k}={_q(v)}" for k, v in env.items()) + " "
                 + " ".join(_q(a) for a in base) + "; echo '[exited]'; sleep 600")
        tmux.wait(r"Fleet · 3 profiles", timeout=30)
        for name in runs:
            tmux.wait(rf"(?m)^\s*{name}\s.*RUNNING", timeout=40)
        time.sleep(1.0)
        assert sshd.accepted_connections() - before == 1, "alpha and bravo must share one connection"

        # Stop bravo from its row (sorted by verdict, then name: alpha, bravo, charlie).
        tmux.keys("Down")
        tmux.wait(r"RUNNING\s+bravo:")            # the detail line names the selected row
        tmux.keys("s")
        tmux.wait(r"Stop the run\?")
        tmux.wait(rf"Stops pid {pids['bravo']} of profile bravo")
        tmux.keys("y")
        deadline = time.monotonic() + 40
        while "RUNNING" in row(tmux.screen(), "bravo") and time.monotonic() < deadline:
            time.sleep(0.2)
        screen = tmux.screen()
        assert row(screen, "bravo") and "RUNNING" not in row(screen, "bravo"), screen
        assert "RUNNING" in row(screen, "alpha") and "RUNNING" in row(screen, "charlie"), screen
        assert not alive(pids["bravo"]) and alive(pids["alpha"]) and alive(pids["charlie"])

        # Enter opens alpha's run view; Escape returns to the fleet. The cursor stayed on bravo,
        # wherever its new verdict sorts it: go to the top, then down to alpha.
        tmux.keys("Home")
        for _ in range(3):
            time.sleep(0.3)
            if re.search(r"RUNNING\s+alpha:", tmux.screen()):
                break
            tmux.keys("Down")
        tmux.wait(r"RUNNING\s+alpha:")
        tmux.keys("Enter")
        tmux.wait(rf"profile alpha[\s\S]*RUNNING|RUNNING[\s\S]*profile alpha", timeout=20)
        tmux.wait(rf"pid {pids['alpha']}")
        tmux.keys("Escape")
        tmux.wait(r"Fleet · 3 profiles")

        # The second host goes down: charlie is UNREACHABLE, alpha stays live and fresh.
        second.kill_sessions()
        second.stop()
        tmux.wait(r"(?m)^\s*charlie\s.*UNREACHABLE", timeout=40)
        screen = tmux.screen()
        assert "RUNNING" in row(screen, "alpha"), screen
        assert re.search(r"(<2s|\b[0-3]s)\s*$", row(screen, "alpha")), row(screen, "alpha")  # still fresh

        tmux.keys("q")
        tmux.wait(r"\[exited\]", timeout=20)
        assert alive(pids["alpha"]), "quitting the dashboard must not stop a run"
    finally:
        second.stop()
        for name in ("alpha", "bravo"):
            subprocess.run([*base, "--profile", name, "--stop"], capture_output=True, text=True,
                           timeout=60, env=run_env)
        if pids.get("charlie") and alive(pids["charlie"]):
            os.killpg(pids["charlie"], 15)


def _q(s: str) -> str:
    return shlex.quote(s)
