"""The launch claim: at most one launch (or relaunch) of a run dir at a time, on the target.

A launch takes the claim before it reads the run dir's state or moves anything to history/,
and gives it back when its first verdict is in. Taking it is ONE hard link of a complete
temp file onto RUN_DIR/.launch-claim: link(2) is atomic and fails when the name exists, so of
two launchers exactly one wins, on any host, through any transport, and a reader never sees a
half-written claim. The loser is refused with who holds the claim and since when.

A claim outlives its launcher only when that launcher died mid-launch (or lost the target
before it could give the claim back). It is broken when that is certain: the holder ran on
this machine (same host name, boot and pid namespace) and its pid is gone or now has another
start time, or it is this very process and no launch of ours holds it; a holder elsewhere is
presumed alive until the claim is older than any launch can last. Breaking compares and
removes under a second lock (mkdir, atomic), so two launchers breaking the same stale claim
cannot remove a fresh one.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import posixpath
import secrets
import socket
import time
from dataclasses import dataclass

from ...contract.rundir import LAUNCH_CLAIM, ClaimRecord, SchemaError, parse_claim, to_json
from ...remote.base import CommandResult, TRANSPORT_FAILURES, Target, TargetError
from ...remote.ops import RemoteOps

# Longer than any launch can take with the profile limits bounded as config.py bounds them
# (preflight, a relaunch's stop with its grace, archive, write, detach, the launch deadline).
CLAIM_STALE_AFTER_S = 30 * 60
# A breaker that died between its mkdir and rmdir leaves the break lock; this old, it is gone.
BREAK_LOCK_STALE_AFTER_S = 60
_MAX_CLAIM_BYTES = 4096

# $1 run dir, $2 claim path, $3 claim text. Prints "claimed", "held" or "error=<why>".
_TAKE = r'''
d=$1 c=$2
mkdir -p -- "$d" || { echo "error=cannot create $d"; exit 0; }
if [ -e "$c" ] || [ -L "$c" ]; then echo held; exit 0; fi
t="$c.tmp.$$"
if ! e=$( { printf '%s\n' "$3" > "$t"; } 2>&1 ); then rm -f -- "$t"; echo "error=$e" | tr '\n' ' '; echo; exit 0; fi
if e=$(ln -- "$t" "$c" 2>&1); then rm -f -- "$t"; echo claimed
elif [ -e "$c" ] || [ -L "$c" ]; then rm -f -- "$t"; echo held
else rm -f -- "$t"; echo "error=$e" | tr '\n' ' '; echo; fi
'''

# $1 claim path, $2 break lock, $3 the claim text judged stale. Prints "broken", "changed"
# (someone else's claim is there now: leave it) or "busy" (another breaker holds the lock).
_BREAK = r'''
c=$1 b=$2
mkdir -- "$b" 2>/dev/null || { echo busy; exit 0; }
if [ -f "$c" ] && [ ! -L "$c" ] && [ "$(head -c 4096 -- "$c")" = "$3" ]; then rm -f -- "$c"; echo broken
else echo changed; fi
rmdir -- "$b"
'''

# Tokens of the claims this process holds right now (a claim naming this pid but not listed
# here is a leftover of one of our own launches whose release could not reach the target).
_HELD: set[str] = set()


class ClaimRefused(Exception):
    """The run dir is claimed by another launch (or the claim cannot be taken): one line.
    `ran_nothing` is the claim command's result when the transport did not run it at all."""

    def __init__(self, message: str, ran_nothing: CommandResult | None = None) -> None:
        super().__init__(message)
        self.ran_nothing = ran_nothing


