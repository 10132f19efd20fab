"""Preflight: everything a launch needs, asked through the same transport the launch will use.

The checks go through `Target.run` (not the agent) on purpose: the agent is a long-lived process
that a flaky `pct exec` or a wrong PATH does not touch, while the launch command is exactly such
a one-shot command. Each check is a `Check`; the first failure says what to fix.
"""

from __future__ import annotations

import math
import json
import posixpath
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from ...config import Profile, system_dir
from ...contract.rundir import (EVENTS_JSONL, EXIT_JSON, LAUNCH_JSON, LAUNCH_OUT, LAUNCH_SH, LOG_GROWTH,
                               STATUS_JSON, STOP_JSON, TRAIN_LOG)
from ...remote.base import CommandResult, CommandTimeout, ContainerNotRunning, Target, TargetError, TargetUnreachable
from ...remote.container import ContainerTarget
from ...remote.ops import RemoteOps
from ...gpu.kernel_log import XID_SCRIPT, KernelLog, parse_kernel_xids
from ...gpu.sample import GpuSnapshot
from ..evidence.observe import gather, process_matches
from ..verdict.checklist import Check, CheckId, CheckState
from ..verdict.gpu_health import gpu_health_check

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING

# The files that describe one run (run/launch/launch.py moves them to history/ on the next launch).
# A backend adds its own (Launcher.RUN_FILES).
PER_RUN_FILES = (LAUNCH_SH, LAUNCH_JSON, LAUNCH_OUT, TRAIN_LOG, LOG_GROWTH, EVENTS_JSONL, STATUS_JSON, EXIT_JSON,
                 STOP_JSON)

# $1 = run dir. Prints key=value lines; each step's failure is printed, not fatal, so one
# round trip answers all of them. `df -P` is POSIX (1024-byte blocks with -k).
_DIR_PROBE = r'''
d=$1
if err=$(mkdir -p -- "$d" 2>&1); then echo "mkdir=ok"; else echo "mkdir=$err" | tr '\n' ' '; echo; fi
p="$d/.dflash-write-probe.$$"
if err=$( (echo probe >"$p") 2>&1 ); then rm -f -- "$p"; echo "write=ok"; else rm -f -- "$p"; echo "write=$err" | tr '\n' ' '; echo; fi
df -Pk -- "$d" 2>/dev/null | awk 'NR==2 {print "avail_kb=" $4}'
for t in awk tr; do command -v "$t" >/dev/null 2>&1 || echo "missing=$t"; done
echo "end=1"
'''

# The tools launch.sh needs beyond sh, and the Debian package of each (for the hint).
_PACKAGE = {"awk": "mawk", "tr": "coreutils"}

# Before anything is created: where the run dir really is (symlinks resolved, from its nearest
# existing ancestor), and which of the per-run files exist as something other than a regular
# file (a FIFO train.log would block the wrapper; the archive moves regular files only).
# $1 = run dir, then the per-run file names.
_WHERE_PROBE = r'''
d=$1; shift
p=$d rest=
while [ ! -d "$p" ]; do rest="/${p##*/}$rest"; q=$(dirname -- "$p"); [ "$q" = "$p" ] && break; p=$q; done
if r=$(cd -- "$p" 2>/dev/null && pwd -P); then echo "real=${r%/}$rest"; fi
for f do
  if [ -e "$d/$f" ] || [ -L "$d/$f" ]; then
    if [ -d "$d/$f" ]; then echo "odd=$f directory"
    elif [ ! -f "$d/$f" ]; then
      k="special file"; [ -p "$d/$f" ] && k=FIFO; [ -S "$d/$f" ] && k=socket; [ -c "$d/$f" ] && k="character device"
      [ -b "$d/$f" ] && k="block device"; [ -L "$d/$f" ] && [ ! -e "$d/$f" ] && k="dangling symlink"
      echo "odd=$f $k"
    fi
  fi
done
echo "end=1"
'''

# Run by the profile's python: which python, and what torch sees. A JSON line, always.
_PYTHON_PROBE = r'''
import importlib, json, sys
out = {"python": sys.executable, "version": sys.version.split()[0]}
try:
    torch = importlib.import_module("torch")   # in the profile's python on the target, never here
    out["torch"] = torch.__version__
    out["cuda"] = torch.cuda.is_available()
    out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if out["cuda"] else []
except Exception as exc:
    out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    trainer = importlib.import_module("dflash_train")   # on the target, never in the dashboard
    out["dflash_train"] = getattr(trainer, "__file__", "") or "ok"
except Exception as exc:
    out["trainer_error"] = "%s: %s" % (type(exc).__name__, exc)
print("dflash-probe " + json.dumps(out))
'''

