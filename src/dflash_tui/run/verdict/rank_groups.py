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

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..stacks.classify import ThreadClass
from .checklist import RankGroup, ThreadHealth, ThreadState, rank_ranges


def group_ranks(threads: Sequence[ThreadHealth], nodes: Sequence[str] | None = None) -> list[RankGroup]:
    """The groups of a run of two or more ranks (`nodes[i]`: the node of `threads[i]`, for a run
    on several nodes); none for one rank, which the thread rows already show.

    One pass to number the processes and one to group their threads: at 1,024 ranks x 20
    threads this runs every poll (benchmarks/rank_groups_cost.py)."""
    env_rank: dict[int, int | None] = {}
    for t in threads:
        pid = t.pid
        if pid is not None and env_rank.get(pid) is None:
            env_rank[pid] = t.rank
    rank_of = rank_numbers(env_rank.items())
    # The same rank on several nodes is several processes: rank numbers are the run's own, so
    # only a run whose ranks were numbered per node has them twice, and then the node tells.
    every = len(set(rank_of.values()))
    if every < 2:
        return []
    acc: dict[tuple[str, str], list] = {}
    stuck_state = ThreadState.STUCK
    for i, t in enumerate(threads):
        rank = rank_of.get(t.pid)   # None: not probed, or the launcher beside ranked processes
        if rank is None:
            continue
        key = (t.cls, t.where)
        g = acc.get(key)
        if g is None:
            # ranks, members, stuck, doing, nodes
            g = acc[key] = [set(), [], False, "", set()]
        g[0].add(rank)
        g[1].append((rank, t.pid, t.name))
        if not g[2] and t.state is stuck_state:
            g[2] = True
        if not g[3] and t.doing:
            g[3] = t.doing
        if nodes is not None:
            g[4].add(nodes[i])
    groups = [RankGroup(ranks=tuple(sorted(ranks)), cls=ThreadClass(cls), where=where, doing=doing, threads=len(members),
                        stuck=stuck, nodes=tuple(sorted(n for n in nodes_ if n)) if nodes_ else (),
                        members=tuple(sorted(members)))
              for (cls, where), (ranks, members, stuck, doing, nodes_) in acc.items()]
    return sorted(groups, key=lambda g: (len(g.ranks) == every, len(g.ranks), not g.stuck, -g.threads,
                                         g.cls.value, g.where))


def odd_ones_out(groups: Iterable[RankGroup]) -> list[RankGroup]:
    """The groups that do not cover every rank of the run: where the ranks differ."""
    groups = list(groups)
    every = len({r for g in groups for r in g.ranks})
    return [g for g in groups if len(g.ranks) < every]


@dataclass(frozen=True)
class OddNodes:
    """The nodes of the ranks that stood outside a collective the other ranks waited in."""

    nodes: tuple[str, ...]
    ranks: tuple[int, ...]

    def why(self) -> str:
        """ "rank 1 was not in the collective the others waited in" """
        who = f"rank {self.ranks[0]} was" if len(self.ranks) == 1 else f"ranks {rank_ranges(self.ranks)} were"
        return f"{who} not in the collective the others waited in"


def nodes_outside_collective(groups: Sequence[RankGroup]) -> OddNodes | None:
    """Where a hung collective names a node: ranks with a thread waiting in a collective, and no
    more ranks with none (the ones the collective waits for), each of those placed on a node by a
    group of theirs alone (`RankGroup.nodes`: a run on several nodes). None when most ranks are
    outside it, a rank's node is not known, or the odd nodes are every node of the run
    (excluding them all would leave nothing to run on)."""
    every = {r for g in groups for r in g.ranks}
    waiting = {r for g in groups if g.cls is ThreadClass.COLLECTIVE for r in g.ranks}
    outside = every - waiting
    if not waiting or not outside or len(outside) > len(waiting):
        return None
    placed: set[int] = set()
    nodes: dict[str, None] = {}
    for g in groups:
        if g.nodes and set(g.ranks) <= outside:
            placed.update(g.ranks)
            nodes.update(dict.fromkeys(g.nodes))
    run_nodes = {n for g in groups for n in g.nodes}
    if placed != outside or not nodes or set(nodes) >= run_nodes:
        return None
    return OddNodes(tuple(sorted(nodes)), tuple(sorted(outside)))


def rank_numbers(procs: Iterable[tuple[int, int | None]]) -> dict[int, int]:
    """pid -> rank for the processes (pid, rank from its environment) of one run, by the rule
    `group_ranks` numbers threads with: the environment's rank; in a run with no rank at all,
    the order of the pids; a process without one beside ranked ones (the launcher) is none."""
    procs = list(procs)
    if any(r is not None for _, r in procs):
        return {pid: r for pid, r in procs if r is not None}
    return {pid: n for n, pid in enumerate(sorted({pid for pid, _ in procs}))}
