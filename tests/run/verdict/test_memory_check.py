"""The `memory` check's state and words (run/verdict/checks/memory.py), from memory runways built
by the real trend (run/evidence/memtrend.py)."""

from dflash_tui.run.evidence.memory_runway import MemoryRunway, MemoryUse
from dflash_tui.run.evidence.memtrend import Sample, trend
from dflash_tui.run.verdict.checklist import CheckId, CheckState
from dflash_tui.run.verdict.checks.memory import memory_check, nodes_memory_check

MB = 1 << 20


def use(name, per_100_steps_mb, limit, s_per_step, gpu=None, since=2000, looks=20, start=4000 * MB):
    every = 100
    samples = [Sample(i * every * s_per_step, since + i * every, start + i * per_100_steps_mb * MB)
               for i in range(looks)]
    t = trend(samples, limit, "GPU total" if gpu is not None else "host MemTotal")
    return MemoryUse(name, samples[-1].used, samples[-1].step, limit,
                     "GPU total" if gpu is not None else "host MemTotal", t, gpu)


def test_a_growth_far_from_full_is_ok_and_named_with_rate_and_forecast():
    # +12 MiB per 100 steps, 0.3 s per step, 80 GiB: full ~ 600,000 steps on, about 50 h
    g = use("GPU 3", 12, 80 << 30, 0.3, gpu=3)
    c = memory_check(MemoryRunway(None, (g,)))
    assert (c.id, c.state) == (CheckId.MEMORY, CheckState.OK)
    assert c.cause.startswith("GPU 3: +12.0 MiB per 100 steps since step 2,000; full at about step "), c.cause
    assert ", in " in c.cause and " h (" in c.cause and "of 80.0 GiB, GPU total)" in c.cause


def test_a_growth_full_within_the_hour_is_a_warn_naming_the_soonest_first():
    host = use("host", 200, 8 << 30, 0.1)          # 4 GiB to go at 2 MiB a step, 0.1 s a step: ~3.5 min
    gpu = use("GPU 0", 100, 12 << 30, 0.1, gpu=0)  # slower
    c = memory_check(MemoryRunway(host, (gpu,)))
    assert c.state is CheckState.WARN and c.hint
    assert c.cause.startswith("host: +200.0 MiB per 100 steps since step 2,000; full at about step "), c.cause
    assert "GPU 0: +100.0 MiB" in c.cause and c.cause.index("host:") < c.cause.index("GPU 0:")


def test_flat_memory_is_ok_with_its_levels():
    flat = MemoryUse("host", 3 << 30, 500, 16 << 30, "cgroup memory.max", None)
    c = memory_check(MemoryRunway(flat, ()))
    assert c.state is CheckState.OK
    assert c.cause == "host 3.0 GiB of 16.0 GiB (cgroup memory.max): no steady growth"
    assert memory_check(None) is None and memory_check(MemoryRunway()) is None


def test_on_several_nodes_the_soonest_forecast_of_any_node_comes_first_named_by_its_node():
    slow = use("host", 100, 8 << 30, 0.1)            # gpu1's host: slower
    fast = use("GPU 2", 300, 12 << 30, 0.1, gpu=2)   # gpu2's GPU 2: full first
    c = nodes_memory_check([("gpu1", MemoryRunway(slow, ())), ("gpu2", MemoryRunway(None, (fast,))), ("gpu3", None)])
    assert (c.id, c.state) == (CheckId.MEMORY, CheckState.WARN) and c.hint
    assert c.cause.startswith("node gpu2: GPU 2: +300.0 MiB per 100 steps since step 2,000; full at about step "), c.cause
    assert "; node gpu1: host: +100.0 MiB" in c.cause and "gpu3" not in c.cause
    # No warn: every node's words, each named, in rank order.
    flat = MemoryUse("host", 3 << 30, 500, 16 << 30, "cgroup memory.max", None)
    ok = nodes_memory_check([("gpu1", MemoryRunway(flat, ())), ("gpu2", MemoryRunway(flat, ()))])
    assert ok.state is CheckState.OK
    assert ok.cause == ("node gpu1: host 3.0 GiB of 16.0 GiB (cgroup memory.max): no steady growth; "
                        "node gpu2: host 3.0 GiB of 16.0 GiB (cgroup memory.max): no steady growth")
    assert nodes_memory_check([("gpu1", None)]) is None and nodes_memory_check([]) is None
