"""A real Slurm cluster on 127.0.0.1 for tests: munged, slurmctld and two slurmd (n1, n2).

Debian's daemons, started in a temp dir with their own munge key and socket, their own ports,
spool, state and pid files; `SLURM_CONF` (the cluster's `env`) points the client commands
(sbatch, squeue, scontrol, scancel, sacct) at it. `start_cluster(workdir)` returns a running
`SlurmCluster`; `cluster.stop()` ends every daemon it started (by its own pid) and cancels
nothing else. The scheduler is tuned for tests: a 1 s scheduler interval, MinJobAge small (a
finished job leaves squeue and scontrol within seconds, as after the default 300 s on a real
cluster), KillWait 10 s (a third of Slurm's default: the bundled trainer stopped right after its
first step, while its compiler thread imports dynamo and traces, needs 4-6 s on 2 shared cores to
finish that step and save its checkpoint), no accounting (sacct answers nothing) and a `jobcomp/filetxt`
record of ended jobs. Both nodes are this machine: `NodeHostname=localhost` with a port each,
so `srun -N2` runs one task on each, as on two hosts.

Memory limits: where the cgroup v1 memory controller is writable (this container's is), jobs
run under `TaskPlugin=task/cgroup` with `ConstrainRAMSpace=yes`: the kernel's OOM killer ends a
job over its `--mem` and Slurm says OUT_OF_MEMORY. Elsewhere (cgroup v2 without delegation, a
read-only hierarchy) `JobAcctGatherParams=OverMemoryKill` kills it from the polled RSS (the
job then reads FAILED with slurmstepd's "exceeded memory limit" in its stderr). No slurmdbd:
it needs a MariaDB server (34 more packages, a database to initialise per run), more than the
tests' budget; sacct answers "accounting storage is disabled".
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
NODES = ("n1", "n2")
# A third node in a partition of its own, for a job that runs out a whole-minute time limit
# beside the other tests (nothing else is scheduled or preempted there).
SIDE_NODE = "n3"
SIDE = "side"
PARTITION = "debug"
URGENT = "urgent"         # a higher PriorityTier on the same nodes: its jobs preempt debug's (PREEMPTED)
# Every node, for a job on two nodes that loses one and runs again on the two others.
WIDE = "wide"
# The node prolog fails while this file exists in the cluster's dir: the job is requeued and
# held before its script runs, and the node drained (a node whose setup fails).
PROLOG_FAIL_MARKER = "prolog-fails"
MIN_JOB_AGE_S = 4
CPUS_PER_NODE = 2
MEMORY_MB_PER_NODE = 8000
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")
CGROUP_CONF = "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainRAMSpace=yes\nConstrainSwapSpace=yes\nAllowedSwapSpace=0\n"


class SlurmUnavailable(RuntimeError):
    """The daemons are not installed, or did not come up: the caller skips or fails."""


def missing_tools() -> list[str]:
    return [t for t in ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
            if shutil.which(t) is None and not os.access(f"/usr/sbin/{t}", os.X_OK)]


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


SLURM_CONF = """\
ClusterName=dflashtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin={task_plugin}
MpiDefault=none
SwitchType=switch/none
LaunchParameters=use_interactive_step
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1,defer_batch
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerNode=3000
MinJobAge={min_job_age}
KillWait=10
OverTimeLimit=0
InactiveLimit=0
MessageTimeout=5
SlurmdTimeout=30
SlurmctldTimeout=30
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=1
{acct_gather_params}
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
Prolog={dir}/prolog.sh
PrologFlags=Alloc
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/jobcomp.txt
{nodes}
PartitionName={partition} Nodes={node_list} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName={urgent} Nodes={node_list} MaxTime=INFINITE State=UP PriorityTier=2
PartitionName={side} Nodes={side_node} MaxTime=INFINITE State=UP PriorityTier=1
PartitionName={wide} Nodes={node_list},{side_node} MaxTime=INFINITE State=UP PriorityTier=1
"""


@dataclass
class SlurmCluster:
    workdir: Path
    conf: Path
    munge_socket: Path
    nodes: tuple[str, ...] = (*NODES, SIDE_NODE)
    partition: str = PARTITION
    min_job_age_s: int = MIN_JOB_AGE_S
    memory_enforcement: str = "jobacct"      # "cgroup": task/cgroup; "jobacct": OverMemoryKill
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with SLURM_CONF set: what the client commands need."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def jobcomp(self) -> Path:
        return self.workdir / "jobcomp.txt"

    def run(self, *argv: str, timeout: float = 20, check: bool = True) -> subprocess.CompletedProcess:
        res = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
        return res

    # -- lifecycle -------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.workdir / f"{name}.stderr", "ab")
        try:
            self._procs[name] = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def start(self, timeout: float = 30.0) -> None:
        d = self.workdir
        key = d / "munge.key"
        subprocess.run([_tool("mungekey"), "--create", "--keyfile", str(key), "--force"], check=True,
                       capture_output=True, timeout=30)
        key.chmod(0o600)
        self._spawn("munged", [_tool("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={d / 'munged.pid'}",
                               f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}"])
        self._wait(lambda: self.munge_socket.exists(), "munged", timeout)
        self._spawn("slurmctld", [_tool("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.run("scontrol", "ping", check=False, timeout=10).stdout.count("UP") > 0,
                   "slurmctld", timeout)
        for node in self.nodes:
            (d / "spool" / node).mkdir(parents=True, exist_ok=True)
            self._spawn(f"slurmd-{node}", [_tool("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
        self._wait(self._nodes_idle, "slurmd", timeout)

    def _node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=10).stdout.split()
        return dict(zip(out[::2], out[1::2]))

    def _nodes_idle(self) -> bool:
        states = self._node_states()
        return all(states.get(n) == "idle" for n in self.nodes)

    def _nodes_in_service(self) -> bool:
        """Neither drained nor down (the side node may be running its job)."""
        states = self._node_states()
        return all(states.get(n) in ("idle", "mix", "alloc", "comp") for n in self.nodes)

    def _wait(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited {proc.returncode}: {self._log_tail(name)}")
            try:
                if ready():
                    return
            except (subprocess.TimeoutExpired, OSError):
                pass
            time.sleep(0.2)
        raise SlurmUnavailable(f"{what} not ready after {timeout:.0f} s: {self._log_tail(what)}")

    def _log_tail(self, name: str) -> str:
        for path in (self.workdir / f"{name}.log", self.workdir / f"{name}.stderr"):
            if path.exists() and path.stat().st_size:
                return " | ".join(path.read_text(errors="replace").strip().splitlines()[-4:])
        return "(no log)"

    def stop(self) -> None:
        """Cancel every job of the cluster and wait for them to end, then end the daemons
        (slurmd first), each by its pid; a slurmstepd of this cluster still there is killed."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            try:
                self.run("scancel", "--full", "--user", getpass.getuser(), check=False, timeout=10)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and self.run("squeue", "-h", "-o", "%i", check=False,
                                                              timeout=10).stdout.strip():
                    time.sleep(0.3)
            except subprocess.TimeoutExpired:
                pass
        order = [n for n in self._procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._procs.clear()
        for pid in self.slurmstepd_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.memory_enforcement == "cgroup":
            # slurmd leaves its (empty) cgroup directories behind: remove them, deepest first.
            for node in self.nodes:
                root = MEMORY_CGROUP / f"slurm_{node}"
                for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    try:
                        d.rmdir()
                    except OSError:
                        pass
                try:
                    root.rmdir()
                except OSError:
                    pass

    def resume_nodes(self, timeout: float = 20.0) -> None:
        """Every node back in service (after a drain or a down), one node at a time: Slurm
        refuses `state=resume` for a node that is not drained or down, and a list with one
        such node would leave the others drained."""
        for node in self.nodes:
            self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        self._wait(self._nodes_in_service, "the nodes' return to service", timeout)

    def slurmstepd_pids(self) -> list[int]:
        """slurmstepd processes of this cluster (their log is in its dir): none may outlive stop()."""
        found = []
        prefix = str(self.workdir) + "/"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if not (entry / "comm").read_text().startswith("slurmstepd"):
                    continue
                links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            except OSError:
                continue
            if any(link.startswith(prefix) for link in links):
                found.append(int(entry.name))
        return found


def _memory_cgroup_writable() -> bool:
    probe = MEMORY_CGROUP / f"dflash-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def start_cluster(workdir: Path, *, min_job_age_s: int = MIN_JOB_AGE_S) -> SlurmCluster:
    """Write the configs and start the daemons; raises SlurmUnavailable with the reason."""
    missing = missing_tools()
    if missing:
        raise SlurmUnavailable("Slurm is not installed here (missing " + ", ".join(missing)
                               + "): apt-get install slurmctld slurmd munge slurm-client")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test cluster runs slurmd, which needs root")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "state").mkdir(exist_ok=True)
    ctld_port, *node_ports = _free_ports(2 + len(NODES))
    nodes = "\n".join(f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs={CPUS_PER_NODE} "
                      f"RealMemory={MEMORY_MB_PER_NODE} State=UNKNOWN" for n, p in zip((*NODES, SIDE_NODE), node_ports))
    # The munge socket path must stay short (a unix socket's path is at most 107 bytes).
    sock = workdir / "m.sock"
    conf = workdir / "slurm.conf"
    prolog = workdir / "prolog.sh"
    prolog.write_text(f"#!/bin/sh\nif [ -e {workdir / PROLOG_FAIL_MARKER} ]; then\n"
                      "  echo 'prolog: /scratch is not mounted' >&2; exit 1\nfi\nexit 0\n")
    prolog.chmod(0o755)
    cgroup = _memory_cgroup_writable()
    if cgroup:
        (workdir / "cgroup.conf").write_text(CGROUP_CONF)
    conf.write_text(SLURM_CONF.format(task_plugin="task/cgroup" if cgroup else "task/none",
                                      acct_gather_params="" if cgroup else "JobAcctGatherParams=OverMemoryKill",
                                      ctld_port=ctld_port, munge_socket=sock, dir=workdir, nodes=nodes,
                                      min_job_age=min_job_age_s, partition=PARTITION, urgent=URGENT, side=SIDE, side_node=SIDE_NODE, wide=WIDE,
                                      node_list=f"n[1-{len(NODES)}]"))
    cluster = SlurmCluster(workdir, conf, sock, min_job_age_s=min_job_age_s,
                           memory_enforcement="cgroup" if cgroup else "jobacct")
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


# -- a login host's PATH ---------------------------------------------------------------------

# What a hung scheduler command waits on: `sleep` with an argument of this test process's own.
HANG = f"300.{os.getpid()}"


def scheduler_shims(path: Path, *, hang: tuple[str, ...] = (), missing: bool = False,
                    scripts: dict[str, str] | None = None) -> str:
    """A PATH for the login host's commands: `hang` are scripts that wait on a child of their
    own (a controller that accepts and never answers: `sleep HANG`); `missing` leaves out every
    Slurm command (a host that is not a login host); `scripts` are sh scripts by name (a
    scheduler that answers what a test says). The rest are this machine's own."""
    path.mkdir()
    scripts = {**(scripts or {}), **{name: f"sleep {HANG}\nexit 0\n" for name in hang}}
    slurm = ("sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo")
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for tool in Path(d).iterdir():
            if not (path / tool.name).exists() and not (missing and tool.name in slurm) and tool.name not in scripts:
                (path / tool.name).symlink_to(tool)
    for name, body in scripts.items():
        (path / name).write_text("#!/bin/sh\n" + body)
        (path / name).chmod(0o755)
    return str(path)


def sleepers() -> list[int]:
    want = f"sleep\0{HANG}\0".encode()
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _read(p / "cmdline") == want]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""



@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory) -> SlurmCluster:
    """A running two-node cluster for one test module; always torn down, no daemon left.
    Outside CI a machine without Slurm (or not root) skips; with CI=true it fails."""
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    except SlurmUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{exc}; CI=true requires the Slurm tests to run")
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
