"""The Slurm settings of a profile (`scheduler = "slurm"`), parsed and checked.

A Slurm profile runs on a login host (`host`, or this machine) that has sbatch, squeue,
scontrol and scancel; the job runs on the cluster's compute nodes, which must see `run_dir`
(shared storage). Each problem is a ValueError phrased as the one line the user reads (the
config loader adds the file and profile).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..words import did_you_mean

SCHEDULER_KEY = "scheduler"
SCHEDULERS = ("slurm",)
# Keys that mean something only under a scheduler; `nodes` is a count there (a list of SSH
# hosts without one).
SLURM_KEYS = ("partition", "account", "qos", "gpus_per_node", "time_limit", "sbatch_args")
MAX_NODES = 4096
# Slurm's own time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; UNLIMITED.
_TIME_RE = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|"
                      r"\d+-\d{1,2}:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$")
# Partition, account and QOS names: what Slurm accepts, and nothing a shell or an option parser
# could take for something else.
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
# sbatch options the launch sets itself: giving them again would point the job's output away
# from the run dir or run it elsewhere than the run dir.
_OWN_OPTIONS = ("--output", "-o", "--error", "-e", "--chdir", "-D", "--job-name", "-J", "--parsable",
                "--wrap", "--nodes", "-N", "--ntasks-per-node", "--partition", "-p", "--account", "-A",
                "--qos", "-q", "--time", "-t", "--gpus-per-node", "--hold", "-H")


@dataclass(frozen=True)
class SlurmSpec:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    gpus_per_node: int | None = None
    time_limit: str | None = None
    sbatch_args: tuple[str, ...] = ()


_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "partition": ((str,), "a partition name"),
    "account": ((str,), "an account name"),
    "qos": ((str,), "a QOS name"),
    "nodes": ((int,), "a number of nodes (under scheduler = \"slurm\"), e.g. nodes = 2"),
    "gpus_per_node": ((int,), "a number of GPUs per node"),
    "time_limit": ((str, int), 'a Slurm time limit: minutes, "HH:MM:SS" or "D-HH:MM:SS"'),
    "sbatch_args": ((list,), 'a list of sbatch options, e.g. ["--constraint=h100", "--exclusive"]'),
}


def take_slurm_keys(table: dict[str, Any]) -> tuple[SlurmSpec | None, dict[str, Any]]:
    """(the spec, the table without the Slurm keys). Without `scheduler` the table is returned
    as is, except that a Slurm key there is an error naming `scheduler`."""
    if SCHEDULER_KEY not in table:
        stray = [k for k in SLURM_KEYS if k in table]
        if stray:
            raise ValueError(f"{stray[0]} is a Slurm setting; add scheduler = \"slurm\" or remove it")
        return None, table
    scheduler = table[SCHEDULER_KEY]
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler = {scheduler!r:.80} is not a known scheduler{did_you_mean(scheduler, SCHEDULERS)} "
                         "(use scheduler = \"slurm\" or remove it)")
    rest = {k: v for k, v in table.items() if k not in (SCHEDULER_KEY, "nodes", *SLURM_KEYS)}
    for key in ("container", "master_addr", "master_port"):
        if key in rest:
            raise ValueError(f"{key} does not apply under scheduler = \"slurm\" (the job runs where Slurm "
                             "places it, the rendezvous is its first node); remove it")
    values: dict[str, Any] = {}
    for key, (types, desc) in _TYPES.items():
        if key not in table:
            continue
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{key} = {value!r:.80} is not {desc}")
        values[key] = value
    for key in ("partition", "account", "qos"):
        if key in values and not _NAME_RE.match(values[key]):
            raise ValueError(f"{key} = {values[key]!r:.80} is not a Slurm name (letters, digits, '_', '.', '-', '+')")
    if "nodes" in values and not 1 <= values["nodes"] <= MAX_NODES:
        raise ValueError(f"nodes = {values['nodes']} is out of range; use 1 to {MAX_NODES}")
    if "gpus_per_node" in values and not 0 <= values["gpus_per_node"] <= 64:
        raise ValueError(f"gpus_per_node = {values['gpus_per_node']} is out of range; use 0 to 64")
    if "time_limit" in values:
        limit = str(values["time_limit"])
        if not _TIME_RE.match(limit) or limit in ("0",):
            raise ValueError(f"time_limit = {values['time_limit']!r:.80} is not a Slurm time limit; write "
                             'minutes (60), "HH:MM:SS" or "D-HH:MM:SS"')
        values["time_limit"] = limit
    if "sbatch_args" in values:
        args = values["sbatch_args"]
        for arg in args:
            if not isinstance(arg, str) or not arg.startswith("-") or any(c in arg for c in "\x00\n\r"):
                raise ValueError(f"sbatch_args item {arg!r:.80} is not an sbatch option (each item starts "
                                 "with '-', one option per item, e.g. \"--exclusive\", \"--constraint=h100\")")
            name = arg.split("=", 1)[0]
            short = name[:2] if not name.startswith("--") else name   # "-pdebug" is "-p debug"
            if name in _OWN_OPTIONS or short in _OWN_OPTIONS:
                raise ValueError(f"sbatch_args item {arg!r:.80} sets what the profile or the launch sets; use the "
                                 "profile's key (partition, account, qos, nodes, time_limit, gpus_per_node) "
                                 "or leave it to the launch (output, chdir, job name)")
        values["sbatch_args"] = tuple(args)
    return SlurmSpec(**values), rest


def sbatch_options(spec: SlurmSpec) -> list[str]:
    """The profile's part of the sbatch command line, one option per item."""
    opts = [f"--nodes={spec.nodes}", "--ntasks-per-node=1"]
    if spec.partition:
        opts.append(f"--partition={spec.partition}")
    if spec.account:
        opts.append(f"--account={spec.account}")
    if spec.qos:
        opts.append(f"--qos={spec.qos}")
    if spec.time_limit:
        opts.append(f"--time={spec.time_limit}")
    if spec.gpus_per_node:
        opts.append(f"--gpus-per-node={spec.gpus_per_node}")
    return [*opts, *spec.sbatch_args]
