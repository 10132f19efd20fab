"""ShellOps: RemoteOps through one-shot POSIX-sh commands, for targets without python3.

Each op is ONE `target.run(["sh", "-c", SCRIPT, "sh", args...])`: the data travel as
positional arguments, never inside the script text, so no path or pattern can inject
anything. Output fields are NUL-separated (paths may hold newlines), file contents and /proc
files travel base64-encoded, and /proc is parsed by the very functions the agent uses, so both
ways give the same answers (tests/remote/test_shell_ops_parity.py holds them to that).

Every script ends by printing a sentinel from an EXIT trap. A command that "succeeds" without
the sentinel never ran: that is the incident's `pct exec` (exit 0, nothing executed), and it is
reported as such instead of being read as "no file, no process".
"""

from __future__ import annotations

import base64
import calendar
import posixpath
import re
from typing import Sequence

from . import agent_server
from .answers import (chunk_from, dirprobe_from, diskfree_from, filestat_from, found_from, pidinfo_from, proctree_from,
                      stackdump_from)
from .base import CommandResult, OpRefused, Target, TargetError
from .ops import DirProbe, DiskFree, FileChunk, FileStat, FoundFiles, PidInfo, ProcTree, StackDumpAnswer

SENTINEL = "@@dflash-ok@@"
START = "@@dflash-start@@\0"

# `st PATH` prints one stat record: "S<readable><isdir> <size> <inode> <mode, hex> <mtime %y>" or
# "E<message>". Shared by every script (_PRELUDE): it, C messages (we parse strerror), the sentinel.
_ST = r"""st() {
  if o=$(stat -L -c '%s %i %f %y' -- "$1" 2>&1); then
    r=1; [ -r "$1" ] || r=0
    d=0; [ -d "$1" ] && d=1
    printf 'S%s%s %s\0' "$r" "$d" "$o"
  else
    printf 'E%s\0' "$o"
  fi
}
"""
_PRELUDE = r"""LC_ALL=C; export LC_ALL; set -f
printf '@@dflash-start@@\0'
trap 'printf "\0@@dflash-ok@@\n"' EXIT
""" + _ST

_STAT = 'for p do st "$p"; done'

_NOW = 'printf "%s\\0" "$(date +%s.%N)"'

# $1 path, $2 offset or "tail", $3 max bytes
_READ = r"""
p=$1 off=$2 n=$3
if ! o=$(stat -L -c '%s %i' -- "$p" 2>&1); then printf 'E%s\0' "$o"
elif [ -d "$p" ]; then printf 'FIs a directory\0'
elif [ ! -f "$p" ]; then
  k=other; [ -p "$p" ] && k=fifo; [ -S "$p" ] && k=socket; [ -c "$p" ] && k=char-device; [ -b "$p" ] && k=block-device
  printf 'Fit is a %s, not a regular file\0' "$k"
elif [ ! -r "$p" ]; then printf 'FPermission denied\0'
else
  set -- $o; size=$1 ino=$2
  if [ "$off" = tail ]; then off=0; [ "$size" -gt "$n" ] && off=$((size - n)); fi
  k=$((size - off)); [ "$k" -gt "$n" ] && k=$n
  case $size:$p in 0:/proc/*|0:/sys/*) k=$n ;; esac
  printf 'S%s %s %s\0' "$off" "$size" "$ino"
  if [ "$k" -gt 0 ]; then tail -c +$((off + 1)) -- "$p" | head -c "$k" | base64; fi
  printf '\0'
fi
"""

_PID_INFO = r"""
for pid do
  printf 'P%s\0' "$pid"
  for f in stat cmdline status; do
    if b=$(base64 < "/proc/$pid/$f" 2>/dev/null); then printf '%s\0' "$b"; else printf -- '-\0'; fi
  done
done
"""

# Whether two paths are one directory (device:inode): "1", "0", or "-" when either cannot be
# looked at (agent_server.same_dir).
_SAME_DIR = r"""
same_dir() {
  if a=$(stat -L -c '%d:%i' -- "$1" 2>/dev/null) && b=$(stat -L -c '%d:%i' -- "$2" 2>/dev/null); then
    if [ "$a" = "$b" ]; then echo 1; else echo 0; fi
  else echo -; fi
}
"""

