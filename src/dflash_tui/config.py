"""Profiles: where a run lives and how to start it, loaded from TOML.

One table per profile under ``[profile.NAME]``. Every problem is reported as a `ConfigError`
whose message names the file, the key and what is wrong, so the CLI can print one line and
exit 2. With no config file at all, the built-in ``local`` profile runs the bundled trainer on
this machine. The file's other top-level tables are `Section`s, each declared by the room that
reads it and handed to the loader by the caller (config_file.SECTIONS): this module knows no
table but ``profile``, and refuses one no section claims.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Generic, Protocol, TypeVar, cast

from .remote.container import parse_container_spec
from .remote.ssh_dest import SSHDest
from .progress_regex import ProgressRegexError, compile_progress_regex
from .table_values import CONTROL_RE, TableError, show_value
from .words import did_you_mean
from .small_file import SmallFileRefused, read_small_file
from .env_entry import env_entry_problem

DEFAULT_PROFILE = "local"

# A small CPU run of the bundled trainer: one target thread and two drafter threads, so the
# embedded default exercises the thread pool and the compile gate without a GPU.
LOCAL_TRAIN_ARGS = ("--target-devices", "cpu", "--drafter-devices", "cpu,cpu", "--steps", "2000")

_PROFILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# A config file is a few KiB; anything this big is the wrong file, and is never read whole.
MAX_CONFIG_BYTES = 1 << 20

# Numeric settings: (lowest, lowest allowed itself, highest). The highs keep every limit a
# launch waits on far below run/launch/claim.py's CLAIM_STALE_AFTER_S.
_NUMBER_RANGES: dict[str, tuple[float, bool, float]] = {
    "stall_after_s": (0.0, False, 7 * 86400.0),
    "compile_stall_after_s": (0.0, False, 7 * 86400.0),
    "launch_deadline_s": (0.0, False, 600.0),
    "stop_grace_s": (0.0, True, 600.0),
    "min_free_gb": (0.0, True, float(1 << 20)),
    "cost_per_gpu_hour": (0.0, True, 1e6),
    "cost_per_kwh": (0.0, True, 1e6),
    "memory_limit_mb": (0.0, False, float(1 << 40)),
}
# --wait's ceiling: a day.
MAX_WAIT_S = 86400.0

# A run dir here would write launch.sh, logs and history/ among the system's own files.
_SYSTEM_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/proc", "/sys", "/dev")
_SYSTEM_DIR_EXCEPTIONS = ("/usr/local", "/dev/shm")
_TOP_LEVEL_DIRS = ("/home", "/root", "/tmp", "/var", "/opt", "/srv", "/mnt", "/media", "/run")


class ConfigError(ValueError):
    """A config problem, already phrased as the one line the user reads."""


SCHEDULER_KEY = "scheduler"


class SchedulerSpec(Protocol):
    """A scheduler's settings of one profile, as its backend parsed them (opaque here)."""

    def where(self) -> str:
        """The scheduler in the target's label, e.g. "slurm:gpu"."""


@dataclass(frozen=True)
class SchedulerKeys:
    """A scheduler's profile keys, published by its launch backend (backends/NAME/) and handed
    to the loader by the caller (backends.SCHEDULERS, through config_file.load_config): config
    sits below the backends and names none of them, yet every profile is checked whole when the
    file is loaded."""

    name: str                  # scheduler = "NAME"
    title: str                 # the scheduler in messages ("Slurm")
    keys: tuple[str, ...]      # the keys that mean something only under it
    # The table (with `scheduler`) -> (its spec, the table without its keys). Each problem is a
    # ValueError phrased as the one line the user reads (the loader adds file and profile).
    take: Callable[[dict[str, Any]], tuple[SchedulerSpec, dict[str, Any]]]


