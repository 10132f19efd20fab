"""Checkpoints are atomic: kill -9 at any moment of a save leaves only complete checkpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from dflash_train.checkpoint import CheckpointError, CheckpointStore


def test_save_load_keep_last(tmp_path):
    store = CheckpointStore(str(tmp_path), keep=2)
    for step in (10, 20, 30):
        store.save(step, {"w": torch.full((3,), float(step)), "step": step}, {"note": "x"})
    assert [c.step for c in store.list()] == [20, 30]
    info, state = store.load_latest()
    assert info.step == 30 and torch.equal(state["w"], torch.full((3,), 30.0))


def test_the_checkpoint_a_rollback_names_is_loaded_not_the_newest(tmp_path):
    store = CheckpointStore(str(tmp_path), keep=3)
    chosen = store.save(10, {"w": torch.full((2,), 10.0)})
    store.save(20, {"w": torch.full((2,), float("nan"))})   # the diverged run's weights
    info, state = store.load_at(chosen.path)
    assert info.step == 10 and torch.equal(state["w"], torch.full((2,), 10.0))
    assert store.load_at(os.path.join(chosen.path, "state.pt"))[0].step == 10
    with pytest.raises(CheckpointError, match="is no complete checkpoint under .*; unset it"):
        store.load_at(str(tmp_path / "checkpoints" / "step-00000015"))


def test_corrupt_newest_is_skipped_with_a_message(tmp_path):
    store = CheckpointStore(str(tmp_path), keep=3)
    store.save(1, {"a": torch.ones(2)})
    newest = store.save(2, {"a": torch.zeros(2)})
    with open(os.path.join(newest.path, "state.pt"), "wb") as fh:
        fh.write(b"not a checkpoint")
    warnings = []
    info, state = store.load_latest(warn=warnings.append)
    assert info.step == 1 and torch.equal(state["a"], torch.ones(2))
    assert "step 2" in warnings[0] and "delete it" in warnings[0]
    with pytest.raises(CheckpointError, match="cannot be read"):
        store.load(newest)


@pytest.mark.slow
def test_kill_9_during_saves_never_leaves_a_torn_checkpoint(tmp_path):
    """A child saves 1 MB checkpoints in a loop; we SIGKILL it at several moments."""
    script = textwrap.dedent(f"""
        import sys, torch
        from dflash_train.checkpoint import CheckpointStore
        store = CheckpointStore({str(tmp_path)!r}, keep=2)
        step = 0
        print("ready", flush=True)
        while True:
            step += 1
            store.save(step, {{"w": torch.full((256, 1024), float(step)), "step": step}})
    """)
    for delay in (0.3, 0.55):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        store = CheckpointStore(str(tmp_path), keep=2)
        loaded = store.load_latest()
        assert loaded is not None
        info, state = loaded
        assert state["step"] == info.step
        assert torch.equal(state["w"], torch.full((256, 1024), float(info.step)))
        # every listed checkpoint is complete, and no temp dir survives the next load
        assert all(os.path.isfile(os.path.join(c.path, "state.pt")) for c in store.list())
        assert not [n for n in os.listdir(store.root) if n.startswith(".tmp-")]


def test_retention_is_per_run_and_the_newest_is_the_one_saved_last(tmp_path):
    store = CheckpointStore(str(tmp_path), keep=3)
    for step in (100, 110, 120):
        store.save(step, {"step": step}, {"run_id": "old", "line": "old"})
    # A run from scratch in the same run dir: its checkpoints stay, however low their steps.
    for step in (10, 20, 30, 40):
        info = store.save(step, {"step": step}, {"run_id": "new", "line": "new"})
        assert os.path.isdir(info.path), f"step {step} pruned right after its save"
    assert [(c.step, c.run_id) for c in store.list()] == [
        (20, "new"), (30, "new"), (40, "new"), (100, "old"), (110, "old"), (120, "old")]
    info, state = store.load_latest()
    assert (info.step, info.run_id, state["step"]) == (40, "new", 40)
    # A resumed run continues the line of the checkpoint it loaded: it prunes that line only.
    store.save(50, {"step": 50}, {"run_id": "resumed", "line": "new"})
    assert [c.step for c in store.list() if c.line == "new"] == [30, 40, 50]
    assert [c.step for c in store.list() if c.line == "old"] == [100, 110, 120]


def _train(run_dir, run_id, *args):
    fast = ["--compile", "off", "--eval-every", "0", "--log-every", "2", "--batch-size", "2"]
    proc = subprocess.run([sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), *args, *fast],
                          env={**os.environ, "DFLASH_RUN_ID": run_id, "PYTHONUNBUFFERED": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


async def test_a_relaunch_from_scratch_keeps_its_checkpoints_and_a_resume_names_their_run(tmp_path):
    """The real trainer on CPU: a run reaches step 15, then a run from scratch in the same run
    dir saves steps 2, 4, 6 (each still there after its "saved"), the resume offer names step 6 of
    that run, and --resume continues it and prunes that run's line only."""
    from dflash_tui.remote.agent import AgentOps
    from dflash_tui.remote.local import LocalTarget
    from dflash_tui.run.history import newest_checkpoint
    from dflash_tui.contract.rundir import CHECKPOINTS_DIR, TRAIN_LOG

    run_dir = tmp_path / "run"
    ckpts = run_dir / CHECKPOINTS_DIR
    _train(run_dir, "run-a", "--steps", "15", "--checkpoint-every", "5")
    _train(run_dir, "run-b", "--steps", "6", "--checkpoint-every", "2")
    log = (run_dir / TRAIN_LOG).read_text()
    for step in (2, 4, 6):
        assert f"checkpoint: step {step} saved" in log and (ckpts / f"step-{step:08d}").is_dir(), sorted(os.listdir(ckpts))
    assert sorted(os.listdir(ckpts)) == [f"step-{s:08d}" for s in (2, 4, 5, 6, 10, 15)]

    agent = await AgentOps.start(LocalTarget())
    try:
        ref = await newest_checkpoint(agent, str(run_dir))
    finally:
        await agent.close()
    assert (ref.step, ref.run_id) == (6, "run-b") and ref.words() == "step 6 (step-00000006) of run run-b", ref

    _train(run_dir, "run-c", "--steps", "8", "--checkpoint-every", "2", "--resume")
    assert "resume: loaded checkpoint at step 6 of run run-b from" in (run_dir / TRAIN_LOG).read_text()
    assert sorted(os.listdir(ckpts)) == [f"step-{s:08d}" for s in (4, 5, 6, 8, 10, 15)]