# $1 root pid, $2 most processes, $3 run dir or "" : a walk of /proc/<pid>/task/*/children
# from the root; the records are parsed by agent_server.proc_tree_record, as the agent's own
# walk is.
_PROC_TREE = _SAME_DIR + r"""
rundir=$3
root=$1 max=$2 n=0 main= first=1 seen=' ' q=$1
clk=$(getconf CLK_TCK 2>/dev/null) || clk=100
pg=$(getconf PAGESIZE 2>/dev/null) || pg=
printf 'C%s %s\0' "${clk:-100}" "$pg"
while [ "$n" -lt "$max" ]; do
  set -- $q; [ "$#" -gt 0 ] || break
  p=$1; shift; q=$*
  case $seen in *" $p "*) continue ;; esac
  seen="$seen$p "
  if s=$(base64 < "/proc/$p/stat" 2>/dev/null); then
    set +f; k=$(cat /proc/"$p"/task/*/children 2>/dev/null); set -f
    k=$(echo $k)
    printf 'P%s\0%s\0%s\0' "$p" "$s" "$k"
    if [ "$first" = 1 ]; then set -- $k; main=${1:-}; fi
    q="$q $k"; n=$((n + 1))
  elif [ "$first" = 1 ]; then q=; break
  fi
  first=0
done
set -- $q; t=0; [ "$#" -gt 0 ] && t=1
printf 'T%s\0' "$t"
for f in "/proc/$root/cmdline" "/proc/$root/status" "/proc/${main:-0}/cmdline"; do
  if [ -n "$main" ] || [ "$f" != /proc/0/cmdline ]; then
    if b=$(base64 < "$f" 2>/dev/null); then printf '%s\0' "$b"; else printf -- '-\0'; fi
  else printf -- '-\0'; fi
done
if [ -n "$rundir" ] && [ "$n" -gt 0 ]; then printf 'W%s\0' "$(same_dir "/proc/$root/cwd" "$rundir")"
else printf 'W-\0'; fi
"""

# $1 pid $2 sig $3 start_ticks or "" $4 base64 of the NUL-terminated command line, or "-"
# $5 working directory, or "" $6 group (1/0). The same rules as agent_server.signal_refusal:
# proven start time, exact command line and directory; never pid 1, a group id below 2, or a
# group that holds this shell or its parent.
_SIGNAL = _SAME_DIR + r"""
pid=$1 sig=$2 want=$3 wantcmd=$4 cwd=$5 group=$6
pgid_of() { s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo -; return; }; set -- ${s##*) }; echo "$3"; }
if [ "$pid" -le 1 ]; then printf 'mismatch\0'
elif ! s=$(cat "/proc/$pid/stat" 2>/dev/null); then printf 'gone\0'
else
  set -- ${s##*) }
  state=$1 pgid=$3 start=${20}
  cmd=$(base64 < "/proc/$pid/cmdline" 2>/dev/null | tr -d '\n')
  here=-; [ -n "$cwd" ] && here=$(same_dir "/proc/$pid/cwd" "$cwd")
  if [ "$state" = Z ] || [ "$state" = X ]; then printf 'gone\0'
  elif [ -z "$want" ] || [ "$start" != "$want" ]; then printf 'mismatch\0'
  elif [ "$wantcmd" != - ] && [ "$cmd" != "$wantcmd" ]; then printf 'mismatch\0'
  elif [ -n "$cwd" ] && [ "$here" != 1 ]; then printf 'mismatch\0'
  elif [ "$group" = 1 ] && { [ "$pgid" -le 1 ] || [ "$pgid" != "$pid" ] ||
       [ "$pgid" = "$(pgid_of $$)" ] || [ "$pgid" = "$(pgid_of $PPID)" ]; }; then printf 'mismatch\0'
  else
    target=$pid; [ "$group" = 1 ] && target=-$pgid
    if e=$(kill -"$sig" "$target" 2>&1); then printf 'sent\0'
    elif [ ! -e "/proc/$pid" ]; then printf 'gone\0'
    else printf 'F%s\0' "$e"; fi
  fi
fi
"""