def take_scheduler_keys(table: dict[str, Any], schedulers: tuple[SchedulerKeys, ...]
                        ) -> tuple[SchedulerSpec | None, dict[str, Any]]:
    """(the scheduler's spec, the table without its keys). Without `scheduler` the table is
    returned as is, except that a scheduler's key there is an error naming `scheduler`."""
    if SCHEDULER_KEY not in table:
        for sched in schedulers:
            stray = [k for k in sched.keys if k in table]
            if stray:
                raise ValueError(f"{stray[0]} is a {sched.title} setting; add scheduler = \"{sched.name}\" or remove it")
        return None, table
    value = table[SCHEDULER_KEY]
    names = tuple(s.name for s in schedulers)
    sched = next((s for s in schedulers if s.name == value), None)
    if sched is None:
        use = "".join(f"scheduler = \"{n}\" or " for n in names)
        raise ValueError(f"scheduler = {value!r:.80} is not a known scheduler{did_you_mean(value, names)} "
                         f"(use {use}remove it)")
    return sched.take(table)


@dataclass(frozen=True)
class Limits:
    """The limits the verdict is judged by (run/verdict/health.py `evaluate`): one profile's,
    `Profile.limits`; these defaults are the profile's too."""

    stall_after_s: float = 60.0        # nothing advancing this long: STALLED
    compile_stall_after_s: float = 900.0  # the same, for a thread that is compiling or warming up
    launch_deadline_s: float = 1.0     # no launch.json this long after the launch: NEVER STARTED
    stop_grace_s: float = 10.0         # SIGTERM, then this long, then SIGKILL
    # Once the run shows its pace, its silence limit is learned from it, stall_after_s the
    # ceiling (run/verdict/stall_limit.py); false keeps stall_after_s.
    learn_stall: bool = True


_LIMITS = Limits()