# The program is looked up the way the wrapper will run it: from the run dir (launch.sh runs
# there), so a relative path means RUN_DIR/path, and a bare name is a PATH search. Both print
# the absolute path found, which is what the launch then runs. $1 = run dir, $2 = program.
_RESOLVE = r'''
cd -- "$1" 2>/dev/null || { echo "dflash-which: no-dir"; exit 0; }
p=$(command -v -- "$2" 2>/dev/null) || { echo "dflash-which: not found"; exit 0; }
case $p in
  /*) ;;
  */*) p="$PWD/$p" ;;
  *) echo "dflash-which: not found"; exit 0 ;;
esac
echo "dflash-which $p"
'''
# $1 = the run dir, then the command's path-like arguments: the index of each that does not
# exist, seen from the run dir (where the wrapper runs the command).
_EXISTS = r'''
cd -- "$1" 2>/dev/null || { echo "no-dir=1"; exit 0; }
shift; i=0
for f do [ -e "$f" ] || echo "missing=$i"; i=$((i+1)); done
echo "end=1"
'''
# Files a program reads and never writes: one missing means the run cannot start (python3
# t.py exits 2 at once). Any other path-like argument may be an output the run creates.
_SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".pl", ".rb", ".js", ".lua", ".jl")
_FILE_SUFFIXES = _SCRIPT_SUFFIXES + (".yaml", ".yml", ".json", ".jsonl", ".toml", ".cfg", ".ini", ".conf",
                                     ".txt", ".csv", ".tsv", ".parquet", ".arrow", ".pt", ".pth", ".ckpt",
                                     ".bin", ".safetensors", ".npy", ".npz")