# $1 pid $2 sig $3 start_ticks or "" $4 dump file $5 least seconds between dumps; the same
# rules as agent_server.op_dump_stacks. Answers "S<status>", then the file's %y and base64.
_DUMP_STACKS = r"""
pid=$1 sig=$2 want=$3 f=$4 min=$5
answer() { printf 'S%s\0' "$1"; if [ -n "$2" ]; then stat -c '%y' -- "$f"; printf '\0'; head -c 262144 -- "$f" | base64; printf '\0'; fi; }
if ! s=$(cat "/proc/$pid/stat" 2>/dev/null); then answer gone
else
  set -- ${s##*) }
  state=$1 start=${20}
  m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
  if [ "$state" = Z ] || [ "$state" = X ]; then answer gone
  elif [ -z "$want" ] || [ "$start" != "$want" ]; then answer mismatch
  elif [ -z "$m" ] || [ $(( (0x$m >> (sig - 1)) & 1 )) != 1 ]; then answer no-handler
  elif [ -L "$f" ]; then printf 'FToo many levels of symbolic links\0'
  elif [ ! -e "$f" ]; then printf 'FNo such file or directory\0'
  elif [ -d "$f" ]; then printf 'FIs a directory\0'
  elif [ ! -f "$f" ]; then
    k=other; [ -p "$f" ] && k=fifo; [ -S "$f" ] && k=socket; [ -c "$f" ] && k=char-device; [ -b "$f" ] && k=block-device
    printf 'Fit is a %s, not a regular file\0' "$k"
  elif [ ! -w "$f" ] || [ ! -r "$f" ]; then printf 'FPermission denied\0'
  elif [ "$(stat -c %s -- "$f")" -gt 0 ] && [ $(( $(date +%s) - $(stat -c %Y -- "$f") )) -lt "$min" ]; then answer recent 1
  else
    : > "$f"
    if e=$(kill -"$sig" "$pid" 2>&1); then
      i=0 last=0
      while [ "$i" -lt 33 ]; do
        sleep 0.03; n=$(stat -c %s -- "$f")
        if [ "$n" -gt 0 ] && [ "$n" = "$last" ]; then break; fi
        last=$n i=$((i + 1))
      done
      if [ "$n" -gt 0 ]; then answer dumped 1; else answer no-dump 1; fi
    elif [ ! -e "/proc/$pid" ]; then answer gone
    else printf 'Fnot permitted to signal pid %s (owned by another user)\0' "$pid"; fi
  fi
fi
"""

# $1 pid $2 start_ticks or "": py-spy dump of that very process, where py-spy is installed.
_PY_SPY_DUMP = r"""
pid=$1 want=$2
if ! s=$(cat "/proc/$pid/stat" 2>/dev/null); then printf 'Sgone\0'
else
  set -- ${s##*) }
  state=$1 start=${20}
  if [ "$state" = Z ] || [ "$state" = X ]; then printf 'Sgone\0'
  elif [ -z "$want" ] || [ "$start" != "$want" ]; then printf 'Smismatch\0'
  elif ! command -v py-spy >/dev/null 2>&1; then printf 'Sno-py-spy\0'
  else
    if o=$(timeout %(timeout)d py-spy dump --pid "$pid" </dev/null 2>&1); then st=dumped
    elif [ $? = 124 ]; then st=failed o="py-spy dump took more than %(timeout)d s"
    else st=failed; fi
    printf 'S%%s\0' "$st"; date +%%s; printf '\0'; printf '%%s\n' "$o" | base64; printf '\0'
  fi
fi
""" % {"timeout": agent_server.PY_SPY_TIMEOUT_S}

# PATH search like shutil.which (files only, executable), not `command -v` (builtins, aliases)
_WHICH = r"""
for n do
  found=-
  case $n in
    */*) [ -f "$n" ] && [ -x "$n" ] && found=$n ;;
    *) oldifs=$IFS; IFS=:
       for d in $PATH; do
         [ -n "$d" ] && [ -f "$d/$n" ] && [ -x "$d/$n" ] && { found=$d/$n; break; }
       done
       IFS=$oldifs ;;
  esac
  printf '%s\0' "$found"
done
"""

_DISK_FREE = r"""
p=$1
while [ ! -e "$p" ]; do q=$(dirname -- "$p"); [ "$q" = "$p" ] && break; p=$q; done
if o=$(stat -f -L -c '%a %S %b' -- "$p" 2>&1); then printf 'S%s\0%s\0' "$p" "$o"
else printf 'E%s\0' "$o"; fi
"""

