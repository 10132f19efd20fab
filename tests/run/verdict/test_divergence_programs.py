"""DIVERGED from real programs (tests/programs/), judged by a one-shot `--check --json` as a
user runs it: a loop whose loss turns NaN at step 20 and keeps stepping (plain `loss X` lines
and `step N/M loss X`), a TensorBoard curve that jumps to 15x and stays, and a lone spike that
comes back (a warn, never DIVERGED; an eval series that jumps for good never counts)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(180)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable


def _config(tmp_path: Path, command: list[str], extra: str = "") -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[profile.p]\nrun_dir = {json.dumps(str(tmp_path / 'run'))}\n"
                   f"command = {json.dumps(command)}\n"
                   "stall_after_s = 30\nmin_free_gb = 0\nprobe = false\nstop_grace_s = 2\n" + extra)
    return cfg


def _check_until(tmp_path: Path, cfg: Path, done, within_s: float = 40.0) -> tuple[dict, int]:
    """--check --json until `done(report)`; the last report and its exit code."""
    t0 = time.monotonic()
    while True:
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
        d = json.loads(res.stdout)
        if done(d) or time.monotonic() - t0 > within_s:
            return d, res.returncode
        time.sleep(1.0)


def _loss_check(d: dict) -> dict:
    return next(c for c in d["checks"] if c["id"] == "loss")


@pytest.mark.parametrize("form, series", [("plain", "loss"), ("steps", "loss")])
def test_a_loss_that_turns_nan_and_keeps_stepping_is_diverged(tmp_path, monkeypatch, form, series):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    cfg = _config(tmp_path, [PY, str(PROGRAMS / "nan_loss.py"), form, "20", "5000", "0.05"])
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        assert res.returncode in (0, 4), res.stdout + res.stderr
        time.sleep(4)      # well past step 20, still stepping
        d, rc = _check_until(tmp_path, cfg, lambda d: d["verdict"] != "STARTING")
        assert d["verdict"] == "DIVERGED", d["summary"]
        assert rc == 1
        assert d["summary"].startswith(f"{series} NaN since step 20 (train.log), last finite "), d["summary"]
        last = 2.0 / 19 ** 0.5 + 0.15
        assert f"last finite {last:.4g} at step 19" in d["summary"], d["summary"]
        check = _loss_check(d)
        assert check["state"] == "fail" and "NaN since step 20" in check["cause"], check
        if form == "steps":
            assert d["progress"]["total"] == 5000 and d["progress"]["eta_s"] is not None, d["progress"]
        text = cli(tmp_path, "--config", str(cfg), "--check").stdout
        assert "DIVERGED" in text and "NaN since step 20" in text, text
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


def test_a_tensorboard_loss_that_jumps_15x_and_stays_is_diverged(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    cfg = _config(tmp_path, [PY, str(PROGRAMS / "tb_spike.py"), "sustained", "60"])
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        assert res.returncode in (0, 4), res.stdout + res.stderr
        d, rc = _check_until(tmp_path, cfg, lambda d: d["verdict"] == "DIVERGED"
                             or d.get("metrics", {}).get("train/loss", {}).get("step", 0) > 90, within_s=60)
        assert d["verdict"] == "DIVERGED", (d["summary"], d.get("metrics"))
        assert rc == 1
        assert "train/loss spiked to" in d["summary"] and "since step 60" in d["summary"], d["summary"]
        assert "TensorBoard runs/exp1" in d["summary"], d["summary"]
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


def test_a_lone_spike_that_comes_back_is_a_warn_and_eval_never_diverges(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    cfg = _config(tmp_path, [PY, str(PROGRAMS / "tb_spike.py"), "lone", "40"])
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        assert res.returncode in (0, 4), res.stdout + res.stderr
        d, rc = _check_until(tmp_path, cfg, lambda d: d.get("metrics", {}).get("train/loss", {}).get("step", 0) > 80,
                             within_s=60)
        assert d["verdict"] == "RUNNING", d["summary"]
        assert rc == 0
        check = _loss_check(d)
        assert check["state"] == "warn", check
        assert "spike at step 40:" in check["cause"] and "back at 41" in check["cause"], check
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_bundled_trainers_one_shot_check_has_metrics_eta_and_the_loss_check(tmp_path):
    # Its series come from events.jsonl (not the log's metric lines, not a metric file): they
    # were missing from "metrics", and a one-shot look (one sample of the step) had no ETA.
    from dflash_tui.config import LOCAL_TRAIN_ARGS
    from tests.test_cli_modes import write_config

    args = list(LOCAL_TRAIN_ARGS)
    args[args.index("--steps") + 1] = "100000"
    cfg = write_config(tmp_path, local={"run_dir": str(tmp_path / "run"), "python": PY,
                                        "train_args": args, "stall_after_s": 30, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "240", timeout=300)
    assert res.returncode == 0 and json.loads(res.stdout)["verdict"] == "RUNNING", res.stdout + res.stderr
    try:
        time.sleep(3)
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
        d = json.loads(res.stdout)
        assert d["verdict"] == "RUNNING", d["summary"]
        assert d["metrics"]["loss"]["source"] == "events.jsonl", d["metrics"]
        assert {"accuracy", "tokens_per_s"} <= set(d["metrics"]), d["metrics"]
        assert d["progress"]["total"] == 100000 and d["progress"]["eta_s"] > 0, d["progress"]
        check = _loss_check(d)
        assert check["state"] == "ok" and check["cause"].startswith("loss "), check
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=120)