def path_like_arguments(args: list[str]) -> list[str]:
    """The arguments of a command (after its program) that name a file: a path ("/x", "./x",
    "../x") or a name with a file suffix ("t.py", "conf/a.yaml"), also as an option's value
    ("--config=conf/a.yaml"). Not: URLs, `-m`/`-c`'s module or code, a name without a suffix
    ("meta-llama/Llama-3-8B" is a model id, not a file)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-m", "-c"):
            skip = True
            continue
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else ("" if arg.startswith("-") else arg)
        if not value or "://" in value or "\n" in value or "\0" in value:
            continue
        if value.startswith(("/", "./", "../")) or value.lower().endswith(_FILE_SUFFIXES):
            out.append(value)
    return out


# Runs the probe only if the interpreter exists, and says so otherwise: a bare 127 is ambiguous
# through `pct exec`/`docker exec` (the tool itself missing gives the same status). $1 = the
# absolute path _RESOLVE found.
_RUN_IF_FOUND = '[ -x "$1" ] || { echo "dflash-probe-missing"; exit 3; }; exec "$@"'


@dataclass
class PreflightResult:
    checks: list[Check] = field(default_factory=list)
    unreachable: bool = False   # the CLI's exit code 3
    # The absolute path of python (bundled trainer) or command[0], found from the run dir as
    # the wrapper would find it: the launch runs this path, so preflight and run agree.
    program: str | None = None
    # Each host GPU's total-energy counter at the preflight (GPU index as text -> mJ, None: no
    # counter): the launch's baseline for the run's energy (run/verdict/energy.py).
    gpu_energy_mj: dict[str, int | None] | None = None

    @property
    def ok(self) -> bool:
        return not self.unreachable and all(c.state is not FAIL for c in self.checks)

    @property
    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if c.state is FAIL), None)


def _ran_nothing(res: CommandResult, what: str) -> str:
    err = " ".join(res.stderr.split())[:200]
    return (f"{what} printed nothing (exit status {res.exit_status}, stderr {err!r}): "
            "the transport did not run the command")


def free_words(avail_gb: float, min_free_gb: float, where: str) -> str:
    """ "0.98 GiB free in /data, below min_free_gb 1": both numbers, the free space cut (never
    rounded) to two decimals, so a shortfall never reads as the limit itself."""
    shown = math.floor(avail_gb * 100) / 100
    if avail_gb < min_free_gb:
        return f"{shown:.2f} GiB free in {where}, below min_free_gb {min_free_gb:g}"
    return f"{shown:.2f} GiB free in {where} (min_free_gb {min_free_gb:g})"


# One GPU sample of the host, bounded in time, never raising (Session.host_gpus).
GpuSampler = Callable[[], Awaitable[GpuSnapshot]]


async def run_preflight(profile: Profile, host: Target, target: Target, ops: RemoteOps | None,
                        *, check_live_run: bool = True, run_files: tuple[str, ...] = PER_RUN_FILES,
                        gpu_sample: GpuSampler | None = None) -> PreflightResult:
    """`gpu_sample`: the host's GPUs, for the "gpu_health" check (None: not asked, as where the
    run's node is not known before it is scheduled)."""
    out = PreflightResult()
    add = out.checks.append
    now = time.time()

    # 1. reachable
    try:
        res = await host.run(["true"], timeout=15)
    except (TargetUnreachable, CommandTimeout) as exc:
        out.unreachable = True
        add(Check.of(CheckId.PRE_REACHABLE, FAIL, str(exc.message), exc.hint or "check host/port/user", now))
        return out
    add(Check.of(CheckId.PRE_REACHABLE, OK if res.ok else WARN,
              f"{host.label} answered" + ("" if res.ok else f" (true exited {res.exit_status})"), "", now))

    # 2. container running
    if profile.container and isinstance(target, ContainerTarget):
        try:
            running = await target.is_running()
        except ContainerNotRunning as exc:
            running, why, hint = False, exc.message, exc.hint
        except TargetError as exc:
            running, why, hint = False, exc.message, exc.hint
        else:
            why = f"{profile.container} is not running on {host.label}"
            hint = target.start_hint()
        if not running:
            add(Check.of(CheckId.PRE_CONTAINER, FAIL, why, hint, now))
            return out
        add(Check.of(CheckId.PRE_CONTAINER, OK, f"{profile.container} is running", "", now))

    try:
        # 3a. the run dir is not a system directory behind a symlink, and holds no run file that
        # is not a regular file
        res = await target.run(["sh", "-c", _WHERE_PROBE, "dflash-where", profile.run_dir, *run_files],
                               timeout=30)
        lines = res.stdout.splitlines()
        if "end=1" not in lines:
            add(Check.of(CheckId.PRE_RUN_DIR, FAIL, _ran_nothing(res, "the run-dir probe"),
                      "try `true` through the same transport; for pct, check `pct exec` works", now))
            return out
        real = next((l[5:] for l in lines if l.startswith("real=")), "")
        if real and real != profile.run_dir and system_dir(real):
            add(Check.of(CheckId.PRE_RUN_DIR, FAIL,
                      f"{profile.run_dir} is {real} on the target (through a symlink), a system directory",
                      "choose a run_dir of its own, e.g. /srv/dflash/runs/NAME", now))
            return out
        odd = [l[4:] for l in lines if l.startswith("odd=")]
        if odd:
            name, _, kind = odd[0].partition(" ")
            add(Check.of(CheckId.PRE_RUN_FILES, FAIL,
                      f"{profile.run_dir}/{name} is a {kind}, not a regular file"
                      + (f" (and {len(odd) - 1} more)" if len(odd) > 1 else ""),
                      "remove it: the wrapper and the archive handle regular files only", now))
            return out

        # 3. run dir creatable + writable, 4. free disk
        res = await target.run(["sh", "-c", _DIR_PROBE, "dflash-preflight", profile.run_dir], timeout=30)
        kv = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
        if "end" not in kv:
            add(Check.of(CheckId.PRE_RUN_DIR, FAIL, _ran_nothing(res, "the run-dir probe"),
                      "try `true` through the same transport; for pct, check `pct exec` works", now))
            return out
        if kv.get("mkdir") != "ok":
            add(Check.of(CheckId.PRE_RUN_DIR, FAIL, f"cannot create {profile.run_dir}: {kv.get('mkdir', '').strip()}",
                      "choose a run_dir the target user can create", now))
            return out
        if kv.get("write") != "ok":
            err = kv.get("write", "").strip()
            free_kb = int(kv["avail_kb"]) if kv.get("avail_kb", "").isdigit() else None
            # dash's echo says only "I/O error" for ENOSPC: the free space tells.
            if "No space left on device" in err or "Disk quota exceeded" in err or (
                    free_kb is not None and free_kb < 4096):
                add(Check.of(CheckId.PRE_RUN_DIR, FAIL, f"disk full: cannot write in {profile.run_dir} "
                          f"({free_kb if free_kb is not None else '?'} KiB free): {err}",
                          "free space on the run dir's filesystem (old runs, history/, checkpoints)", now))
            else:
                add(Check.of(CheckId.PRE_RUN_DIR, FAIL, f"cannot write in {profile.run_dir}: {err}",
                          "fix its permissions or choose another run_dir", now))
            return out
        add(Check.of(CheckId.PRE_RUN_DIR, OK, f"{profile.run_dir} created and writable", "", now))
        # launch.sh writes its records (launch.json, exit.json) through these: without them it
        # would run the program and leave records that name no run (a crash read as KILLED).
        missing = [v for k, v in (line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
                   if k == "missing"]
        if missing:
            add(Check.of(CheckId.PRE_TOOLS, FAIL,
                      f"{' and '.join(missing)} not found on {target.label}: the launch wrapper writes its "
                      "records with them",
                      f"install them where the run lives (Debian: apt-get install {' '.join(_PACKAGE[m] for m in missing)})",
                      now))
            return out
        try:
            avail_gb = int(kv["avail_kb"]) / (1 << 20)
        except (KeyError, ValueError):
            add(Check.of(CheckId.PRE_DISK, WARN, "df gave no answer for the run dir", "check free space by hand", now))
        else:
            state = FAIL if avail_gb < profile.min_free_gb else OK
            add(Check.of(CheckId.PRE_DISK, state, free_words(avail_gb, profile.min_free_gb, profile.run_dir),
                      f"free space or lower min_free_gb (now {profile.min_free_gb:g})" if state is FAIL else "", now))

        # 5. python / torch (bundled trainer) or the command's program
        what = "Python found" if profile.uses_bundled_trainer else "Program found"
        prog = profile.python if profile.uses_bundled_trainer else profile.command[0]
        found, why = await resolve_program(target, profile.run_dir, prog)
        if found is None:
            add(Check(CheckId.PRE_PYTHON, what, FAIL, why,
                      f"set {'python' if profile.uses_bundled_trainer else 'command'} in the profile to an "
                      "absolute path on the target", now))
        elif profile.uses_bundled_trainer:
            out.program = found
            await _probe_python(profile, found, target, add, now)
        else:
            out.program = found
            add(Check(CheckId.PRE_PYTHON, what, OK, found, "", now))
            await _check_arguments(target, profile, add, now)
    except (TargetUnreachable, CommandTimeout) as exc:
        out.unreachable = isinstance(exc, TargetUnreachable)
        add(Check.of(CheckId.PRE_TRANSPORT, FAIL, exc.message, exc.hint, now))
        return out

    # 6. the host's GPUs fit to run on: a GPU with uncorrectable ECC, a pending remap, a narrow
    # link or a node Xid refuses the launch, naming the GPU and why
    if gpu_sample is not None:
        snap = await gpu_sample()
        if snap.error is None and snap.gpus:
            out.gpu_energy_mj = {str(g.index): g.energy_mj for g in snap.gpus}
        kernel = None
        if snap.gpus:
            try:
                res = await host.run(["sh", "-c", XID_SCRIPT], timeout=15)
                kernel = parse_kernel_xids(res.stdout)
            except (TargetUnreachable, CommandTimeout, TargetError) as exc:
                kernel = KernelLog(None, refused=str(exc.message))
        check = gpu_health_check(snap, where=host.label, kernel=kernel, check_id=CheckId.PRE_GPU_HEALTH)
        check.since = now
        add(check)

    # 7. no live run in this run dir
    if check_live_run and ops is not None:
        ev = await gather(ops, profile.run_dir)
        if ev.launch is not None and process_matches(ev.launch, ev.proc) and ev.exit is None:
            add(Check.of(CheckId.PRE_NO_LIVE_RUN, FAIL,
                      f"run {ev.launch.run_id} (pid {ev.launch.pid}) is still running in {profile.run_dir}",
                      "stop it first (--stop), or relaunch (r) to stop and start", now))
        else:
            add(Check.of(CheckId.PRE_NO_LIVE_RUN, OK, "no live run in the run dir", "", now))
    return out


async def resolve_program(target: Target, run_dir: str, prog: str) -> tuple[str | None, str]:
    """(absolute path, "") of `prog` as the wrapper will find it from `run_dir`, or (None, why)."""
    res = await target.run(["sh", "-c", _RESOLVE, "dflash-which", run_dir, prog], timeout=30)
    line = next((l for l in reversed(res.stdout.splitlines()) if l.startswith("dflash-which")), "")
    if line.startswith("dflash-which /"):
        return posixpath.normpath(line[len("dflash-which "):]), ""
    if not line:
        return None, _ran_nothing(res, "`command -v`")
    if line == "dflash-which: no-dir":
        return None, f"cannot enter the run dir {run_dir} to look for {prog!r}"
    if "/" in prog and not prog.startswith("/"):
        return None, (f"{prog!r} not found in {run_dir}: a relative path is resolved from the run dir, "
                      "where the wrapper runs")
    return None, f"{prog!r} not found on the target's PATH"


async def _check_arguments(target: Target, profile: Profile, add, now: float) -> None:
    """The command's path-like arguments, each looked for from the run dir as the wrapper will:
    a missing script fails the preflight, any other missing file is a warning (the run may
    create it). Each missing one is named with the absolute path looked at."""
    paths = path_like_arguments(list(profile.command[1:]))
    if not paths:
        return
    res = await target.run(["sh", "-c", _EXISTS, "dflash-exists", profile.run_dir, *paths], timeout=30)
    kv = [line.split("=", 1) for line in res.stdout.splitlines() if "=" in line]
    if ("end", "1") not in [tuple(p) for p in kv]:
        add(Check.of(CheckId.PRE_ARGS, WARN, _ran_nothing(res, "the file check"),
                  "check the command's files by hand", now))
        return
    missing = [paths[int(v)] for k, v in kv if k == "missing" and v.isdigit() and int(v) < len(paths)]
    if not missing:
        add(Check.of(CheckId.PRE_ARGS, OK, f"{len(paths)} found: {', '.join(paths)}", "", now))
        return
    relative = any(not m.startswith("/") for m in missing)
    looked = "; ".join(f"{m!r} not found at {posixpath.normpath(posixpath.join(profile.run_dir, m))}"
                       for m in missing)
    if relative:
        looked += f" (a relative path is resolved from the run dir {profile.run_dir}, where the wrapper runs the command)"
    if any(m.lower().endswith(_SCRIPT_SUFFIXES) for m in missing):
        add(Check.of(CheckId.PRE_ARGS, FAIL, looked,
                  "put the file in the run dir, or write its absolute path in command", now))
    else:
        add(Check.of(CheckId.PRE_ARGS, WARN, looked,
                  "nothing to do if the run creates it; else fix its path in command", now))


async def _probe_python(profile: Profile, python: str, target: Target, add, now: float) -> None:
    res = await target.run(["sh", "-c", _RUN_IF_FOUND, "dflash-python", python, "-c", _PYTHON_PROBE],
                           timeout=120)
    line = next((l for l in res.stdout.splitlines() if l.startswith("dflash-probe ")), None)
    if line is None:
        if "dflash-probe-missing" in res.stdout:
            add(Check.of(CheckId.PRE_PYTHON, FAIL, f"{profile.python!r} not found on the target",
                      "set python = \"/path/to/venv/bin/python\" in the profile", now))
        elif res.exit_status == 0 and not res.stderr.strip():
            add(Check.of(CheckId.PRE_PYTHON, FAIL, _ran_nothing(res, "the python probe"), "", now))
        else:
            err = " ".join(res.stderr.split())[-200:]
            add(Check.of(CheckId.PRE_PYTHON, FAIL, f"{profile.python} failed (exit {res.exit_status}): {err}",
                      "run it by hand on the target", now))
        return
    try:
        info = json.loads(line[len("dflash-probe "):])
    except ValueError:
        add(Check.of(CheckId.PRE_PYTHON, FAIL, "the python probe answered garbage", "", now))
        return
    add(Check.of(CheckId.PRE_PYTHON, OK, f"{python} (python {info.get('version')})", "", now))
    if "torch_error" in info:
        add(Check.of(CheckId.PRE_TORCH, FAIL, info["torch_error"],
                  f"install torch for {profile.python} (pip install 'dflash-tui[train]')", now))
    else:
        devs = info.get("devices") or []
        seen = f"{len(devs)} CUDA device(s): {', '.join(devs)}" if devs else "no CUDA devices (CPU only)"
        add(Check.of(CheckId.PRE_TORCH, OK, f"torch {info.get('torch')}, {seen}", "", now))
    if "trainer_error" in info:
        add(Check.of(CheckId.PRE_TRAINER, FAIL, info["trainer_error"],
                  f"install dflash-tui[train] for {profile.python}", now))