@dataclass(frozen=True)
class Profile:
    name: str
    run_dir: str
    host: str | None = None            # None: this machine
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    container: str | None = None       # "pct:200" | "docker:NAME"
    python: str = "python3"
    train_args: tuple[str, ...] = ()
    # Replaces `python -m dflash_train --run-dir RUN_DIR` (train_args are still appended).
    # The program finds its run dir and id in $DFLASH_RUN_DIR and $DFLASH_RUN_ID.
    command: tuple[str, ...] | None = None
    known_hosts: str | None = None     # None: asyncssh default (~/.ssh/known_hosts)
    ssh_config: str | None = None      # None: ~/.ssh/config
    # The verdict's limits (Limits says what each is); `limits` holds them as one record.
    stall_after_s: float = _LIMITS.stall_after_s
    compile_stall_after_s: float = _LIMITS.compile_stall_after_s
    learn_stall: bool = _LIMITS.learn_stall
    launch_deadline_s: float = _LIMITS.launch_deadline_s
    stop_grace_s: float = _LIMITS.stop_grace_s
    min_free_gb: float = 1.0           # preflight fails below this much free disk in run_dir
    # What the run costs (run/verdict/energy.py): per GPU-hour of the run's GPUs, and per kWh
    # they drew; None: not priced.
    cost_per_gpu_hour: float | None = None
    cost_per_kwh: float | None = None
    # A regular expression for the program's progress lines, with named groups step, loss
    # and/or total (run/evidence/progress.py); tried before the built-in forms.
    progress_regex: str | None = None
    probe: bool = True                 # the run probe in every Python process (run/launch/probe_install.py)
    # Where the program writes metric files beyond its run dir (which is always searched):
    # directories or files, relative to run_dir, "~" the target user's home
    # (run/evidence/metric_files/reader.py).
    metrics: tuple[str, ...] = ()
    # The divergence watch (run/evidence/divergence.py): the series it watches (empty: the
    # training loss by name), NaN/Inf values in a row and values above the band in a row that
    # make DIVERGED.
    watch_series: tuple[str, ...] = ()
    nan_patience: int = 1
    spike_patience: int = 3
    # Where the program saves checkpoints beyond its run dir (which is always searched, 3
    # directories down): folders relative to run_dir, "~/" the target user's home
    # (run/evidence/checkpoints.py).
    checkpoints: tuple[str, ...] = ()
    # The run's host memory budget in MiB: its memory runway forecasts against this instead of
    # its cgroup's limit or the host's MemTotal (run/evidence/memory_runway.py).
    memory_limit_mb: float | None = None
    # The program's environment (run/launch/environment.py): (NAME, VALUE) pairs, and a file of
    # NAME=VALUE lines on this machine read at each launch (secrets: never written anywhere).
    env: tuple[tuple[str, str], ...] = ()
    env_file: str | None = None
    source: str = "<built-in>"         # the file the profile came from, for messages
    # -- a run across several hosts (watch/node_plan.py) -------------------------------------------
    nodes: tuple[str, ...] = ()        # SSH hosts or aliases, "localhost" = this machine; rank = index
    master_addr: str | None = None     # None: the first node's address (its ssh HostName)
    master_port: int = 29500           # torch.distributed rendezvous port on the first node
    # -- a run under a scheduler (`scheduler = "slurm"`: backends/slurm/spec.py); host is then
    # its login host --------------------------------------------------------------------------
    scheduler: SchedulerSpec | None = None

    @cached_property
    def limits(self) -> Limits:
        """This profile's limits, built once (a frozen profile never changes them)."""
        return Limits(self.stall_after_s, self.compile_stall_after_s, self.launch_deadline_s, self.stop_grace_s,
                      self.learn_stall)

    @property
    def memory_limit_bytes(self) -> int | None:
        return int(self.memory_limit_mb * (1 << 20)) if self.memory_limit_mb is not None else None

    @cached_property
    def ssh_dest(self) -> SSHDest:
        """Where and as whom its host is reached (host None: this machine)."""
        return SSHDest(self.host, self.port, self.user, self.identity_file, self.known_hosts, self.ssh_config)

    @property
    def is_local(self) -> bool:
        return self.host is None and not self.nodes

    @property
    def is_multinode(self) -> bool:
        return bool(self.nodes)

    @property
    def trainer_argv(self) -> list[str]:
        """The argv the wrapper runs: the bundled trainer unless `command` overrides it."""
        if self.command is not None:
            return [*self.command, *self.train_args]
        return [self.python, "-m", "dflash_train", "--run-dir", self.run_dir, *self.train_args]

    @property
    def uses_bundled_trainer(self) -> bool:
        return self.command is None

    def where(self) -> str:
        """Human label of the target, e.g. "root@gpu1:2222 · pct:200" or "local"."""
        if self.nodes:
            base = f"nodes {','.join(self.nodes)}"
        elif self.host is None:
            base = "local"
        else:
            base = f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port else ''}"
        if self.scheduler is not None:
            return f"{base} · {self.scheduler.where()}"
        return f"{base} · {self.container}" if self.container else base


@dataclass
class Config:
    path: str | None                   # None when no file exists and the built-in is used
    profiles: dict[str, Profile] = field(default_factory=dict)
    default: str | None = DEFAULT_PROFILE  # the profile used without --profile, if unambiguous
    # The other top-level tables, [NAME] -> its room's settings as its Section parsed them (a
    # table the file leaves out: absent here); read typed through `Section.of`.
    sections: dict[str, Any] = field(default_factory=dict)

    def profile(self, name: str | None) -> Profile:
        if name is None:
            if self.default is not None:
                return self.profiles[self.default]
            file_names = sorted(n for n, p in self.profiles.items() if p.source == self.path)
            raise ConfigError(
                f"{self.path}: several profiles ({', '.join(file_names)}) and no "
                f"'{DEFAULT_PROFILE}'; choose one with --profile NAME")
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles)) or "none"
            where = self.path or "the built-in config"
            raise ConfigError(f"{where}: no profile named {name!r}{did_you_mean(name, self.profiles)} "
                              f"(known: {known}); add a [profile.{name}] table or pick another") from None


    def file_profiles(self) -> list[Profile]:
        """The profiles the config file defines, in its order (the built-in `local` without one)."""
        mine = [p for p in self.profiles.values() if p.source == self.path]
        return mine or list(self.profiles.values())


T = TypeVar("T")


