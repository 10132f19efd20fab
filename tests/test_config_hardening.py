"""Hostile settings are config errors: one line naming the file, key and fix, exit 2, and
nothing read that is not a regular file (a real `dflash-tui` process per case)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from dflash_tui.config_file import parse_config
from dflash_tui.config import ConfigError
from tests.test_cli_modes import cli, one_line_error

pytestmark = pytest.mark.timeout(180)

NUMERIC = ("stall_after_s", "compile_stall_after_s", "launch_deadline_s", "stop_grace_s", "min_free_gb")


def profile(tmp_path: Path, body: str, name: str = "p") -> Path:
    path = tmp_path / "config.toml"
    command = "" if body.startswith("command") else 'command = ["true"]\n'
    path.write_text(f'[profile.{name}]\nrun_dir = "{tmp_path / "run"}"\n{command}{body}\n')
    return path


def usage_error(tmp_path: Path, *args: str) -> str:
    t0 = time.monotonic()
    res = cli(tmp_path, *args, timeout=30)
    assert time.monotonic() - t0 < 10, "a config error must not wait on anything"
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    return one_line_error(res)


@pytest.mark.parametrize("key", NUMERIC)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300"])
def test_non_finite_and_absurd_numbers_are_refused(key, value):
    with pytest.raises(ConfigError) as err:
        parse_config(f'[profile.p]\nrun_dir = "/srv/run"\n{key} = {value}\n', "c.toml")
    msg = str(err.value)
    assert "\n" not in msg and f"{key} = " in msg and "c.toml" in msg, msg


def test_numeric_bounds_through_the_cli(tmp_path):
    assert "stop_grace_s = nan" in usage_error(tmp_path, "--config", str(profile(tmp_path, "stop_grace_s = nan")), "--check")
    line = usage_error(tmp_path, "--config", str(profile(tmp_path, "launch_deadline_s = 1e9")), "--check")
    assert "launch_deadline_s" in line and "600" in line, line
    for wait in ("nan", "inf", "-1", "1e12", "abc"):
        line = usage_error(tmp_path, "--config", str(profile(tmp_path, "")), "--check", "--wait", wait)
        assert "--wait" in line, line


@pytest.mark.parametrize("run_dir, why", [
    ("/x/../../etc", "'..'"), ("/srv/run/../../etc", "'..'"), ("/etc", "system directory"),
    ("/etc/dflash", "system directory"), ("/usr", "system directory"), ("/", "root"),
    ("/proc/self", "system directory"), ("/dev", "system directory"), ("/boot/r", "system directory"),
    ("/bin", "system directory"), ("/sys/x", "system directory"), ("relative/run", "absolute"),
    ("/srv/run\nx", "control character"),
])
def test_run_dir_refused(tmp_path, run_dir, why):
    path = tmp_path / "config.toml"
    path.write_text(f"[profile.p]\nrun_dir = {json.dumps(run_dir)}\n")   # a JSON string is a TOML string
    line = usage_error(tmp_path, "--config", str(path), "--check")
    assert "run_dir" in line and why in line, line
    assert not Path("/etc/launch.sh").exists()


def test_run_dir_is_normalised():
    cfg = parse_config('[profile.p]\nrun_dir = "/srv//runs/./a/"\n', "c.toml")
    assert cfg.profiles["p"].run_dir == "/srv/runs/a"
    for fine in ("/dev/shm/run", "/usr/local/runs/a", "/tmp/run", "/home/me/run"):
        assert parse_config(f'[profile.p]\nrun_dir = "{fine}"\n', "c.toml").profiles["p"].run_dir == fine


def test_nul_and_control_characters_are_config_errors(tmp_path):
    for body in ('python = "py\\u0000thon"', 'command = ["a\\u0000b"]', 'train_args = ["--x", "\\u0000"]',
                 'host = "gpu\\n1"', 'user = "ro\\u0000ot"\nhost = "h"'):
        line = usage_error(tmp_path, "--config", str(profile(tmp_path, body)), "--check")
        assert "control character" in line or "NUL" in line, (body, line)


def test_a_newline_in_a_profile_name_is_one_line(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[profile."a\\nb"]\nrun_dir = "/srv/run"\n')
    line = usage_error(tmp_path, "--config", str(path), "--check")
    assert "profile names" in line and "'a\\nb'" in line, line


def test_config_files_that_are_not_regular_files_are_never_read(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    assert "not a regular file" in usage_error(tmp_path, "--config", str(fifo), "--check")
    assert "not a regular file" in usage_error(tmp_path, "--config", "/dev/zero", "--check")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (2 << 20))
    assert "too big" in usage_error(tmp_path, "--config", str(big), "--check")
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"# caf\xe9\n")
    assert "not UTF-8" in usage_error(tmp_path, "--config", str(latin), "--check")


@pytest.mark.parametrize("body, words", [
    ('[profile.p]\nrun_dir = "/srv/r"\ncomand = ["true"]\n', "unknown key 'comand'; did you mean 'command'? (known keys: "),
    ('[profile.p]\nrun_dir = "/srv/r"\nstall_after = 5\n', "did you mean 'stall_after_s'?"),
    ('[profile.p]\nrun_dir = "/srv/r"\nhost = "h"\nscheduler = "slurm"\npartiton = "gpu"\n',
     "unknown key 'partiton'; did you mean 'partition'?"),
    ('[profile.p]\nrun_dir = "/srv/r"\nhost = "h"\nscheduler = "slrum"\n', "did you mean 'slurm'?"),
    ('[profiles.p]\nrun_dir = "/srv/r"\n', "unknown top-level key 'profiles'; did you mean 'profile'?"),
    ('[profile.p]\nrun_dir = "/srv/r"\n[notify]\nurl = ["json://127.0.0.1/x"]\n',
     "[notify]: unknown key 'url'; did you mean 'urls'?"),
    ('[profile.p]\nrun_dir = "/srv/r"\n[notify]\non = ["FINISHD"]\n', "unknown event 'FINISHD'; did you mean 'FINISHED'?"),
    ('[profile.gpu1]\nrun_dir = "/srv/r"\n[notify.profile.gpu11]\nenabled = false\n',
     "no [profile.gpu11] to apply it to; did you mean 'gpu1'?"),
    ('[profile.p]\nrun_dir = "/srv/r"\n[watch]\nstroe = "/tmp/x.db"\n', "[watch]: unknown key 'stroe'; did you mean 'store'?"),
])
def test_a_typo_is_answered_with_the_close_key(body, words):
    with pytest.raises(ConfigError) as err:
        parse_config(body, "c.toml")
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_no_suggestion_when_nothing_is_close_and_a_profile_typo_on_the_command_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        parse_config('[profile.p]\nrun_dir = "/srv/r"\nzzzz = 1\n', "c.toml")
    assert "did you mean" not in str(err.value) and "known keys" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config('[profile.p]\nrun_dir = "/srv/r"\n' + "c" * 100_000 + "ommand = 1\n", "c.toml")
    assert "did you mean" not in str(err.value)
    cfg = profile(tmp_path, "", name="gpu-main")
    assert "no profile named 'gpu-mian'; did you mean 'gpu-main'?" in usage_error(
        tmp_path, "--config", str(cfg), "--profile", "gpu-mian", "--check")


def test_checkpoints_folders_are_checked_in_one_line(tmp_path):
    for body, words in (('checkpoints = ["ckpt/\\u001b[2J"]', "control character"),
                        ('checkpoints = ["ok/", ""]', "empty entry"),
                        ('checkpoints = ["~root/out"]', '"~/"'),
                        ('checkpoints = "ckpt/"', "a list of folders")):
        line = usage_error(tmp_path, "--config", str(profile(tmp_path, body)), "--check")
        assert words in line and "checkpoints" in line and "\n" not in line, (body, line)
