"""The `metrics` key: where a program writes metric files beyond its run dir."""

from __future__ import annotations

import json

import pytest

from dflash_tui.config import ConfigError, parse_config


def test_metrics_paths_are_kept_as_given():
    cfg = parse_config('[profile.x]\nrun_dir = "/r"\nmetrics = ["~/runs/exp1", "out/"]\n', "<test>")
    assert cfg.profiles["x"].metrics == ("~/runs/exp1", "out/")
    assert parse_config('[profile.x]\nrun_dir = "/r"\n', "<test>").profiles["x"].metrics == ()


@pytest.mark.parametrize("value, words", [('"out/"', "is not a list of directories or files of metrics"),
                                          ("[1]", "1 is not a string")])
def test_a_bad_metrics_value_is_one_line_naming_the_key(value, words):
    with pytest.raises(ConfigError) as err:
        parse_config(f'[profile.x]\nrun_dir = "/r"\nmetrics = {value}\n', "<test>")
    assert "metrics" in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("path", ["runs/\x1b]2;pwned\x07", "runs/\x1b[2J", "out\x9b1m", "a\x85b", "x\ny", "tab\there"])
def test_a_metrics_path_with_an_escape_or_a_c1_control_is_refused_in_one_line(path):
    with pytest.raises(ConfigError) as err:
        parse_config(f'[profile.x]\nrun_dir = "/r"\nmetrics = ["ok/", {json.dumps(path)}]\n', "<test>")
    words = str(err.value)
    assert "metrics" in words and "control character" in words and "\n" not in words, words
    assert "\x1b" not in words and not any(0x80 <= ord(c) <= 0x9f for c in words), words


def test_a_metrics_path_with_an_escape_is_exit_2_from_check(tmp_path):
    from tests.test_cli_modes import cli

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[profile.x]\nrun_dir = {json.dumps(str(tmp_path / "run"))}\ncommand = ["true"]\n'
                   f'metrics = [{json.dumps(chr(0x9b) + "31m")}]\n')
    res = cli(tmp_path, "--config", str(cfg), "--check")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (res.returncode, res.stderr)
    assert "metrics" in res.stderr and "control character" in res.stderr, res.stderr
