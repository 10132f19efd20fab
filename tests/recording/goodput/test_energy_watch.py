"""The run's energy and cost under a real watcher: a watcher started before the launch (it
reads the launch's counter readings again when a new run appears), a real `--launch` whose
preflight reads the NVML stand-in's counters, a real program that crashes; the notification
and `--timeline` carry what the run drew and cost."""

from __future__ import annotations

import json
import signal
import time

import pytest

from dflash_tui.recording.store.store import ChangeStore
from tests.recording.test_daemon import PROGRAMS, PY, start_watcher
from tests.support.receivers import HttpReceiver
from tests.test_cli_gpu_check import FAKE, cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def http():
    r = HttpReceiver()
    yield r
    r.close()


def test_the_crash_notification_and_the_timeline_say_what_the_run_drew_and_cost(tmp_path, http, monkeypatch):
    for k, v in FAKE.items():          # the watcher's NVML: the stand-in, 2 idle GPUs
        monkeypatch.setenv(k, v)
    store = tmp_path / "watch.sqlite3"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[profile.e]\nrun_dir = "{tmp_path / "e"}"\n'
                   f'command = ["{PY}", "{PROGRAMS / "crash_after_steps.py"}", "20"]\n'
                   'stall_after_s = 5\nstop_grace_s = 2\nmin_free_gb = 0\ncost_per_gpu_hour = 3.6\n'
                   f'[watch]\ninterval_s = 0.3\nstore = "{store}"\n'
                   f'[notify]\nhold_s = 1\nurls = ["json://127.0.0.1:{http.port}/hook"]\n')
    w = start_watcher(tmp_path, cfg)
    try:
        deadline = time.monotonic() + 30
        while not store.exists() or not ChangeStore(store, readonly=True).changes("e"):
            assert time.monotonic() < deadline and w.poll() is None
            time.sleep(0.1)
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", env=FAKE)
        assert json.loads(res.stdout)["run_id"], res.stdout + res.stderr
        deadline = time.monotonic() + 40
        while not (crashed := [json.loads(r.body) for r in http.requests
                               if json.loads(r.body)["title"] == "dflash-tui: e CRASHED"]):
            assert time.monotonic() < deadline and w.poll() is None, [r.body for r in http.requests]
            time.sleep(0.1)
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=15)
    body = crashed[0]["message"]
    # No process of the run on a GPU: the host's 2 GPUs are its, each idling at 72 W since the launch.
    line = next((l for l in body.splitlines() if l.startswith("this run: ")), None)
    assert line is not None and " kWh, cost " in line and "so far" in line, body + err
    js = json.loads(cli(tmp_path, "--config", str(cfg), "--timeline", "--json").stdout)
    (run_id, kwh), = js["energy"]["runs"].items()
    assert 0 < kwh < 2 * 72 * 60 / 3.6e6 and js["energy"]["kwh"] == pytest.approx(kwh), js["energy"]
    assert js["cost"]["per_hour"] == pytest.approx(7.2) and js["cost"]["since"] == "first_launch", js["cost"]
    text = cli(tmp_path, "--config", str(cfg), "--timeline").stdout
    assert "kWh over 1 run" in text and "7.20 an hour" in text, text