@dataclass(frozen=True)
class Section(Generic[T]):
    """A top-level table besides [profile], published by the room that reads its settings (e.g.
    recording/notify/settings.py for [notify]) and handed to the loader by the caller
    (config_file.SECTIONS): config sits below those rooms and names none of them, yet every
    table is checked when the file is loaded, and a table no section claims is refused."""

    name: str                  # the table, [NAME]
    default: T                 # the settings of a file without the table
    # (the table, the file's profile names) -> its settings. Each problem is a TableError
    # phrased as the one line the user reads, naming [NAME] (the loader adds the file).
    parse: Callable[[dict[str, Any], tuple[str, ...]], T]

    def of(self, config: Config) -> T:
        """This section's settings in `config`: its default where the file has no such table."""
        return cast(T, config.sections.get(self.name, self.default))


def state_dir() -> Path:
    """$XDG_STATE_HOME/dflash-tui (default ~/.local/state/dflash-tui)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "dflash-tui"


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "dflash-tui" / "config.toml"


def builtin_local_profile() -> Profile:
    return Profile(
        name=DEFAULT_PROFILE,
        run_dir=str(state_dir() / "runs" / DEFAULT_PROFILE),
        python=sys.executable,
        train_args=LOCAL_TRAIN_ARGS,
    )


# key -> (accepted python types, description used in messages)
_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "host": ((str,), "a host name or ~/.ssh/config alias"),
    "user": ((str,), "a user name"),
    "port": ((int,), "a port number (1-65535)"),
    "identity_file": ((str,), "a path to a private key"),
    "container": ((str,), 'a container, "pct:ID" or "docker:NAME"'),
    "run_dir": ((str,), "an absolute path on the target"),
    "python": ((str,), "a python executable on the target"),
    "train_args": ((list,), "a list of strings"),
    "command": ((list,), "a non-empty list of strings"),
    "known_hosts": ((str,), "a path to a known_hosts file"),
    "ssh_config": ((str,), "a path to an ssh config file"),
    "stall_after_s": ((int, float), "a number of seconds"),
    "compile_stall_after_s": ((int, float), "a number of seconds"),
    "launch_deadline_s": ((int, float), "a number of seconds"),
    "stop_grace_s": ((int, float), "a number of seconds"),
    "min_free_gb": ((int, float), "a number of GiB"),
    "cost_per_gpu_hour": ((int, float), "a price per GPU-hour, e.g. 2.5"),
    "cost_per_kwh": ((int, float), "a price per kWh, e.g. 0.3"),
    "memory_limit_mb": ((int, float), "a number of MiB"),
    "progress_regex": ((str,), "a regular expression with (?P<step>...), (?P<loss>...) and/or (?P<total>...)"),
    "nodes": ((list,), 'a list of host names or ssh aliases, e.g. ["gpu1", "gpu2"]'),
    "master_addr": ((str,), "the address the other nodes reach the first node at"),
    "master_port": ((int,), "a port number (1-65535)"),
    "probe": ((bool,), "true or false"),
    "metrics": ((list,), 'a list of directories or files of metrics, relative to run_dir, e.g. ["~/runs/exp1", "out/"]'),
    "learn_stall": ((bool,), "true or false"),
    "watch_series": ((list,), 'a list of series names to watch for divergence, e.g. ["train/loss"]'),
    "nan_patience": ((int,), "a whole number of values (NaN or Inf in a row that make DIVERGED), 1 to 10000"),
    "spike_patience": ((int,), "a whole number of values (spikes in a row that make DIVERGED), 1 to 10000"),
    "checkpoints": ((list,), 'a list of folders of checkpoints, relative to run_dir, e.g. ["ckpt/", "~/out"]'),
    "env": ((dict,), 'a table of environment variables, e.g. env = { HF_HOME = "/data/hf" }'),
    "env_file": ((str,), "a path on this machine to a file of NAME=VALUE lines (secrets)"),
}


# List keys whose entries are paths: no control character in any (as path string keys).
_PATH_LIST_KEYS = frozenset({"metrics"})


def check_number(key: str, value: float, where: str) -> None:
    """A finite number inside the setting's range, or a ConfigError naming both."""
    low, low_ok, high = _NUMBER_RANGES[key]
    ok = isinstance(value, int) or math.isfinite(value)
    ok = ok and (value >= low if low_ok else value > low) and value <= high
    if not ok:
        rel = ">=" if low_ok else ">"
        raise ConfigError(f"{where}: {key} = {show_value(value)} is out of range; use a number "
                          f"{rel} {low:g} and <= {high:g}")


