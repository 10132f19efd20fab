"""`dflash-tui --health` as a user runs it: the real probe (2 gloo processes on this CPU), the
real results file in the state dir, a python without torch, a node that cannot be reached."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

DFLASH_TUI = str(Path(sys.executable).parent / "dflash-tui")
LINE = re.compile(r"^here: all_reduce 64 MB over 2 gloo processes: [0-9.]+ GB/s bus, ")


def health(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "config.toml"
    cfg.write_text(config)
    env = {k: v for k, v in os.environ.items() if k != "DFLASH_TUI_DEBUG"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return subprocess.run([DFLASH_TUI, "--config", str(cfg), "--health", *args],
                          capture_output=True, text=True, env=env, timeout=110)


def here(tmp_path: Path, python: str = sys.executable) -> str:
    return f'[profile.here]\nrun_dir = "{tmp_path / "run"}"\npython = "{python}"\n'


def results_file(tmp_path: Path) -> Path:
    return tmp_path / "state" / "dflash-tui" / "health.jsonl"


def test_a_second_run_is_compared_with_the_first(tmp_path):
    first = health(tmp_path, here(tmp_path), "--profile", "here", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    obj = json.loads(first.stdout)
    r = obj["result"]
    assert (r["backend"], r["world_size"], r["bytes"]) == ("gloo", 2, 64 << 20)
    assert r["busbw_gbps"] > 0 and r["seconds"] > 0 and r["devices"] == ["cpu", "cpu"]
    assert obj["earlier_results"] == 0 and obj["ratio"] is None and obj["exit_code"] == 0

    second = health(tmp_path, here(tmp_path), "--profile", "here")
    assert second.returncode == 0, second.stdout + second.stderr
    assert LINE.match(second.stdout), second.stdout
    assert re.search(r"[0-9.]+x this node's median of 1$", second.stdout.strip()), second.stdout
    rows = [json.loads(line) for line in results_file(tmp_path).read_text().splitlines()]
    assert len(rows) == 2 and {row["node"] for row in rows} == {"local"}


def test_a_node_far_below_its_median_exits_1_and_a_damaged_file_is_a_note(tmp_path):
    # Earlier results of this node 1000x faster than a CPU can do, between damaged lines.
    path = results_file(tmp_path)
    path.parent.mkdir(parents=True)
    fast = {"node": "local", "time": 1.0, "backend": "gloo", "world_size": 2, "bytes": 64 << 20,
            "seconds": 1e-4, "algbw_gbps": 1000.0, "busbw_gbps": 1000.0, "devices": ["cpu", "cpu"]}
    path.write_text("\n".join([json.dumps(fast), "{not json", json.dumps(fast), '["a list"]',
                               json.dumps({**fast, "busbw_gbps": "fast"}), json.dumps(fast)]) + "\n")
    res = health(tmp_path, here(tmp_path), "--profile", "here")
    assert res.returncode == 1, res.stdout + res.stderr
    assert LINE.match(res.stdout) and "x this node's median of 3 (below 0.5x" in res.stdout, res.stdout
    assert "note: 3 unreadable line(s)" in res.stdout and "Traceback" not in res.stdout + res.stderr
    assert len(path.read_text().splitlines()) == 4   # the readable three and the new one


def test_a_python_without_torch_and_an_unreachable_node_each_say_so_in_one_line(tmp_path):
    # The venv's python without its site-packages: no torch there.
    no_torch = tmp_path / "python-no-torch"
    no_torch.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    no_torch.chmod(0o755)
    config = (here(tmp_path, str(no_torch)) +
              f'[profile.gone]\nrun_dir = "/tmp/run"\nhost = "127.0.0.1"\nport = 1\n')
    res = health(tmp_path, config, "--all", "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    here_obj, gone = json.loads(res.stdout)
    assert here_obj["exit_code"] == 2 and here_obj["error"].startswith("no torch in ")
    assert here_obj["error"].endswith("the health probe needs the training environment's python")
    assert gone["exit_code"] == 3 and gone["error"].startswith("unreachable: ")
    text = health(tmp_path, config, "--profile", "here")
    assert text.returncode == 2 and text.stdout.count("\n") == 1 and "Traceback" not in text.stdout + text.stderr
    assert not results_file(tmp_path).exists()


@pytest.mark.sshd
def test_the_probe_reaches_a_node_over_ssh(sshd, tmp_path):
    # The probe's text on stdin through a real sshd; the node is its target's label.
    fields = "".join(f'{k} = {json.dumps(v)}\n' for k, v in sshd.profile().items())
    config = f'[profile.gpu]\nrun_dir = "{tmp_path / "run"}"\npython = "{sys.executable}"\n{fields}'
    res = health(tmp_path, config, "--profile", "gpu", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    obj = json.loads(res.stdout)
    assert obj["result"]["backend"] == "gloo" and obj["target"].endswith("@127.0.0.1"), obj


def test_a_results_file_that_is_a_folder_is_a_note_and_the_measurement_stands(tmp_path):
    results_file(tmp_path).mkdir(parents=True)
    res = health(tmp_path, here(tmp_path), "--profile", "here")
    assert res.returncode == 0 and LINE.match(res.stdout), res.stdout + res.stderr
    assert res.stdout.splitlines()[1] == (f"  note: not recorded: {results_file(tmp_path)} is not a regular "
                                          "file; move it away")
