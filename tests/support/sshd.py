"""A real OpenSSH sshd on 127.0.0.1, with keys made at start-up, for tests and benchmarks.

`start_sshd(workdir)` returns a running `SshdServer`; `server.stop()` ends it. The sessions it
serves get `tests/support/bin` (the pct and docker stand-ins) at the front of PATH through
`SetEnv` in sshd_config, which sshd applies after its own default PATH, so a plain
`ssh host 'pct exec ...'` finds the stand-in exactly as it would find the real tool.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ports import free_port

SUPPORT_DIR = Path(__file__).resolve().parent
BIN_DIR = SUPPORT_DIR / "bin"
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd")
ALIAS = "dflash-test-sshd"


class SshdUnavailable(RuntimeError):
    """No sshd / ssh-keygen here: the caller decides whether that skips or fails."""


def find_sshd() -> str | None:
    for cand in SSHD_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("sshd")


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dflash-test",
                    "-f", str(path)], check=True, stdin=subprocess.DEVNULL, timeout=30)
    return path.with_suffix(".pub").read_text().strip()


def _q(value: object) -> str:
    """Double-quote a value for sshd_config / ssh_config (both accept "..." tokens)."""
    s = str(value)
    if '"' in s or "\n" in s:
        raise ValueError(f"path not usable in an ssh config file: {s!r}")
    return f'"{s}"'


@dataclass
class SshdServer:
    workdir: Path
    port: int
    user: str
    client_key: Path          # private key the clients authenticate with
    host_key: Path            # the server's private host key
    known_hosts: Path         # holds the server's host key for [127.0.0.1]:port
    ssh_config: Path          # `Host dflash-test-sshd` → this server
    standin_dir: Path         # state of the pct/docker stand-ins (PCT_STANDIN_DIR)
    log_path: Path            # sshd -e output, LogLevel VERBOSE
    config_path: Path
    host: str = "127.0.0.1"
    alias: str = ALIAS
    bin_dir: Path = BIN_DIR
    sshd_path: str = "/usr/sbin/sshd"
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                [self.sshd_path, "-D", "-e", "-f", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self._proc.returncode}: "
                                   f"{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                    s.settimeout(2.0)
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen on {self.host}:{self.port} within "
                           f"{timeout:.0f}s: {self.log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()   # the listener; established sessions have their own processes
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def kill_sessions(self) -> None:
        """Drop every established connection (what a host reboot or network cut does)."""
        if self._proc is None:
            return
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self._proc.pid)],
                             capture_output=True, text=True, timeout=10).stdout
        for pid in out.split():
            try:
                os.kill(int(pid), 15)
            except ProcessLookupError:
                pass

    def restart(self) -> None:
        self.kill_sessions()
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- helpers for tests ------------------------------------------------------------------
    def ssh_argv(self, *remote: str) -> list[str]:
        """An OpenSSH client command line for this server (the incident's way)."""
        return ["ssh", "-F", str(self.ssh_config), self.alias, *remote]

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(lines[-n:])

    def accepted_connections(self) -> int:
        """How many clients have authenticated since the log started."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return 0
        return text.count("Accepted publickey for ")

    def profile(self) -> dict:
        """The fields of an SSHDest (remote/ssh_dest.py) that reaches this server."""
        return {"host": self.host, "port": self.port, "user": self.user,
                "identity_file": str(self.client_key), "known_hosts": str(self.known_hosts)}


def start_sshd(workdir: str | os.PathLike, *, user: str | None = None,
               env: dict[str, str] | None = None, path_first: str | None = None) -> SshdServer:
    """Generate keys and config under `workdir` and start sshd on a free loopback port.
    `env`: more variables every session gets (e.g. SLURM_CONF for a test cluster's login host);
    `path_first`: a directory the sessions' PATH looks in before the system's (a login host's
    own commands).

    Raises SshdUnavailable when sshd or ssh-keygen is not installed."""
    sshd = find_sshd()
    if sshd is None or shutil.which("ssh-keygen") is None:
        raise SshdUnavailable("OpenSSH server not installed (apt-get install openssh-server, "
                              "or `make system-tools`)")
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    user = user or getpass.getuser()
    if os.geteuid() == 0:
        # sshd refuses to start as root without its privilege-separation directory.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    host_key, client_key = work / "ssh_host_ed25519_key", work / "client_ed25519"
    host_pub = _keygen(host_key)
    client_pub = _keygen(client_key)
    (work / "authorized_keys").write_text(client_pub + "\n")
    standin = work / "standin"
    standin.mkdir(exist_ok=True)
    last_error: Exception | None = None
    for _attempt in range(5):
        port = free_port()
        known_hosts = work / "known_hosts"
        known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        config_path = work / "sshd_config"
        path_env = (f"{path_first}:" if path_first else "") + \
            f"{BIN_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        config_path.write_text("\n".join([
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {_q(host_key)}",
            f"PidFile {_q(work / 'sshd.pid')}",
            f"AuthorizedKeysFile {_q(work / 'authorized_keys')}",
            "UsePAM no",
            "StrictModes no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "LogLevel VERBOSE",
            # The benchmark opens a new connection per check, as the incident did.
            "MaxStartups 200:30:400",
            # Applied after sshd's own PATH: the stand-ins shadow nothing else but pct/docker.
            f"SetEnv {_q('PATH=' + path_env)} {_q(f'PCT_STANDIN_DIR={standin}')} "
            f"{_q(f'DOCKER_STANDIN_DIR={standin}')}"
            + "".join(f" {_q(f'{k}={v}')}" for k, v in (env or {}).items()),
            "Subsystem sftp internal-sftp",
            "",
        ]))
        ssh_config = work / "ssh_config"
        ssh_config.write_text("\n".join([
            f"Host {ALIAS}",
            "  HostName 127.0.0.1",
            f"  Port {port}",
            f"  User {user}",
            f"  IdentityFile {_q(client_key)}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {_q(known_hosts)}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  LogLevel ERROR",
            "",
        ]))
        server = SshdServer(workdir=work, port=port, user=user, client_key=client_key,
                            host_key=host_key, known_hosts=known_hosts, ssh_config=ssh_config,
                            standin_dir=standin, log_path=work / "sshd.log",
                            config_path=config_path, sshd_path=sshd)
        try:
            server.start()
            return server
        except RuntimeError as exc:   # e.g. the port was taken between probe and bind
            last_error = exc
    raise RuntimeError(f"could not start sshd: {last_error}")
