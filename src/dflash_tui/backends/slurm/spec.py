"""The Slurm settings of a profile (`scheduler = "slurm"`), parsed and checked.

A Slurm profile runs on a login host (`host`, or this machine) that has sbatch, squeue,
scontrol and scancel; the job runs on the cluster's compute nodes, which must see `run_dir`
(shared storage). Each problem is a ValueError phrased as the one line the user reads (the
config loader adds the file and profile). `KEYS` is what the loader is handed (config.py's
`SchedulerKeys`, through backends.SCHEDULERS and config_file.load_config): `scheduler` itself
and a Slurm key without it are the loader's to check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from ...config import SCHEDULER_KEY, SchedulerKeys

# Keys that mean something only under a scheduler; `nodes` is a count there (a list of SSH
# hosts without one).
SLURM_KEYS = ("partition", "account", "qos", "gpus_per_node", "time_limit", "sbatch_args")
MAX_NODES = 4096
# Slurm's own time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; UNLIMITED.
# ASCII digits only, the whole value (fullmatch: no trailing newline).
_TIME_RE = re.compile(r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|"
                      r"\d+-\d{1,2}:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE", re.ASCII)
# Partition, account and QOS names: what Slurm accepts, and nothing a shell or an option parser
# could take for something else.
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", re.ASCII)
# sbatch options the launch sets itself: giving them again would point the job's output away
# from the run dir or run it elsewhere than the run dir.
# --ntasks too (the launch runs one task per node: more tasks ask for more nodes), and what
# would keep sbatch's answer from the launch: --quiet (no job id printed), --wait (no answer
# until the job ends).
_OWN_LONG = ("--output", "--error", "--chdir", "--job-name", "--parsable", "--wrap", "--nodes", "--ntasks",
             "--ntasks-per-node", "--partition", "--account", "--qos", "--time", "--gpus-per-node", "--hold",
             "--quiet", "--wait")
_OWN_SHORT = "oeDJNnpAqtHQW"
# sbatch parses its options with getopt_long: a long option may be abbreviated to any prefix
# that names one option (`--out=` is `--output=`), unless the name is an option of its own
# (`--gpus` is not `--gpus-per-node`); short options cluster (`-vo FILE` is `-v -o FILE`).
# sbatch's own options that are a prefix of one the launch sets, so taken as themselves:
_SBATCH_PREFIX_OPTIONS = ("--gpus",)
# Short options that take no argument (and -I, -k, whose argument is optional: read as none,
# which refuses more): in a cluster, the letter after one is another option. Every other letter
# takes the rest of the item as its argument.
_SHORT_FLAGS = "hIkOsvV"
# --exclude as getopt_long reads it: "--exclu" is also --exclusive's, so "--exclud" is the
# shortest spelling; -x the short one.
_EXCLUDE = "--exclude"
_EXCLUDE_SHORTEST = len("--exclud")


def _own_option(arg: str) -> str | None:
    """The option the launch sets that `arg` would give sbatch again, as sbatch reads it, or
    None. Conservative: an abbreviation that could name one of them counts."""
    if arg.startswith("--"):
        name = arg.split("=", 1)[0]
        if name in _OWN_LONG:
            return name
        if name in _SBATCH_PREFIX_OPTIONS:
            return None
        hits = [own for own in _OWN_LONG if own.startswith(name)]
        return hits[0] if hits else None
    for letter in arg[1:]:
        if letter in _OWN_SHORT:
            return "-" + letter
        if letter not in _SHORT_FLAGS:
            return None   # the rest of the item is this option's argument
    return None


def exclude_of(arg: str) -> tuple[str, str] | None:
    """(what stays of `arg`, the node list it excludes) where sbatch reads `arg` as --exclude
    (`--exclude=n1`, `--exclud=n1`, `-xn1`, `-vxn1`: "-v" stays); None for any other option.
    A node list of "" is the option without its value (sbatch would take the next item)."""
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        if len(name) >= _EXCLUDE_SHORTEST and _EXCLUDE.startswith(name):
            return "", value if eq else ""
        return None
    for i, letter in enumerate(arg[1:], start=1):
        if letter == "x":
            return (arg[:i] if i > 1 else ""), arg[i + 1:]
        if letter not in _SHORT_FLAGS:
            return None   # the rest of the item is this option's argument
    return None


def node_names(node_list: str) -> list[str]:
    """A Slurm node list split at its top-level commas ("n[1,3],n5" -> ["n[1,3]", "n5"])."""
    out, depth, part = [], 0, ""
    for c in node_list:
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            out.append(part)
            part = ""
        else:
            part += c
    out.append(part)
    return [p.strip() for p in out if p.strip()]


def merge_exclude(args: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """`args` with every --exclude of the profile's and the recovery's `exclude` merged into one
    `--exclude=` (the union, the profile's first): sbatch keeps only the last of two."""
    rest: list[str] = []
    nodes: list[str] = []
    for arg in args:
        found = exclude_of(arg)
        if found is None:
            rest.append(arg)
            continue
        kept, listed = found
        if kept:
            rest.append(kept)
        nodes += node_names(listed)
    for node_list in exclude:
        nodes += node_names(node_list)
    union = list(dict.fromkeys(nodes))
    return [*rest, f"{_EXCLUDE}={','.join(union)}"] if union else rest


@dataclass(frozen=True)
class SlurmSpec:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    gpus_per_node: int | None = None
    time_limit: str | None = None
    sbatch_args: tuple[str, ...] = ()

    def where(self) -> str:
        return f"slurm{':' + self.partition if self.partition else ''}"


_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "partition": ((str,), "a partition name"),
    "account": ((str,), "an account name"),
    "qos": ((str,), "a QOS name"),
    "nodes": ((int,), "a number of nodes (under scheduler = \"slurm\"), e.g. nodes = 2"),
    "gpus_per_node": ((int,), "a number of GPUs per node"),
    "time_limit": ((str, int), 'a Slurm time limit: minutes, "HH:MM:SS" or "D-HH:MM:SS"'),
    "sbatch_args": ((list,), 'a list of sbatch options, e.g. ["--constraint=h100", "--exclusive"]'),
}


