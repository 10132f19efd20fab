"""The watcher's recovery of a run on two SSH nodes, end to end: a real `dflash-tui --watch` with
a `[recover]` policy watches the bundled trainer on two nodes (this machine, and the same machine
through the real sshd), on CPU. One node's trainer SIGKILLed after a checkpoint fails the run;
the watcher stops what is left, relaunches every node with --resume from rank 0's newest
checkpoint (never step 0), the run finishes, and one "restarted" notice says from which step.
A hang that names one of the nodes is relaunched on the same nodes, and the notice says so."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.contract.rundir import CHECKPOINTS_DIR, STATUS_JSON, TRAIN_LOG, parse_status, rank_file
from tests.recording.test_daemon import start_watcher, wait_title
from tests.recording.recovery.test_recovery import wait_until
from tests.support.runs import alive
from tests.support.watch_store import recorded_actions, recorded_states
from tests.test_cli_modes import cli
from tests.watch.test_nodes_session import LOCAL, nodes_toml

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(240)]

STEPS, EVERY = 40, 2
TRAIN = ["--target-devices", "cpu", "--drafter-devices", "cpu", "--preset", "tiny", "--steps", str(STEPS),
         "--checkpoint-every", str(EVERY), "--compile", "off", "--eval-every", "0", "--log-every", "1",
         "--batch-size", "2", "--peer-timeout", "10", "--dist-timeout", "60"]


def write_config(sshd, tmp_path: Path, port: int) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        nodes_toml(sshd, tmp_path, *TRAIN, command=None, stop_grace_s=5)
        + f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        f'[notify]\nhold_s = 1\non = []\nurls = ["json://127.0.0.1:{port}/hook"]\n'
        '[recover]\non = ["CRASHED", "KILLED"]\nmax_restarts = 2\nbackoff_s = 0\n')
    return cfg


def actions(tmp_path: Path) -> list:
    """The recovery's actions; not the record of the tests' own clean-up `--stop` of a live run
    (a person's stop disarms the run it ended: `cancelled` with `was` "")."""
    return [a for a in recorded_actions(tmp_path / "watch.sqlite3", "two")
            if not (a.action == "cancelled" and a.detail.get("was") == "")]


def states(tmp_path: Path) -> list[tuple[str, str]]:
    return recorded_states(tmp_path / "watch.sqlite3", "two")


def status(run_dir: Path, rank: int):
    path = run_dir / rank_file(STATUS_JSON, rank)
    return parse_status(path.read_text()) if path.exists() else None


def test_a_killed_node_is_recovered_on_every_node_from_rank_0s_checkpoint(sshd, tmp_path, http):
    before = len(http.requests)
    cfg = write_config(sshd, tmp_path, http.port)
    dirs = [tmp_path / f"run-{LOCAL}", tmp_path / f"run-{sshd.alias}"]
    w = start_watcher(tmp_path, cfg)
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json", timeout=120)
        first = json.loads(res.stdout)["run_ids"]
        ckpts = dirs[0] / CHECKPOINTS_DIR
        wait_until(lambda: ckpts.is_dir() and any(ckpts.iterdir()), 120, lambda: states(tmp_path))
        # Rank 1's trainer (the SSH node's), by the pid its own status file names.
        victim = wait_until(lambda: (st := status(dirs[1], 1)) and st.run_id == first[sshd.alias] and st.pid, 30,
                            lambda: status(dirs[1], 1))
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: any(a.action == "launched" for a in actions(tmp_path)), 90,
                   lambda: (states(tmp_path), [(a.action, a.detail) for a in actions(tmp_path)]))
        wait_until(lambda: states(tmp_path) and states(tmp_path)[-1][0] == "FINISHED", 120,
                   lambda: (states(tmp_path), [status(d, r) for r, d in enumerate(dirs)]))
        time.sleep(1.5)   # past the hold: anything else due would have gone out by now
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=120)
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=30)
    acts = actions(tmp_path)
    assert [(a.action, a.attempt) for a in acts] == [("planned", 1), ("launching", 1), ("launched", 1)], (acts, err)
    was = acts[0].run_id
    assert was in first.values() and {a.run_id for a in acts} == {was}, (acts, first)
    failed = [s for s, r in states(tmp_path) if r == was]
    assert failed[-1] in ("CRASHED", "KILLED"), states(tmp_path)
    launched = acts[-1].detail
    step = launched["from_step"]
    assert launched["resume"] is True and isinstance(step, int) and step >= EVERY and step % EVERY == 0, launched
    second = launched["new_run_id"]
    assert second not in first.values() and [r for s, r in states(tmp_path) if s == "FINISHED"] == [second]
    # What the watcher recorded is the two runs, each from its own states: never the relaunch's
    # in-between (a node already moved to history beside one not yet, or a new rank 0 beside the
    # old rank 1's crash), which would be a failure of a run that never had one.
    recorded = states(tmp_path)
    # The watcher before the launch, and a look while the launch was writing its files (no run id yet).
    while recorded and recorded[0][1] == "" and recorded[0][0] in ("NO RUN", "STARTING"):
        recorded = recorded[1:]
    assert {r for _, r in recorded} == {was, second}, recorded
    seq = [s for s, r in recorded if r == second]
    assert seq[-1] == "FINISHED" and set(seq) <= {"STARTING", "RUNNING", "FINISHED"}, recorded

    # Both ranks ran again, with --resume, continued from that step (rank 1 from rank 0's
    # checkpoint, sent to it), and finished every step.
    for rank, d in enumerate(dirs):
        st = status(d, rank)
        assert st.run_id != first[[LOCAL, sshd.alias][rank]] and st.phase == "finished" and st.step == STEPS, st
        assert not alive(st.pid)
        log = (d / TRAIN_LOG).read_text()
        assert f"resume: loaded checkpoint at step {step} " in log, log[-2000:]
        assert (", sent by rank 0" in log) == (rank == 1), log[-2000:]
        steps = [int(m) for m in re.findall(r"^.*step (\d+)/\d+ loss", log, re.M)]
        assert steps and min(steps) == step + 1 and max(steps) == STEPS, steps

    restarted = [json.loads(r.body) for r in http.requests[before:]
                 if json.loads(r.body)["title"].startswith("dflash-tui: two restarted")]
    assert [m["title"] for m in restarted] == ["dflash-tui: two restarted (1/2)"], http.requests[before:]
    body = restarted[0]["message"]
    assert f"run {second} resumed from step {step} (was run {was})" in body, body
    assert f"after {failed[-1]}" in body, body


