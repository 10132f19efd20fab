"""Every door of the product, started as a user starts it, says only its own lines on stderr.

A dependency's new release that adds a warning at import (cryptography 51's DSA deprecation,
raised through asyncssh) broke the one-line error promise on every fresh install. These tests
start each command-line door in a subprocess, with the packages the venv holds, and compare
stderr with exactly what the product itself says: the next release that adds a line fails here.
The remote agent and the run probe run in other people's Pythons, so they are run with every
warning turned on (`-W always`) and must still print nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from cryptography.utils import CryptographyDeprecationWarning as Crypto

from dflash_tui import __version__
from dflash_tui.import_warnings import KNOWN, KnownImportWarning, quiet_third_party_imports
from dflash_tui.remote.agent import BOOTSTRAP, build_program
from tests.support.probe import probe_env

pytestmark = pytest.mark.timeout(180)

BIN = Path(sys.executable).parent


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "DFLASH_TUI_DEBUG")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"), **extra)
    return env


def door(tmp_path: Path, argv: list[str], timeout: float = 90, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=clean_env(tmp_path, **env), timeout=timeout)


def dflash_tui(*args: str) -> list[str]:
    return [str(BIN / "dflash-tui"), *args]


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def local_profile(tmp_path: Path) -> Path:
    return write_config(tmp_path, f'[profile.here]\nrun_dir = "{tmp_path / "run"}"\n'
                                  f'command = ["{sys.executable}", "-c", "pass"]\n')


def test_version_and_help_print_nothing_on_stderr(tmp_path):
    for argv in (dflash_tui("--version"), [sys.executable, "-m", "dflash_tui", "--version"]):
        res = door(tmp_path, argv)
        assert (res.returncode, res.stdout.strip(), res.stderr) == (0, f"dflash-tui {__version__}", ""), argv
    for argv in (dflash_tui("--help"), [str(BIN / "dflash-train"), "--help"],
                 [sys.executable, "-m", "dflash_train", "--help"]):
        res = door(tmp_path, argv)
        assert res.returncode == 0 and res.stdout.startswith("usage:") and res.stderr == "", (argv, res.stderr)


def test_a_bad_config_is_exactly_one_line(tmp_path):
    cfg = write_config(tmp_path, "[profile.x]\nrun_dir = 3\n")
    res = door(tmp_path, dflash_tui("--config", str(cfg), "--check"))
    assert res.returncode == 2
    line, = res.stderr.splitlines()
    assert line.startswith("dflash-tui: ") and "run_dir" in line, line


def test_check_json_and_the_profile_list_have_a_clean_stderr(tmp_path):
    cfg = local_profile(tmp_path)
    res = door(tmp_path, dflash_tui("--config", str(cfg), "--profile", "here", "--check", "--json"))
    assert res.returncode == 4 and json.loads(res.stdout)["verdict"] == "NO RUN"
    assert res.stderr == ""
    res = door(tmp_path, dflash_tui("--config", str(cfg), "--list-profiles"))
    assert res.returncode == 0 and "here" in res.stdout and res.stderr == ""


def test_health_has_a_clean_stderr(tmp_path):
    # The probe runs torch in the profile's python: whatever it says there stays there.
    cfg = local_profile(tmp_path)
    res = door(tmp_path, dflash_tui("--config", str(cfg), "--profile", "here", "--health", "--json"))
    assert res.returncode == 0 and json.loads(res.stdout)["result"]["backend"] == "gloo", res.stdout
    assert res.stderr == ""


def test_a_second_watcher_is_refused_in_one_line(tmp_path):
    cfg = local_profile(tmp_path)
    store = tmp_path / "w.db"
    first = subprocess.Popen(dflash_tui("--config", str(cfg), "--watch", "--store", str(store)),
                             env=clean_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = tmp_path / "w.db.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text()):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        res = door(tmp_path, dflash_tui("--config", str(cfg), "--watch", "--store", str(store)))
        assert res.returncode == 2
        line, = res.stderr.splitlines()
        assert "another watcher writes this store" in line, line
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            _, err = first.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            first.kill()
            _, err = first.communicate()
    # The watcher's own log lines are timestamped "dflash-tui --watch: ..."; nothing else.
    assert err and all(" dflash-tui --watch: " in line for line in err.splitlines()), err


def test_warnings_asked_for_are_still_shown(tmp_path):
    """PYTHONWARNINGS turns the filters off: a developer who asks sees asyncssh's warnings (where
    the installed cryptography raises them at all) and the command still works."""
    probe = subprocess.run([sys.executable, "-W", "always", "-c", "import asyncssh"], capture_output=True,
                           text=True, timeout=60)
    res = door(tmp_path, dflash_tui("--version"), PYTHONWARNINGS="always")
    assert res.returncode == 0 and res.stdout.strip() == f"dflash-tui {__version__}"
    if "CryptographyDeprecationWarning" not in probe.stderr:
        pytest.skip("the installed cryptography raises no warning through asyncssh")
    assert "CryptographyDeprecationWarning" in res.stderr


def test_the_filters_are_by_category_and_module_only():
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        placed = quiet_third_party_imports()
        assert placed == list(KNOWN) or sys.warnoptions
        crypto = next(e for e in KNOWN if e.category_name == "CryptographyDeprecationWarning")
        warnings.warn_explicit("dsa", Crypto, "x.py", 1, module="asyncssh.crypto.dsa")   # filtered
        warnings.warn_explicit("dsa", Crypto, "x.py", 2, module="paramiko.dsskey")       # another importer
        warnings.warn_explicit("other", UserWarning, "x.py", 3, module="asyncssh.connection")
        warnings.warn_explicit("ours", DeprecationWarning, "x.py", 4, module="dflash_tui.cli")
    assert [str(w.message) for w in seen] == ["dsa", "other", "ours"]
    assert crypto.why


def test_a_category_that_is_not_installed_places_no_filter():
    ghost = KnownImportWarning("no_such_package_here.utils", "GhostWarning", r"x\Z", "test")
    assert quiet_third_party_imports((ghost,)) == []


def test_the_agent_prints_nothing_with_every_warning_on(tmp_path):
    (tmp_path / "f").write_text("hello\n")
    proc = subprocess.Popen([sys.executable, "-W", "always", "-X", "dev", "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    requests = [{"id": 1, "op": "stat", "args": {"paths": [str(tmp_path / "f"), "/nonexistent"]}},
                {"id": 2, "op": "read", "args": {"path": str(tmp_path / "f")}},
                {"id": 3, "op": "list_dir", "args": {"path": str(tmp_path)}},
                {"id": 4, "op": "proc_tree", "args": {"pid": os.getpid()}},
                {"id": 5, "op": "pid_info", "args": {"pids": [os.getpid(), 999999999]}},
                {"id": 6, "op": "disk_free", "args": {"path": str(tmp_path)}},
                {"id": 7, "op": "which", "args": {"names": ["sh", "no-such-tool"]}},
                {"id": 8, "op": "now"}]
    proc.stdin.write(build_program())
    proc.stdin.flush()
    answers = [json.loads(proc.stdout.readline())]          # the hello, before any request
    for request in requests:
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        answers.append(json.loads(proc.stdout.readline()))
    _, err = proc.communicate(timeout=60)                   # EOF on stdin ends it
    assert [a["id"] for a in answers] == list(range(9)) and all(a["ok"] for a in answers), answers
    assert proc.returncode == 0 and err == b"", err.decode()


def test_the_run_probe_prints_nothing_with_every_warning_on(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = probe_env(run_dir)
    env.update(PYTHONWARNINGS="always", PYTHONDEVMODE="1")
    code = "import threading, time\nt = threading.Thread(target=time.sleep, args=(0.5,)); t.start(); t.join()\n"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert list((run_dir / "probe").glob("[0-9]*.json")), "the probe did not run"
    assert not (run_dir / "probe" / "errors.log").exists()
