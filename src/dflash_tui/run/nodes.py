"""A run across several hosts: one node per host, one verdict for all of them.

A profile with ``nodes = ["gpu1", "gpu2", ...]`` is ONE torch.distributed run: node R runs on
host ``nodes[R]`` (``localhost`` is this machine) through the same launch wrapper as a
single-host run, with the rendezvous at the first node (the environment torchrun gives a
worker: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, see `node_argv`). `plan_nodes` turns the
profile into one single-host Profile and argv per node; `combine` turns the nodes' RunReports (each judged by
run/health.py `evaluate`, never re-judged here) into the run's verdict.

The combination rule (docs/ARCHITECTURE.md, "Runs on several nodes"):

1. any node with a failing verdict (NEVER STARTED, LOG MISSING, CRASHED, KILLED, STALLED, GPU
   LOST, NOT LAUNCHED) fails the run: the run's verdict is that node's, its summary names it
   ("node gpu2: CRASHED killed by SIGKILL; also node gpu1: CRASHED exit code 1: ..."). When
   several failed, the first named is the one that stopped first: its exit time, else its last
   heartbeat or step (a hung node stopped before its peers' collective timeouts fired), else
   when its failing check turned; within the same second a node killed, stalled or never
   started comes before one that exited with a code, which is how a peer reacts to another's
   death;
2. else, every node RUNNING: RUNNING; every node FINISHED: FINISHED; every node NO RUN: NO RUN;
3. else STARTING (no verdict yet), naming the nodes that are not RUNNING yet (or, at the end,
   the ones still running after others finished).
A node that could not be reached this poll keeps its last known report; `unreachable` names
it, and the CLI's exit code is 1 for a failing run, else 3 while a node is unreachable, else
the verdict's own (0 RUNNING/FINISHED, 4 STARTING/NO RUN).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import NODE_PLACEHOLDER, ConfigError, Profile
from ..gpu.sample import GpuError, GpuErrorKind, GpuSnapshot
from ..remote.ssh import SSHParams, resolve
from .report import RunReport
from .verdict import Check, CheckState, Checklist, Verdict

LOCALHOST = "localhost"   # the node name that means this machine (no SSH)
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class NodePlan:
    node: str              # as written in `nodes`
    rank: int              # its index in `nodes`; 0 hosts the rendezvous
    profile: Profile       # a single-host profile: host = the node (None for localhost), own run_dir
    argv: tuple[str, ...]  # what the node's launch wrapper runs


def node_run_dir(profile: Profile, node: str) -> str:
    return profile.run_dir.replace(NODE_PLACEHOLDER, node)


def rendezvous_addr(profile: Profile) -> str:
    """Where the other nodes reach the first one: `master_addr`, else the first node's
    address as this machine's ssh config resolves it (its HostName), 127.0.0.1 for localhost
    (a ConfigError when a node elsewhere would have to reach this machine by that)."""
    if profile.master_addr:
        return profile.master_addr
    first = profile.nodes[0]
    if first != LOCALHOST:
        return _hostname(profile, first)
    remote = [n for n in profile.nodes[1:] if n != LOCALHOST and not _is_loopback(_hostname(profile, n))]
    if remote:
        raise ConfigError(f"{profile.source}: [profile.{profile.name}]: the first node is localhost and "
                          f"{remote[0]} cannot reach it at {LOOPBACK}; set master_addr to this machine's "
                          "address as the other nodes see it, or put another node first")
    return LOOPBACK


def _hostname(profile: Profile, node: str) -> str:
    return resolve(SSHParams(host=node, port=profile.port, user=profile.user, identity_file=profile.identity_file,
                             known_hosts=profile.known_hosts, ssh_config=profile.ssh_config))[0]


def _is_loopback(host: str) -> bool:
    return host in (LOCALHOST, "::1") or host.startswith("127.")


def node_env(profile: Profile, node: str, rank: int, master_addr: str) -> list[str]:
    """NAME=VALUE for node `rank`: what torchrun gives each worker (one process per node), the
    PET_* variables torchrun itself reads (so a `command` that is torchrun works too), and the
    node's name."""
    n, port = len(profile.nodes), profile.master_port
    return [f"DFLASH_NODE={node}", f"DFLASH_NODE_RANK={rank}", f"DFLASH_NNODES={n}",
            f"MASTER_ADDR={master_addr}", f"MASTER_PORT={port}", f"WORLD_SIZE={n}", f"RANK={rank}",
            "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", f"GROUP_RANK={rank}",
            f"PET_NNODES={n}", f"PET_NODE_RANK={rank}", "PET_NPROC_PER_NODE=1",
            f"PET_MASTER_ADDR={master_addr}", f"PET_MASTER_PORT={port}"]


