"""The watcher's recovery of the bundled trainer, with real processes and real time: the trainer
SIGKILLed mid-run (right after its first checkpoint) is relaunched by the policy with --resume
and, at the end, its weights and optimizer state are bit-identical to an uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dflash_tui.contract import rundir
from dflash_tui.recording.goodput.goodput import goodput
from dflash_tui.recording.store.store import ChangeStore
from dflash_tui.verdicts import Verdict
from tests.recording.test_daemon import start_watcher
from tests.recording.recovery.test_recovery import actions, states, wait_until
from tests.test_cli_modes import cli, toml_str

pytestmark = pytest.mark.timeout(180)

# A tiny step takes ~40 ms: the kill, once the watcher has seen the run RUNNING (goodput needs
# its RUNNING time), must land well before STEPS; every checkpoint is kept so the one compared is
# still there when it is read.
STEPS, EVERY = 400, 4
TRAIN = ["--target-devices", "cpu", "--drafter-devices", "cpu", "--preset", "tiny", "--compile", "off",
         "--eval-every", "0", "--log-every", "4", "--batch-size", "2", "--checkpoint-every", str(EVERY),
         "--keep-checkpoints", "1000"]


def write_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.toml"
    args = ", ".join(toml_str(a) for a in [*TRAIN, "--steps", "100000"])
    cfg.write_text(
        f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\npython = {toml_str(sys.executable)}\ntrain_args = [{args}]\n'
        'stall_after_s = 60\nstop_grace_s = 5\nmin_free_gb = 0\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        '[recover]\non = ["KILLED", "CRASHED"]\nmax_restarts = 2\nbackoff_s = 0\n')
    return cfg


def trainer_pids(run_dir: Path) -> list[int]:
    """The trainer's Python processes, from the probe's reports (probe/<pid>.json), still alive."""
    probe = run_dir / rundir.PROBE_DIR
    pids = []
    for name in os.listdir(probe) if probe.is_dir() else []:
        if name.endswith(".json") and name[:-5].isdigit() and os.path.exists(f"/proc/{name[:-5]}"):
            pids.append(int(name[:-5]))
    return pids


def final_state(run_dir: Path) -> dict:
    return torch.load(run_dir / rundir.CHECKPOINTS_DIR / f"step-{STEPS:08d}" / "state.pt", weights_only=True)


def test_the_trainer_sigkilled_mid_run_is_resumed_by_the_policy_bit_for_bit(tmp_path):
    straight = tmp_path / "straight"
    proc = subprocess.Popen([sys.executable, "-m", "dflash_train", "--run-dir", str(straight), *TRAIN,
                             "--steps", str(STEPS)], env={**os.environ, "DFLASH_RUN_ID": "straight"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    cfg = write_config(tmp_path)
    w = start_watcher(tmp_path, cfg)
    run_dir = tmp_path / "p"
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json")
        first = json.loads(res.stdout)["run_id"]
        ckpt = run_dir / rundir.CHECKPOINTS_DIR / f"step-{EVERY:08d}"
        wait_until(lambda: ckpt.is_dir() and trainer_pids(run_dir) and (Verdict.RUNNING, first) in states(tmp_path),
                   90, lambda: (sorted(os.listdir(run_dir)), states(tmp_path)))
        for pid in trainer_pids(run_dir):
            os.kill(pid, signal.SIGKILL)
        # The profile asks for more steps than the straight run (the schedule is constant after
        # its warm-up): the relaunch is compared at the checkpoint the straight run wrote last.
        final = run_dir / rundir.CHECKPOINTS_DIR / f"step-{STEPS:08d}"
        wait_until(lambda: final.is_dir(), 120, lambda: (states(tmp_path), actions(tmp_path)))
        resumed = final_state(run_dir)
        acts = actions(tmp_path)         # before the clean-up stop, which disarms the recovery
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=120)
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    assert proc.wait(120) == 0, proc.stderr.read()[-2000:]
    assert [a[0] for a in actions(tmp_path)[len(acts):]] in ([], ["cancelled"]), (actions(tmp_path), err)
    assert [(a[0], a[1], a[2]) for a in acts][:1] == [("planned", first, 1)], acts
    assert [a[0] for a in acts] == ["planned", "launching", "launched"], (acts, err)
    assert [s for s, r in states(tmp_path) if r == first][-1] in ("KILLED", "CRASHED"), states(tmp_path)
    log = (run_dir / rundir.TRAIN_LOG).read_text()
    assert "resume: loaded checkpoint at step" in log, log[-2000:]

    a, b = final_state(straight), resumed
    assert a["step"] == b["step"] == STEPS
    assert a["drafter"].keys() == b["drafter"].keys()
    for k in a["drafter"]:
        assert torch.equal(a["drafter"][k], b["drafter"][k]), k
    for (ka, sa), (kb, sb) in zip(a["optimizer"]["state"].items(), b["optimizer"]["state"].items()):
        for name in sa:
            assert torch.equal(torch.as_tensor(sa[name]), torch.as_tensor(sb[name])), (ka, name)
    # Goodput's checkpoint cause: the saves' seconds the trainer's events reported, summed in
    # the evidence of the killed run's last change.
    saves = [json.loads(line) for line in (run_dir / "history" / first / rundir.EVENTS_JSONL).read_text().splitlines()
             if '"checkpoint"' in line]
    reported = sum(e.get("seconds") or 0.0 for e in saves if e.get("action") == "saved")
    with ChangeStore(tmp_path / "watch.sqlite3", readonly=True) as store:
        changes = store.changes("p")
    killed = [c for c in changes if c.run_id == first][-1]
    assert reported > 0 and killed.evidence.checkpoint_s == pytest.approx(reported, abs=0.01), (saves, killed)
    good = goodput(changes, time.time(), 60)
    assert good.runs[first]["checkpoint"] == pytest.approx(reported, abs=0.01), good