_MAX_LABEL, _MAX_NAME = 63, 253     # RFC 1035: what a resolver (and IDNA) takes


def check_host_name(key: str, name: str, where: str) -> None:
    """A host name, address or ssh alias a resolver can take, or a ConfigError naming `key`:
    no empty label (`a..b`), none longer than 63 characters, at most 253 in all, and no
    leading '-' (ssh would read it as an option)."""
    bare = name[:-1] if name.endswith(".") and len(name) > 1 else name
    labels = bare.split(".")
    why = ""
    if name.startswith("-"):
        why = "starts with '-' (ssh would read it as an option)"
    elif len(bare) > _MAX_NAME:
        why = f"is {len(bare)} characters long, more than {_MAX_NAME}"
    elif any(not label for label in labels):
        why = "has an empty label (two dots in a row, or a leading dot)"
    elif any(len(label) > _MAX_LABEL for label in labels):
        longest = max(labels, key=len)
        why = f"has a label of {len(longest)} characters, more than {_MAX_LABEL}"
    if why:
        raise ConfigError(f"{where}: {key} = {show_value(name)} {why}; write the host name, address "
                          "or ~/.ssh/config alias as ssh would take it")


def system_dir(path: str) -> bool:
    """Whether an absolute, normalised path is, or is inside, a system directory (or is one of
    the shared top-level ones itself): no place for a run dir."""
    inside = any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS)
    excepted = any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIR_EXCEPTIONS)
    return path == "/" or (inside and not excepted) or path in _TOP_LEVEL_DIRS


def check_run_dir(run_dir: str, where: str) -> str:
    """The run dir, normalised; a ConfigError for '..', a control character, a relative path or
    a system directory."""
    if CONTROL_RE.search(run_dir):
        raise ConfigError(f"{where}: run_dir = {show_value(run_dir)} holds a control character; "
                          "write the path without it")
    if not run_dir.startswith("/"):
        raise ConfigError(f"{where}: run_dir = {show_value(run_dir)} must be an absolute path on the target")
    if ".." in run_dir.split("/"):
        raise ConfigError(f"{where}: run_dir = {show_value(run_dir)} has '..' components; "
                          "write the absolute path without '..'")
    norm = "/" + posixpath.normpath(run_dir).lstrip("/")
    if norm == "/":
        raise ConfigError(f"{where}: run_dir = {show_value(run_dir)} would put run files in the root; "
                          "choose a directory")
    if system_dir(norm):
        raise ConfigError(f"{where}: run_dir = {show_value(run_dir)} is a system directory (or inside "
                          "one); choose a directory of its own, e.g. /srv/dflash/runs/NAME")
    return norm