def take_slurm_keys(table: dict[str, Any]) -> tuple[SlurmSpec, dict[str, Any]]:
    """(the spec, the table without `scheduler` and the Slurm keys) of a table with
    `scheduler = "slurm"`."""
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
        if key in values and not _NAME_RE.fullmatch(values[key]):
            raise ValueError(f"{key} = {values[key]!r:.80} is not a Slurm name (letters, digits, '_', '.', '-', '+')")
    if "nodes" in values and not 1 <= values["nodes"] <= MAX_NODES:
        raise ValueError(f"nodes = {values['nodes']} is out of range; use 1 to {MAX_NODES}")
    if "gpus_per_node" in values and not 0 <= values["gpus_per_node"] <= 64:
        raise ValueError(f"gpus_per_node = {values['gpus_per_node']} is out of range; use 0 to 64")
    if "time_limit" in values:
        limit = str(values["time_limit"])
        if not _TIME_RE.fullmatch(limit) or limit in ("0",):
            raise ValueError(f"time_limit = {values['time_limit']!r:.80} is not a Slurm time limit; write "
                             'minutes (60), "HH:MM:SS" or "D-HH:MM:SS"')
        values["time_limit"] = limit
    if "sbatch_args" in values:
        args = values["sbatch_args"]
        for arg in args:
            if (not isinstance(arg, str) or not arg.startswith("-") or arg in ("-", "--")
                    or any(c in arg for c in "\x00\n\r")):
                raise ValueError(f"sbatch_args item {arg!r:.80} is not an sbatch option (each item starts "
                                 "with '-', one option per item, e.g. \"--exclusive\", \"--constraint=h100\")")
            excluded = exclude_of(arg)
            if excluded is not None and not excluded[1]:
                raise ValueError(f"sbatch_args item {arg!r:.80} names no nodes (sbatch would take the next option "
                                 "for them); write the nodes in the same item: \"--exclude=n1,n2\"")
            own = _own_option(arg)
            if own is not None:
                raise ValueError(f"sbatch_args item {arg!r:.80} sets what the profile or the launch sets ({own}, "
                                 "as sbatch reads it); use the profile's key (partition, account, qos, nodes, "
                                 "time_limit, gpus_per_node) or leave it to the launch (output, chdir, job name)")
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


KEYS = SchedulerKeys("slurm", "Slurm", SLURM_KEYS, take_slurm_keys)
