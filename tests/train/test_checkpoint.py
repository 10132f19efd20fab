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
