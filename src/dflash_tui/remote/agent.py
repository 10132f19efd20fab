"""AgentOps: RemoteOps answered by the persistent agent (agent_server.py) over one channel.

The agent is started once per target with `python3 -c BOOTSTRAP`; its source follows on stdin,
so nothing is installed or left on the target. Requests carry ids, so any number of coroutines
can ask at once; each waits at most its own timeout. When the channel dies (network cut, sshd
restart, container stopped) every waiting request fails with a TargetError, and the next
request starts a fresh agent through the target, whose transport reconnects on its own.

`open_ops(target)` is the entry point: the agent where the target has python3, else ShellOps.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import zlib
from pathlib import Path
from typing import Any, Sequence

from . import agent_server
from .base import CommandTimeout, OpRefused, Process, Target, TargetError
from .answers import (changes_from, chunk_from, dirprobe_from, diskfree_from, exits_from, filestat_from, found_from,
                      pidinfo_from, proctree_from, stackdump_from)
from .look_plans import LookPlans, OutOfStep
from .ops import DirProbe, DiskFree, FileChunk, FileStat, FoundChanges, FoundFiles, PidInfo, ProcTree, StackDumpAnswer
from .shell_ops import ShellOps

# Reads one line (the program, zlib + base64) from stdin and runs it: small enough to read in
# `ps`, and independent of how long the program grows with extra sources.
BOOTSTRAP = ("import sys,zlib,base64;exec(compile(zlib.decompress(base64.b64decode("
             "sys.stdin.buffer.readline())),'<dflash-agent>','exec'),{'__name__':'dflash_agent'})")

# sh finds the interpreter first so "no python3 here" is an answer, not a silent EOF.
_LAUNCH = ('command -v "$1" >/dev/null 2>&1 || { echo "dflash-agent: no-python $1"; exit 127; }; '
           'exec "$1" -c "$2"')
NO_PYTHON_MARK = "dflash-agent: no-python"

_SERVER_SOURCE = Path(agent_server.__file__).read_text(encoding="utf-8")


class AgentUnavailable(TargetError):
    """The target has no usable python3 (missing or older than 3.8): use ShellOps there."""


def build_program(extra_sources: Sequence[str] = ()) -> bytes:
    """The line sent after the bootstrap: server source + extras + the call to main."""
    extras = [(f"extra{i}", src) for i, src in enumerate(extra_sources)]
    text = f"{_SERVER_SOURCE}\nmain({extras!r})\n"
    return base64.b64encode(zlib.compress(text.encode("utf-8"), 9)) + b"\n"


# -- answers → the contract's dataclasses (ShellOps builds the same dicts) ------------------


class AgentOps:
    """RemoteOps (and PreflightOps) through the agent. Create with `await AgentOps.start(t)`."""

    kind = "agent"

    def __init__(self, target: Target, *, python: str = "python3",
                 extra_sources: Sequence[str] = (), request_timeout: float = 15.0,
                 start_timeout: float = 30.0) -> None:
        self.target = target
        self.python = python
        self.extra_sources = list(extra_sources)
        self.request_timeout = request_timeout
        self.start_timeout = start_timeout
        self.info: dict[str, Any] = {}     # the agent's hello: python, pid, hostname, user, ops
        self.starts = 0                    # how many agents this client has started
        self._proc: Process | None = None
        self._reader: asyncio.Task | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._start_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._outbox: tuple[Process, list[bytes], asyncio.Task] | None = None
        self._looks: list[tuple[dict, asyncio.Future]] | None = None   # observe's of this tick
        self._plans = LookPlans()          # the look plans the running agent holds
        self._sending: set[asyncio.Task] = set()   # the loop keeps only weak references to tasks
        self._closed = False

    @classmethod
    async def start(cls, target: Target, extra_sources: Sequence[str] = (),
                    **kw: Any) -> "AgentOps":
        ops = cls(target, extra_sources=extra_sources, **kw)
        await ops._ensure()
        return ops

    @property
    def label(self) -> str:
        return self.target.label

    # -- lifecycle -----------------------------------------------------------------------
    async def _ensure(self) -> None:
        if self._closed:
            raise TargetError(f"the agent client for {self.label} is closed")
        if self._proc is not None and self._reader is not None and not self._reader.done():
            return
        async with self._start_lock:
            if self._proc is not None and self._reader is not None and not self._reader.done():
                return
            await self._spawn()

    async def _spawn(self) -> None:
        proc = await self.target.open_process(
            ["sh", "-c", _LAUNCH, "dflash-agent", self.python, BOOTSTRAP])
        try:
            try:
                await proc.write(build_program(self.extra_sources))
            except (OSError, TargetError):
                pass   # it already exited (no python3?): its first line says why
            first = await asyncio.wait_for(self._first_line(proc), self.start_timeout)
        except asyncio.TimeoutError:
            await proc.close()
            raise CommandTimeout(f"the agent on {self.label} did not answer within "
                                 f"{self.start_timeout:.0f}s", "is the target overloaded?") from None
        except BaseException:
            await proc.close()
            raise
        text = first.decode("utf-8", "replace").strip()
        if text.startswith(NO_PYTHON_MARK):
            await proc.close()
            raise AgentUnavailable(f"no {self.python} on {self.label}",
                                   "install python3 there, or set `python` in the profile")
        if text.startswith("dflash-agent: python"):
            await proc.close()
            raise AgentUnavailable(f"{self.python} on {self.label}: {text[14:]}",
                                   "the agent needs python 3.8 or newer")
        try:
            hello = json.loads(text)
            assert hello.get("id") == 0 and hello.get("ok")
        except (ValueError, AssertionError, AttributeError):
            await proc.close()
            if not text:
                # A stopped container answers on stderr, which this channel does not carry.
                await self.target.ensure_running()
                raise TargetError(
                    f"the agent on {self.label} printed nothing and exited "
                    f"(status {proc.returncode}): the transport did not run the command",
                    "run `dflash-tui --canary` to test the transport") from None
            raise TargetError(f"the agent on {self.label} did not start: {text[:200]}",
                              f"check that `{self.python}` runs there") from None
        self.info = hello["result"]
        self._proc = proc
        self._plans = LookPlans()   # this agent knows no look plan yet
        self.starts += 1
        self._reader = asyncio.create_task(self._read_answers(proc), name="dflash-agent-reader")

    async def _first_line(self, proc: Process) -> bytes:
        """The agent's hello (or the no-python mark), skipping what a login script printed
        before it (a banner from ~/.bashrc must not make the target look agent-less)."""
        noise: list[bytes] = []
        while True:
            line = await proc.readline()
            if not line or line.startswith((b'{"id":0,', NO_PYTHON_MARK.encode(),
                                            b"dflash-agent: python")):
                return line if line or not noise else noise[-1]
            noise.append(line)
            if len(noise) > 200:   # not a banner any more: report what came
                return line

    async def _read_answers(self, proc: Process) -> None:
        try:
            while True:
                line = await proc.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                    fut = self._pending.pop(msg.get("id"), None)
                except (ValueError, AttributeError):
                    continue   # not ours (noise on the channel); requests still time out
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (TargetError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if self._proc is proc:
                self._proc = None
            err = TargetError(f"the agent on {self.label} stopped (its channel closed)",
                              "it is restarted on the next request")
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(err)
            self._pending.clear()

    async def _drop(self) -> None:
        proc, self._proc = self._proc, None
        reader, self._reader = self._reader, None
        if proc is not None:
            try:
                await asyncio.wait_for(proc.close(), 5)
            except (asyncio.TimeoutError, TargetError, OSError):
                pass
        if reader is not None:
            reader.cancel()
            try:
                await reader
            except (asyncio.CancelledError, Exception):
                pass

    async def close(self) -> None:
        self._closed = True
        await self._drop()

    # -- requests ------------------------------------------------------------------------
    async def call(self, op: str, timeout: float | None = None, **args: Any) -> Any:
        """One request; retried once on a fresh agent when the channel died under it
        (every op but `signal` and `dump_stacks` is a read, or, like `remove_if_holds`, does
        nothing the second time, so repeating it is harmless)."""
        for attempt in (1, 2):
            await self._ensure()
            try:
                return await self._call_once(op, args, timeout or self.request_timeout)
            except _ChannelLost:
                if attempt == 2 or op in ("signal", "dump_stacks"):
                    raise TargetError(f"lost the agent on {self.label} during {op}",
                                      "check the connection; it is retried on the next poll") from None
        raise AssertionError("unreachable")

    async def _call_once(self, op: str, args: dict, timeout: float) -> Any:
        proc = self._proc
        if proc is None:
            raise _ChannelLost()
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        line = (json.dumps({"id": rid, "op": op, "args": args}, separators=(",", ":"))
                + "\n").encode("utf-8")
        try:
            await asyncio.shield(self._send(proc, line))
            msg = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            # A wedged agent (e.g. stat on a hung mount) answers nothing else: start afresh.
            await self._drop()
            raise CommandTimeout(f"the agent on {self.label} did not answer {op} within "
                                 f"{timeout:.0f}s", "a filesystem there may be hanging") from None
        except (TargetError, OSError, ConnectionError):
            self._pending.pop(rid, None)
            raise _ChannelLost() from None
        except asyncio.CancelledError:
            self._pending.pop(rid, None)   # its answer, if it ever comes, is nobody's
            raise
        if not msg.get("ok"):
            raise OpRefused(f"{op} on {self.label}: {msg.get('error', 'failed')}")
        return msg.get("result")

    def _send(self, proc: Process, line: bytes) -> asyncio.Task:
        """Queue `line` for the agent; every request made in the same event-loop tick goes out
        in ONE write. A poll asks several things at once (and a fleet polls several profiles of
        one target at once): one SSH packet for all of them instead of one each."""
        box = self._outbox
        if box is None or box[0] is not proc or box[2].done():
            lines: list[bytes] = []
            box = self._outbox = (proc, lines, asyncio.ensure_future(self._flush(proc, lines)))
        box[1].append(line)
        return box[2]

    async def _flush(self, proc: Process, lines: list[bytes]) -> None:
        await asyncio.sleep(0)   # let the requests of this tick join
        if self._outbox is not None and self._outbox[1] is lines:
            self._outbox = None  # later requests start the next write
        async with self._write_lock:
            await proc.write(b"".join(lines))

    # -- RemoteOps ------------------------------------------------------------------------
    async def now(self) -> float:
        return float(await self.call("now"))

    async def stat(self, paths: list[str]) -> list[FileStat]:
        return [filestat_from(d) for d in await self.call("stat", paths=list(paths))]

    async def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> FileChunk:
        return chunk_from(await self.call("read", path=path, offset=offset, max_bytes=max_bytes))

    async def read_tail(self, path: str, max_bytes: int = 64 << 10) -> FileChunk:
        return chunk_from(await self.call("read_tail", path=path, max_bytes=max_bytes))

    async def pid_info(self, pids: list[int]) -> list[PidInfo]:
        return [pidinfo_from(d) for d in await self.call("pid_info", pids=[int(p) for p in pids])]

    async def proc_tree(self, pid: int, run_dir: str | None = None) -> ProcTree:
        return proctree_from(await self.call("proc_tree", pid=int(pid), run_dir=run_dir))

    async def signal(self, pid: int, sig: int, *, start_ticks: int | None,
                     cmdline: Sequence[str] | None, cwd: str | None = None, group: bool = False) -> str:
        return await self.call("signal", pid=int(pid), sig=int(sig), start_ticks=start_ticks,
                               cmdline=None if cmdline is None else list(cmdline), cwd=cwd, group=bool(group))

    async def dump_stacks(self, pid: int, sig: int, *, start_ticks: int | None, path: str,
                          min_interval_s: float = 5.0) -> StackDumpAnswer:
        return stackdump_from(await self.call("dump_stacks", pid=int(pid), sig=int(sig), start_ticks=start_ticks,
                                              path=path, min_interval_s=float(min_interval_s)))

    async def py_spy_dump(self, pid: int, *, start_ticks: int | None) -> StackDumpAnswer:
        return stackdump_from(await self.call("py_spy_dump", timeout=agent_server.PY_SPY_TIMEOUT_S + 5,
                                              pid=int(pid), start_ticks=start_ticks))

    async def wait_exit(self, pids: Sequence[tuple[int, int]], timeout_s: float) -> list[tuple[int, int]]:
        """The processes of `pids` ((pid, start_ticks) each) that have ended, as soon as one has
        (agent_server `op_wait_exit`); [] when all still run after `timeout_s`."""
        gone = await self.call("wait_exit", timeout=timeout_s + self.request_timeout,
                               pids=[[int(p), int(s)] for p, s in pids], timeout_s=float(timeout_s))
        return exits_from(gone)

    async def observe(self, paths: list[str], *, reads: dict[str, int], known: dict[str, list],
                      grown: dict[str, tuple[int, int]] | None = None, list_dirs: Sequence[str] = (),
                      proc_tree: tuple[int, str | None] | None = None) -> dict:
        """The first round of a look at a run dir (agent_server `observe_one`): its answer, the
        stats and listings as FileStats, which run/evidence/first_look.py hands out as the answers of the
        single ops. The looks asked in one event-loop tick (a fleet's poll of one target's run
        dirs) go as ONE request, each as its plan (remote/look_plans.py): only what changed."""
        tree = None if proc_tree is None else {"pid": int(proc_tree[0]), "run_dir": proc_tree[1]}
        look = {"paths": list(paths), "reads": dict(reads), "known": dict(known),
                "grown": {p: [int(o), int(n)] for p, (o, n) in (grown or {}).items()},
                "list_dirs": list(list_dirs), "proc_tree": tree}
        answer = asyncio.get_running_loop().create_future()
        if self._looks is None:
            self._looks = []
            task = asyncio.ensure_future(self._observe_together(self._looks))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        self._looks.append((look, answer))
        return await answer

    async def _observe_together(self, looks: list[tuple[dict, asyncio.Future]]) -> None:
        await asyncio.sleep(0)   # let the looks of this tick join
        if self._looks is looks:
            self._looks = None   # later looks start the next request
        waiting = list(looks)
        for _ in range(2):
            # Made for the agent that will answer (a fresh one knows no plan): one resend, of
            # the looks whose plan the agent did not hold as this side did.
            try:
                await self._ensure()
            except Exception as exc:
                _fail_all(waiting, exc)
                return
            plans = self._plans
            entries = [plans.entry(look) for look, _ in waiting]
            try:
                items = await self.call("observe", looks=[entry for _, _, entry in entries])
                if not isinstance(items, list) or len(items) != len(waiting):
                    raise TargetError(f"the agent on {self.label} answered observe with "
                                      f"{len(items) if isinstance(items, list) else 'no'} looks for {len(waiting)}")
            except Exception as exc:   # each caller gets it, as its own call would have
                _fail_all(waiting, exc)
                return
            again = []
            for (look, answer), (plan, seq, _), item in zip(waiting, entries, items):
                if not isinstance(item, dict):
                    item = {"ok": False, "error": "failed"}
                if item.get("resend"):
                    plans.forget(plan)
                    again.append((look, answer))
                    continue
                if not item.get("ok"):
                    plans.failed(plan, seq)
                    if not answer.done():
                        answer.set_exception(OpRefused(f"observe on {self.label}: {item.get('error', 'failed')}"))
                    continue
                # Decoded even when its caller gave up (its poll's deadline): the next answer
                # builds on this one.
                try:
                    result = plans.decode(plan, seq, item.get("result"))
                except OutOfStep:
                    again.append((look, answer))
                    continue
                if not answer.done():
                    answer.set_result(result)
            if not again:
                return
            waiting = again
        _fail_all(waiting, OpRefused(f"observe on {self.label}: the agent did not keep the look's plan"))

    # -- PreflightOps ---------------------------------------------------------------------
    async def metric_read(self, items: list[dict]) -> list[dict]:
        """A run's metric files in one request (agent_server `op_metric_read`): searches, new
        bytes by offset, read-only SQLite rows; each answer {"ok", "result"|"error"}, raw
        (bytes base64, rows as lists): run/evidence/metric_files/ decodes them."""
        return await self.call("metric_read", items=list(items))

    async def remove_if_holds(self, path: str, token: str) -> bool:
        return bool(await self.call("remove_if_holds", path=path, token=token))

    async def which(self, names: list[str]) -> dict[str, str | None]:
        return await self.call("which", names=list(names))

    async def disk_free(self, path: str) -> DiskFree:
        return diskfree_from(await self.call("disk_free", path=path))

    async def probe_dir(self, path: str, create: bool = True) -> DirProbe:
        return dirprobe_from(await self.call("probe_dir", path=path, create=create))

    async def list_dir(self, path: str) -> list[FileStat]:
        return [filestat_from(d) for d in await self.call("list_dir", path=path)]

    async def find_files(self, roots: Sequence[str], patterns: Sequence[str], *, max_depth: int = 3,
                         max_entries: int = 20000, max_found: int = 512, skip: Sequence[str] = ()) -> FoundFiles:
        return found_from(await self.call("find_files", roots=list(roots), patterns=list(patterns),
                                          max_depth=int(max_depth), max_entries=int(max_entries),
                                          max_found=int(max_found), skip=list(skip)))

    async def find_changes(self, roots: Sequence[str], patterns: Sequence[str], *, max_depth: int = 3,
                           max_entries: int = 20000, max_found: int = 512, skip: Sequence[str] = (),
                           since: tuple | None = None, fresh: Sequence[str] = (),
                           rescan: bool = False) -> FoundChanges:
        return changes_from(await self.call("find_files", roots=list(roots), patterns=list(patterns),
                                            max_depth=int(max_depth), max_entries=int(max_entries),
                                            max_found=int(max_found), skip=list(skip),
                                            since=list(since) if since else None, fresh=list(fresh),
                                            rescan=bool(rescan)))


class _ChannelLost(Exception):
    pass


def _fail_all(looks: list[tuple[dict, asyncio.Future]], exc: BaseException) -> None:
    for _, answer in looks:
        if not answer.done():
            answer.set_exception(exc)


async def open_ops(target: Target, *, python: str = "python3",
                   extra_sources: Sequence[str] = (), prefer: str = "auto"):
    """RemoteOps for `target`: the agent where python3 runs there, else ShellOps.

    `prefer="shell"` forces ShellOps. The result's `.kind` says which ("agent" / "shell");
    a ShellOps made because the agent could not start has `.fallback_reason`."""
    if prefer not in ("auto", "agent", "shell"):
        raise ValueError(f"prefer must be auto, agent or shell, not {prefer!r}")
    if prefer == "shell":
        return await ShellOps.start(target)
    try:
        return await AgentOps.start(target, extra_sources=extra_sources, python=python)
    except AgentUnavailable as exc:
        if prefer == "agent":
            raise
        ops = await ShellOps.start(target)
        ops.fallback_reason = str(exc)
        return ops