ODD_RANK_PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "ranks_one_odd.py"


def test_a_hang_that_names_one_of_the_profiles_own_nodes_is_said_and_never_excluded(sshd, tmp_path, http):
    """SSH `nodes` are the profile's own list: no launch of theirs can avoid one. Two gloo ranks,
    one per node: after 2 steps rank 1 (the SSH node) waits on a queue while rank 0 waits for it
    in all_reduce, STALLED, and the hang names rank 1's node. The recovery plans, records and
    announces no exclusion: its notice says which node looked unhealthy and that the nodes are
    the profile's own; the relaunch (DFLASH_RESTART=1: a few steps of sh) runs on both nodes."""
    before = len(http.requests)
    again = 'i=1; while [ $i -le 4 ]; do echo "step $i/4"; i=$((i+1)); sleep 0.5; done'
    command = ["sh", "-c", f'if [ "${{DFLASH_RESTART:-0}}" -gt 0 ]; then {again}; '
               f'else OMP_NUM_THREADS=1 exec {sys.executable} {ODD_RANK_PROGRAM} 2 0.3 1; fi']
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        nodes_toml(sshd, tmp_path, command=command, stall_after_s=10, stop_grace_s=2)
        + f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        f'[notify]\nhold_s = 1\non = []\nurls = ["json://127.0.0.1:{http.port}/hook"]\n'
        '[recover]\non = ["STALLED"]\nmax_restarts = 2\nbackoff_s = 1\n')
    w = start_watcher(tmp_path, cfg)
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json", timeout=120)
        first = set(json.loads(res.stdout)["run_ids"].values())
        wait_until(lambda: any(a.action == "launched" for a in actions(tmp_path)), 150,
                   lambda: (states(tmp_path), [(a.action, a.detail) for a in actions(tmp_path)]))
        wait_title(http, "dflash-tui: two restarted (1/2)", 30)
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=120)
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=30)
    acts = actions(tmp_path)
    assert [a.action for a in acts] == ["planned", "stopped", "launching", "launched"], (acts, err)
    assert acts[0].run_id in first and acts[0].failure.state == "STALLED", acts
    why = "rank 1 was not in the collective the others waited in"
    # Named, and kept for the notice; never an exclusion the nodes' launch could not carry out.
    assert all(a.detail.get("unhealthy") == [sshd.alias] for a in acts), acts
    assert acts[-1].detail["unhealthy_why"] == why, acts
    assert not any("exclude" in a.detail for a in acts), acts
    (message,) = [json.loads(r.body)["message"] for r in http.requests[before:]
                  if json.loads(r.body)["title"] == "dflash-tui: two restarted (1/2)"]
    assert (f"node {sshd.alias} looked unhealthy ({why}); not excluded: the profile's nodes are its own list"
            in message), message
    assert "excluding" not in message, message
