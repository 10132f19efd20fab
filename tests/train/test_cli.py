"""dflash-train as the dashboard launches it (a real subprocess): bad arguments fail fast with one
line, SIGTERM saves and exits 0, kill -9 + --resume continues bit-for-bit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from dflash_tui.contract import rundir

FAST = ["--compile", "off", "--eval-every", "0", "--log-every", "4", "--batch-size", "2"]


def _cmd(run_dir, *args):
    return [sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), *args]


def _env(run_id="test-run"):
    return {**os.environ, "DFLASH_RUN_ID": run_id, "PYTHONUNBUFFERED": "1"}


def _events(run_dir):
    with open(os.path.join(run_dir, rundir.EVENTS_JSONL)) as fh:
        batch = rundir.parse_events(fh)
    assert batch.skipped == 0
    return batch.events


def _status(run_dir):
    return rundir.parse_status(open(os.path.join(run_dir, rundir.STATUS_JSON)).read())


@pytest.mark.parametrize("args, expect", [
    (["--drafter-devices", "gpu0"], "unknown device 'gpu0'"),
    (["--drafter-devices", "cuda:3"], "no usable CUDA device"),
    (["--data", "/nonexistent/corpus.jsonl"], "--data /nonexistent/corpus.jsonl: no such file"),
    (["--preset", "huge"], "unknown model preset 'huge'"),
    (["--buckets", "8"], "--buckets [8]: each length must be"),
    (["--attention", "flex"], "--attention flex cannot train on cpu"),
    (["--eval-prompt-len", "200", "--eval-new-tokens", "64"], "exceeds max_seq_len 256"),
    (["--drafter-devices", ",".join(["cpu"] * ((os.cpu_count() or 1) + 1))], "cpu threads but this machine has"),
])
def test_bad_arguments_fail_fast_with_one_line(tmp_path, args, expect):
    t0 = time.monotonic()
    proc = subprocess.run(_cmd(tmp_path, *args), env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("dflash-train: error: ") and expect in proc.stderr
    st = _status(tmp_path)
    assert st.phase == "failed" and expect in st.last_error and st.run_id == "test-run"
    kinds = [e["kind"] for e in _events(tmp_path)]
    assert "error" in kinds and kinds[-1] == "exit"
    assert not os.path.exists(tmp_path / rundir.CHECKPOINTS_DIR)   # nothing was built
    assert time.monotonic() - t0 < 60


def _wait_for(predicate, timeout, proc=None, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"trainer exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _status_step(run_dir):
    try:
        return _status(run_dir).step
    except (OSError, rundir.SchemaError):
        return -1


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_0(tmp_path):
    proc = subprocess.Popen(_cmd(tmp_path, "--steps", "100000", "--checkpoint-every", "100000", *FAST),
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _status_step(tmp_path) >= 6, 180, proc, "step 6")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    final = _status(tmp_path)
    assert final.phase == "finished"
    ckpts = sorted(os.listdir(tmp_path / rundir.CHECKPOINTS_DIR))
    assert ckpts == [f"step-{final.step:08d}"] and final.step >= 6
    exits = [e for e in _events(tmp_path) if e["kind"] == "exit"]
    assert exits[-1]["reason"] == "stopped" and exits[-1]["code"] == 0
    log = (tmp_path / rundir.TRAIN_LOG).read_text()
    assert "SIGTERM received" in log and f"checkpoint: step {final.step} saved" in log


def _load_final(run_dir, step):
    return torch.load(os.path.join(run_dir, rundir.CHECKPOINTS_DIR, f"step-{step:08d}", "state.pt"),
                      weights_only=True)


def _step_losses(run_dir):
    return {e["step"]: e["loss"] for e in _events(run_dir) if e["kind"] == "step"}


@pytest.mark.slow
def test_kill_9_then_resume_is_bitwise_identical_to_a_straight_run(tmp_path):
    steps, every = 24, 8
    common = ["--drafter-devices", "cpu,cpu", "--checkpoint-every", str(every), *FAST]
    straight = tmp_path / "straight"
    killed = tmp_path / "killed"

    proc = subprocess.run(_cmd(straight, "--steps", str(steps), *common), env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]

    # the same run, with room to go on, SIGKILLed right after its first checkpoint
    proc = subprocess.Popen(_cmd(killed, "--steps", "100000", *common), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = killed / rundir.CHECKPOINTS_DIR / f"step-{every:08d}"
    try:
        _wait_for(lambda: ckpt.is_dir(), 240, proc, "the first checkpoint")
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    lost = _status_step(killed)
    assert lost < steps   # it really died mid-run

    proc = subprocess.run(_cmd(killed, "--steps", str(steps), "--resume", *common), env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (killed / rundir.TRAIN_LOG).read_text()
    resumed_from = max(int(n[5:]) for n in os.listdir(killed / rundir.CHECKPOINTS_DIR) if n != f"step-{steps:08d}")
    assert f"resume: loaded checkpoint at step" in log

    a, b = _load_final(straight, steps), _load_final(killed, steps)
    assert a["step"] == b["step"] == steps
    for k in a["drafter"]:
        assert torch.equal(a["drafter"][k], b["drafter"][k]), k
    for (ka, sa), (kb, sb) in zip(a["optimizer"]["state"].items(), b["optimizer"]["state"].items()):
        for name in sa:
            assert torch.equal(torch.as_tensor(sa[name]), torch.as_tensor(sb[name])), (ka, name)
    la, lb = _step_losses(straight), _step_losses(killed)
    assert all(la[s] == lb[s] for s in range(every + 1, steps + 1))
    assert resumed_from >= every


def test_a_worker_exception_fails_the_run_cleanly(tmp_path, monkeypatch):
    """In-process (so a fault can be injected into one drafter thread): the run ends with exit 1,
    the traceback in train.log, an error event, phase failed, and the thread's error named."""
    import threading

    import dflash_train.objective as objective
    from dflash_train import cli

    real = objective.drafter_loss
    calls = {"n": 0}

    def faulty(*a, **kw):
        if threading.current_thread().name == "drafter1":
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("injected fault in drafter1")
        return real(*a, **kw)

    monkeypatch.setattr(objective, "drafter_loss", faulty)
    monkeypatch.setenv("DFLASH_RUN_ID", "fault-run")
    rc = cli.main(["--run-dir", str(tmp_path), "--drafter-devices", "cpu,cpu", "--steps", "50", *FAST])
    assert rc == 1
    log = (tmp_path / rundir.TRAIN_LOG).read_text()
    assert "error in thread drafter1: RuntimeError: injected fault in drafter1" in log
    assert "Traceback (most recent call last)" in log
    st = _status(tmp_path)
    assert st.phase == "failed" and "injected fault" in st.last_error
    assert {t.name: t for t in st.threads}["drafter1"].error == "RuntimeError: injected fault in drafter1"
    ev = _events(tmp_path)
    errors = [e for e in ev if e["kind"] == "error"]
    assert errors and errors[-1]["fatal"] and "drafter1" in errors[-1]["message"]
    exit_ev = [e for e in ev if e["kind"] == "exit"][-1]
    assert exit_ev["code"] == 1
    assert st.step < 50


