"""A person's stop of a run on several SSH nodes is never undone by the recovery: a real watcher
with a `[recover]` policy, a program that fails on both nodes (this machine and the same machine
through the real sshd); a `--stop` while the restart waits out its backoff cancels it (recorded,
said in the stop's JSON), and no node is launched again."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.recording.test_daemon import start_watcher
from tests.recording.recovery.test_recovery import wait_until
from tests.support.watch_store import recorded_actions, recorded_states
from tests.test_cli_modes import cli
from tests.watch.test_nodes_session import LOCAL, nodes_toml

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(180)]

CRASH = ["sh", "-c", 'echo "step 1/9"; sleep 0.5; echo "step 2/9"; sleep 1; echo "boom" >&2; exit 3']


def test_a_stop_while_the_restart_of_two_nodes_waits_cancels_it(sshd, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(nodes_toml(sshd, tmp_path, command=CRASH, stop_grace_s=2)
                   + f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
                   '[recover]\non = ["CRASHED"]\nmax_restarts = 2\nbackoff_s = 12\n')
    dirs = [tmp_path / f"run-{LOCAL}", tmp_path / f"run-{sshd.alias}"]

    def actions():
        return recorded_actions(tmp_path / "watch.sqlite3", "two")

    def run_ids():
        return [json.loads((d / "launch.json").read_text())["run_id"] for d in dirs]

    w = start_watcher(tmp_path, cfg)
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json", timeout=120)
        first = json.loads(res.stdout)["run_ids"]
        wait_until(lambda: any(a.action == "planned" for a in actions()), 60,
                   lambda: (recorded_states(tmp_path / "watch.sqlite3", "two"), actions()))
        launched = run_ids()
        res = cli(tmp_path, "--config", str(cfg), "--stop", "--json", timeout=120)
        assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
        doc = json.loads(res.stdout)
        assert doc["recovery"]["state"] == "cancelled", doc["recovery"]
        assert doc["recovery"]["reason"].startswith("restart cancelled by "), doc["recovery"]
        time.sleep(12 + 4)   # past the backoff and a few of the watcher's ticks
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=30)
    assert run_ids() == launched and set(launched) <= set(first.values()), (run_ids(), first)
    acts = actions()
    assert [a.action for a in acts] == ["planned", "cancelled"], (acts, err)
    assert acts[-1].detail["was"] == "planned" and acts[-1].run_id == acts[0].run_id, acts