def _profile_from_table(path: str, name: str, table: Any, schedulers: tuple[SchedulerKeys, ...] = ()) -> Profile:
    where = f"{path}: [profile.{name}]" if _PROFILE_NAME_RE.fullmatch(name) else f"{path}: profile {name!r}"
    if not _PROFILE_NAME_RE.fullmatch(name):
        raise ConfigError(f"{where}: profile names use letters, digits, '_', '.', '-'; rename it")
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table (write it as [profile.{name}] with keys below)")
    # -- the scheduler's keys (its backend's): taken out first, `nodes` is a count under Slurm --
    try:
        scheduler, table = take_scheduler_keys(table, schedulers)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    values: dict[str, Any] = {"scheduler": scheduler} if scheduler is not None else {}
    for key, value in table.items():
        if key not in _KEYS:
            keys = sorted({*_KEYS, SCHEDULER_KEY, *(k for s in schedulers for k in s.keys)})
            raise ConfigError(f"{where}: unknown key {show_value(key)}{did_you_mean(key, keys)} "
                              f"(known keys: {', '.join(keys)})")
        types, desc = _KEYS[key]
        # TOML booleans are ints to Python; a port of `true` is a mistake, not 1.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ConfigError(f"{where}: {key} = {show_value(value)} is not {desc}")
        if isinstance(value, list):
            bad = [v for v in value if not isinstance(v, str)]
            if bad:
                raise ConfigError(f"{where}: {key} must be {desc}; {show_value(bad[0])} is not a string "
                                  f"(quote it)")
            nul = [v for v in value if "\x00" in v]
            if nul:
                raise ConfigError(f"{where}: {key} has {show_value(nul[0])}, which holds a NUL character "
                                  "(no argument can); remove it")
            if key in _PATH_LIST_KEYS:
                ctl = [v for v in value if CONTROL_RE.search(v)]
                if ctl:
                    raise ConfigError(f"{where}: {key} has {show_value(ctl[0])}, which holds a control character "
                                      "(an escape sequence?); write the path without it")
            value = tuple(value)
        elif isinstance(value, str) and key not in ("run_dir", "progress_regex") and CONTROL_RE.search(value):
            raise ConfigError(f"{where}: {key} = {show_value(value)} holds a control character; remove it")
        values[key] = value

    if "checkpoints" in values:
        _check_folders(where, "checkpoints", values["checkpoints"])
    if "env" in values:
        for env_name, env_value in values["env"].items():
            why = env_entry_problem(env_name, env_value)
            if why:
                raise ConfigError(f"{where}: env: {why}")
        values["env"] = tuple(values["env"].items())
    if "env_file" in values:
        if not values["env_file"].strip():
            raise ConfigError(f"{where}: env_file = \"\" is empty; name the file or remove the key")
        values["env_file"] = os.path.expanduser(values["env_file"])
    if "port" in values and not 1 <= values["port"] <= 65535:
        raise ConfigError(f"{where}: port = {show_value(values['port'])} is not a port number (1-65535)")
    for key in _NUMBER_RANGES:
        if key in values:
            check_number(key, values[key], where)
    if "container" in values:
        try:
            parse_container_spec(values["container"])
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if "progress_regex" in values:
        try:
            compile_progress_regex(values["progress_regex"])
        except ProgressRegexError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    for key in ("nan_patience", "spike_patience"):
        if key in values and not 1 <= values[key] <= 10_000:
            raise ConfigError(f"{where}: {key} = {show_value(values[key])} is out of range; use a whole number "
                              "from 1 to 10000")
    bad = [n for n in values.get("watch_series", ()) if not n.strip()]
    if bad:
        raise ConfigError(f"{where}: watch_series holds an empty name; name each series as its source "
                          'writes it, e.g. ["train/loss"]')
    if "command" in values and not values["command"]:
        raise ConfigError(f"{where}: command = [] is empty; remove it to run the bundled trainer")
    if "command" in values and not values["command"][0]:
        raise ConfigError(f"{where}: command starts with an empty program name; name the program first")
    for key in ("host", "user", "python", "identity_file", "known_hosts", "ssh_config"):
        if key in values and (not values[key] or values[key] != values[key].strip()):
            raise ConfigError(f"{where}: {key} = {show_value(values[key])} is empty or has surrounding spaces")
    if "host" in values:
        check_host_name("host", values["host"], where)
    _check_nodes(where, values)
    if any(k in values for k in ("user", "port", "identity_file")) and not ("host" in values or "nodes" in values):
        raise ConfigError(f"{where}: user/port/identity_file are set but host is not; "
                          "add host = \"...\" or remove them to run locally")

    if "run_dir" not in values:
        if "host" in values or "nodes" in values:
            raise ConfigError(f"{where}: run_dir is missing; add run_dir = \"/abs/path\" "
                              "(a directory on the target)")
        values["run_dir"] = str(state_dir() / "runs" / name)
    values["run_dir"] = check_run_dir(values["run_dir"], where)
    if "identity_file" in values:
        values["identity_file"] = os.path.expanduser(values["identity_file"])
    for key in ("known_hosts", "ssh_config"):
        if key in values:
            values[key] = os.path.expanduser(values[key])
    if not any(k in values for k in ("python", "host", "container", "nodes")):
        values["python"] = sys.executable   # local: the interpreter that has dflash_train
    return Profile(name=name, source=path, **values)


