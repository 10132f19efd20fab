"""[recover]: parsed from a real config file through the CLI's own loader; every bad value is
one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dflash_tui.config import ConfigError
from dflash_tui.config_file import parse_config
from dflash_tui.recording.recovery.settings import DEFAULT_ON, RECOVER_SECTION, RESTARTABLE, RecoverPolicy
from dflash_tui.run.verdict.checklist import Verdict

PROFILES = '[profile.a]\nrun_dir = "/tmp/a"\n[profile.b]\nrun_dir = "/tmp/b"\n'


def parse(text: str):
    return parse_config(PROFILES + text, "c.toml")


def recover(text: str):
    return RECOVER_SECTION.of(parse(text))


def test_the_restartable_words_are_the_failing_verdicts():
    assert set(RESTARTABLE) == {v.value for v in Verdict if v.failing}
    assert set(DEFAULT_ON) <= set(RESTARTABLE)


def test_off_when_absent_on_for_all_with_a_key_and_per_profile_overrides():
    assert recover("").for_profile("a") is None
    # A table of one profile only turns recovery on for that profile.
    only_b = recover("[recover.profile.b]\nmax_restarts = 1\n")
    assert only_b.for_profile("a") is None and only_b.for_profile("b") == RecoverPolicy(max_restarts=1)
    cfg = recover('[recover]\non = ["CRASHED"]\nmax_restarts = 2\nbackoff_s = 1\n'
                  '[recover.profile.a]\nwindow_s = 60\n[recover.profile.b]\nenabled = false\n')
    a = cfg.for_profile("a")
    assert (a.on, a.max_restarts, a.backoff_s, a.window_s) == (("CRASHED",), 2, 1.0, 60.0)
    assert cfg.for_profile("b") is None
    assert recover("[recover]\nenabled = false\n").for_profile("a") is None


def test_backoff_doubles_and_is_capped_at_30_min():
    p = RecoverPolicy(backoff_s=30)
    assert [p.backoff(n) for n in range(4)] == [30, 60, 120, 240]
    assert p.backoff(10) == 1800 and p.backoff(10_000) == 1800


@pytest.mark.parametrize("body, words", [
    ("[recover]\nretries = 3\n", "[recover]: unknown key 'retries' (known: enabled, on,"),
    ('[recover]\non = ["CRASHED", "HUNG"]\n', "[recover]: on: unknown word 'HUNG' (pick from NEVER STARTED,"),
    ('[recover]\non = ["FINISHED"]\n', "[recover]: on: unknown word 'FINISHED'"),
    ("[recover]\nmax_restarts = -1\n", "[recover]: max_restarts = -1: must be an integer from 0 to 1000"),
    ("[recover]\nbackoff_s = -5\n", "[recover]: backoff_s = -5: must be a number of seconds from 0 to 1800"),
    ("[recover]\nwindow_s = nan\n", "[recover]: window_s = nan: must be a number of seconds"),
    ('[recover]\ngive_up_on = ["oom"]\n', "[recover]: give_up_on: unknown word 'oom' (pick from cuda_oom,"),
    ("[recover.profile.zz]\nmax_restarts = 1\n", "[recover.profile.zz]: no [profile.zz] to apply it to"),
    ("[recover.profile.a]\nmax_restarts = 1.5\n", "[recover.profile.a]: max_restarts = 1.5: must be an integer"),
    ('[recover]\nresume = "yes"\n', "[recover]: resume must be true or false"),
    # A typo is answered with the close word.
    ("[recover]\nmax_restart = 3\n", "[recover]: unknown key 'max_restart'; did you mean 'max_restarts'? (known: "),
    ('[recover]\non = ["STALED"]\n', "[recover]: on: unknown word 'STALED'; did you mean 'STALLED'? (pick from "),
    ('[recover]\ngive_up_on = ["cuda_om"]\n', "unknown word 'cuda_om'; did you mean 'cuda_oom'?"),
    ("[recover.profile.aa]\nmax_restarts = 1\n", "[recover.profile.aa]: no [profile.aa] to apply it to; did you mean 'a'?"),
])
def test_bad_values_are_one_line(body, words):
    with pytest.raises(ConfigError) as err:
        parse(body)
    assert str(err.value).startswith("c.toml: ") and words in str(err.value), str(err.value)


def test_the_cli_exits_2_with_one_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILES + "[recover]\nmax_restarts = -3\n")
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--profile", "a", "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "max_restarts = -3: must be an integer" in res.stderr, res.stderr
