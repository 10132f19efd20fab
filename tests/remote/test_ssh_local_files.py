"""The SSH files a profile names (ssh_config, known_hosts, identity_file) are checked before
asyncssh reads them: a FIFO, /dev/zero, a directory, non-UTF-8 text or a syntax error is a
config error (exit 2, one line) within seconds, against the real loopback sshd."""

from __future__ import annotations

import os
import time

import pytest

from tests.test_cli_modes import cli, one_line_error, write_config

pytestmark = [pytest.mark.timeout(180), pytest.mark.sshd]


def test_bad_ssh_files_are_config_errors(sshd, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    latin = tmp_path / "latin"
    latin.write_bytes(b"Host gpu\n  HostName caf\xe9\n")
    garbage = tmp_path / "garbage"
    garbage.write_text("Host *\n  Port notanumber\n")
    cases = [
        ({"ssh_config": "/dev/zero"}, "ssh_config /dev/zero is not a regular file"),
        ({"ssh_config": str(fifo)}, "is not a regular file"),
        ({"ssh_config": str(latin)}, "is not UTF-8 text"),
        ({"ssh_config": str(garbage)}, "Invalid Port integer value"),
        ({"known_hosts": str(fifo)}, "known_hosts"),
        ({"known_hosts": "/dev/zero"}, "not a regular file"),
        ({"identity_file": str(tmp_path)}, "identity_file"),
    ]
    for over, said in cases:
        prof = {**sshd.profile(), "run_dir": "/tmp/dflash-sshfiles", **over}
        cfg = write_config(tmp_path, p=prof)
        t0 = time.monotonic()
        res = cli(tmp_path, "--config", str(cfg), "--check", timeout=60)
        assert time.monotonic() - t0 < 10, over
        assert res.returncode == 2, (over, res.returncode, res.stdout, res.stderr)
        line = one_line_error(res)
        assert said in line and str(cfg) in line, (over, line)


def test_a_good_ssh_config_still_connects(sshd, tmp_path):
    good = tmp_path / "ssh_config"
    good.write_text(f"Host gpu-alias\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n")
    prof = {"host": "gpu-alias", "ssh_config": str(good), "identity_file": str(sshd.client_key),
            "known_hosts": str(sshd.known_hosts), "run_dir": str(tmp_path / "run")}
    res = cli(tmp_path, "--config", str(write_config(tmp_path, p=prof)), "--check", timeout=60)
    assert res.returncode == 4 and "NO RUN" in res.stdout, (res.stdout, res.stderr)
