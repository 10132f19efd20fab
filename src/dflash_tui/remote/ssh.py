"""SSHTarget: commands on a host over ONE asyncssh connection per (host, port, user).

Every command, stream and agent of every SSHTarget with the same (host, port, user) shares one
connection from a per-event-loop pool, instead of paying a TCP + key exchange + auth handshake
per check as `ssh host cmd` does. ~/.ssh/config is honoured (Host aliases, HostName, User, Port,
IdentityFile, ProxyJump, UserKnownHostsFile) because asyncssh reads it; host keys are verified
against known_hosts by default, and an unknown or changed key is refused with the command that
accepts it. A dropped connection is re-established on the next command, with exponential
backoff between failed attempts so a dead host is not hammered by every poll.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shlex
import socket
import stat
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

import asyncssh

from .base import CommandResult, CommandTimeout, Process, Target, TargetError, TargetUnreachable

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KEEPALIVE = 15.0          # seconds between keepalives; 3 missed → connection lost
BACKOFF_FIRST, BACKOFF_CAP = 0.5, 30.0
# OpenSSH's default MaxSessions is 10 channels per connection; stay under it so a burst of
# polls waits for a free channel instead of failing with "open failed".
DEFAULT_MAX_CHANNELS = 8
# The local files a profile names are small; a bigger one is the wrong file, never read whole.
MAX_LOCAL_FILE_BYTES = 16 << 20
DEFAULT_SSH_CONFIG = "~/.ssh/config"


def check_local_file(field_name: str, value: str, *, text: bool) -> None:
    """Refuse (ValueError, one line) a profile-named local file that is not a small, readable,
    regular file (and, when `text`, UTF-8): asyncssh would otherwise read a FIFO or /dev/zero
    forever, or die on the decoding. A missing file is left to the connect, which says so."""
    path = os.path.expanduser(value)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(f"{field_name} {value}: {exc.strerror or exc}; fix `{field_name}`") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise ValueError(f"{field_name} {value} is {kind}; point `{field_name}` at a file")
    if st.st_size > MAX_LOCAL_FILE_BYTES:
        raise ValueError(f"{field_name} {value} is {st.st_size} bytes, too big for an SSH file; "
                         f"fix `{field_name}`")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except PermissionError:
        raise ValueError(f"{field_name} {value} is not readable; make it readable (chmod u+r)") from None
    except OSError as exc:
        raise ValueError(f"{field_name} {value}: {exc.strerror or exc}; fix `{field_name}`") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_LOCAL_FILE_BYTES + 1) if text else b""
    if text:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{field_name} {value} is not UTF-8 text (byte {exc.start}); "
                             "save it as UTF-8") from None


# AES-GCM first: with AES in hardware it costs less CPU per packet in asyncssh than
# chacha20-poly1305 (its default first choice), which adds up over a fleet polled every second
# (benchmarks/RESULTS.md, "fleet"). The server still picks from this list what it allows.
_CIPHERS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
            *(a.decode() for a in asyncssh.encryption.get_default_encryption_algs()
              if a not in (b"aes128-gcm@openssh.com", b"aes256-gcm@openssh.com"))]


@dataclass
class ConnectionState:
    """What the UI shows about a host's connection."""

    connected: bool = False
    last_error: str = ""
    since: float = field(default_factory=time.time)   # when `connected` last changed
    attempts: int = 0          # failed connection attempts since the last success
    retry_at: float = 0.0      # monotonic time before which no new attempt is made
    connects: int = 0          # successful connects (1 + reconnects)
    last_hint: str = ""        # what the user can do about last_error


@dataclass(frozen=True)
class SSHParams:
    host: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_config: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    keepalive_interval: float = DEFAULT_KEEPALIVE
    max_channels: int = DEFAULT_MAX_CHANNELS

    @property
    def key(self) -> tuple:
        return (self.host, self.port, self.user, self.identity_file, self.known_hosts,
                self.ssh_config)


