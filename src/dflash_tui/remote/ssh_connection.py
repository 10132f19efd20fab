"""One asyncssh connection per (host, port, user, keys, config), pooled per event loop.

SSHConnection connects on first use (~/.ssh/config honoured because asyncssh reads it; host
keys verified against known_hosts, an unknown or changed key refused with the command that
accepts it), bounds the channels open at once, and after a drop reconnects on the next use with
exponential backoff between failed attempts, so a dead host is not hammered by every poll.
SSHPool shares one connection among every SSHTarget with the same SSHParams (remote/ssh.py).
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from .base import CommandTimeout, TargetUnreachable
from .ssh_dest import SSHDest

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_KEEPALIVE = 15.0          # seconds between keepalives; 3 missed → connection lost
BACKOFF_FIRST, BACKOFF_CAP = 0.5, 30.0
# OpenSSH's default MaxSessions is 10 channels per connection; stay under it so a burst of
# polls waits for a free channel instead of failing with "open failed".
DEFAULT_MAX_CHANNELS = 8

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
    dest: SSHDest
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    keepalive_interval: float = DEFAULT_KEEPALIVE
    max_channels: int = DEFAULT_MAX_CHANNELS

    @property
    def key(self) -> SSHDest:
        """Targets with one destination share a connection, whatever their tuning."""
        return self.dest


@functools.lru_cache(maxsize=64)
def resolve(p: SSHParams) -> tuple[str, int, str, list[str]]:
    """(hostname, port, user, known_hosts files) after applying the ssh config: what the
    messages name, so "unknown host key" says which file and which [host]:port."""
    d = p.dest
    host, port, user = d.host, d.port or 22, d.user or ""
    files = [d.known_hosts] if d.known_hosts else []
    try:
        opts = asyncssh.SSHClientConnectionOptions(
            host=d.host, port=d.port if d.port else (), username=d.user if d.user else (),
            config=[os.path.expanduser(d.ssh_config)] if d.ssh_config else ())
        host, port, user = opts.host, opts.port, opts.username
        if not files and isinstance(opts.known_hosts, (list, tuple)):
            files = [str(f) for f in opts.known_hosts
                     if isinstance(f, (str, os.PathLike)) and str(f) != "/dev/null"]
    except (asyncssh.Error, OSError, ValueError):
        pass
    return host, port, user, files or ["~/.ssh/known_hosts"]


# Asked on every look (each answer's words name the target); a target's params never change.
@functools.lru_cache(maxsize=64)
def label_for(p: SSHParams) -> str:
    user = resolve(p)[2]
    return f"{user}@{p.dest.host}" if user else p.dest.host


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
        p, d = self.params, self.params.dest
        kw: dict[str, Any] = {
            "connect_timeout": p.connect_timeout,
            "keepalive_interval": p.keepalive_interval,
            "keepalive_count_max": 3,
            "encryption_algs": _CIPHERS,
        }
        if d.port:
            kw["port"] = d.port
        if d.user:
            kw["username"] = d.user
        # Files named by the profile: a missing one is a profile error, not a network one.
        for field_name, value in (("identity_file", d.identity_file),
                                  ("known_hosts", d.known_hosts), ("ssh_config", d.ssh_config)):
            if value and not os.path.isfile(os.path.expanduser(value)):
                raise TargetUnreachable(f"{self.label}: {field_name} {value} does not exist",
                                        f"fix `{field_name}` in the profile" + (
                                            f"; `ssh-keyscan -p {d.port or 22} {d.host} > {value}`"
                                            " creates it after you check the fingerprint"
                                            if field_name == "known_hosts" else ""))
        if d.identity_file:
            kw["client_keys"] = [os.path.expanduser(d.identity_file)]
        if d.known_hosts:
            kw["known_hosts"] = os.path.expanduser(d.known_hosts)
        if d.ssh_config:
            kw["config"] = [os.path.expanduser(d.ssh_config)]
        try:
            try:
                return await asyncssh.connect(d.host, **kw)
            except asyncssh.KeyImportError:
                # A passphrase-protected identity_file: OpenSSH would use the key the agent
                # holds for it, so try the agent before giving up.
                if "client_keys" not in kw or not os.environ.get("SSH_AUTH_SOCK"):
                    raise
                del kw["client_keys"]
                return await asyncssh.connect(d.host, **kw)
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


CONNECTION_ERRORS = (asyncssh.Error, OSError, ConnectionError, EOFError)
