"""A person's stop is never undone by the recovery: with real programs, a real watcher process
and real time, a `--stop` while the restart waits out its backoff cancels it (recorded as
"restart cancelled by user@host", said in the stop's output and in one notification), and the
policy stays off for that run until a person launches again; a stop of a stalled run before
the watcher acts on it is not undone either."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.recording.test_daemon import PY, PROGRAMS, start_watcher, titles
from tests.recording.recovery.test_recovery import actions, states, wait_until, write_config
from tests.support.watch_store import recorded_actions
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(120)


def test_a_stop_while_the_restart_waits_cancels_it_and_disarms_the_run(tmp_path, http):
    # The backoff leaves room for the check and the stop, each a process start on a busy machine.
    cfg = write_config(tmp_path, http.port, [PY, str(PROGRAMS / "crash_after_steps.py"), "3"], backoff_s=12)
    w = start_watcher(tmp_path, cfg)
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        wait_until(lambda: any(x[0] == "planned" for x in actions(tmp_path)), 30,
                   lambda: (actions(tmp_path), states(tmp_path)))
        waiting = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json").stdout)["recovery"]
        assert waiting["state"] == "waiting" and waiting["next_in_s"] > 1, waiting
        res = cli(tmp_path, "--config", str(cfg), "--stop", "--json")
        doc = json.loads(res.stdout)
        assert res.returncode == 0 and doc["verdict"] == "CRASHED", res
        assert doc["recovery"]["state"] == "cancelled", doc["recovery"]
        assert doc["recovery"]["reason"].startswith("restart cancelled by "), doc["recovery"]
        text = cli(tmp_path, "--config", str(cfg), "--check").stdout
        assert "recovery off for this run: restart cancelled by" in text, text
        time.sleep(12 + 4)   # past the backoff and a few of the watcher's ticks: no relaunch
        assert (tmp_path / "p" / "launch.json").exists()
        assert json.loads((tmp_path / "p" / "launch.json").read_text())["run_id"] == first
        wait_until(lambda: any(t.endswith("restart cancelled") for t in titles(http)), 10, lambda: titles(http))
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    assert [(a.action, a.run_id) for a in acts] == [("planned", first), ("cancelled", first)], (acts, err)
    assert acts[-1].detail["was"] == "planned" and acts[-1].detail["by"] in acts[-1].detail["reason"]
    cancelled = [json.loads(r.body) for r in http.requests if json.loads(r.body)["title"] == "dflash-tui: p restart cancelled"]
    assert len(cancelled) == 1, titles(http)
    assert "restart 1/3 after CRASHED cancelled by " in cancelled[0]["message"], cancelled[0]
    assert not any("restarted" in t for t in titles(http)), titles(http)
    # A person's launch arms it again: the next crash is restarted.
    w = start_watcher(tmp_path, cfg)
    try:
        second = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        wait_until(lambda: any(x[0] == "planned" and x[1] == second for x in actions(tmp_path)), 30,
                   lambda: (actions(tmp_path), states(tmp_path)))
    finally:
        w.send_signal(signal.SIGTERM)
        try:
            w.communicate(timeout=15)
        except Exception:
            w.kill()
            print(w.communicate()[1][-3000:])
            raise


def test_a_stop_after_the_watcher_stopped_a_stalled_run_cancels_its_relaunch(tmp_path, http):
    ckpt = tmp_path / "own-checkpoint"
    cfg = write_config(tmp_path, http.port, [PY, str(PROGRAMS / "hang_once.py"), str(ckpt), "20", "3", "0.3"],
                       backoff_s=8)
    w = start_watcher(tmp_path, cfg)
    try:
        first = json.loads(cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json").stdout)["run_id"]
        wait_until(lambda: any(x[0] == "stopped" for x in actions(tmp_path)), 30,
                   lambda: (actions(tmp_path), states(tmp_path)))
        res = cli(tmp_path, "--config", str(cfg), "--stop")
        assert res.returncode == 0 and "restart 1/3 of run" in res.stdout and "cancelled" in res.stdout, res
        time.sleep(8 + 3)
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    assert json.loads((tmp_path / "p" / "launch.json").read_text())["run_id"] == first
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    assert [a.action for a in acts] == ["planned", "stopped", "cancelled"], (acts, err)
    assert acts[-1].detail["was"] == "stopped"