# $1 path $2 create (1/0)
_PROBE_DIR = r"""
p=$1 create=$2 exists=0 created=0 writable=0 err=
if [ -d "$p" ]; then exists=1
elif [ -e "$p" ] || [ -L "$p" ]; then err="exists and is not a directory"
elif [ "$create" = 1 ]; then
  if e=$(mkdir -p -- "$p" 2>&1); then exists=1 created=1; else err=${e##*: }; fi
else err="No such file or directory"; fi
if [ "$exists" = 1 ]; then
  f="$p/.dflash-probe.$$"
  if e=$( { : > "$f"; } 2>&1 ); then rm -f -- "$f"; writable=1; else err=${e##*: }; fi
fi
printf '%s%s%s\0%s\0' "$exists" "$created" "$writable" "$err"
"""

# $1 directory as given, $2 the same ending in "/"
# $1 path $2 token. Prints R when it removed the file, K when it kept it (not ours, or gone).
_REMOVE_IF_HOLDS = r"""
c=$1
if [ -f "$c" ] && [ ! -L "$c" ] && head -c 4096 -- "$c" | grep -qF -- "$2"; then
  if e=$(rm -f -- "$c" 2>&1); then printf 'R\0'; else printf 'F%s\0' "$e"; fi
else printf 'K\0'; fi
"""

# $1 depth, $2 most files found, $3 the name patterns and $4 the directories not entered, each
# joined by "/" (which no name holds), then the roots. GNU find walks each root (hidden
# directories and the skipped ones pruned) and prints each match's stat itself, no process per
# file: "N<path>", then "F<readable> <size> <inode> <permissions, octal> <mtime as %y>". head
# stops the walk once enough were found.
_FIND_FILES = r"""
depth=$1 maxf=$2 pats=$3 skip=$4; shift 4
t='%s %i %m %TY-%Tm-%Td %TH:%TM:%TS %Tz\0'
for r do
  case $r in "~/"*) r=$HOME/${r#"~/"} ;; esac
  if [ -f "$r" ]; then printf 'N%s\0' "$r"; st "$r"; continue; fi
  [ -d "$r" ] || continue
  IFS=/
  set -- \( -type d \( -name '.*'
  for k in $skip; do set -- "$@" -o -name "$k"; done
  set -- "$@" \) -prune \) -o \( -type f \( -false
  for k in $pats; do set -- "$@" -o -name "$k"; done
  unset IFS
  find -H "$r" -mindepth 1 -maxdepth $((depth + 1)) "$@" \) \
    \( -readable -printf "N%p\\0F1 $t" -o -printf "N%p\\0F0 $t" \) \) 2>/dev/null \
    | head -z -n $((2 * maxf))
done
"""

_LIST_DIR = r"""
p=$1 d=$2
if [ ! -e "$p" ] && [ ! -L "$p" ]; then :
elif [ ! -d "$p" ]; then printf 'FNot a directory\0'
elif [ ! -r "$p" ] || [ ! -x "$p" ]; then printf 'FPermission denied\0'
else
  set +f
  for f in "$d"* "$d".[!.]* "$d"..?*; do
    if [ -e "$f" ] || [ -L "$f" ]; then printf 'N%s\0' "$f"; st "$f"; fi
  done
fi
"""

_Y = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))? ([+-])(\d\d)(\d\d)$")


def parse_stat_time(text: str) -> float:
    """`stat -c %y` ("2026-11-30 10:46:09.418262254 +0000") → the float os.stat gives."""
    m = _Y.match(text.strip())
    if not m:
        raise ValueError(f"unexpected stat time {text!r}")
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    frac = (m.group(7) or "0")[:9].ljust(9, "0")
    offset = (int(m.group(9)) * 3600 + int(m.group(10)) * 60) * (1 if m.group(8) == "+" else -1)
    sec = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset
    return sec + int(frac) * 1e-9   # the same arithmetic as CPython's st_mtime


def _strerror(message: str) -> str:
    """The strerror at the end of a tool's message: "stat: cannot statx 'x': No such ..."."""
    return message.rsplit(": ", 1)[-1].strip()