def _check_folders(where: str, key: str, folders: tuple[str, ...]) -> None:
    """Folders on the target: each a path that is not empty, holds no control character and
    names no "~user" (only "~/", the target user's home)."""
    for f in folders:
        if not f.strip():
            raise ConfigError(f"{where}: {key} has an empty entry; name a folder, e.g. \"ckpt/\"")
        if CONTROL_RE.search(f):
            raise ConfigError(f"{where}: {key} has {show_value(f)}, which holds a control character; remove it")
        if f.startswith("~") and not f.startswith("~/"):
            raise ConfigError(f"{where}: {key} has {show_value(f)}; only \"~/\" (the target user's home) "
                              "is understood, write the folder out")


# A node name is a host name, an IPv4 address or an ~/.ssh/config alias; it also names the
# node's run dir where run_dir holds "{node}" (nodes that share a filesystem), so no "/".
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NODE_PLACEHOLDER = "{node}"


def _check_nodes(where: str, values: dict[str, Any]) -> None:
    """`nodes`, `master_addr`, `master_port`: a run across several hosts (watch/node_plan.py)."""
    if "nodes" not in values:
        extra = [k for k in ("master_addr", "master_port") if k in values]
        if extra:
            raise ConfigError(f"{where}: {extra[0]} is set but nodes is not; add nodes = [...] or remove it")
        if NODE_PLACEHOLDER in values.get("run_dir", ""):
            raise ConfigError(f"{where}: run_dir holds {NODE_PLACEHOLDER} but nodes is not set; "
                              "add nodes = [...] or write the directory out")
        return
    nodes = values["nodes"]
    if "host" in values:
        raise ConfigError(f"{where}: host and nodes are both set; a run on several hosts lists "
                          "them all in nodes (remove host)")
    if not nodes:
        raise ConfigError(f"{where}: nodes = [] is empty; list the hosts, e.g. nodes = [\"gpu1\", \"gpu2\"]")
    for node in nodes:
        if not _NODE_RE.match(node):
            raise ConfigError(f"{where}: nodes entry {node!r} is not a host name or ssh alias "
                              "(letters, digits, '.', '_', '-'; put user and port in user/port or ~/.ssh/config)")
        check_host_name("nodes entry", node, where)
    dup = next((n for i, n in enumerate(nodes) if n in nodes[:i]), None)
    if dup is not None:
        raise ConfigError(f"{where}: nodes lists {dup!r} twice; each host runs one process, list it once")
    if "master_port" in values and not 1 <= values["master_port"] <= 65535:
        raise ConfigError(f"{where}: master_port = {values['master_port']} is not a port number (1-65535)")
    if "master_addr" in values and (not values["master_addr"] or values["master_addr"] != values["master_addr"].strip()):
        raise ConfigError(f"{where}: master_addr = {values['master_addr']!r} is empty or has surrounding spaces")
    run_dir = values.get("run_dir", "")
    if run_dir.count("{") != run_dir.count(NODE_PLACEHOLDER) or "}" in run_dir.replace(NODE_PLACEHOLDER, ""):
        raise ConfigError(f"{where}: run_dir = {run_dir!r}: the only placeholder is {NODE_PLACEHOLDER}")