def node_argv(profile: Profile, node_profile: Profile, rank: int, master_addr: str) -> tuple[str, ...]:
    """The argv of node `rank`: `env` with `node_env`, then the node's trainer (or `command`).

    The environment torchrun would give its worker, not torchrun: torchrun starts each worker
    in a session of its own, so the wrapper's group signal (stop's SIGKILL after the grace, a
    kill from outside) would miss the trainer and leave it running without its launcher. As
    the wrapper's own child, the trainer is stopped by its verified pid like any single-host
    run, and its exit code is its own. `env` because the wrapper runs an argv, and env is POSIX.
    """
    node = profile.nodes[rank]
    return ("env", *node_env(profile, node, rank, master_addr), *node_profile.trainer_argv)


def plan_nodes(profile: Profile) -> list[NodePlan]:
    """One NodePlan per entry of `profile.nodes`, in rank order."""
    if not profile.nodes:
        raise ValueError(f"profile {profile.name!r} has no nodes")
    addr = rendezvous_addr(profile)
    plans = []
    for rank, node in enumerate(profile.nodes):
        local = node == LOCALHOST
        single = replace(
            profile, name=f"{profile.name}@{node}", nodes=(), master_addr=None,
            host=None if local else node, run_dir=node_run_dir(profile, node),
            # This machine needs no SSH settings (make_targets refuses them without a host).
            user=None if local else profile.user, port=None if local else profile.port,
            identity_file=None if local else profile.identity_file,
            known_hosts=None if local else profile.known_hosts)
        plans.append(NodePlan(node, rank, single, node_argv(profile, single, rank, addr)))
    return plans


# -- the combination ----------------------------------------------------------------------------

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
        return Checklist(self.verdict, checks, self.summary)

    def report(self, profile: str, target_label: str, run_dir: str) -> RunReport:
        """The run as one RunReport, for the panes: the combined checklist; every node's
        threads, each named "NODE/thread" (so a table sorted by name groups them by node);
        the first node's launch, step, loss and log. Nothing is judged here."""
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
            last_traceback=(first_failing or lead).last_traceback)


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


def combine(nodes: list[NodeReport]) -> RunOfNodes:
    """The run's verdict from its nodes' verdicts (the rule in this module's docstring)."""
    unreachable = [n.node for n in nodes if not n.report.connected]
    # exit.json's end_time has whole seconds: within one second, the kind of failure decides.
    failing = sorted((n for n in nodes if n.verdict.failing),
                     key=lambda n: (int(_failed_at(n)), _reaction_like(n), _failed_at(n), n.rank))
    if failing:
        first, rest = failing[0], failing[1:]
        summary = first.line() + "".join(f"; also {n.line()}" for n in rest)
        return RunOfNodes(first.verdict, summary, nodes, unreachable)
    verdicts = {n.verdict for n in nodes}
    if len(verdicts) == 1 and verdicts <= {Verdict.RUNNING, Verdict.FINISHED, Verdict.NO_RUN}:
        (verdict,) = verdicts
        names = ", ".join(n.node for n in nodes)
        what = {Verdict.RUNNING: "running", Verdict.FINISHED: "finished", Verdict.NO_RUN: "no run on"}[verdict]
        return RunOfNodes(verdict, f"{len(nodes)} nodes {what}: {names}"
                          if verdict is not Verdict.NO_RUN else f"no run on {names}", nodes, unreachable)
    if Verdict.FINISHED in verdicts:
        done = ", ".join(n.node for n in nodes if n.verdict is Verdict.FINISHED)
        waiting = "; ".join(n.line() for n in nodes if n.verdict is not Verdict.FINISHED)
        return RunOfNodes(Verdict.STARTING, f"finished on {done}; still going: {waiting}", nodes, unreachable)
    waiting = "; ".join(n.line() for n in nodes if n.verdict is not Verdict.RUNNING)
    return RunOfNodes(Verdict.STARTING, f"waiting for {waiting}", nodes, unreachable)