def _stat_record(path: str, field: str) -> dict:
    rec = {"path": path, "exists": False, "size": 0, "mtime": 0.0, "inode": 0,
           "is_dir": False, "kind": "", "error": ""}
    if field.startswith("E"):
        err = _strerror(field[1:])
        if err != "No such file or directory":
            rec["error"] = err
        return rec
    readable, is_dir = field[1] == "1", field[2] == "1"
    size, inode, mode, when = field[4:].split(" ", 3)
    rec.update(exists=True, size=int(size), inode=int(inode), mtime=parse_stat_time(when),
               is_dir=is_dir, kind=agent_server.file_kind(int(mode, 16)),
               error="" if readable else "Permission denied")
    return rec


def _b64(field: str) -> bytes | None:
    return None if field == "-" else base64.b64decode(field)


class ShellOps:
    """RemoteOps (and PreflightOps) through one sh command per op."""

    kind = "shell"

    def __init__(self, target: Target, *, timeout: float = 30.0) -> None:
        self.target = target
        self.timeout = timeout
        self.fallback_reason = ""   # set by open_ops when the agent could not start

    @classmethod
    async def start(cls, target: Target, **kw) -> "ShellOps":
        """Also proves the transport runs commands at all (the incident's exec did not)."""
        ops = cls(target, **kw)
        await ops._run("noop", ":")
        return ops

    @property
    def label(self) -> str:
        return self.target.label

    async def _run(self, op: str, script: str, *args: str, input: bytes | None = None) -> list[str]:
        res: CommandResult = await self.target.run(
            ["sh", "-c", _PRELUDE + script, "sh", *args], input=input, timeout=self.timeout)
        out = res.stdout
        end = "\0" + SENTINEL + "\n"
        if not out.endswith(end):
            if res.exit_status == 0 and not out and not res.stderr:
                raise TargetError(
                    f"{op} on {self.label}: the command exited 0 and printed nothing, so it "
                    "never ran (the transport dropped it)", "run `dflash-tui --canary`")
            detail = (res.stderr.strip() or out.strip())[-300:]
            raise TargetError(f"{op} on {self.label}: sh failed (exit {res.exit_status}): "
                              f"{detail or 'no output'}")
        body = out[: -len(end)]
        # Whatever a login script printed before our script started is not ours.
        body = body[body.find(START) + len(START):] if START in body else body
        fields = body.split("\0")
        if fields and fields[-1] == "":
            fields.pop()
        return fields

    # -- RemoteOps ------------------------------------------------------------------------
    async def now(self) -> float:
        (text,) = await self._run("now", _NOW)
        sec, _, frac = text.partition(".")
        return int(sec) + (int(frac[:9].ljust(9, "0")) * 1e-9 if frac.isdigit() else 0.0)

    async def stat(self, paths: list[str]) -> list[FileStat]:
        paths = list(paths)
        if not paths:
            return []
        fields = await self._run("stat", _STAT, *paths)
        return [filestat_from(_stat_record(p, f)) for p, f in zip(paths, fields, strict=True)]

    async def _read(self, op: str, path: str, offset: str, max_bytes: int) -> FileChunk:
        max_bytes = min(int(max_bytes), agent_server.MAX_READ)   # same cap as the agent
        fields = await self._run(op, _READ, path, offset, str(max_bytes))
        head = fields[0]
        if head.startswith("E"):
            err = _strerror(head[1:])
            if err == "No such file or directory":
                return chunk_from({"path": path, "offset": 0 if offset == "tail" else int(offset),
                                   "data": "", "size": 0, "inode": 0, "exists": False})
            raise OpRefused(f"{op} on {self.label}: cannot read {path}: {err}")
        if head.startswith("F"):
            raise OpRefused(f"{op} on {self.label}: cannot read {path}: {head[1:]}")
        off, size, ino = head[1:].split()
        data = fields[1].replace("\n", "") if len(fields) > 1 else ""
        return chunk_from({"path": path, "offset": int(off), "data": data, "size": int(size),
                           "inode": int(ino), "exists": True})

    async def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> FileChunk:
        if offset < 0 or max_bytes < 0:
            raise OpRefused(f"read on {self.label}: offset and max_bytes must not be negative")
        return await self._read("read", path, str(int(offset)), max_bytes)

    async def read_tail(self, path: str, max_bytes: int = 64 << 10) -> FileChunk:
        return await self._read("read_tail", path, "tail", max_bytes)

    async def pid_info(self, pids: list[int]) -> list[PidInfo]:
        pids = [int(p) for p in pids]
        for p in pids:
            if p <= 0:
                raise OpRefused(f"pid_info on {self.label}: pid must be a positive integer, got {p}")
        if not pids:
            return []
        fields = await self._run("pid_info", _PID_INFO, *map(str, pids))
        out = []
        for i, pid in enumerate(pids):
            rec = fields[4 * i: 4 * i + 4]
            if len(rec) != 4 or rec[0] != f"P{pid}":
                raise TargetError(f"pid_info on {self.label}: garbled answer for pid {pid}")
            out.append(pidinfo_from(agent_server.pid_record(
                pid, _b64(rec[1]), _b64(rec[2]), _b64(rec[3]))))
        return out

    async def proc_tree(self, pid: int, run_dir: str | None = None) -> ProcTree:
        pid = int(pid)
        if pid <= 0:
            raise TargetError(f"proc_tree on {self.label}: pid must be a positive integer, got {pid}")
        fields = await self._run("proc_tree", _PROC_TREE, str(pid), str(agent_server.MAX_TREE), run_dir or "")
        try:
            head = fields[0][1:].split() if fields[0].startswith("C") else []
            clk = int(head[0]) if head and head[0].isdigit() else 100
            page = int(head[1]) if len(head) > 1 and head[1].isdigit() else None
            walked, i = [], 1
            while fields[i].startswith("P"):
                walked.append((int(fields[i][1:]), _b64(fields[i + 1]),
                               agent_server.parse_children(fields[i + 2])))
                i += 3
            truncated = fields[i] == "T1"
            cmdline, status, main_cmdline, where = fields[i + 1: i + 5]
        except (IndexError, ValueError):
            raise TargetError(f"proc_tree on {self.label}: garbled answer for pid {pid}") from None
        in_run_dir = {"W1": True, "W0": False}.get(where) if run_dir else None
        return proctree_from(agent_server.proc_tree_record(
            pid, walked, _b64(cmdline), _b64(status), _b64(main_cmdline), clk, truncated, in_run_dir, page))

    async def signal(self, pid: int, sig: int, *, start_ticks: int | None,
                     cmdline: Sequence[str] | None, cwd: str | None = None, group: bool = False) -> str:
        pid, sig = int(pid), int(sig)
        if pid <= 0:
            raise OpRefused(f"signal on {self.label}: pid must be a positive integer, got {pid}")
        want_cmd = "-" if cmdline is None else base64.b64encode(
            b"".join(a.encode("utf-8", "surrogateescape") + b"\0" for a in cmdline)).decode("ascii")
        (answer,) = await self._run(
            "signal", _SIGNAL, str(pid), str(sig),
            "" if start_ticks is None else str(int(start_ticks)), want_cmd, cwd or "",
            "1" if group else "0")
        if answer.startswith("F"):
            raise OpRefused(f"signal on {self.label}: not permitted to signal pid {pid}: "
                              f"{_strerror(answer[1:])}")
        return answer

    async def dump_stacks(self, pid: int, sig: int, *, start_ticks: int | None, path: str,
                          min_interval_s: float = 5.0) -> StackDumpAnswer:
        fields = await self._run("dump_stacks", _DUMP_STACKS, str(int(pid)), str(int(sig)),
                                 "" if start_ticks is None else str(int(start_ticks)), path,
                                 str(int(min_interval_s)))
        return self._dump_answer("dump_stacks", path, fields, parse_stat_time)

    async def py_spy_dump(self, pid: int, *, start_ticks: int | None) -> StackDumpAnswer:
        fields = await self._run("py_spy_dump", _PY_SPY_DUMP, str(int(pid)),
                                 "" if start_ticks is None else str(int(start_ticks)))
        return self._dump_answer("py_spy_dump", "", fields, float)

    def _dump_answer(self, op: str, path: str, fields: list[str], when) -> StackDumpAnswer:
        head = fields[0]
        if head.startswith("F"):
            raise OpRefused(f"{op} on {self.label}: " + (f"cannot open {path}: {head[1:]}"
                                                         if not head.startswith("Fnot permitted") else head[1:]))
        if len(fields) < 3:
            return stackdump_from({"status": head[1:], "data": "", "time": 0.0})
        return stackdump_from({"status": head[1:], "data": fields[2].replace("\n", ""),
                               "time": when(fields[1].strip())})

    # -- PreflightOps ---------------------------------------------------------------------
    async def which(self, names: list[str]) -> dict[str, str | None]:
        names = list(names)
        if not names:
            return {}
        fields = await self._run("which", _WHICH, *names)
        return {n: (None if f == "-" else f) for n, f in zip(names, fields, strict=True)}

    async def disk_free(self, path: str) -> DiskFree:
        start = path if path.startswith("/") else None
        if start is None:
            (home,) = await self._run("disk_free", 'printf "%s\\0" "$PWD"')
            start = posixpath.join(home, path)
        start = posixpath.normpath(start)
        fields = await self._run("disk_free", _DISK_FREE, start)
        if fields[0].startswith("E"):
            raise OpRefused(f"disk_free on {self.label}: cannot measure free space at "
                              f"{start}: {_strerror(fields[0][1:])}")
        avail, frsize, blocks = (int(x) for x in fields[1].split())
        return diskfree_from({"path": path, "checked": fields[0][1:], "free": avail * frsize,
                              "total": blocks * frsize})

    async def probe_dir(self, path: str, create: bool = True) -> DirProbe:
        flags, err = await self._run("probe_dir", _PROBE_DIR, path, "1" if create else "0")
        return dirprobe_from({"path": path, "exists": flags[0] == "1", "created": flags[1] == "1",
                              "writable": flags[2] == "1", "error": err})

    async def remove_if_holds(self, path: str, token: str) -> bool:
        (field,) = await self._run("remove_if_holds", _REMOVE_IF_HOLDS, path, token)
        if field.startswith("F"):
            raise OpRefused(f"remove_if_holds on {self.label}: cannot remove {path}: {field[1:]}")
        return field == "R"

    async def list_dir(self, path: str) -> list[FileStat]:
        prefix = path if path.endswith("/") else path + "/"
        fields = await self._run("list_dir", _LIST_DIR, path, prefix)
        if fields and fields[0].startswith("F"):
            raise OpRefused(f"list_dir on {self.label}: cannot list {path}: {fields[0][1:]}")
        recs = []
        for name_f, stat_f in zip(fields[0::2], fields[1::2], strict=True):
            recs.append(_stat_record(name_f[1:], stat_f))
        return [filestat_from(r) for r in sorted(recs, key=lambda r: r["path"])]

    async def find_files(self, roots: Sequence[str], patterns: Sequence[str], *, max_depth: int = 3,
                         max_entries: int = 20000, max_found: int = 512, skip: Sequence[str] = ()) -> FoundFiles:
        """As the agent's, but `max_entries` is not counted (find walks each root whole,
        within `max_depth`), and the search stops at `max_found` in all of them."""
        words = [*patterns, *skip]
        if any("/" in w or not w for w in words):
            raise OpRefused(f"find_files on {self.label}: a pattern or skipped name holds '/' or is empty")
        fields = await self._run("find_files", _FIND_FILES, str(int(max_depth)), str(int(max_found)),
                                 "/".join(patterns), "/".join(skip), *roots)
        recs = {}
        for name_f, stat_f in zip(fields[0::2], fields[1::2]):
            if not name_f.startswith("N"):
                continue
            if stat_f.startswith("F"):   # find's own: a regular file, its permission bits in octal
                readable, size, inode, perm, when = stat_f[1:].split(" ", 4)
                stat_f = f"S{readable}0 {size} {inode} {0o100000 | int(perm, 8):x} {when}"
            recs[name_f[1:]] = _stat_record(name_f[1:], stat_f)
        found = sorted(recs.values(), key=lambda r: r["path"])[: int(max_found)]
        notes = (f"stopped at {int(max_found)} files found",) if len(found) >= int(max_found) else ()
        return found_from({"found": found, "notes": list(notes)})

    async def close(self) -> None:
        """Nothing persistent to release: every op was its own command."""


__all__: Sequence[str] = ("ShellOps", "parse_stat_time")
