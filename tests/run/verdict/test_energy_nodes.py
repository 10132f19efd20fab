"""A run on several nodes has one energy and one cost: each node's own (as one host's is worked
out, from its GPUs' counters since the launch) summed into the run's report, each GPU named
"NODE:INDEX"; a GPU without a counter is named with its node, never 0 kWh."""

from __future__ import annotations

from dataclasses import replace

from dflash_tui.run.verdict.checklist import Checklist
from dflash_tui.run.verdict.combine import NodeReport, combine
from dflash_tui.run.verdict.energy import nodes_cost, nodes_energy, priced_energy
from dflash_tui.run.verdict.gpu_facts import GpuFacts
from dflash_tui.run.verdict.report import RunReport
from dflash_tui.verdicts import Verdict

HOUR = 3600.0


def gpu(index: int, energy_mj: int | None, pid: int = 7) -> GpuFacts:
    return GpuFacts(index, "H100", 90.0, 90.0, 1 << 30, 80 << 30, 500.0, 700.0, 1900, 1980, (pid,), False,
                    energy_mj=energy_mj)


def node(name: str, rank: int, facts: list[GpuFacts], baseline: dict[str, int | None], *,
         eta_s: float | None = 1800.0, per_kwh: float | None = None) -> NodeReport:
    """A node's report with its energy and cost worked out as one host's watch does."""
    energy, cost = priced_energy(facts=facts, baseline_mj=baseline, run_s=HOUR, step=1000, tokens_per_s=None,
                                 eta_s=eta_s, per_gpu_hour=2.0, per_kwh=per_kwh)
    report = RunReport(time=200.0, profile="p", target_label=name, run_dir="/d",
                       checklist=Checklist(Verdict.RUNNING, [], "step 1000"), energy=energy, cost=cost)
    return NodeReport(name, rank, report)


def test_the_runs_energy_and_cost_are_its_nodes_summed():
    a = node("gpu1", 0, [gpu(0, 5_000_000), gpu(1, 7_000_000)], {"0": 1_000_000, "1": 1_000_000})
    b = node("gpu2", 1, [gpu(0, 4_000_000)], {"0": 2_000_000})
    run = combine([a, b]).report("p", "nodes", "/d")
    e = run.energy
    assert e is not None and e.joules == 4_000 + 6_000 + 2_000, e
    assert e.gpus == ("gpu1:0", "gpu1:1", "gpu2:0") and e.missing == ()
    assert e.j_per_step == 12.0                     # 12,000 J over the 1,000 steps the ranks made together
    assert e.words() == "energy 0.003 kWh (12,000 J) on 3 GPUs, 12.0 J per step"
    c = run.cost
    assert c is not None and (c.per_hour, c.so_far, c.to_finish) == (6.0, 6.0, 3.0), c   # 3 GPUs at 2.00/h
    assert e.to_json()["gpus"] == ["gpu1:0", "gpu1:1", "gpu2:0"]


def test_a_node_gpu_without_a_counter_is_named_with_its_node_and_the_energy_says_what_it_covers():
    a = node("gpu1", 0, [gpu(0, 5_000_000)], {"0": 1_000_000}, per_kwh=0.3)
    b = node("gpu2", 1, [gpu(0, None)], {"0": None}, per_kwh=0.3)
    run = combine([a, b]).report("p", "nodes", "/d")
    assert run.energy is not None and run.energy.joules == 4_000 and run.energy.gpus == ("gpu1:0",)
    assert run.energy.missing == (("gpu2:0", "no energy counter"),)
    assert run.energy.short() == "0.001 kWh*"
    assert run.energy.words().endswith("; no energy counter on GPU gpu2:0"), run.energy.words()
    assert run.cost is not None and run.cost.unpriced.startswith("node gpu2: the energy is not priced"), run.cost
    # No node with a counter at all: unknown, never 0 kWh.
    none = nodes_energy([("gpu1", b.report.energy), ("gpu2", b.report.energy)])
    assert none is not None and none.joules is None and none.kwh is None and len(none.missing) == 2


def test_what_one_node_cannot_say_the_run_does_not_guess():
    a = node("gpu1", 0, [gpu(0, 5_000_000)], {"0": 1_000_000})
    b = node("gpu2", 1, [gpu(0, 3_000_000)], {"0": 1_000_000}, eta_s=None)
    cost = nodes_cost([("gpu1", a.report.cost), ("gpu2", b.report.cost)])
    assert cost is not None and cost.to_finish is None and cost.so_far == 4.0, cost
    # A node that saw no GPU (or is not priced) adds nothing; no node at all: no energy, no cost.
    cpu = replace(b.report, energy=None, cost=None)
    run = combine([a, NodeReport("cpu1", 1, cpu)]).report("p", "nodes", "/d")
    assert run.energy is not None and run.energy.gpus == ("gpu1:0",) and run.cost is not None
    assert run.cost.so_far == 2.0
    assert nodes_energy([("a", None), ("b", None)]) is None and nodes_cost([("a", None)]) is None
