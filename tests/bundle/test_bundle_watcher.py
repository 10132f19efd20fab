"""The watcher's bundle, taken before its recovery acts: a real watcher process with a [recover]
policy, a real program that hangs once; the bundle holds the hung process's stacks (not its
successor's), the restart's notification names it, `--timeline` lists it."""

from __future__ import annotations

import json
import signal
import tarfile
from pathlib import Path

import pytest

from tests.recording.test_daemon import PY, PROGRAMS, start_watcher
from tests.recording.recovery.test_recovery import actions, states, wait_until, write_config
from tests.support.receivers import HttpReceiver
from tests.support.watch_store import recorded_actions
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(150)


def test_the_bundle_before_a_restart_holds_the_hung_process_not_its_successor(tmp_path):
    http = HttpReceiver()
    ckpt = tmp_path / "own-checkpoint"
    cfg = write_config(tmp_path, http.port, [PY, str(PROGRAMS / "hang_once.py"), str(ckpt), "12", "4", "0.3"],
                       backoff_s=1)
    w = start_watcher(tmp_path, cfg)
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", "--json")
        first = json.loads(res.stdout)["run_id"]
        wait_until(lambda: any(x[0] == "launched" for x in actions(tmp_path)), 90,
                   lambda: (actions(tmp_path), states(tmp_path)))
        wait_until(lambda: any("restarted" in json.loads(r.body)["title"] for r in http.requests), 30,
                   lambda: [r.body for r in http.requests])
    finally:
        w.send_signal(signal.SIGTERM)
        w.communicate(timeout=15)
        http.close()
    (bundle,) = sorted((tmp_path / "bundles" / "p").glob("*.tar.gz"))
    assert first in bundle.name
    with tarfile.open(bundle, "r:gz") as tar:
        verdict = json.loads(tar.extractfile("verdict.json").read())
        raw = json.loads(tar.extractfile("stacks/raw.json").read())
    assert verdict["verdict"] == "STALLED" and verdict["run_id"] == first and verdict["pid_alive"] is True, verdict
    hung = {p["pid"] for p in raw["processes"]}
    old = {int(p.stem) for p in (tmp_path / "p" / "history" / first / "probe").glob("*.json") if p.stem.isdigit()}
    new = {int(p.stem) for p in (tmp_path / "p" / "probe").glob("*.json") if p.stem.isdigit()}
    assert hung and hung <= old and not hung & new, (hung, old, new)
    frames = " ".join(f for p in raw["processes"] for t in p["threads"] for f in t["frames"])
    assert "hang_once.py" in frames, frames
    plan = next(a for a in actions_detail(tmp_path) if a["action"] == "planned")
    assert plan["bundle"] == str(bundle)
    body = next(json.loads(r.body)["message"] for r in http.requests if "restarted" in json.loads(r.body)["title"])
    assert f"evidence bundle (taken before the restart): {bundle}" in body, body
    timeline = cli(tmp_path, "--config", str(cfg), "--timeline")
    assert str(bundle) in timeline.stdout, timeline.stdout
    doc = json.loads(cli(tmp_path, "--config", str(cfg), "--timeline", "--json").stdout)
    assert [b["path"] for b in doc["bundles"]] == [str(bundle)]


def actions_detail(tmp_path: Path) -> list[dict]:
    return [{"action": a.action, **a.detail} for a in recorded_actions(tmp_path / "watch.sqlite3", "p")]