# Run as the process's entry point, with an import hook that notes, at the process's first
# import of torch._dynamo, which thread imports it and how many step events exist by then.
_DYNAMO_WATCH = """
import importlib.abc, json, os, sys, threading
class FirstDynamoImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch._dynamo":
            sys.meta_path.remove(self)
            events = os.path.join(sys.argv[sys.argv.index("--run-dir") + 1], "events.jsonl")
            steps = sum(1 for line in open(events) if json.loads(line)["kind"] == "step")
            with open(os.environ["DYNAMO_WATCH_OUT"], "w") as fh:
                json.dump({"thread": threading.current_thread().name, "step_events": steps}, fh)
        return None
sys.meta_path.insert(0, FirstDynamoImport())
from dflash_train.cli import main
sys.exit(main())
"""


def test_nothing_before_the_first_step_imports_torch_dynamo(tmp_path):
    """Its import is seconds of Python holding the GIL: the first step (fresh, and resumed from a
    checkpoint) must not wait for it nor share the interpreter with it. The step compiler's
    thread, released at the first step's end, is the first to import it. (The target's pre-fit,
    once per machine and cached, is torch.optim's and imports it: done here first.)"""
    from dflash_train.config import ModelConfig
    from dflash_train.model.target import build_target

    build_target(ModelConfig.preset("tiny"), 0, "cpu")
    run_dir = tmp_path / "run"
    base = ["--drafter-devices", "cpu,cpu", "--eval-every", "0", "--batch-size", "2", "--checkpoint-every", "2"]
    for steps, extra in (("2", []), ("4", ["--resume"])):
        out = tmp_path / f"first-dynamo-import{'-resume' if extra else ''}.json"
        proc = subprocess.run([sys.executable, "-c", _DYNAMO_WATCH, "--run-dir", str(run_dir), "--steps", steps,
                               *base, *extra], env={**_env(), "DYNAMO_WATCH_OUT": str(out)},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        first = json.loads(out.read_text())
        before = 2 if extra else 0      # the resumed run appends to the same events.jsonl
        assert first["thread"] == "compiler" and first["step_events"] > before, first
    assert "resume: loaded checkpoint at step 2" in (run_dir / rundir.TRAIN_LOG).read_text()