@functools.lru_cache(maxsize=64)
def resolve(p: SSHParams) -> tuple[str, int, str, list[str]]:
    """(hostname, port, user, known_hosts files) after applying the ssh config: what the
    messages name, so "unknown host key" says which file and which [host]:port."""
    host, port, user = p.host, p.port or 22, p.user or ""
    files = [p.known_hosts] if p.known_hosts else []
    try:
        opts = asyncssh.SSHClientConnectionOptions(
            host=p.host, port=p.port if p.port else (), username=p.user if p.user else (),
            config=[os.path.expanduser(p.ssh_config)] if p.ssh_config else ())
        host, port, user = opts.host, opts.port, opts.username
        if not files and isinstance(opts.known_hosts, (list, tuple)):
            files = [str(f) for f in opts.known_hosts
                     if isinstance(f, (str, os.PathLike)) and str(f) != "/dev/null"]
    except (asyncssh.Error, OSError, ValueError):
        pass
    return host, port, user, files or ["~/.ssh/known_hosts"]


def label_for(p: SSHParams) -> str:
    user = resolve(p)[2]
    return f"{user}@{p.host}" if user else p.host


def _known_hosts_entry(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class SSHConnection:
    """One shared connection; reconnects on demand with capped exponential backoff."""

    def __init__(self, params: SSHParams) -> None:
        self.params = params
        self.state = ConnectionState()
        self.refs = 0
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(params.max_channels)

    def resolved(self) -> tuple[str, int, str, list[str]]:
        return resolve(self.params)

    @property
    def label(self) -> str:
        return label_for(self.params)

    # -- connecting ---------------------------------------------------------------------
    def _alive(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def get(self) -> asyncssh.SSHClientConnection:
        if self._alive():
            return self._conn  # type: ignore[return-value]
        async with self._lock:
            if self._alive():
                return self._conn  # type: ignore[return-value]
            if self._conn is not None:   # it was up and dropped: reconnect at once
                self._conn = None
                self._mark(False, self.state.last_error or "connection lost")
            wait = self.state.retry_at - time.monotonic()
            if wait > 0:
                raise TargetUnreachable(
                    f"{self.state.last_error} (next attempt in {wait:.1f}s)",
                    self.state.last_hint or "retrying with backoff")
            try:
                self._conn = await self._connect()
            except TargetUnreachable as exc:
                self.state.attempts += 1
                delay = min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (self.state.attempts - 1))
                self.state.retry_at = time.monotonic() + delay
                self._mark(False, exc.message)
                self.state.last_hint = exc.hint
                raise
            self.state.attempts, self.state.retry_at = 0, 0.0
            self.state.connects += 1
            self._mark(True, "")
            return self._conn

    def _mark(self, connected: bool, error: str) -> None:
        if connected != self.state.connected:
            self.state.since = time.time()
        self.state.connected = connected
        if error or connected:
            self.state.last_error = error

    async def _connect(self) -> asyncssh.SSHClientConnection:
        p = self.params
        kw: dict[str, Any] = {
            "connect_timeout": p.connect_timeout,
            "keepalive_interval": p.keepalive_interval,
            "keepalive_count_max": 3,
            "encryption_algs": _CIPHERS,
        }
        if p.port:
            kw["port"] = p.port
        if p.user:
            kw["username"] = p.user
        # Files named by the profile: a missing one is a profile error, not a network one.
        for field_name, value in (("identity_file", p.identity_file),
                                  ("known_hosts", p.known_hosts), ("ssh_config", p.ssh_config)):
            if value and not os.path.isfile(os.path.expanduser(value)):
                raise TargetUnreachable(f"{self.label}: {field_name} {value} does not exist",
                                        f"fix `{field_name}` in the profile" + (
                                            f"; `ssh-keyscan -p {p.port or 22} {p.host} > {value}`"
                                            " creates it after you check the fingerprint"
                                            if field_name == "known_hosts" else ""))
        if p.identity_file:
            kw["client_keys"] = [os.path.expanduser(p.identity_file)]
        if p.known_hosts:
            kw["known_hosts"] = os.path.expanduser(p.known_hosts)
        if p.ssh_config:
            kw["config"] = [os.path.expanduser(p.ssh_config)]
        try:
            try:
                return await asyncssh.connect(p.host, **kw)
            except asyncssh.KeyImportError:
                # A passphrase-protected identity_file: OpenSSH would use the key the agent
                # holds for it, so try the agent before giving up.
                if "client_keys" not in kw or not os.environ.get("SSH_AUTH_SOCK"):
                    raise
                del kw["client_keys"]
                return await asyncssh.connect(p.host, **kw)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise self._host_key_error(exc) from None
        except asyncssh.KeyImportError as exc:
            raise TargetUnreachable(
                f"{self.label}: cannot use the private key ({exc})",
                "load it into ssh-agent (`ssh-add KEY`; the agent is used through "
                "SSH_AUTH_SOCK) or point identity_file at an unencrypted key") from None
        except asyncssh.PermissionDenied:
            host, port, user, _ = self.resolved()
            raise TargetUnreachable(
                f"{self.label}: authentication failed for user {user or '?'} on {host}:{port}",
                "check `user` and `identity_file` in the profile (or User/IdentityFile in "
                "~/.ssh/config); `ssh-copy-id` installs a key") from None
        except (asyncio.TimeoutError, TimeoutError):
            host, port, _, _ = self.resolved()
            raise TargetUnreachable(
                f"{self.label}: no answer from {host}:{port} within {p.connect_timeout:.0f}s",
                "check the address, the network/VPN and the firewall") from None
        except ConnectionRefusedError:
            host, port, _, _ = self.resolved()
            raise TargetUnreachable(f"{self.label}: connection refused by {host}:{port}",
                                    "is sshd running there, and is the port right?") from None
        except socket.gaierror as exc:
            host, _, _, _ = self.resolved()
            raise TargetUnreachable(f"{self.label}: cannot resolve host name {host!r} "
                                    f"({exc.strerror})",
                                    "check `host` in the profile or add a Host entry to "
                                    "~/.ssh/config") from None
        except asyncssh.Error as exc:
            raise TargetUnreachable(f"{self.label}: SSH failed: {exc.reason}",
                                    "try `ssh` to the same host to see more") from None
        except OSError as exc:
            host, port, _, _ = self.resolved()
            raise TargetUnreachable(f"{self.label}: cannot connect to {host}:{port}: "
                                    f"{exc.strerror or exc}", "check the network") from None

    def _host_key_error(self, exc: asyncssh.HostKeyNotVerifiable) -> TargetUnreachable:
        host, port, _, files = self.resolved()
        entry = _known_hosts_entry(host, port)
        kh = files[0]
        recorded = False
        for f in files:
            try:
                known = asyncssh.read_known_hosts(os.path.expanduser(f))
                keys = asyncssh.match_known_hosts(known, host, None, port)[0]
            except (OSError, ValueError, asyncssh.Error):
                continue
            if keys:
                recorded, kh = True, f
                break
        keyscan = f"ssh-keyscan -p {port} {host} >> {kh}" if port != 22 else \
            f"ssh-keyscan {host} >> {kh}"
        if recorded:
            return TargetUnreachable(
                f"{self.label}: the host key of {entry} has CHANGED since it was recorded in "
                f"{kh}; refusing to connect (a reinstalled host, or someone in the middle)",
                f"if the change is expected: ssh-keygen -R '{entry}' -f {kh} && {keyscan}")
        return TargetUnreachable(
            f"{self.label}: unknown host key for {entry} (not in {', '.join(files)}); refusing "
            "to connect",
            f"verify its fingerprint, then accept it: {keyscan} (or `ssh -o "
            f"UserKnownHostsFile={kh} -p {port} {host}` once and answer yes: into the file this "
            f"profile reads, not ~/.ssh/known_hosts), or point `known_hosts = \"...\"` in the profile at a file "
            "that has it")

    async def channel(self, timeout: float | None) -> None:
        """Wait for a free session channel (released with `release()`)."""
        try:
            await asyncio.wait_for(self._channels.acquire(), timeout)
        except asyncio.TimeoutError:
            raise CommandTimeout(f"{self.label}: all {self.params.max_channels} SSH channels "
                                 "stayed busy", "close open streams or raise max_channels") from None

    def release(self) -> None:
        self._channels.release()

    def lost(self, exc: BaseException) -> None:
        """A channel failed because the connection went away: drop it for a reconnect."""
        if self._conn is not None and self._conn.is_closed():
            self._mark(False, f"connection lost ({exc.__class__.__name__}: {exc})")

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 5)
            except (asyncio.TimeoutError, asyncssh.Error, OSError):
                pass
        self._mark(False, "")


