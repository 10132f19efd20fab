"""The divergence rules (run/evidence/divergence.py), the readers that keep NaN for them, the
bundled trainer's events.jsonl in the look's metrics, and the config keys that tune them."""

from __future__ import annotations

import math
import shutil
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import ConfigError, load_config
from dflash_tui.contract.rundir import EVENTS_JSONL, LAUNCH_JSON
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.agent import open_ops
from dflash_tui.run.evidence.activity import ProgressTracker
from dflash_tui.run.evidence.divergence import DivergenceRules, DivergenceWatch

RECORDED = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "divergence_recorded"


def _watch(values, rules=DivergenceRules(), name="loss"):
    w = DivergenceWatch(rules)
    w.feed(name, "train.log", list(enumerate(values, 1)))
    return w.finding()


def test_a_nan_is_a_divergence_at_once_with_the_last_finite_value():
    f = _watch([1.0] * 19 + [math.nan] * 5)
    d = f.divergence
    assert d.words() == "loss NaN since step 20 (train.log), last finite 1 at step 19"
    assert _watch([1.0] * 19 + [math.inf]).divergence.words().startswith("loss Inf since step 20")


def test_nan_patience_waits_for_that_many_in_a_row():
    rules = DivergenceRules(nan_patience=3)
    assert _watch([1.0] * 10 + [math.nan, math.nan, 1.0] * 5, rules).divergence is None
    assert _watch([1.0] * 10 + [math.nan] * 3, rules).divergence.step == 11


def test_a_sustained_spike_is_found_at_spike_patience_and_a_lone_one_is_a_warn():
    base = [1.0 + 0.05 * (i % 3) for i in range(50)]
    d = _watch(base + [15.0] * 3).divergence
    assert d.rule == "spike" and d.step == 51 and d.count == 3 and d.ratio > 10, d
    assert "spiked to 15" in d.words() and "3 values in a row" in d.words()
    assert _watch(base + [15.0] * 2).divergence is None
    f = _watch(base + [8.2, 1.0, 1.0])
    assert f.divergence is None
    assert f.spikes[-1].words() == "spike at step 51: 7.8x the running median, back at 52"


def test_noise_and_a_2x_blip_stay_inside_the_band():
    vals = [2.0 * (0.65 if i % 2 else 1.35) for i in range(300)]
    vals[150] *= 2.0
    f = _watch(vals)
    assert f.divergence is None and not f.spikes


def test_eval_series_are_never_watched_and_a_profile_names_its_own():
    assert DivergenceRules().watches("train/loss") and DivergenceRules().watches("tb:lm loss")
    assert not DivergenceRules().watches("eval/loss") and not DivergenceRules().watches("val_loss")
    assert not DivergenceRules().watches("validate_loss")
    own = DivergenceRules(watch_series=("objective",))
    assert own.watches("objective") and not own.watches("loss")
    assert _watch([1.0] * 5 + [math.nan], name="eval_loss").divergence is None


def test_a_batch_bigger_than_a_poll_is_searched_for_nan_and_judged_from_its_newest():
    vals = [1.0] * 100_000
    vals[10] = math.nan
    f = _watch(vals)
    assert f.divergence.step == 11 and f.skipped == 80_000


async def test_the_bundled_trainers_events_give_metrics_and_the_watch(tmp_path):
    # A real bundled trainer's events.jsonl (recorded here: benchmarks/data/divergence_recorded).
    shutil.copy(RECORDED / "bundled" / "events.jsonl", tmp_path / EVENTS_JSONL)
    (tmp_path / LAUNCH_JSON).write_text("{}")
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    try:
        tracker = ProgressTracker()
        stats = dict(zip((EVENTS_JSONL, LAUNCH_JSON),
                         await ops.stat([str(tmp_path / EVENTS_JSONL), str(tmp_path / LAUNCH_JSON)])))
        await tracker.read_files(ops, str(tmp_path), "r1", time.time(), stats)
    finally:
        await ops.close()
    latest = tracker.metrics.latest
    assert latest["loss"][0] == 150 and latest["loss"][2] == EVENTS_JSONL, latest
    assert "accuracy" in latest and "tokens_per_s" in latest, latest
    f = tracker.divergence.finding()
    assert f.series == ("loss",) and f.values == 150 and f.divergence is None


@pytest.mark.parametrize("line, words", [
    ("nan_patience = 0", "nan_patience = 0 is out of range; use a whole number from 1 to 10000"),
    ("spike_patience = 2.5", "spike_patience = 2.5 is not a whole number"),
    ("watch_series = \"loss\"", "watch_series = 'loss' is not a list of series names"),
    ("watch_series = [\"\"]", "watch_series holds an empty name"),
])
def test_config_keys_are_checked_with_one_line(tmp_path, line, words):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[profile.p]\nrun_dir = \"{tmp_path}/run\"\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_config_keys_reach_the_profile(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[profile.p]\nrun_dir = \"{tmp_path}/run\"\nwatch_series = [\"train/loss\"]\n"
                   "nan_patience = 2\nspike_patience = 5\n")
    p = load_config(cfg).profiles["p"]
    assert (p.watch_series, p.nan_patience, p.spike_patience) == (("train/loss",), 2, 5)
