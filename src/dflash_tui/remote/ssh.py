"""SSHTarget: commands on a host over ONE asyncssh connection per (host, port, user).

Every command, stream and agent of every SSHTarget with the same (host, port, user) shares one
connection from a per-event-loop pool (remote/ssh_connection.py), instead of paying a TCP + key
exchange + auth handshake per check as `ssh host cmd` does. ~/.ssh/config is honoured (Host
aliases, HostName, User, Port, IdentityFile, ProxyJump, UserKnownHostsFile) because asyncssh
reads it; host keys are verified against known_hosts by default, and an unknown or changed key
is refused with the command that accepts it. A dropped connection is re-established on the next
command, with exponential backoff between failed attempts so a dead host is not hammered by
every poll. The local files a profile names are checked first (small_file.py).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections import deque
from typing import Sequence

import asyncssh

from ..small_file import SmallFileRefused, read_small_file
from .base import CommandResult, CommandTimeout, Process, Target, TargetError, TargetUnreachable
from .ssh_dest import SSHDest
from .ssh_connection import (CONNECTION_ERRORS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEPALIVE, DEFAULT_MAX_CHANNELS,
                             ConnectionState, SSHConnection, SSHParams, SSHPool, default_pool, label_for)

# The local files a profile names are small; a bigger one is the wrong file, never read whole.
MAX_LOCAL_FILE_BYTES = 16 << 20
DEFAULT_SSH_CONFIG = "~/.ssh/config"


def check_local_file(field_name: str, value: str, *, text: bool) -> None:
    """Refuse (ValueError, one line) a profile-named local file that is not a small, readable,
    regular file (and, when `text`, UTF-8; small_file.py): asyncssh would otherwise read a FIFO
    or /dev/zero forever, or die on the decoding. A missing file is left to the connect, which
    says so."""
    try:
        read_small_file(os.path.expanduser(value), MAX_LOCAL_FILE_BYTES, text=text)
    except FileNotFoundError:
        return
    except SmallFileRefused as no:
        fix = f"fix `{field_name}`"
        why = {"directory": f" is a directory; point `{field_name}` at a file",
               "special": f" is not a regular file (a FIFO, device or socket); point `{field_name}` at a file",
               "changed": f" is not a regular file (a FIFO, device or socket); point `{field_name}` at a file",
               "too_big": f" is {no.size if no.size is not None else 'too many'} bytes, too big for an SSH file; {fix}",
               "unreadable": " is not readable; make it readable (chmod u+r)",
               "os_error": f": {no.detail}; {fix}",
               "not_utf8": f" is not UTF-8 text (byte {no.at}); save it as UTF-8"}[no.problem]
        raise ValueError(f"{field_name} {value}{why}") from None


class _SSHProcess(Process):
    def __init__(self, conn: SSHConnection, proc: asyncssh.SSHClientProcess) -> None:
        self._conn = conn
        self._proc = proc
        self._released = False
        self.stderr_tail: deque[bytes] = deque(maxlen=64)
        # Unread stderr would fill the channel window and stall the remote command.
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        try:
            while True:
                chunk = await self._proc.stderr.read(4096)
                if not chunk:
                    return
                self.stderr_tail.append(chunk)
        except CONNECTION_ERRORS:
            return

    async def write(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)
            await self._proc.stdin.drain()
        except CONNECTION_ERRORS as exc:
            self._conn.lost(exc)
            raise TargetError(f"{self._conn.label}: channel closed ({exc})") from None

    async def readline(self) -> bytes:
        try:
            return await self._proc.stdout.readline()
        except asyncio.CancelledError:
            raise
        except CONNECTION_ERRORS as exc:
            self._conn.lost(exc)
            return b""

    async def close(self) -> None:
        try:
            if not self._proc.stdin.is_closing():
                self._proc.stdin.write_eof()
            try:
                await asyncio.wait_for(self._proc.wait_closed(), 1.0)
            except asyncio.TimeoutError:
                # Still running (e.g. `tail -F`): ask sshd to signal it (OpenSSH >= 7.9
                # honours the request), then drop the channel either way.
                try:
                    self._proc.terminate()
                except CONNECTION_ERRORS:
                    pass
                self._proc.close()
                await asyncio.wait_for(self._proc.wait_closed(), 2.0)
        except (asyncio.TimeoutError, *CONNECTION_ERRORS):
            pass
        finally:
            self._stderr_task.cancel()
            if not self._released:
                self._released = True
                self._conn.release()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode


class SSHTarget(Target):
    """A host reached over SSH. Share-nothing to construct; the connection is pooled."""

    def __init__(self, dest: SSHDest, *,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 keepalive_interval: float = DEFAULT_KEEPALIVE,
                 max_channels: int = DEFAULT_MAX_CHANNELS,
                 pool: SSHPool | None = None) -> None:
        host, port, user, ssh_config = dest.host, dest.port, dest.user, dest.ssh_config
        if not host or host.startswith("-") or any(c.isspace() or not c.isprintable() for c in host):
            raise ValueError(f"not a usable SSH host name: {host!r}")
        for field_name, value, text in (("identity_file", dest.identity_file, False),
                                        ("known_hosts", dest.known_hosts, True),
                                        ("ssh_config", ssh_config or DEFAULT_SSH_CONFIG, True)):
            if value:
                check_local_file(field_name, value, text=text)
        self.params = SSHParams(dest, connect_timeout=connect_timeout, keepalive_interval=keepalive_interval,
                                max_channels=max_channels)
        self._pool = pool
        self._conn: SSHConnection | None = None
        config = os.path.expanduser(ssh_config or DEFAULT_SSH_CONFIG)
        if os.path.isfile(config):
            try:
                asyncssh.SSHClientConnectionOptions(host=host, port=port if port else (),
                                                    username=user if user else (), config=[config])
            except asyncssh.config.ConfigParseError as exc:
                raise ValueError(f"ssh_config: {exc}; fix that line") from None
            except (asyncssh.Error, OSError, ValueError):
                pass   # key files and the like: the connect reports those with their own hint

    @property
    def label(self) -> str:   # type: ignore[override]
        return label_for(self.params)   # cached there: asked on every look

    def _connection(self) -> SSHConnection:
        if self._conn is None:
            pool = self._pool if self._pool is not None else default_pool()
            self._pool = pool
            self._conn = pool.acquire(self.params)
        return self._conn

    @property
    def state(self) -> ConnectionState:
        """connected, last_error, since, attempts, connects: for the header of the UI."""
        return self._connection().state

    async def connect(self) -> None:
        """Connect now (otherwise the first command does); raises TargetUnreachable."""
        await self._connection().get()

    @staticmethod
    def command_line(argv: Sequence[str]) -> str:
        if not argv:
            raise ValueError("empty argv")
        return shlex.join(argv)

    async def run(self, argv: Sequence[str], *, input: bytes | None = None,
                  timeout: float | None = 30.0) -> CommandResult:
        cmd = self.command_line(argv)
        conn = self._connection()
        t0 = time.monotonic()
        await conn.channel(timeout)
        try:
            ssh = await conn.get()
            try:
                proc = await ssh.create_process(cmd, encoding=None)
            except asyncssh.ChannelOpenError as exc:
                conn.lost(exc)
                raise TargetUnreachable(f"{conn.label}: cannot open a channel: {exc.reason}",
                                        "the connection is being re-established") from None
            except CONNECTION_ERRORS as exc:
                conn.lost(exc)
                raise TargetUnreachable(f"{conn.label}: connection lost ({exc})",
                                        "it is re-established on the next command") from None
            try:
                out, err = await asyncio.wait_for(proc.communicate(input), timeout)
            except asyncio.TimeoutError:
                proc.close()   # closing the channel is all a client can do about a hang
                raise CommandTimeout(
                    f"{argv[0]} on {conn.label} did not finish within {timeout:.0f}s",
                    "a process it started may be holding the channel's stdout/stderr open "
                    "(like a PTY); detach it with setsid and redirect its output") from None
            except CONNECTION_ERRORS as exc:
                conn.lost(exc)
                raise TargetUnreachable(f"{conn.label}: connection lost during {argv[0]} ({exc})",
                                        "it is re-established on the next command") from None
        finally:
            conn.release()
        signal = proc.exit_signal[0] if proc.exit_signal else None
        status = None if signal or proc.exit_status is None or proc.exit_status < 0 \
            else proc.exit_status
        return CommandResult(tuple(argv), status, (out or b"").decode("utf-8", "replace"),
                             (err or b"").decode("utf-8", "replace"), time.monotonic() - t0,
                             exit_signal=signal)

    async def open_process(self, argv: Sequence[str]) -> Process:
        cmd = self.command_line(argv)
        conn = self._connection()
        await conn.channel(conn.params.connect_timeout * 3)
        try:
            ssh = await conn.get()
            proc = await ssh.create_process(cmd, encoding=None)
        except TargetError:
            conn.release()
            raise
        except asyncssh.ChannelOpenError as exc:
            conn.release()
            conn.lost(exc)
            raise TargetUnreachable(f"{conn.label}: cannot open a channel: {exc.reason}") from None
        except CONNECTION_ERRORS as exc:
            conn.release()
            conn.lost(exc)
            raise TargetUnreachable(f"{conn.label}: connection lost ({exc})") from None
        except BaseException:
            conn.release()
            raise
        return _SSHProcess(conn, proc)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._pool is not None:
            await self._pool.release(conn)

    def __repr__(self) -> str:
        return f"SSHTarget({self.label!r})"