class SSHPool:
    """Connections by (host, port, user, ...), one pool per event loop (asyncssh connections
    belong to the loop that made them)."""

    def __init__(self) -> None:
        self._conns: dict[tuple, SSHConnection] = {}

    def acquire(self, params: SSHParams) -> SSHConnection:
        conn = self._conns.get(params.key)
        if conn is None:
            conn = self._conns[params.key] = SSHConnection(params)
        conn.refs += 1
        return conn

    async def release(self, conn: SSHConnection) -> None:
        conn.refs -= 1
        if conn.refs <= 0:
            self._conns.pop(conn.params.key, None)
            await conn.close()

    def __len__(self) -> int:
        return len(self._conns)


_POOLS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SSHPool]" = weakref.WeakKeyDictionary()


def default_pool() -> SSHPool:
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = SSHPool()
    return pool


_CONN_ERRORS = (asyncssh.Error, OSError, ConnectionError, EOFError)


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
        except _CONN_ERRORS:
            return

    async def write(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)
            await self._proc.stdin.drain()
        except _CONN_ERRORS as exc:
            self._conn.lost(exc)
            raise TargetError(f"{self._conn.label}: channel closed ({exc})") from None

    async def readline(self) -> bytes:
        try:
            return await self._proc.stdout.readline()
        except asyncio.CancelledError:
            raise
        except _CONN_ERRORS as exc:
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
                except _CONN_ERRORS:
                    pass
                self._proc.close()
                await asyncio.wait_for(self._proc.wait_closed(), 2.0)
        except (asyncio.TimeoutError, *_CONN_ERRORS):
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

    def __init__(self, host: str, *, user: str | None = None, port: int | None = None,
                 identity_file: str | None = None, known_hosts: str | None = None,
                 ssh_config: str | None = None,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 keepalive_interval: float = DEFAULT_KEEPALIVE,
                 max_channels: int = DEFAULT_MAX_CHANNELS,
                 pool: SSHPool | None = None) -> None:
        if not host or host.startswith("-") or any(c.isspace() or not c.isprintable() for c in host):
            raise ValueError(f"not a usable SSH host name: {host!r}")
        for field_name, value, text in (("identity_file", identity_file, False),
                                        ("known_hosts", known_hosts, True),
                                        ("ssh_config", ssh_config or DEFAULT_SSH_CONFIG, True)):
            if value:
                check_local_file(field_name, value, text=text)
        self.params = SSHParams(host=host, port=port, user=user, identity_file=identity_file,
                                known_hosts=known_hosts, ssh_config=ssh_config,
                                connect_timeout=connect_timeout,
                                keepalive_interval=keepalive_interval, max_channels=max_channels)
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
        return label_for(self.params)

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
            except _CONN_ERRORS as exc:
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
            except _CONN_ERRORS as exc:
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
        except _CONN_ERRORS as exc:
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
