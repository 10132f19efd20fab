"""The watcher's recovery end to end, with real programs, a real watcher process and real time:
a program of one's own that hangs once is stopped and relaunched with DFLASH_RESTART=1 and
resumes from its own checkpoint file, across a watcher SIGKILLed between the stop and the
relaunch; a program with the same bug every time is given up on after one restart, notified
once, through Apprise to a real HTTP receiver; a restart's notice committed by a watcher
SIGKILLed before it sent it is sent, once, by the next one."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from dflash_tui.recording.recovery.recovery import PAUSE_ENV
from tests.recording.test_daemon import PY, PROGRAMS, env_for, start_watcher, titles
from tests.support.watch_store import recorded_actions, recorded_states
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(120)


def write_config(tmp_path: Path, port: int, command: list[str], *, backoff_s: float) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\ncommand = {json.dumps(command)}\n'
        'stall_after_s = 2\nstop_grace_s = 2\nmin_free_gb = 0\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        # Only the recovery's own notifications: each restart and each give-up.
        f'[notify]\nhold_s = 1\non = []\nurls = ["json://127.0.0.1:{port}/hook"]\n'
        f'[recover]\non = ["CRASHED", "STALLED"]\nmax_restarts = 3\nbackoff_s = {backoff_s}\n')
    return cfg


def actions(tmp_path: Path) -> list[tuple[str, str, int]]:
    return [(a.action, a.run_id, a.attempt) for a in recorded_actions(tmp_path / "watch.sqlite3", "p")]


def wait_until(what, timeout: float, why):
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, why()
        time.sleep(0.2)
    return got


def states(tmp_path: Path) -> list[tuple[str, str]]:
    return recorded_states(tmp_path / "watch.sqlite3", "p")


def test_a_hang_is_stopped_and_resumed_once_across_a_sigkilled_watcher(tmp_path, http):
    ckpt = tmp_path / "own-checkpoint"
    cfg = write_config(tmp_path, http.port, [PY, str(PROGRAMS / "hang_once.py"), str(ckpt), "20", "6", "0.4"],
                       backoff_s=4)
    a = start_watcher(tmp_path, cfg)
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json")
        first = json.loads(res.stdout)["run_id"]
        # STALLED at step 6, stopped by the watcher; killed before the backoff (4 s) is over.
        wait_until(lambda: any(x[0] == "stopped" for x in actions(tmp_path)), 30,
                   lambda: (actions(tmp_path), states(tmp_path)))
        a.send_signal(signal.SIGKILL)
        _, a_err = a.communicate(timeout=10)
    finally:
        a.kill()
    assert actions(tmp_path) == [("planned", first, 1), ("stopped", first, 1)], a_err
    assert ("STALLED", first) in states(tmp_path)

    b = start_watcher(tmp_path, cfg)
    try:
        wait_until(lambda: states(tmp_path)[-1][0] == "FINISHED", 40, lambda: (states(tmp_path), actions(tmp_path)))
    finally:
        b.send_signal(signal.SIGTERM)
        _, b_err = b.communicate(timeout=15)
    assert b.returncode == 0, b_err
    # One launch, the count kept: restart 1, not a new plan.
    acts = actions(tmp_path)
    assert [(x[0], x[2]) for x in acts] == [("planned", 1), ("stopped", 1), ("launching", 1), ("launched", 1)], acts
    second = states(tmp_path)[-1][1]
    assert ("STOPPED", first) in states(tmp_path)   # stopped by the watcher, not a person: resumed
    assert second != first and [r for s, r in states(tmp_path) if s == "FINISHED"] == [second]
    log = (tmp_path / "p" / "train.log").read_text()
    assert "DFLASH_RESTART=1: starting at step 6" in log and "step 7 loss" in log and "finished 20 steps" in log
    assert "step 1 loss" not in log
    history = sorted(p.name for p in (tmp_path / "p" / "history").iterdir())
    assert history == [first], history   # exactly one run before this one
    # Who stopped it, as the timeline and history say: the policy, not the user the watcher runs as.
    stop = json.loads((tmp_path / "p" / "history" / first / "stop.json").read_text())
    assert stop["requested_by"] == "the recovery policy, attempt 1/3", stop
    assert "DFLASH_RESTART=0: starting at step 0" in (tmp_path / "p" / "history" / first / "train.log").read_text()
    # From outside: goodput as scripted (20 steps of 0.4 s: 8 s of progress, many of the
    # watcher's looks a second apart even on a busy machine; 2 s of silence
    # before the STALLED verdict), and the recovery armed with its one restart counted.
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
    doc = json.loads(res.stdout)
    assert doc["recovery"] == {"state": "armed", "restarts": 1, "max_restarts": 3, "next_in_s": None, "reason": ""}
    good = doc["goodput"]
    # Progress counts from the steps' own times (the changes' `step_at`), not from when the
    # watcher recorded RUNNING or STALLED: within 2 s of the script.
    assert abs(good["good_s"] - 8.0) <= 2.0, good
    # The backoff (4 s, from the failure) is the stalled run's evidence bundle (the run still
    # hangs while its stacks are taken: stalled time), then down time.
    assert good["badput_s"]["stalled"] >= 1.0 and good["badput_s"]["stalled"] + good["badput_s"]["down"] >= 4.5, good
    assert abs(sum(good["badput_s"].values()) + good["good_s"] - good["wall_s"]) < 0.5, good
    timeline = cli(tmp_path, "--config", str(cfg), "--timeline")
    # The text rounds the percent to a whole number, the JSON to a tenth: 54.52 is "55" and 54.5.
    said = re.search(r"goodput (\d+) % of", timeline.stdout)
    assert said and abs(int(said.group(1)) - good["percent"]) <= 0.55, timeline.stdout
    restarted = [json.loads(r.body) for r in http.requests if json.loads(r.body)["title"].startswith("dflash-tui: p restarted")]
    assert [m["title"] for m in restarted] == ["dflash-tui: p restarted (1/3)"], titles(http)
    body = restarted[0]["message"]
    assert "restart 1/3 after STALLED: stuck at" in body and "hang_once.py" in body, body
    assert f"run {second} relaunched with DFLASH_RESTART=1 (was run {first})" in body, body
    assert "\nlost " in body and " stalled" in body, body


def test_the_same_bug_every_time_gives_up_after_one_restart_notified_once(tmp_path, http):
    before = len(http.requests)
    cfg = write_config(tmp_path, http.port, [PY, str(PROGRAMS / "crash_after_steps.py"), "3"], backoff_s=1)
    w = start_watcher(tmp_path, cfg)
    try:
        cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        wait_until(lambda: any(x[0] == "gave_up" for x in actions(tmp_path)), 40,
                   lambda: (actions(tmp_path), states(tmp_path)))
        time.sleep(2.5)   # past the hold and a backoff: anything else due would have gone out by now
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    acts = actions(tmp_path)
    assert [(x[0], x[2]) for x in acts] == [("planned", 1), ("launching", 1), ("launched", 1), ("gave_up", 1)], acts
    crashed = [r for s, r in states(tmp_path) if s == "CRASHED"]
    assert len(crashed) == 2 and crashed[0] != crashed[1]   # two attempts, no third
    mine = [json.loads(r.body) for r in http.requests[before:]]
    assert [m["title"] for m in mine] == ["dflash-tui: p restarted (1/3)", "dflash-tui: p recovery gave up"], mine
    body = mine[1]["message"]
    assert ("gave up after 1/3 restarts: the same failure came back with no progress: ValueError: shape mismatch"
            in body), body
    assert f"run {crashed[1]}" in body
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
    rec = json.loads(res.stdout)["recovery"]
    assert rec["state"] == "gave_up" and rec["reason"].startswith("the same failure came back"), rec
    text = cli(tmp_path, "--config", str(cfg), "--check").stdout
    assert "gave up: the same failure came back with no progress" in text, text


def outbox(tmp_path: Path) -> list[tuple[str, bool]]:
    """(title, sent) of each notice in the store's outbox, oldest first (none before the watcher
    made its store)."""
    if not (tmp_path / "watch.sqlite3").exists():
        return []
    db = sqlite3.connect(f"file:{tmp_path / 'watch.sqlite3'}?mode=ro", uri=True)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'outbox'").fetchone():
            return []
        return [(t, sent is not None) for t, sent in db.execute("SELECT title, sent FROM outbox ORDER BY id")]
    finally:
        db.close()


def test_a_notice_left_by_a_watcher_killed_before_sending_it_is_sent_once_by_the_next(tmp_path, http):
    before = len(http.requests)
    cfg = write_config(tmp_path, http.port, [PY, str(PROGRAMS / "crash_after_steps.py"), "3"], backoff_s=1)
    # The test hook: the watcher stands still right after committing `launched` with its notice.
    a = subprocess.Popen([PY, "-m", "dflash_tui", "--config", str(cfg), "--watch"],
                         env={**env_for(tmp_path), PAUSE_ENV: "60"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        wait_until(lambda: outbox(tmp_path), 40, lambda: (actions(tmp_path), states(tmp_path)))
        a.send_signal(signal.SIGKILL)
        _, a_err = a.communicate(timeout=10)
    finally:
        a.kill()
    assert [x[0] for x in actions(tmp_path)] == ["planned", "launching", "launched"], a_err
    assert outbox(tmp_path) == [("dflash-tui: p restarted (1/3)", False)]
    assert http.requests[before:] == []   # killed before the send: nothing went out

    b = start_watcher(tmp_path, cfg)
    try:
        wait_until(lambda: len(outbox(tmp_path)) == 2 and all(sent for _, sent in outbox(tmp_path)), 40,
                   lambda: (outbox(tmp_path), actions(tmp_path), states(tmp_path)))
        time.sleep(1.5)   # past the hold: anything else due would have gone out by now
    finally:
        b.send_signal(signal.SIGTERM)
        _, b_err = b.communicate(timeout=15)
    assert [x[0] for x in actions(tmp_path)] == ["planned", "launching", "launched", "gave_up"], b_err
    mine = [json.loads(r.body)["title"] for r in http.requests[before:]]
    assert mine == ["dflash-tui: p restarted (1/3)", "dflash-tui: p recovery gave up"], mine
    assert "sending the notice a watcher before this one did not" in b_err
