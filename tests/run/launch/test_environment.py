"""A profile's `env` table and `env_file` (secrets) reach the program, locally and over SSH into
a container; the secret is in no file of the run dir, not in launch.json's argv, and not in the
command line of any process; bad entries are one line naming the file and the fix."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config_file import load_config
from dflash_tui.config import ConfigError, Profile
from dflash_tui.run.launch.environment import EnvError, launch_environment, parse_env_file

pytestmark = pytest.mark.timeout(90)

SECRET = "s3cr3t-$(id)-'q'-\"dq\" x"
PROGRAM = ('for n in HF_HOME API_TOKEN PYTHONFAULTHANDLER; do eval "printf \'%s=%s\\n\' $n \\"\\$$n\\""; done '
           '> "$OUT_FILE.tmp" && mv "$OUT_FILE.tmp" "$OUT_FILE"; sleep 30')


async def test_env_and_env_file_reach_the_program_and_the_secret_stays_out_of_the_run(place, sessions, tmp_path):
    label, keys = place
    secrets_file = tmp_path / "secrets.env"
    secrets_file.write_text(f"# the token\nexport API_TOKEN='{SECRET}'\nPYTHONFAULTHANDLER=0\n")
    out = tmp_path / "out" / "env.txt"    # a directory the stand-in container shares with this machine
    out.parent.mkdir()
    run_dir = tmp_path / "run"
    profile = Profile(name="envtest", run_dir=str(run_dir), command=("sh", "-c", PROGRAM), min_free_gb=0.0,
                      env=(("HF_HOME", "/data/hf cache"), ("OUT_FILE", str(out))), env_file=str(secrets_file),
                      **keys)
    session = sessions(profile)
    await session.launch(preflight=False)
    t0 = time.monotonic()
    while not out.exists() and time.monotonic() - t0 < 30:
        await asyncio.sleep(0.2)
    got = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert got == {"HF_HOME": "/data/hf cache", "API_TOKEN": SECRET, "PYTHONFAULTHANDLER": "0"}, (label, got)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"{label}: the secret is in {path}"
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            assert SECRET not in cmdline, f"{label}: the secret is on the command line of pid {pid}"


async def test_a_bad_env_file_refuses_the_launch_in_one_line(sessions, tmp_path):
    bad = tmp_path / "secrets.env"
    bad.write_text("API_TOKEN=x\nthis line has no equals sign\n")
    profile = Profile(name="envtest", run_dir=str(tmp_path / "run"), command=("sleep", "5"), min_free_gb=0.0,
                      env_file=str(bad))
    result = await sessions(profile).launch(preflight=False)
    words = " ".join(c.cause for c in result.checklist.checks) + " " + result.checklist.summary
    assert f"env_file {bad} line 2: no '='; write NAME=VALUE" in words, words


def test_env_file_parsing_and_its_errors(tmp_path):
    assert parse_env_file('A=1\n\n# c\nexport B = "two words"\nC=\'x=y\'\nD=\n', "f") == {
        "A": "1", "B": "two words", "C": "x=y", "D": ""}
    for text, words in (("1A=x", "line 1: '1A' is not a variable name"),
                        ("DFLASH_RUN_ID=x", "line 1: DFLASH_RUN_ID is set by the wrapper"),
                        ("X", "line 1: no '='")):
        with pytest.raises(EnvError, match=words):
            parse_env_file(text, "f")
    with pytest.raises(EnvError, match=f"env_file {tmp_path}/none does not exist"):
        launch_environment((), str(tmp_path / "none"))
    both = tmp_path / "both.env"
    both.write_text("A=2\n")
    with pytest.raises(EnvError, match="A is set in both env and env_file"):
        launch_environment((("A", "1"),), str(both))


@pytest.mark.parametrize("body, words", [
    ('env = "A=1"', ["env = 'A=1' is not a table"]),
    ('env = { "1A" = "x" }', ["env: '1A' is not a variable name"]),
    ('env = { A = 1 }', ["env: A's value is not a string"]),
    ('env = { A = "x\\ny" }', ["env: A's value holds a newline"]),
    ('env = { DFLASH_RUN_DIR = "/x" }', ["env: DFLASH_RUN_DIR is set by the wrapper"]),
    ('env = { DFLASH_RESUME_FROM = "/x" }', ["env: DFLASH_RESUME_FROM is set by the wrapper"]),
    ('env_file = 3', ["env_file = 3 is not a path"]),
    ('env_file = ""', ['env_file = "" is empty']),
])
def test_bad_env_keys_are_one_line(tmp_path, body, words):
    path = tmp_path / "config.toml"
    path.write_text(f"[profile.a]\n{body}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert msg.startswith(str(path)) and "\n" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_good_env_keys_load(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[profile.a]\nenv = { HF_HOME = "/data/hf", PYTHONFAULTHANDLER = "" }\nenv_file = "~/x.env"\n')
    p = load_config(path).profile("a")
    assert p.env == (("HF_HOME", "/data/hf"), ("PYTHONFAULTHANDLER", ""))
    assert p.env_file == os.path.expanduser("~/x.env")
