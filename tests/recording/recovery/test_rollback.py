"""A diverged run rolled back end to end, with a real program, a real watcher process and real
time: its loss turns NaN at step 38 while it keeps stepping; the watcher stops it and relaunches
it from the newest complete checkpoint at or before the last finite step (checkpoint-25: the
newer checkpoint-30 is torn, its weight file cut; checkpoint-40 holds the diverged weights),
handing the program DFLASH_RESUME_FROM / DFLASH_RESUME_STEP / DFLASH_DIVERGED_AT and
`{resume_from}` in its argv; the same divergence at the same step after the rollback is given up
on, with the reason. A crash resumes from the newest complete checkpoint (not the torn one); a
divergence with no complete checkpoint before it is relaunched from scratch."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.recording.test_daemon import PY, PROGRAMS, start_watcher
from tests.recording.recovery.test_recovery import actions, states, wait_until
from tests.support.watch_store import recorded_actions
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(120)


def write_config(tmp_path: Path, port: int, mode: str, shape: tuple[str, ...] = ("45", "38", "5", "30")) -> Path:
    command = [PY, str(PROGRAMS / "nan_until_resumed.py"), *shape, mode, "from={resume_from}"]
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\ncommand = {json.dumps(command)}\n'
        'stall_after_s = 30\nstop_grace_s = 2\nmin_free_gb = 0\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        f'[notify]\nhold_s = 1\non = []\nurls = ["json://127.0.0.1:{port}/hook"]\n'
        '[recover]\non = ["CRASHED", "STALLED", "DIVERGED"]\nmax_restarts = 3\nbackoff_s = 1\n')
    return cfg


def run_until(tmp_path: Path, cfg: Path, done) -> str:
    w = start_watcher(tmp_path, cfg)
    try:
        cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        wait_until(lambda: done(), 60, lambda: (actions(tmp_path), states(tmp_path)))
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    return err


def test_a_nan_is_rolled_back_to_the_newest_complete_checkpoint_before_it_and_finishes(tmp_path, http):
    before = len(http.requests)
    cfg = write_config(tmp_path, http.port, "once")
    err = run_until(tmp_path, cfg, lambda: states(tmp_path) and states(tmp_path)[-1][0] == "FINISHED")
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    assert [a.action for a in acts] == ["planned", "stopped", "launching", "launched"], err
    first = acts[0].run_id
    assert ("DIVERGED", first) in states(tmp_path)
    ckpt = str(tmp_path / "p" / "checkpoint-25")
    point = acts[-1].detail["resume_from"]
    assert (point["path"], point["step"], point["format"], point["diverged_at"], point["what"]) == \
        (ckpt, 25, "hf", 38, "loss NaN"), point
    log = (tmp_path / "p" / "train.log").read_text()
    assert f"resumed from {ckpt} at step 25, diverged at 38" in log and f"'from={ckpt}'" in log, log
    assert "step 26/45" in log and "finished 45 steps" in log and "loss nan" not in log, log
    mine = [json.loads(r.body) for r in http.requests[before:]]
    restarted = [m for m in mine if m["title"] == "dflash-tui: p restarted (1/3)"]
    assert restarted, mine
    body = restarted[0]["message"]
    assert "loss NaN at step 38; rolled back to checkpoint-25 (complete, " in body and "lost 13 steps" in body, body
    assert "restart 1/3 after DIVERGED: loss NaN since step 38" in body, body
    assert " rollback" in body.split("lost ")[-1], body      # goodput's badput: the DIVERGED band so far


def test_a_crash_resumes_from_the_newest_complete_checkpoint_not_a_torn_one(tmp_path, http):
    before = len(http.requests)
    cfg = write_config(tmp_path, http.port, "crash")
    err = run_until(tmp_path, cfg, lambda: states(tmp_path) and states(tmp_path)[-1][0] == "FINISHED")
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    assert [a.action for a in acts] == ["planned", "launching", "launched"], err
    assert ("CRASHED", acts[0].run_id) in states(tmp_path)
    ckpt = str(tmp_path / "p" / "checkpoint-25")      # checkpoint-30 is newer, and torn
    point = acts[-1].detail["resume_from"]
    assert (point["path"], point["step"], point["format"]) == (ckpt, 25, "hf") and "diverged_at" not in point, point
    log = (tmp_path / "p" / "train.log").read_text()
    assert f"resumed from {ckpt} at step 25, diverged at None" in log and "finished 45 steps" in log, log
    mine = [json.loads(r.body) for r in http.requests[before:]]
    body = next(m["message"] for m in mine if m["title"] == "dflash-tui: p restarted (1/3)")
    assert body.startswith("resumed from checkpoint-25 (complete, "), body


def test_the_same_divergence_at_the_same_step_after_a_rollback_is_given_up_on(tmp_path, http):
    before = len(http.requests)
    cfg = write_config(tmp_path, http.port, "always")
    err = run_until(tmp_path, cfg, lambda: any(x[0] == "gave_up" for x in actions(tmp_path)))
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    assert [a.action for a in acts] == ["planned", "stopped", "launching", "launched", "planned", "stopped",
                                        "launching", "launched", "gave_up"] or \
        [a.action for a in acts][:4] + [a.action for a in acts][-1:] == \
        ["planned", "stopped", "launching", "launched", "gave_up"], err
    assert acts[3].detail["resume_from"]["step"] == 25
    reason = acts[-1].detail["reason"]
    assert reason.startswith("the same divergence came back at the same step after the rollback: loss NaN since step 38"), \
        reason
    mine = [json.loads(r.body)["title"] for r in http.requests[before:]]
    assert mine[-1] == "dflash-tui: p recovery gave up", mine


def test_a_divergence_with_no_complete_checkpoint_before_it_starts_from_scratch_not_from_its_weights(tmp_path, http):
    # NaN at step 8; its only checkpoints (checkpoint-10, ...) are saved after it, diverged.
    before = len(http.requests)
    cfg = write_config(tmp_path, http.port, "once", ("45", "8", "10", "0"))
    err = run_until(tmp_path, cfg, lambda: any(x[0] == "gave_up" for x in actions(tmp_path)))
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    assert [a.action for a in acts][:4] == ["planned", "stopped", "launching", "launched"], err
    why = "no complete checkpoint at or before step 7, the last good one"
    assert all(a.detail.get("from_scratch") == why and "resume_from" not in a.detail for a in acts[:4]), acts
    log = (tmp_path / "p" / "train.log").read_text()
    assert "resumed from" not in log and "argv: ['45', '8', '10', '0', 'once', 'from=']" in log, log
    mine = [json.loads(r.body) for r in http.requests[before:]]
    body = next(m["message"] for m in mine if m["title"] == "dflash-tui: p restarted (1/3)")
    assert body.startswith(f"relaunched from scratch: {why}\n"), body
    assert acts[-1].detail["reason"].startswith("the same divergence came back at the same step after the rollback")


def test_a_rollback_finds_the_good_checkpoint_behind_more_diverged_ones_than_a_look_judges(tmp_path, http):
    # Saved at every step, NaN at step 38: the run saved 100 more (diverged) before its NaN was
    # read, all found at once; a look judges the newest JUDGE_PER_LOOK files first, so the
    # recovery must judge the candidates at or before the last good step first, or it finds
    # none and relaunches from scratch into the same NaN.
    command = [PY, str(PROGRAMS / "nan_saves_past_it.py"), "200", "38", "100"]
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\ncommand = {json.dumps(command)}\n'
        'stall_after_s = 30\nstop_grace_s = 2\nmin_free_gb = 0\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        f'[notify]\nhold_s = 1\non = []\nurls = ["json://127.0.0.1:{http.port}/hook"]\n'
        '[recover]\non = ["DIVERGED"]\nmax_restarts = 2\nbackoff_s = 0\n')
    err = run_until(tmp_path, cfg, lambda: states(tmp_path) and states(tmp_path)[-1][0] == "FINISHED")
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    said = [(a.action, a.detail.get("reason") or a.detail.get("from_scratch")) for a in acts]
    assert [a.action for a in acts] == ["planned", "stopped", "launching", "launched"], f"{said}\n{err[-2000:]}"
    ckpt = str(tmp_path / "p" / "out" / "checkpoint-37")
    point = acts[0].detail["resume_from"]
    assert (point["path"], point["step"], point["diverged_at"]) == (ckpt, 37, 38), point
    log = (tmp_path / "p" / "train.log").read_text()
    assert f"resumed from {ckpt} at step 37, diverged at 38" in log and "finished 200 steps" in log, log[-2000:]
