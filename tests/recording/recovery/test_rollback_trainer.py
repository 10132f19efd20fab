"""The bundled trainer rolled back end to end, with a real watcher process and real time: the
batch of step NAN_AT gives a NaN loss (--inject-nan-at); the trainer logs the step, skips its
update and goes on stepping, so the watcher reads DIVERGED at that step, stops it and, with
`[recover] on = ["DIVERGED"]`, relaunches it with --resume from the newest complete checkpoint
at or before the last finite step; the relaunch passes over the diverged window's batches (the
poisoned one among them, never met again) and finishes. The notification names the checkpoint
and the steps lost."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest

from dflash_tui.contract import rundir
from dflash_tui.verdicts import Verdict
from tests.recording.test_daemon import start_watcher
from tests.recording.recovery.test_recovery import actions, states, wait_until
from tests.support.watch_store import recorded_actions
from tests.test_cli_modes import cli, toml_str

pytestmark = pytest.mark.timeout(120)

# A tiny CPU step takes ~15-40 ms: NAN_AT comes about a second after the first step, before the
# watcher's second checkpoint search (every 5 s until it knows the save interval:
# run/evidence/checkpoints.py), so the checkpoint the relaunch resumes from is one the recovery
# searched for when it planned. The steps after NAN_AT last seconds, many of the watcher's looks,
# so it stops the run long before it would finish.
STEPS, EVERY, NAN_AT = 900, 10, 40
TRAIN = ["--target-devices", "cpu", "--drafter-devices", "cpu", "--preset", "tiny", "--compile", "off",
         "--eval-every", "0", "--log-every", "5", "--batch-size", "2", "--checkpoint-every", str(EVERY),
         "--keep-checkpoints", "1000", "--steps", str(STEPS), "--inject-nan-at", str(NAN_AT)]


def write_config(tmp_path: Path, port: int) -> Path:
    cfg = tmp_path / "config.toml"
    args = ", ".join(toml_str(a) for a in TRAIN)
    cfg.write_text(
        f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\npython = {toml_str(sys.executable)}\ntrain_args = [{args}]\n'
        'stall_after_s = 60\nstop_grace_s = 5\nmin_free_gb = 0\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        f'[notify]\nhold_s = 1\non = []\nurls = ["json://127.0.0.1:{port}/hook"]\n'
        '[recover]\non = ["DIVERGED"]\nmax_restarts = 2\nbackoff_s = 0\n')
    return cfg


def test_the_trainer_with_a_nan_is_diverged_rolled_back_past_the_window_and_finishes(tmp_path, http):
    before = len(http.requests)
    cfg = write_config(tmp_path, http.port)
    run_dir = tmp_path / "p"
    w = start_watcher(tmp_path, cfg)
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json")
        first = json.loads(res.stdout)["run_id"]
        wait_until(lambda: states(tmp_path) and states(tmp_path)[-1][0] == Verdict.FINISHED.value, 90,
                   lambda: (actions(tmp_path), states(tmp_path)))
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    acts = recorded_actions(tmp_path / "watch.sqlite3", "p")
    # On a failure, what each action decided, in words short enough to survive the assertion's cut.
    said = [(a.action, a.detail.get("reason") or a.detail.get("from_scratch")
             or (a.detail.get("resume_from") or {}).get("step")) for a in acts]
    assert [a.action for a in acts] == ["planned", "stopped", "launching", "launched"], f"{said}\n{err[-3000:]}"
    assert (Verdict.DIVERGED.value, first) in states(tmp_path), states(tmp_path)
    # The last good step is the last finite value the watcher judged before the NaN (a look
    # reads the lines since the last one at once); the checkpoint is the newest at or before it.
    failure = acts[0].detail["failure"]
    good = int(re.search(r"last finite [-\d.e]+ at step (\d+)", failure["where"]).group(1))
    assert 0 < good < NAN_AT and failure["where"].startswith(f"loss NaN since step {NAN_AT} (train.log)"), failure
    newest_before = good // EVERY * EVERY
    ckpt = str(run_dir / rundir.CHECKPOINTS_DIR / f"step-{newest_before:08d}")
    point = acts[-1].detail["resume_from"]
    assert (point["path"], point["step"], point["diverged_at"], point["what"]) == \
        (ckpt, newest_before, NAN_AT, "loss NaN"), (point, failure)

    diverged_log = (run_dir / "history" / first / rundir.TRAIN_LOG).read_text()
    assert f"step {NAN_AT}/{STEPS} loss nan" in diverged_log, diverged_log[-2000:]
    assert f"step {NAN_AT}: loss nan, update skipped" in diverged_log, diverged_log[-2000:]
    log = (run_dir / rundir.TRAIN_LOG).read_text()
    assert f"resume: passing over the batches of steps {newest_before + 1}..{NAN_AT}" in log, log[-3000:]
    assert f"resume: loaded checkpoint at step {newest_before}" in log and f"from {ckpt}" in log, log[-3000:]
    assert f"finished at step {STEPS}" in log and "loss nan" not in log, log[-3000:]

    mine = [json.loads(r.body) for r in http.requests[before:]]
    body = next((m["message"] for m in mine if m["title"] == "dflash-tui: p restarted (1/2)"), None)
    assert body is not None, mine
    lost = re.search(rf"loss NaN at step {NAN_AT}; rolled back to step-{newest_before:08d} \(complete, [^)]*\); "
                     r"lost (\d+) steps", body)
    assert lost and int(lost.group(1)) >= NAN_AT - newest_before, body
