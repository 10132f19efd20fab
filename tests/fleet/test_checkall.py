"""`dflash-tui --check --all [--json]` as a user runs it: real processes, real runs, a host that
refuses; one line (or one JSON object, as `--check --json` prints it) per profile, and the exit
code the worst by the precedence in README: 2 > 1 > 3 > 4 > 0."""

from __future__ import annotations

import json
import time

import pytest

from tests.test_cli_modes import cli, local, write_config

pytestmark = pytest.mark.timeout(180)

DOWN = {"host": "127.0.0.1", "port": 1, "run_dir": "/nowhere"}


def test_check_all_text_json_and_the_worst_exit_code(tmp_path):
    beat, crash = local(tmp_path / "beat", "beat"), local(tmp_path / "crash", "crash")
    cfg = write_config(tmp_path, beat=beat, crash=crash, idle=local(tmp_path / "idle", "beat"), down=DOWN)
    for name in ("beat", "crash"):
        r = cli(tmp_path, "--config", str(cfg), "--profile", name, "--launch", "--wait", "15")
        assert r.returncode in (0, 1), (r.stdout, r.stderr)
    try:
        t0 = time.monotonic()
        r = cli(tmp_path, "--config", str(cfg), "--check", "--all")
        took = time.monotonic() - t0
        assert r.returncode == 1, (r.stdout, r.stderr)        # CRASHED beats UNREACHABLE and NO RUN
        lines = r.stdout.splitlines()
        assert [l.split()[0] for l in lines] == ["beat", "crash", "idle", "down"], r.stdout
        assert lines[0].split()[1] == "RUNNING" and "CRASHED" in lines[1] and "NO RUN" in lines[2]
        assert "UNREACHABLE" in lines[3] and "connection refused" in lines[3]
        assert took < 30, took

        r = cli(tmp_path, "--config", str(cfg), "--check", "--all", "--json")
        assert r.returncode == 1
        objs = json.loads(r.stdout)
        assert [o["profile"] for o in objs] == ["beat", "crash", "idle", "down"]
        assert [o["exit_code"] for o in objs] == [0, 1, 4, 3]
        assert [o["verdict"] for o in objs] == ["RUNNING", "CRASHED", "NO RUN", None]
        # Each object is what `--check --json` prints for that profile.
        single = json.loads(cli(tmp_path, "--config", str(cfg), "--profile", "crash", "--check", "--json").stdout)
        assert set(objs[1]) == set(single) and objs[1]["verdict"] == single["verdict"]
        assert objs[1]["summary"] == single["summary"] and objs[1]["run_id"] == single["run_id"]
        assert "connection refused" in objs[3]["error"]

        for profiles, code in (({"beat": beat, "down": DOWN}, 3), ({"beat": beat, "idle": local(tmp_path / "i2", "beat")}, 4),
                               ({"beat": beat}, 0)):
            sub = tmp_path / f"c{code}"
            sub.mkdir()
            r = cli(tmp_path, "--config", str(write_config(sub, **profiles)), "--check", "--all", "--json")
            assert r.returncode == code, (profiles.keys(), r.stdout, r.stderr)

        r = cli(tmp_path, "--config", str(cfg), "--all")
        assert r.returncode == 2 and "--all goes with --check" in r.stderr and "Traceback" not in r.stderr
    finally:
        cli(tmp_path, "--config", str(cfg), "--profile", "beat", "--stop")