def read_small_text_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """The UTF-8 text of a small REGULAR file (small_file.py), or a ConfigError naming it.
    FileNotFoundError is left to the caller."""
    try:
        return read_small_file(path, max_bytes)
    except SmallFileRefused as no:
        why = {"directory": f"is a directory, expected a {what}",
               "special": f"not a regular file (a FIFO, device or socket); point it at a {what}",
               "changed": f"not a regular file; point it at a {what}",
               "too_big": (f"{no.size} bytes is too big for a {what} (at most {max_bytes})" if no.size is not None
                           else f"too big for a {what} (more than {max_bytes} bytes)"),
               "unreadable": "permission denied; make it readable (chmod u+r)",
               "os_error": f"cannot read it: {no.detail}",
               "not_utf8": f"not UTF-8 text (byte {no.at}); save it as UTF-8"}[no.problem]
        raise ConfigError(f"{path}: {why}") from None


def parse_config(text: str, path: str, schedulers: tuple[SchedulerKeys, ...] = (),
                 sections: tuple[Section[Any], ...] = ()) -> Config:
    """The config in `text`; `schedulers`: the keys of the schedulers a profile may name
    (backends.SCHEDULERS); `sections`: the other top-level tables the file may hold
    (config_file.SECTIONS; config_file.parse_config passes both)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    except (ValueError, RecursionError) as exc:   # a 5000-digit integer, arrays nested 10000 deep
        raise ConfigError(f"{path}: not a usable TOML file ({str(exc)[:100]}); fix the value") from None
    _refuse_unknown_tables(path, data, sections)
    tables = data.get("profile", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: 'profile' must hold tables, e.g. [profile.gpu1]")
    if not tables:
        raise ConfigError(f"{path}: no profiles; add a [profile.NAME] table "
                          "(see assets/profiles.example.toml)")
    profiles = {name: _profile_from_table(path, name, table, schedulers) for name, table in tables.items()}
    return Config(path=path, profiles=profiles, sections=_parse_sections(path, data, sections, tuple(profiles)))


def _refuse_unknown_tables(path: str, data: dict[str, Any], sections: tuple[Section[Any], ...]) -> None:
    """The one place a top-level key no section claims is refused, naming the ones there are."""
    names = [f"[{s.name}]" for s in sections]
    tops = ("profile", *(s.name for s in sections))
    extra = sorted(set(data) - set(tops))
    if not extra:
        return
    others = ""
    if len(names) == 1:
        others = f"; {names[0]} is the other"
    elif names:
        others = f"; {', '.join(names[:-1])} and {names[-1]} are the others"
    raise ConfigError(f"{path}: unknown top-level key {extra[0]!r}{did_you_mean(extra[0], tops)} "
                      f"(profiles go under [profile.NAME]{others})")


def _parse_sections(path: str, data: dict[str, Any], sections: tuple[Section[Any], ...],
                    profiles: tuple[str, ...]) -> dict[str, Any]:
    """Each section the file holds, parsed by its room (in `sections`' order)."""
    out: dict[str, Any] = {}
    for section in sections:
        if section.name not in data:
            continue
        table = data[section.name]
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{section.name}] must be a table")
        try:
            out[section.name] = section.parse(table, profiles)
        except TableError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return out


def load_config(path: str | os.PathLike[str] | None = None, schedulers: tuple[SchedulerKeys, ...] = (),
                sections: tuple[Section[Any], ...] = ()) -> Config:
    """Load `path`, or the default path; with no file at the default path, the built-in profile.

    An explicit path that does not exist is an error (the user asked for it by name)."""
    explicit = path is not None
    p = Path(path) if explicit else default_config_path()
    try:
        text = read_small_text_file(p, "config file")
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{p}: no such config file; check the --config path") from None
        return Config(path=None, profiles={DEFAULT_PROFILE: builtin_local_profile()})
    config = parse_config(text, str(p), schedulers, sections)
    # Without --profile: the file's only profile, or its `local`; several and no `local` is
    # ambiguous. The built-in `local` stays reachable by name unless the file overrides it.
    names = list(config.profiles)
    config.default = names[0] if len(names) == 1 else (DEFAULT_PROFILE if DEFAULT_PROFILE in names else None)
    config.profiles.setdefault(DEFAULT_PROFILE, builtin_local_profile())
    return config
