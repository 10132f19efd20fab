"""A run across several hosts: one node per host, one verdict for all of them.

A profile with ``nodes = ["gpu1", "gpu2", ...]`` is ONE torch.distributed run: node R runs on
host ``nodes[R]`` (``localhost`` is this machine) through the same launch wrapper as a
single-host run, with the rendezvous at the first node (the environment torchrun gives a
worker: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, see `node_argv`). `plan_nodes` turns the
profile into one single-host Profile and argv per node; run/verdict/combine.py turns the nodes'
reports into the run's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import NODE_PLACEHOLDER, ConfigError, Profile
from ..remote.ssh_connection import SSHParams, resolve

LOCALHOST = "localhost"   # the node name that means this machine (no SSH)
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class NodePlan:
    node: str              # as written in `nodes`
    rank: int              # its index in `nodes`; 0 hosts the rendezvous
    profile: Profile       # a single-host profile: host = the node (None for localhost), own run_dir
    argv: tuple[str, ...]  # what the node's launch wrapper runs


_SSH_FIELDS = ("user", "port", "identity_file", "known_hosts")

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
    return resolve(SSHParams(profile.ssh_dest.on(node)))[0]


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
        # This machine needs no SSH settings (make_host_target refuses them without a host).
        no_ssh = {f: None for f in _SSH_FIELDS} if local else {}
        single = replace(profile, name=f"{profile.name}@{node}", nodes=(), master_addr=None,
                         host=None if local else node, run_dir=node_run_dir(profile, node), **no_ssh)
        plans.append(NodePlan(node, rank, single, node_argv(profile, single, rank, addr)))
    return plans
