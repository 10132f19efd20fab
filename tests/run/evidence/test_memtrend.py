"""The memory trend (run/evidence/memtrend.py): a steady growth is named with its rate and
forecast; a warm-up jump, a GC sawtooth and a flat line are not."""

import json

from dflash_tui.run.evidence.memtrend import WINDOW, MemorySeries, Sample, theil_sen, trend

MB = 1 << 20


def series(values, step0=0, every=100, dt=10.0):
    return [Sample(i * dt, step0 + i * every, int(v)) for i, v in enumerate(values)]


def test_steady_growth_named_with_rate_and_forecast():
    # +120 MB per 100 steps from 1 GiB, 10 s per 100 steps, 8 GiB limit
    s = series([1024 * MB + i * 120 * MB for i in range(20)], step0=2000)
    t = trend(s, 8 << 30, "cgroup memory.max")
    assert t is not None
    assert round(t.bytes_per_step * 100 / MB) == 120
    assert t.since_step == 2000 and t.step == 3900
    # (8192 - (1024 + 19*120)) MB / 1.2 MB per step = 4073 steps after step 3900
    assert abs(t.full_at_step - (3900 + (8192 - 1024 - 19 * 120) / 1.2)) <= 1
    assert abs(t.full_in_s - (t.full_at_step - 3900) * 0.1) < 1.0
    assert t.to_json()["bytes_per_100_steps"] == 120 * MB


def test_warmup_jump_then_flat_is_no_trend():
    s = series([200 * MB, 2000 * MB] + [2000 * MB + (i % 2) * MB for i in range(18)])
    assert trend(s, 8 << 30) is None


def test_gc_sawtooth_is_no_trend():
    # rises 40 MB a look for 4 looks, then falls back: forever
    s = series([1000 * MB + (i % 5) * 40 * MB for i in range(40)])
    assert trend(s, 8 << 30) is None


def test_flat_and_noisy_is_no_trend():
    s = series([1000 * MB + ((i * 7) % 5) * MB for i in range(40)])
    assert trend(s) is None


def test_growth_after_a_drop_counts_from_the_drop():
    s = series([3000 * MB, 3100 * MB, 1000 * MB] + [1000 * MB + i * 50 * MB for i in range(1, 10)])
    t = trend(s)
    assert t is not None and t.since_step == 200 and t.limit is None and t.full_at_step is None


def test_too_few_samples_is_no_trend():
    assert trend(series([i * 100 * MB for i in range(5)])) is None


def test_theil_sen_ignores_an_outlier():
    xs = [float(i) for i in range(10)]
    ys = [2.0 * x for x in xs]
    ys[3] = 1000.0
    assert theil_sen(xs, ys) == 2.0


def test_series_restarts_on_an_earlier_step():
    m = MemorySeries()
    for i in range(10):
        m.add(float(i), 100 + i, i * MB)
    m.add(20.0, 5, MB)
    assert [x.step for x in m.samples] == [5]
    m.add(21.0, None, MB)
    assert len(m.samples) == 1


def test_a_long_series_is_bounded_and_still_spans_the_run():
    m = MemorySeries()
    for i in range(10_000):
        m.add(float(i), i, 1000 * MB + i * MB)
    assert len(m.samples) <= WINDOW
    assert m.samples[0].step == 0 and m.samples[-1].step == 9_999
    t = trend(m.samples, 64 << 30)
    assert t is not None and t.since_step == 0 and round(t.bytes_per_step / MB) == 1


def test_the_same_step_looked_at_again_keeps_its_latest_reading():
    m = MemorySeries()
    m.add(0.0, 5, MB)
    m.add(1.0, 5, 2 * MB)
    assert [(s.step, s.used) for s in m.samples] == [(5, 2 * MB)]


def test_a_one_off_jump_mid_run_is_no_trend():
    # flat, the first compile's jump at step 2,000, flat again (noisy)
    s = series([1000 * MB + (i % 3) * MB for i in range(20)] + [3000 * MB + (i % 3) * MB for i in range(20)])
    assert trend(s, 8 << 30) is None


def test_a_noisy_leak_is_found_by_its_median_slope():
    # +10 MB per look with +-6 MB of noise and one 500 MB spike that falls back
    vals = [1000 * MB + i * 10 * MB + ((i * 7) % 5 - 2) * 3 * MB for i in range(30)]
    vals[12] += 500 * MB
    t = trend(series(vals), 8 << 30)
    assert t is not None and 8 <= t.bytes_per_step * 100 / MB <= 12


def test_series_round_trip_and_malformed_rows():
    m = MemorySeries()
    for i in range(8):
        m.add(float(i), i * 10, i * MB)
    again = MemorySeries.from_json(json.loads(json.dumps(m.to_json())))
    assert again.samples == m.samples
    assert MemorySeries.from_json([[1, "x", 2]]).samples == []
    assert MemorySeries.from_json([[1, 5, 2], [2, 4, 2]]).samples == []     # steps not rising
    assert MemorySeries.from_json("nonsense").samples == []


def test_a_leak_that_sets_in_later_counts_from_about_where_it_began():
    # flat for steps 0-1,900, then +12 MiB per 100 steps from step 2,000
    flat = [4000 * MB + (i % 2) * MB for i in range(20)]
    leak = [4000 * MB + i * 12 * MB for i in range(1, 21)]
    t = trend(series(flat + leak), 80 << 30, "GPU total")
    assert t is not None and 1000 <= t.since_step <= 2100, t
    assert round(t.bytes_per_step * 100 / MB) == 12
