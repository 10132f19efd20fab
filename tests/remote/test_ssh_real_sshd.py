"""The loopback sshd fixture itself: it serves real sessions, with the stand-ins on PATH."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = pytest.mark.sshd


def test_ssh_session_gets_standin_path_and_state_dir(sshd):
    res = subprocess.run(sshd.ssh_argv('printf "%s\\n" "$PATH" "$PCT_STANDIN_DIR"; whoami'),
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    path, standin, user = res.stdout.splitlines()
    # sshd's SetEnv put the stand-ins before every system directory; a login rc file may
    # still prepend its own (pyenv, cargo), which shadows neither pct nor docker.
    dirs = path.split(":")
    assert str(sshd.bin_dir) in dirs
    assert dirs.index(str(sshd.bin_dir)) < dirs.index("/usr/bin")
    assert standin == str(sshd.standin_dir)
    assert user == sshd.user


def test_host_key_is_verified_by_the_openssh_client(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    res = subprocess.run(["ssh", "-F", str(sshd.ssh_config), "-o",
                          f"UserKnownHostsFile={empty}", sshd.alias, "true"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 255
    assert "Host key verification failed" in res.stderr


def test_log_counts_accepted_connections(sshd):
    before = sshd.accepted_connections()
    subprocess.run(sshd.ssh_argv("true"), check=True, timeout=30)
    assert sshd.accepted_connections() == before + 1


def test_missing_sshd_skips_outside_ci_and_fails_under_ci(monkeypatch, tmp_path):
    from tests import conftest
    from tests.support import sshd as sshd_mod

    monkeypatch.setattr(sshd_mod, "find_sshd", lambda: None)
    with pytest.raises(sshd_mod.SshdUnavailable, match="apt-get install openssh-server"):
        sshd_mod.start_sshd(tmp_path)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true requires"):
        conftest._unavailable("OpenSSH server not installed")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="OpenSSH server not installed"):
        conftest._unavailable("OpenSSH server not installed")
