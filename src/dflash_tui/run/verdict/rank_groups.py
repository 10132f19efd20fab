"""Many ranks as one picture: the probed threads of every rank grouped by where they stand.

Threads whose stacks agree (the same class, the same innermost frame of the program's own code)
are one group across ranks and processes, so "which rank differs?" is read off the first rows:
"rank 7: queue (data.py:40)" before "ranks 0-6, 8-63: collective all_reduce (train.py:88)".
Pure, from the checklist's threads (ThreadHealth, each with its process's rank: RANK or
SLURM_PROCID in its environment, as the probe read it; in a run with no rank at all, the order
of its processes; a process without one beside ranked ones is their launcher, not a rank).

Order, odd ones out first: groups that cover fewer ranks than the run has, fewest ranks first;
then the groups on every rank, those with STUCK threads first, the most threads first.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

from .checklist import RankGroup, ThreadHealth, ThreadState


def group_ranks(threads: Sequence[ThreadHealth], nodes: Sequence[str] | None = None) -> list[RankGroup]:
    """The groups of a run of two or more ranks (`nodes[i]`: the node of `threads[i]`, for a run
    on several nodes); none for one rank, which the thread rows already show."""
    probed = [(i, t) for i, t in enumerate(threads) if t.pid is not None]
    if any(t.rank is not None for _, t in probed):
        # A process without a rank beside ranked ones is their launcher (torchrun's agent): it
        # starts and watches the ranks, it is never one of them.
        probed = [(i, t) for i, t in probed if t.rank is not None]
    # A process without a rank in its environment: its place in the order of such processes.
    unranked = sorted({t.pid for _, t in probed if t.rank is None})
    order = {pid: n for n, pid in enumerate(unranked)}
    rank_of = {i: (t.rank if t.rank is not None else order[t.pid]) for i, t in probed}
    # The same rank on several nodes is several processes: rank numbers are the run's own, so
    # only a run whose ranks were numbered per node has them twice, and then the node tells.
    if len({rank_of[i] for i, _ in probed}) < 2:
        return []
    acc: dict[tuple[str, str], dict] = defaultdict(lambda: {"ranks": set(), "members": [], "stuck": False,
                                                               "doing": "", "nodes": set()})
    for i, t in probed:
        g = acc[(t.cls, t.where)]
        g["ranks"].add(rank_of[i])
        g["members"].append((rank_of[i], t.pid, t.name))
        g["stuck"] = g["stuck"] or t.state is ThreadState.STUCK
        g["doing"] = g["doing"] or t.doing
        if nodes is not None:
            g["nodes"].add(nodes[i])
    every = len({rank_of[i] for i, _ in probed})
    groups = [RankGroup(ranks=tuple(sorted(g["ranks"])), cls=cls, where=where, doing=g["doing"],
                        threads=len(g["members"]), stuck=g["stuck"], nodes=tuple(sorted(g["nodes"])),
                        members=tuple(sorted(g["members"])))
              for (cls, where), g in acc.items()]
    return sorted(groups, key=lambda g: (len(g.ranks) == every, len(g.ranks), not g.stuck, -g.threads,
                                         g.cls, g.where))


def odd_ones_out(groups: Iterable[RankGroup]) -> list[RankGroup]:
    """The groups that do not cover every rank of the run: where the ranks differ."""
    groups = list(groups)
    every = len({r for g in groups for r in g.ranks})
    return [g for g in groups if len(g.ranks) < every]
