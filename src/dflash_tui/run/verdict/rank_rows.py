"""The Ranks view's rows: one per rank of the run, the odd ones first. Pure; the pane only draws.

A rank is a process of the run numbered as rank_groups.rank_numbers numbers it (RANK or
SLURM_PROCID from its environment, else the order of its pid); its row says its node, its step
and step time (as it logs them through the probe), its share of time waiting in collectives
(activity.WaitShare), its state as the engine judged its threads, and where its main thread
stands (its rank group). Odd first: STUCK ranks, then stragglers, then the odd ones out (ranks
whose group holds fewer than half the run's ranks), then the rest; within each, the ranks of the
smallest groups first, then by rank (rank 7 alone on a queue before the 63 STUCK in all_reduce).
"""

from __future__ import annotations

from dataclasses import dataclass

from .checklist import RankGroup, rank_ranges
from .rank_groups import rank_numbers
from .report import RunReport

STUCK, SLOW, ODD, OK, ENDED = "STUCK", "slow", "odd", "ok", "ended"
_ORDER = {STUCK: 0, SLOW: 1, ODD: 2, OK: 3, "stale": 3, ENDED: 4}


@dataclass(frozen=True)
class RankRow:
    rank: int
    node: str
    pid: int
    step: int | None
    step_time: float | None    # seconds, as the rank logs it
    waiting: float | None      # share of its time in collectives (None: not sampled yet)
    state: str                 # STUCK, slow, odd (its group is not every rank's), ok, stale, ended
    group: str                 # where its main thread stands: its group's class and place
    why: str = ""              # a STUCK thread's or a straggler's words
    odd: bool = False          # its group holds fewer than half the run's ranks: where ranks differ

    def cells(self) -> list[str]:
        return [str(self.rank), self.node, str(self.pid), "-" if self.step is None else str(self.step),
                "-" if self.step_time is None else f"{self.step_time:.3g} s",
                "-" if self.waiting is None else f"{self.waiting * 100:.0f} %", self.state, self.group]


def rank_rows(report: RunReport) -> list[RankRow]:
    """Every rank of `report` (a run on several nodes: of every node), odd ones first."""
    cl = report.checklist
    sources = [(n.node, n.report) for n in report.nodes] or [("", report)]
    by_member: dict[tuple[str, int, str], RankGroup] = {}
    for g in cl.rank_groups:
        for _, pid, name in g.members:
            node, _, thread = name.rpartition("/") if report.nodes else ("", "", name)
            by_member[(node, pid, thread)] = g
    every = len({r for g in cl.rank_groups for r in g.ranks})
    slow = {s.rank: s for s in cl.stragglers}
    rows = []
    for node, r in sources:
        numbers = rank_numbers((p.pid, p.rank) for p in r.probes)
        waits = r.activity.waits if r.activity is not None else {}
        # A program of one's own logs no step through the probe: the step its node's log (or
        # metric file) shows is the step of the node's first rank, the one that prints it.
        logged = r.progress.step if r.progress is not None else None
        first = min((numbers[p.pid] for p in r.probes if p.pid in numbers and not p.ended), default=None)
        threads = {}
        for t in r.checklist.threads:
            if t.pid is not None:
                threads.setdefault(t.pid, []).append(t)
        for p in r.probes:
            if p.pid not in numbers:
                continue
            rank = numbers[p.pid]
            mine = threads.get(p.pid, [])
            main = next((t for t in mine if t.name == "MainThread"), mine[0] if mine else None)
            g = by_member.get((node, p.pid, main.name)) if main is not None else None
            stuck = [t for t in mine if t.trouble]
            odd = g is not None and 2 * len(g.ranks) < every
            if p.ended:
                state, why = ENDED, ""
            elif stuck:
                state, why = STUCK, stuck[0].why
            elif rank in slow:
                state, why = SLOW, slow[rank].why
            elif odd:
                state, why = ODD, ""
            else:
                state, why = ("stale" if any(t.stale for t in mine) else OK), ""
            w = waits.get(p.pid)
            place = f"{g.cls} {g.place()}" if g is not None else (
                f"{main.cls} {main.where}".strip() if main is not None else "")
            rows.append((len(g.ranks) if g is not None else every,
                         RankRow(rank, p.node or node, p.pid,
                                 p.step if p.step is not None or rank != first else logged, p.step_time,
                                 w.share if w is not None and w.samples else None, state, place, why, odd)))
    rows.sort(key=lambda sr: (_ORDER.get(sr[1].state, 3), sr[0], sr[1].rank, sr[1].node))
    return [row for _, row in rows]


def rank_summary(rows: list[RankRow]) -> str:
    """ "1024 ranks on 128 nodes · 1024 STUCK: ranks 0-1023 · 1 odd one(s) out: rank 777" """
    nodes = {r.node for r in rows if r.node}
    parts = [f"{len(rows)} rank{'' if len(rows) == 1 else 's'}" + (f" on {len(nodes)} nodes" if len(nodes) > 1 else "")]
    for label, ranks in ((STUCK, [r.rank for r in rows if r.state == STUCK]),
                         ("slow", [r.rank for r in rows if r.state == SLOW]),
                         ("odd one(s) out", [r.rank for r in rows if r.odd])):
        if ranks:
            parts.append(f"{len(ranks)} {label}: rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}")
    return " · ".join(parts)
