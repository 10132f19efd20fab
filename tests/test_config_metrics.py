"""The `metrics` key: where a program writes metric files beyond its run dir."""

from __future__ import annotations

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
