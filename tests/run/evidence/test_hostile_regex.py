"""No regular expression can hang or starve anything, and no config value reaches "internal error".

A profile's `progress_regex` is matched by RE2 (linear time); what RE2 cannot bound, or what is
too big to be a progress pattern (a repeat count over 1000, groups nested 1,000 deep, thousands
of characters), is refused when the config is read: exit 2, one line naming the key. The
built-in progress forms are held to linear time on lines written to defeat them. A `host`
that no resolver takes (an empty label, a label over 63 characters, a name over 253) is exit 2
too. Patterns and lines come from seeded generators (DFLASH_FUZZ_SEED).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from dflash_tui.progress_regex import ProgressRegexError, compile_progress_regex
from dflash_tui.run.evidence.progress import MAX_SEGMENT, parse_text
from tests.test_cli_modes import local, write_config

pytestmark = pytest.mark.timeout(120)

SEED = int(os.environ.get("DFLASH_FUZZ_SEED", "20261201"))
LIMIT_S = 10.0


def run_cli(tmp_path, *args: str, timeout: float = 20.0):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    t0 = time.monotonic()
    try:
        res = subprocess.run([sys.executable, "-m", "dflash_tui", *args], capture_output=True, text=True,
                             env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dflash-tui {' '.join(args)} hung past {timeout:.0f} s")
    return res, time.monotonic() - t0


def pathological_patterns(rng: random.Random) -> list[str]:
    """Patterns a config must refuse: unbounded by RE2, or too big for a progress pattern."""
    n = rng.randint(1001, 10**12)
    return [f"(?P<step>a{{{n}}})", f"(?P<step>a{{2,{n}}})", "(?P<step>\\d+){1000}{1000}",
            "(" * 1000 + "(?P<step>a)" + ")" * 1000, "(" * rng.randint(51, 300) + "(?P<step>a)" + ")" * 300,
            "(?P<step>\\d+)(?=x)", "(?P<step>\\d+)(?!x)", "(?<=x)(?P<step>\\d+)", "(a)\\1(?P<step>\\d+)",
            "(?P<step>\\d++)", "(?>(?P<step>\\d+))", "(?P<step>" + "x" * rng.randint(1001, 5000) + ")",
            "(?P<step>" + "a{1000}" * 12 + ")"]


def test_pathological_progress_regexes_are_exit_2_with_one_line(tmp_path):
    rng = random.Random(SEED)
    patterns = pathological_patterns(rng)
    for i, pattern in enumerate(patterns):
        with pytest.raises(ProgressRegexError):
            compile_progress_regex(pattern)
    for i, pattern in enumerate(rng.sample(patterns, 6) + [patterns[0], patterns[3]]):
        d = tmp_path / f"c{i}"
        d.mkdir()
        cfg = write_config(d, p={"run_dir": str(tmp_path / "run"), "command": ["true"], "progress_regex": pattern})
        res, took = run_cli(d, "--config", str(cfg), "--check")
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, (pattern[:80], res.returncode, res.stderr[-500:])
        assert "progress_regex" in lines[0] and "Traceback" not in res.stderr, lines
        assert len(lines[0]) < 400, lines[0]


@pytest.mark.parametrize("host", ["a..b", ".a", "a" * 64 + ".example", ("abcdefgh." * 29) + "com", "-x.y"])
def test_a_host_no_resolver_takes_is_exit_2_naming_the_key(tmp_path, host):
    cfg = write_config(tmp_path, p={"host": host, "run_dir": "/srv/dflash/run"})
    res, took = run_cli(tmp_path, "--config", str(cfg), "--check")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, (res.returncode, res.stdout, res.stderr)
    assert "host" in lines[0] and "internal error" not in lines[0], lines[0]


# Lines written to defeat a backtracking engine: each built-in form (and a user's pattern) gets
# long runs of what it half-matches.
def hostile_lines(rng: random.Random) -> list[str]:
    n = MAX_SEGMENT
    lines = ["step" + " " * (n - 10) + "x", "1" * (n - 10) + " x/s", "loss" + " " * (n - 10),
             "tok/s" + " " * (n - 10), "epoch" + " " * (n - 10), "| " + " " * (n - 10) + "1/",
             "checkpoint " * (n // 11), "1." * (n // 2) + "it/s", "step " + "1" * (n - 20) + " of ",
             "tok/s " + "1," * (n // 3), "loss=" + "1" * (n - 10) + "e", "a" * 40 + "b"]
    return lines + ["".join(rng.choice("step loss 1/.,: it/s|[e") for _ in range(n)) for _ in range(8)]


def test_the_built_in_progress_forms_stay_linear_on_adversarial_lines():
    rng = random.Random(SEED)
    lines = hostile_lines(rng)
    t0 = time.monotonic()
    for line in lines:
        parse_text(line + "\n" + line)          # a finished segment and a partial one
    took = time.monotonic() - t0
    # A backtracking pattern takes seconds to hours on ONE of these; linear ones, milliseconds.
    assert took < 2.0, f"{len(lines)} adversarial lines took {took:.1f} s"
    # The forms still read what they are for.
    p = parse_text("step 12/100 loss 0.5 tok/s 18,450 epoch 1.5\n")
    assert (p.step, p.total, p.loss, p.rate, p.rate_unit, p.epoch) == (12, 100, 0.5, 18450.0, "tok/s", 1.5)


def test_a_catastrophic_user_pattern_cannot_hang_check(tmp_path):
    """(a|aa)+ nested in +, then $: a backtracking engine needs ~2^40 steps on a 41-byte line."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(("a" * 40 + "b\n") * 200)
    (run / "launch.json").write_text(json.dumps({"v": 1, "run_id": "r", "pid": 4194000, "pgid": 4194000,
                                                 "start_ticks": 1, "start_time": time.time() - 5,
                                                 "argv": ["x"]}))
    for pattern in ["(?P<step>(a|aa)+)+$", "(?P<step>(a*)*)b$", "^(?P<step>(a+)+)$"]:
        cfg = write_config(tmp_path, p={**local(run, "beat"), "progress_regex": pattern})
        res, took = run_cli(tmp_path, "--config", str(cfg), "--check", "--json", timeout=30)
        assert took < LIMIT_S, took
        assert json.loads(res.stdout)["verdict"] == "KILLED", res.stdout


@pytest.mark.timeout(60)
async def test_a_catastrophic_user_pattern_cannot_starve_the_dashboard(tmp_path, monkeypatch):
    from dflash_tui.config import Profile
    from dflash_tui.ui.app import DashboardApp
    from dflash_tui.ui.screens.dialogs import HelpScreen
    from dflash_tui.ui.sources.watch_source import WatchSource
    from dflash_tui.watch import open_watch
    from tests.ui.test_app import until

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(("a" * 40 + "b\n") * 200)
    (run / "launch.json").write_text(json.dumps({"v": 1, "run_id": "r", "pid": 4194000, "pgid": 4194000,
                                                 "start_ticks": 1, "start_time": time.time() - 5, "argv": ["x"]}))
    profile = Profile(name="re", run_dir=str(run), command=("true",), python=sys.executable,
                      progress_regex="(?P<step>(a|aa)+)+$", min_free_gb=0.0)
    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "re")
    t0 = time.monotonic()
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None and app.run_view.report.checklist.verdict.value == "KILLED", 20)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), 5)
    assert time.monotonic() - t0 < 30