def _read_first(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(256).strip()
    except OSError:
        return ""


def _own_start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def machine_id() -> str:
    """This machine as a launcher: host name, boot and pid namespace (all three, because
    containers on one kernel share the boot id and may share a host name)."""
    boot = _read_first("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    # Without /proc (macOS) a pid cannot be checked by its start time: "" says so, and such a
    # holder is judged by the claim's age only.
    return f"{socket.gethostname()}|{boot}|{pidns}" if boot and pidns else ""


def _launcher() -> str:
    try:
        user = getpass.getuser()
    except Exception:   # getuser raises when the uid has no name; the field is informative only
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Holder:
    """The claim found in the run dir: its exact text, and its record when it is one of ours."""

    text: str
    record: ClaimRecord | None

    @classmethod
    def parse(cls, text: str) -> "Holder":
        try:
            return cls(text, parse_claim(text))
        except SchemaError:
            return cls(text, None)

    def who(self) -> str:
        if self.record is None:
            return "an unknown launcher (the claim is not one of ours)"
        launcher = "".join(ch if ch.isprintable() else "?" for ch in self.record.launcher)[:120]
        return f"{launcher} (pid {self.record.pid}, {self.record.action[:20]})"

    def alive_here(self) -> bool | None:
        """True/False when this machine can tell whether the holder still runs, else None."""
        rec = self.record
        if rec is None or not rec.machine or rec.machine != machine_id():
            return None
        if rec.pid == os.getpid():
            return rec.token in _HELD
        ticks = _own_start_ticks(rec.pid)
        if ticks is None:
            return False
        return rec.start_ticks is None or ticks == rec.start_ticks


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


@dataclass
class Claim:
    """A claim this process holds; `release()` gives it back (only if it is still ours)."""

    ops: RemoteOps
    path: str
    token: str

    async def release(self) -> None:
        _HELD.discard(self.token)
        try:
            # only while it still holds our token: a claim broken and retaken since is not ours
            await self.ops.remove_if_holds(self.path, self.token)
        except TargetError:
            # The target is gone; the claim names this process, so our next launch, or any
            # launcher on this machine once we have exited, breaks it.
            pass


async def take_claim(target: Target, ops: RemoteOps, run_dir: str, action: str) -> Claim:
    """Take RUN_DIR/.launch-claim, breaking a stale one; raises ClaimRefused when it is held."""
    path = posixpath.join(run_dir, LAUNCH_CLAIM)
    token = secrets.token_hex(8)
    pid = os.getpid()
    text = to_json(ClaimRecord(token=token, launcher=_launcher(), pid=pid, start_ticks=_own_start_ticks(pid),
                               machine=machine_id(), action=action))
    for _ in range(4):
        res = await target.run(["sh", "-c", _TAKE, "dflash-claim", run_dir, path, text], timeout=30)
        answer = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        if answer == "claimed":
            _HELD.add(token)
            return Claim(ops, path, token)
        if answer.startswith("error="):
            raise ClaimRefused(f"cannot take the launch claim {path}: {answer[6:].strip()}; "
                               "fix the run dir's permissions")
        if answer != "held":
            raise ClaimRefused(f"the launch-claim command printed {res.stdout.strip()[-200:]!r} "
                               f"(exit status {res.exit_status}): the transport did not run it", res)
        holder, age, problem = await _inspect(ops, path)
        if problem:
            raise ClaimRefused(f"{path} {problem}; remove it if no launch of this run dir is in progress")
        if holder is None:
            continue        # given back between our attempt and our look: try again
        alive = holder.alive_here()
        # A claim dated far in the future (a clock set wrong, a touched file) would never age.
        if alive is False or (alive is None and abs(age) > CLAIM_STALE_AFTER_S):
            await _break(target, ops, path, holder.text)
            continue
        age = max(0.0, age)
        since = f"{_utc(time.time() - age)}, {age:.0f} s ago" if age < 7200 else _utc(time.time() - age)
        raise ClaimRefused(f"another launch of this run dir is in progress, started by {holder.who()} at {since}; "
                           f"wait for it to finish, or remove {path} if that launcher is gone")
    raise ClaimRefused(f"{path} keeps changing under this launch; another launcher is racing for it, "
                       "try again in a moment")


async def _inspect(ops: RemoteOps, path: str) -> tuple[Holder | None, float, str]:
    """(holder, age in seconds on the target's clock, problem); (None, 0, "") when it is gone."""
    (st,) = await ops.stat([path])
    if not st.exists:
        return None, 0.0, ""
    if not st.is_regular:
        return None, 0.0, "is not a regular file"
    try:
        chunk = await ops.read(path, 0, _MAX_CLAIM_BYTES)
    except TRANSPORT_FAILURES:
        raise
    except TargetError as exc:
        return None, 0.0, f"cannot be read ({exc.message})"
    if not chunk.exists:
        return None, 0.0, ""
    now = await ops.now()
    text = chunk.data.decode("utf-8", "replace").rstrip("\n")
    return Holder.parse(text), now - st.mtime, ""


async def _break(target: Target, ops: RemoteOps, path: str, text: str) -> None:
    lock = path + ".break"
    res = await target.run(["sh", "-c", _BREAK, "dflash-break", path, lock, text], timeout=30)
    if res.stdout.strip() == "busy":
        await asyncio.sleep(0.2)
        (st,) = await ops.stat([lock])
        if st.exists and await ops.now() - st.mtime > BREAK_LOCK_STALE_AFTER_S:
            await target.run(["rmdir", "--", lock], timeout=30)
