"""Commands on this machine, through asyncio subprocesses (no shell).

`run` starts each command as the leader of a process group of its own, so that a command that
runs past its timeout (or whose caller gives up on it) is ended with everything it started and
did not detach: a hung child of a script (a squeue that sleeps on its controller) would
otherwise keep the pipes open, and the wait for them would last as long as the hang."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Sequence

from .base import CommandResult, CommandTimeout, Process, Target, TargetUnreachable


# After the kill, how long `run` waits for the killed command to be reaped.
_REAP_S = 2.0


def _end_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group (it is its leader), then close our ends of its
    pipes: a process of the group that survives (one that left it) cannot hold the wait."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass   # already gone (and reaped): the group is empty
    transport = getattr(proc, "_transport", None)   # asyncio keeps the pipes there
    if transport is not None:
        transport.close()


class _LocalProcess(Process):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc

    async def write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(data)
        await self._proc.stdin.drain()

    async def readline(self) -> bytes:
        assert self._proc.stdout is not None
        return await self._proc.stdout.readline()

    async def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()
        if self._proc.returncode is None:
            try:
                await asyncio.wait_for(self._proc.wait(), 1.0)
            except asyncio.TimeoutError:
                self._proc.terminate()
                try:
                    await asyncio.wait_for(self._proc.wait(), 2.0)
                except asyncio.TimeoutError:
                    self._proc.kill()
                    await self._proc.wait()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode


class LocalTarget(Target):
    label = "local"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._env = env

    async def run(self, argv: Sequence[str], *, input: bytes | None = None,
                  timeout: float | None = 30.0) -> CommandResult:
        t0 = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            return CommandResult(tuple(argv), 127, "", f"{argv[0]}: {exc.strerror}", time.monotonic() - t0)
        except OSError as exc:
            raise TargetUnreachable(f"cannot start {argv[0]!r} locally: {exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except asyncio.TimeoutError:
            _end_group(proc)
            try:
                await asyncio.wait_for(proc.wait(), _REAP_S)
            except asyncio.TimeoutError:
                pass   # a process it detached into a session of its own: not ours to wait for
            raise CommandTimeout(
                f"{argv[0]} did not finish within {timeout:.0f}s",
                "it and what it started were killed; a child that hangs holds its output open",
            ) from None
        except BaseException:
            _end_group(proc)   # cancelled: nobody will read its answer
            raise
        rc = proc.returncode
        sig = None
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name.removeprefix("SIG")
            except ValueError:
                sig = str(-rc)
        return CommandResult(tuple(argv), rc if rc is not None and rc >= 0 else None,
                             out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                             time.monotonic() - t0, exit_signal=sig)

    async def open_process(self, argv: Sequence[str]) -> Process:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=self._env,
                limit=16 * 1024 * 1024,
            )
        except OSError as exc:
            raise TargetUnreachable(f"cannot start {argv[0]!r} locally: {exc}") from None
        return _LocalProcess(proc)

    def __repr__(self) -> str:
        return f"LocalTarget(pid={os.getpid()})"
