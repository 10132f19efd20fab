"""Profiles: good files load, every bad one is named (file, key, what is wrong)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dflash_tui.config_file import load_config, parse_config
from dflash_tui.config import DEFAULT_PROFILE, LOCAL_TRAIN_ARGS, ConfigError

EXAMPLE = Path(__file__).resolve().parent.parent / "assets" / "profiles.example.toml"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_no_config_gives_builtin_local(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cfg = load_config()
    assert cfg.path is None
    p = cfg.profile(None)
    assert p.name == DEFAULT_PROFILE and p.is_local and p.container is None
    assert p.python == sys.executable
    assert p.run_dir == str(tmp_path / "state" / "dflash-tui" / "runs" / "local")
    assert p.trainer_argv == [sys.executable, "-m", "dflash_train", "--run-dir", p.run_dir, *LOCAL_TRAIN_ARGS]


def test_full_profile(tmp_path):
    cfg = load_config(write(tmp_path, '''
[profile.gpu1]
host = "gpu1"
user = "root"
port = 2222
identity_file = "~/.ssh/id_gpu"
container = "pct:200"
run_dir = "/workspace/runs/dflash/"
python = "/opt/venv/bin/python"
train_args = ["--target-devices", "cuda:0,cuda:1", "--drafter-devices", "cuda:2,cuda:3"]
stall_after_s = 120
learn_stall = false
'''))
    p = cfg.profile(None)     # the file's only profile is the default
    assert p.name == "gpu1" and p.host == "gpu1" and p.port == 2222 and p.container == "pct:200"
    assert p.run_dir == "/workspace/runs/dflash"
    assert not p.identity_file.startswith("~")
    assert p.where() == "root@gpu1:2222 · pct:200"
    assert p.trainer_argv[:5] == ["/opt/venv/bin/python", "-m", "dflash_train", "--run-dir", "/workspace/runs/dflash"]
    assert p.stall_after_s == 120.0 and p.learn_stall is False
    assert cfg.profile("local").is_local     # the built-in stays reachable by name


def test_the_shipped_example_parses():
    cfg = load_config(EXAMPLE)
    assert len(cfg.profiles) >= 3
    for p in cfg.profiles.values():
        assert p.run_dir.startswith("/")


def test_hostile_values_are_kept_verbatim(tmp_path):
    cfg = load_config(write(tmp_path, r'''
[profile.h]
run_dir = "/tmp/a b/'q\"/$(touch /tmp/pwned)/x"
train_args = ["$(touch /tmp/pwned)", "a b", "line1\nline2", "'", "\""]
'''))
    p = cfg.profile("h")
    assert p.run_dir == "/tmp/a b/'q\"/$(touch /tmp/pwned)/x"
    assert p.train_args == ("$(touch /tmp/pwned)", "a b", "line1\nline2", "'", '"')


@pytest.mark.parametrize("body, words", [
    ('[profile.a]\nport = "22"', ["[profile.a]", "port", "not a port number"]),
    ('[profile.a]\nhost = "h"\nport = 70000\nrun_dir = "/r"', ["port = 70000", "1-65535"]),
    ('[profile.a]\nport = true', ["port", "not a port"]),
    ('[profile.a]\nhots = "x"', ["unknown key 'hots'", "known keys"]),
    ('[profile.a]\ncontainer = "lxc:200"', ["container", "pct:ID", "docker:NAME"]),
    ('[profile.a]\ncontainer = "pct:abc"', ["container", "pct:ID"]),
    ('[profile.a]\nrun_dir = "relative/path"', ["run_dir", "absolute path"]),
    ('[profile.a]\nrun_dir = "/"', ["run_dir", "root"]),
    ('[profile.a]\nhost = "gpu"', ["run_dir is missing"]),
    ('[profile.a]\ntrain_args = "--steps 10"', ["train_args", "list of strings"]),
    ('[profile.a]\ntrain_args = ["--steps", 10]', ["train_args", "10 is not a string"]),
    ('[profile.a]\ncommand = []', ["command = [] is empty"]),
    ('[profile.a]\nuser = "root"', ["host is not", "run locally"]),
    ('[profile.a]\nstall_after_s = 0', ["stall_after_s", "> 0"]),
    ('[profile.a]\nlearn_stall = "no"', ["learn_stall = 'no'", "true or false"]),
    ('[profile.a]\nhost = " gpu"\nrun_dir = "/r"', ["host", "surrounding spaces"]),
    ('[profile.a]\nhost = "gpu"\nrun_dir = "/r"\n[profile.b]\nhost = "x"\nrun_dir="/r"', None),
    ('[profile.a\nhost = 1', ["not valid TOML"]),
    ('profile = 3', ["'profile' must hold tables"]),
    ('[profiles.a]\nhost = "x"', ["unknown top-level key 'profiles'"]),
    ('', ["no profiles"]),
    ('[profile."a b"]\nhost = "x"', ["profile names"]),
])
def test_bad_config_names_file_key_and_problem(tmp_path, body, words):
    path = write(tmp_path, body)
    if words is None:     # valid, but ambiguous without --profile
        cfg = load_config(path)
        with pytest.raises(ConfigError) as exc:
            cfg.profile(None)
        assert str(path) in str(exc.value) and "--profile" in str(exc.value) and "a, b" in str(exc.value)
        return
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert msg.startswith(str(path)), msg
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_unknown_profile_lists_the_known_ones(tmp_path):
    cfg = load_config(write(tmp_path, '[profile.gpu1]\nhost = "g"\nrun_dir = "/r"'))
    with pytest.raises(ConfigError, match=r"no profile named 'gpu2'; did you mean 'gpu1'\? \(known: gpu1, local\)"):
        cfg.profile("gpu2")


def test_missing_explicit_file_and_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[profile.a]\nhost = "\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(bad)


def test_parse_config_is_pure():
    cfg = parse_config('[profile.x]\ncommand = ["sleep", "5"]', "<test>")
    assert cfg.profiles["x"].trainer_argv == ["sleep", "5"]
    assert not cfg.profiles["x"].uses_bundled_trainer


@pytest.mark.parametrize("spec,ok", [("pct:200", True), ("docker:trainer", True), ("pct:5", False),
                                     ("pct:abc", False), ("lxc:200", False), ("docker:-x", False)])
def test_one_container_rule_for_config_and_targets(tmp_path, spec, ok):
    # The config accepts exactly what ContainerTarget accepts: one parser decides.
    from dflash_tui.remote.container import ContainerTarget
    from dflash_tui.remote.local import LocalTarget
    cfg = tmp_path / "p.toml"
    cfg.write_text(f'[profile.a]\ncontainer = "{spec}"\n')
    if ok:
        load_config(cfg)
        ContainerTarget(LocalTarget(), spec)
    else:
        with pytest.raises(ConfigError, match="pct:ID"):
            load_config(cfg)
        with pytest.raises(ValueError):
            ContainerTarget(LocalTarget(), spec)


def test_memory_limit_mb_is_a_budget_in_mib_and_bad_values_are_one_line(tmp_path):
    cfg = load_config(write(tmp_path, '[profile.p]\nrun_dir = "/tmp/r"\nmemory_limit_mb = 2048\n'))
    assert cfg.profiles["p"].memory_limit_bytes == 2048 << 20
    assert load_config(write(tmp_path, '[profile.p]\nrun_dir = "/tmp/r"\n')).profiles["p"].memory_limit_bytes is None
    for bad, words in (("0", "out of range"), ("true", "is not a number of MiB"), ('"2G"', "is not a number of MiB")):
        with pytest.raises(ConfigError, match=f"memory_limit_mb = .*{words}"):
            load_config(write(tmp_path, f'[profile.p]\nrun_dir = "/tmp/r"\nmemory_limit_mb = {bad}\n'))
