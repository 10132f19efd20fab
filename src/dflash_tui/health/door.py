"""`dflash-tui --health`: the collective bandwidth probe on each node, against its own history.

One measurement per node (each node of a `nodes` profile), one after another: two probes at
once on one host would share its links and measure each other. Each result is compared with
the median of that node's earlier results of the same kind (health/results.py), never with a
fixed number, then recorded.

Exit codes: 0 every node measured, none below SLOW_RATIO of its median (a first result is
fine); 1 a node below SLOW_RATIO of its median, or a probe that ran and failed (a crash, a
hang past its limit); 2 bad config, a profile whose python has no torch included, or a Slurm
profile (its nodes are the job's, not reachable from here); 3 a node unreachable. Several
nodes: the worst, 2 > 1 > 3 > 0 (fleet/checkall.py EXIT_PRECEDENCE).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..backends import launcher_for
from ..config import Profile
from ..fleet.checkall import worst_exit_code
from ..remote.base import Target, TargetError
from ..watch.node_plan import plan_nodes
from . import results as stored
from .probe_run import ProbeFailed, ProbeResult, run_probe

SLOW_RATIO = 0.5           # below this fraction of the node's median: exit 1
NO_TORCH = "no torch in "  # the probe's words for a python that is not the training environment

EXIT_OK, EXIT_SLOW, EXIT_CONFIG, EXIT_UNREACHABLE = 0, 1, 2, 3


@dataclass
class NodeHealth:
    name: str                       # the profile, and the node for a `nodes` profile
    where: str                      # the target's label: the node's key in the results file
    exit_code: int = EXIT_OK
    result: ProbeResult | None = None
    median_gbps: float | None = None
    earlier: int = 0                # how many earlier results the median is of
    error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.result is None or not self.median_gbps:
            return None
        return self.result.compared_gbps / self.median_gbps

    def line(self) -> str:
        if self.result is None:
            return f"{self.name}: {self.error}"
        r = self.result
        text = (f"{self.name}: all_reduce {r.bytes >> 20} MB over {r.world_size} {r.backend} processes: "
                + (f"{r.busbw_gbps:.3g} GB/s bus" if r.world_size > 1 else
                   f"{r.algbw_gbps:.3g} GB/s (one process: no link between GPUs measured)"))
        if self.ratio is None:
            text += ", first result for this node"
        else:
            text += f", {self.ratio:.2f}x this node's median of {self.earlier}"
            if self.exit_code == EXIT_SLOW:
                text += f" (below {SLOW_RATIO}x: a slow link, a busy node or a degraded GPU)"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"node": self.name, "target": self.where, "exit_code": self.exit_code,
                "result": self.result.to_json() if self.result else None,
                "median_gbps": self.median_gbps, "earlier_results": self.earlier,
                "ratio": self.ratio, "error": self.error or None, "notes": self.notes}


def _targets(profile: Profile) -> list[tuple[str, Profile]]:
    if profile.nodes:
        return [(f"{profile.name}/{plan.node}", plan.profile) for plan in plan_nodes(profile)]
    return [(profile.name, profile)]


async def _probe_node(name: str, profile: Profile, results: stored.Results, now: float) -> NodeHealth:
    if profile.scheduler is not None:
        return NodeHealth(name, profile.where(), EXIT_CONFIG, error=(
            "a scheduler's nodes are the job's: run the probe inside a job (benchmarks/device/health_probe.sh)"))
    target: Target = launcher_for(profile).target
    node = NodeHealth(name, target.label)
    try:
        node.result = await run_probe(target, profile.python)
    except ProbeFailed as exc:
        node.error = str(exc)
        node.exit_code = EXIT_CONFIG if node.error.startswith(NO_TORCH) or "no python" in node.error else EXIT_SLOW
        return node
    except TargetError as exc:
        node.error, node.exit_code = f"unreachable: {exc}", EXIT_UNREACHABLE
        return node
    finally:
        await target.close()
    earlier = results.earlier(node.where, node.result)
    node.earlier, node.median_gbps = len(earlier), stored.median_of(earlier)
    if node.ratio is not None and node.ratio < SLOW_RATIO:
        node.exit_code = EXIT_SLOW
    problem = stored.record(results, node.where, now, node.result)
    if problem:
        node.notes.append(f"not recorded: {problem}")
    return node


async def check_health(profiles: Sequence[Profile], path=None, clock=time.time) -> list[NodeHealth]:
    results = stored.load(path or stored.default_results_path())
    # An unusable file is said by each node ("not recorded: ..."); skipped lines once, here.
    note = f"{results.skipped} unreadable line(s) of {results.path} skipped" if results.skipped else ""
    out = []
    for profile in profiles:
        for name, node_profile in _targets(profile):
            out.append(await _probe_node(name, node_profile, results, clock()))
    if note and out:
        out[0].notes.insert(0, note)
    return out


def health_mode(args, profiles: Sequence[Profile]) -> int:
    nodes = asyncio.run(check_health(profiles))
    if args.json:
        print(json.dumps(nodes[0].to_json() if len(nodes) == 1 else [n.to_json() for n in nodes]))
    else:
        for n in nodes:
            print(n.line())
            for note in n.notes:
                print(f"  note: {note}")
    return worst_exit_code([n.exit_code for n in nodes])
