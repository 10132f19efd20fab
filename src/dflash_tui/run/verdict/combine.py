"""The verdict of a run on several nodes, from its nodes' (each judged by run/verdict/health.py
`evaluate`, never re-judged here), and the run as one RunReport and one GpuSnapshot for the panes.

The combination rule (watch/README.md, "One run on several nodes"):

1. any node with a failing verdict (NEVER STARTED, LOG MISSING, CRASHED, KILLED, STALLED, GPU
   LOST, NOT LAUNCHED) fails the run: the run's verdict is that node's, its summary names it
   ("node gpu2: CRASHED killed by SIGKILL; also node gpu1: CRASHED exit code 1: ..."). When
   several failed, the first named is the one that stopped first: its exit time, else its last
   heartbeat or step (a hung node stopped before its peers' collective timeouts fired), else
   when its failing check turned; within the same second a node killed, stalled or never
   started comes before one that exited with a code, which is how a peer reacts to another's
   death;
2. else, every node RUNNING: RUNNING; every node NO RUN: NO RUN; every node ended (FINISHED or
   STOPPED): STOPPED if any node was stopped, else FINISHED; every node stopping or ended, one
   STOPPING: STOPPING;
3. else STARTING (no verdict yet), naming the nodes that are not RUNNING yet (or, at the end,
   the ones still going after others ended).
A run that is STALLED where some nodes' ranks wait in a collective (their threads' class, as
each node's engine read its stacks) and another node's ranks are not in it says so first:
"hung in a collective: node gpu1 (rank 0) waits in all_reduce (train.py:42); node gpu2 (rank 1)
is not in it: checkpoint_to_slow_disk (train.py:9)" — the node not in it is where to look.
A node that could not be reached this poll keeps its last known report; `unreachable` names
it, and the CLI's exit code is 1 for a failing run, else 3 while a node is unreachable, else
the verdict's own (0 RUNNING/FINISHED/STOPPED, 4 STARTING/STOPPING/NO RUN).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...gpu.sample import GpuError, GpuErrorKind, GpuSnapshot
from ..stacks.classify import ThreadClass
from .energy import nodes_cost, nodes_energy
from .report import RunReport
from .rank_groups import group_ranks
from .stragglers import paces, stragglers, with_stragglers
from .checklist import Check, CheckState, Checklist, ThreadHealth, Verdict
from .checks.memory import nodes_memory_check


@dataclass
class NodeReport:
    node: str
    rank: int
    report: RunReport       # this node's report (the last known one when `connected` is False)

    @property
    def verdict(self) -> Verdict:
        return self.report.checklist.verdict

    def line(self) -> str:
        """ "node gpu2: CRASHED exit code 1: ..." """
        summary = self.report.checklist.summary
        return f"node {self.node}: {self.verdict.value}" + (f" {summary}" if summary else "")


@dataclass
class RunOfNodes:
    verdict: Verdict
    summary: str
    nodes: list[NodeReport]
    unreachable: list[str]   # nodes whose transport failed at this poll

    def checklist(self) -> Checklist:
        """The run's checklist: one check per node, then that node's checks labelled with it."""
        checks: list[Check] = []
        for n in self.nodes:
            cl = n.report.checklist
            state = (CheckState.FAIL if cl.verdict.failing else CheckState.OK if cl.verdict.healthy
                     else CheckState.PENDING)
            if not n.report.connected:
                state = CheckState.FAIL if cl.verdict.failing else CheckState.WARN
            cause = f"{cl.verdict.value}" + (f": {cl.summary}" if cl.summary else "")
            if not n.report.connected:
                cause += f" (unreachable: {n.report.error or 'no connection'})"
            checks.append(Check(f"node:{n.node}", f"node {n.node} (rank {n.rank})", state, cause,
                                "" if state is CheckState.OK else f"see node {n.node}'s checks below"))
            checks += [replace(c, id=f"{n.node}:{c.id}", label=f"{n.node} · {c.label}") for c in cl.checks]
        # The run's memory runway: the soonest forecast of any node's, named by its node; only
        # the nodes whose run lives (a node's own `memory` check goes with its run too).
        memory = nodes_memory_check([(n.node, n.report.memory) for n in self.nodes
                                     if n.report.checklist.verdict.alive])
        if memory is not None:
            checks.append(memory)
        threads = [replace(t, name=f"{n.node}/{t.name}") for n in self.nodes for t in n.report.checklist.threads]
        nodes = [n.node for n in self.nodes for _ in n.report.checklist.threads]
        # The run's silence limit: the node's that trips first.
        limits = [(n.report.checklist.stall_limit_s, f"node {n.node}: {n.report.checklist.stall_limit_why}")
                  for n in self.nodes if n.report.checklist.stall_limit_s is not None]
        stall_s, why = min(limits, default=(None, ""))
        cl = Checklist(self.verdict, checks, self.summary, threads, rank_groups=group_ranks(threads, nodes),
                       stall_limit_s=stall_s, stall_limit_why=why)
        # Stragglers across the nodes: each node's engine saw only its own ranks.
        probes = [(n.node, p) for n in self.nodes for p in n.report.probes]
        waits = {(n.node, pid): w for n in self.nodes if n.report.activity is not None
                 for pid, w in n.report.activity.waits.items()}
        return with_stragglers(cl, stragglers(paces(probes, waits)))

    def report(self, profile: str, target_label: str, run_dir: str) -> RunReport:
        """The run as one RunReport, for the panes: the combined checklist; every node's
        threads, each named "NODE/thread" (so a table sorted by name groups them by node);
        the first node's launch, step, loss and log; the energy and cost over every node
        (run/verdict/energy.py). Nothing is judged here."""
        reports = [n.report for n in self.nodes]
        lead = reports[0]
        with_status = [(n.node, n.report.status) for n in self.nodes if n.report.status is not None]
        status = None
        if with_status:
            base = lead.status if lead.status is not None else with_status[0][1]
            status = replace(base, threads=[replace(t, name=f"{node}/{t.name}") for node, st in with_status
                                            for t in st.threads])
        alive = [r.pid_alive for r in reports]
        first_failing = next((n.report for n in self.nodes if n.verdict is self.verdict and self.verdict.failing), None)
        errors = [f"node {n.node}: {n.report.error}" for n in self.nodes if n.report.error]
        stale = [r.stale_since for r in reports if r.stale_since is not None]
        return RunReport(
            time=max(r.time for r in reports), profile=profile, target_label=target_label, run_dir=run_dir,
            checklist=self.checklist(), launch=lead.launch, exit=lead.exit, stop=lead.stop, status=status,
            # Alive only when every node's process is: a thread of a dead node is not STUCK.
            pid_alive=False if False in alive else (None if None in alive else True),
            uptime_s=lead.uptime_s, connected=all(r.connected for r in reports),
            stale_since=min(stale) if stale else None, error="; ".join(errors) or None,
            last_traceback=(first_failing or lead).last_traceback, progress=lead.progress, activity=lead.activity,
            nodes=tuple(self.nodes),
            energy=nodes_energy([(n.node, n.report.energy) for n in self.nodes]),
            cost=nodes_cost([(n.node, n.report.cost) for n in self.nodes]))


def merge_gpu_snapshots(snaps: list[tuple[str, GpuSnapshot]]) -> GpuSnapshot:
    """Every node's GPUs in one snapshot, grouped by node in rank order: numbered on from one
    node to the next (the pane keys rows by index) and named "NODE:INDEX MODEL"."""
    gpus = []
    errors = []
    for node, snap in snaps:
        for g in snap.gpus:
            model = g.name[len("NVIDIA "):] if g.name.startswith("NVIDIA ") else g.name
            gpus.append(replace(g, index=len(gpus), name=f"{node}:{g.index} {model}"))
        if snap.error is not None:
            errors.append(f"node {node}: {snap.error.message}")
    kinds = {snap.error.kind for _, snap in snaps if snap.error is not None}
    error = GpuError(kinds.pop() if len(kinds) == 1 else GpuErrorKind.PROBE_FAILED, "; ".join(errors)) if errors else None
    times = [snap.time for _, snap in snaps]
    return GpuSnapshot(time=max(times) if times else 0.0, source="+".join(sorted({s.source for _, s in snaps})),
                       gpus=tuple(gpus), error=error,
                       driver_version=", ".join(sorted({s.driver_version for _, s in snaps if s.driver_version})))


def _failed_at(n: NodeReport) -> float:
    """When the node stopped: its exit, else its last sign of life (a hung or killed node's
    last heartbeat or step, which comes before its peers' collective timeouts), else when its
    failing check turned."""
    r = n.report
    if r.exit is not None:
        return float(r.exit.end_time)
    st = r.status
    if st is not None:
        steps = [t.last_step_time for t in st.threads if t.last_step_time is not None]
        beats = [t for t in (st.heartbeat_time, max(steps, default=None)) if t is not None]
        if n.verdict is Verdict.STALLED and beats:
            return min(beats)   # a process that beats but makes no step stopped at its last step
        if beats:
            return max(beats)
    times = [c.since for c in r.checklist.checks if c.state is CheckState.FAIL and c.since is not None]
    return min(times) if times else r.time


def _reaction_like(n: NodeReport) -> bool:
    """An exit with a code: how a healthy peer ends when another node dies under it."""
    r = n.report
    return n.verdict is Verdict.CRASHED and r.exit is not None and r.exit.exit_code is not None


def _place(t: ThreadHealth) -> str:
    """ "all_reduce (train.py:42)" or "checkpoint_to_slow_disk (train.py:9)" """
    if t.doing and t.where and t.cls != "library":
        return f"{t.doing} ({t.where.rsplit(' (', 1)[-1]}"
    return t.where or t.doing or "an unknown frame"


def _speaker(threads: list[ThreadHealth]) -> ThreadHealth | None:
    """The thread that speaks for a node's ranks: a rank's main thread, else any rank's thread."""
    ranked = [t for t in threads if t.rank is not None]
    return next((t for t in ranked if t.name == "MainThread"), ranked[0] if ranked else None)


def _collective_split(nodes: list[NodeReport]) -> str:
    """ "hung in a collective: node A (rank 0) waits in ...; node B (rank 1) is not in it: ..." when
    some nodes' ranks wait in a collective and others' do not ("" otherwise)."""
    waiting, elsewhere = [], []
    for n in nodes:
        threads = [t for t in n.report.checklist.threads if t.pid is not None and t.rank is not None]
        if not threads:
            continue
        coll = [t for t in threads if t.cls == ThreadClass.COLLECTIVE]
        if coll:
            waiting.append((n, _speaker(coll) or coll[0]))
        elif (t := _speaker(threads)) is not None:
            elsewhere.append((n, t))
    if not waiting or not elsewhere:
        return ""
    def who(n: NodeReport, t: ThreadHealth) -> str:
        return f"node {n.node} (rank {t.rank})"
    parts = [f"{who(n, t)} waits in {_place(t)}" for n, t in waiting]
    parts += [f"{who(n, t)} is not in it: {_place(t)}" for n, t in elsewhere]
    return "hung in a collective: " + "; ".join(parts)


def combine(nodes: list[NodeReport]) -> RunOfNodes:
    """The run's verdict from its nodes' verdicts (the rule in this module's docstring)."""
    unreachable = [n.node for n in nodes if not n.report.connected]
    # exit.json's end_time has whole seconds: within one second, the kind of failure decides.
    failing = sorted((n for n in nodes if n.verdict.failing),
                     key=lambda n: (int(_failed_at(n)), _reaction_like(n), _failed_at(n), n.rank))
    if failing:
        first, rest = failing[0], failing[1:]
        split = _collective_split(nodes) if any(n.verdict is Verdict.STALLED for n in failing) else ""
        if split:
            return RunOfNodes(Verdict.STALLED, split, nodes, unreachable)
        summary = first.line() + "".join(f"; also {n.line()}" for n in rest)
        return RunOfNodes(first.verdict, summary, nodes, unreachable)
    verdicts = {n.verdict for n in nodes}
    names = ", ".join(n.node for n in nodes)
    if verdicts == {Verdict.RUNNING}:
        return RunOfNodes(Verdict.RUNNING, f"{len(nodes)} nodes running: {names}", nodes, unreachable)
    if verdicts == {Verdict.NO_RUN}:
        return RunOfNodes(Verdict.NO_RUN, f"no run on {names}", nodes, unreachable)
    if Verdict.STOPPING in verdicts and all(v.ended_well or v is Verdict.STOPPING for v in verdicts):
        going = [n for n in nodes if n.verdict is Verdict.STOPPING]
        return RunOfNodes(Verdict.STOPPING, "; ".join(n.line() for n in going), nodes, unreachable)
    if all(v.ended_well for v in verdicts):
        # A stop that reached a node after it had finished still stopped the run.
        verdict = Verdict.STOPPED if Verdict.STOPPED in verdicts else Verdict.FINISHED
        what = "stopped" if verdict is Verdict.STOPPED else "finished"
        return RunOfNodes(verdict, f"{len(nodes)} nodes {what}: {names}", nodes, unreachable)
    if any(v.ended_well for v in verdicts):
        done = ", ".join(n.node for n in nodes if n.verdict.ended_well)
        waiting = "; ".join(n.line() for n in nodes if not n.verdict.ended_well)
        return RunOfNodes(Verdict.STARTING, f"ended on {done}; still going: {waiting}", nodes, unreachable)
    waiting = "; ".join(n.line() for n in nodes if n.verdict is not Verdict.RUNNING)
    return RunOfNodes(Verdict.STARTING, f"waiting for {waiting}", nodes, unreachable)
