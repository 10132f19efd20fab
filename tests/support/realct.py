"""Real container runtimes for the tests: an LXC container behind Proxmox's `pct` and a podman
container behind `docker`, both answered by the shims in tests/support/bin/real/.

Each container runs on a rootfs directory built here: the host's /usr bind-mounted read-only
(Debian's usrmerge links bin, sbin, lib, lib64 into it), minimal /etc files (and the host's /etc/alternatives, without which half of Debian's /usr/bin
is dangling links), and the paths a run
needs at the same place inside as outside: the python the tests run (its installation and the
venv, read-only), this checkout (read-only: the test programs import from it) and one shared
directory (read-write) that holds the run dirs, so the host reads what the container wrote.
PID 1 is a small reaper (detached processes are re-parented to it), so a container stop kills
everything in it at once, as on a real Proxmox node.

`need_runtime("lxc" | "podman")` says why a runtime cannot run here (not root, tools missing),
None when it can.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .sshd import SUPPORT_DIR

REAL_BIN = SUPPORT_DIR / "bin" / "real"
REPO = SUPPORT_DIR.parents[1]

# PID 1 of the container: reap every orphan, end on SIGTERM (podman's stop) or SIGPWR (lxc-stop's
# clean halt); the kernel then kills the rest of the PID namespace.
REAPER = (
    "import os, signal, time\n"
    "for s in (signal.SIGTERM, signal.SIGPWR, signal.SIGINT):\n"
    "    signal.signal(s, lambda *a: os._exit(0))\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.2)\n"
)

ETC_FROM_HOST = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf",
                 "os-release", "debian_version")

TOOLS = {"lxc": ("lxc-start", "lxc-attach", "lxc-info", "lxc-stop"), "podman": ("podman", "runc")}


def need_runtime(kind: str) -> str | None:
    """Why `kind` cannot run containers here, or None."""
    if os.geteuid() != 0:
        return f"{kind} containers need root here (rootful runtime, bind mounts)"
    missing = [t for t in TOOLS[kind] if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (make system-tools installs them)"
    return None


def _shared_paths(share: Path) -> tuple[list[Path], list[Path]]:
    """(read-only, read-write) host paths the container sees at the same place."""
    ro = {Path(os.path.realpath(p)) for p in (sys.base_prefix, sys.prefix, REPO)}
    ro.add(Path(sys.prefix))    # the venv as the tests name it (its bin/python is a link)
    ro.add(Path(os.path.realpath(sys.executable)).parent.parent)
    kept = sorted(p for p in ro if not (p == Path("/usr") or Path("/usr") in p.parents))
    # A path inside another one is seen through it; binding it again could fail read-only.
    kept = [p for p in kept if not any(q != p and q in p.parents for q in kept)]
    for p in [*kept, share]:
        if any(c.isspace() for c in str(p)):
            raise ValueError(f"{p}: a path with whitespace cannot be a bind mount here")
    return kept, [share]


def make_rootfs(root: Path, hostname: str) -> Path:
    """A rootfs directory that borrows the host's /usr; returns it."""
    root.mkdir(parents=True)
    for d in ("usr", "etc", "proc", "sys", "dev", "tmp", "run", "root", "var/tmp", "home"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():           # usrmerge: /bin -> usr/bin and so on
            (root / name).symlink_to(os.readlink(host))
    etc = root / "etc"
    # What makes the borrowed /usr whole: Debian's alternatives (/usr/bin/awk is a link through
    # /etc/alternatives) and the loader's cache.
    for name in ETC_FROM_HOST:
        host = Path("/etc") / name
        if host.is_dir() and not host.is_symlink():
            shutil.copytree(host, etc / name, symlinks=True)
        elif host.exists() or host.is_symlink():
            shutil.copy2(host, etc / name, follow_symlinks=False)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (etc / "hostname").write_text(hostname + "\n")
    (etc / "hosts").write_text(f"127.0.0.1 localhost {hostname}\n")
    (root / "dflash-init.py").write_text(REAPER)
    return root


def _run(argv: list[str], env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


class RealContainer:
    """One container of a real runtime, driven through its shim as a user drives pct/docker."""

    kind = ""          # "pct" | "docker": the tool the product calls

    def __init__(self, state: Path, name: str, share: Path) -> None:
        self.state, self.name, self.share = state, name, share
        self.spec = f"{self.kind}:{name}"
        self.env = {**os.environ, "PATH": f"{REAL_BIN}:{os.environ.get('PATH', '')}"}

    def tool(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        res = _run([self.kind, *args], self.env, timeout)
        if check and res.returncode != 0:
            raise RuntimeError(f"{self.kind} {' '.join(args)}: exit {res.returncode}: {res.stderr.strip()}")
        return res

    @property
    def start_hint(self) -> str:
        return f"{self.kind} start {self.name}"

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        if self.kind == "pct":
            return self.tool("exec", self.name, "--", *argv, check=check)
        return self.tool("exec", "-i", self.name, *argv, check=check)

    def start(self) -> None:
        self.tool("start", self.name)

    def ensure_running(self) -> None:
        """Start it again where an earlier test stopped it."""
        if not self.running():
            self.start()

    def stop(self) -> None:
        raise NotImplementedError

    def running(self) -> bool:
        raise NotImplementedError

    def init_host_pid(self) -> int:
        raise NotImplementedError


class LxcContainer(RealContainer):
    """A real LXC container named by a Proxmox VMID, in its own lxcpath (DFLASH_LXC_PATH)."""

    kind = "pct"

    def __init__(self, state: Path, name: str, share: Path) -> None:
        super().__init__(state, name, share)
        self.lxcpath = state / "lxc"
        self.env["DFLASH_LXC_PATH"] = str(self.lxcpath)

    def create(self) -> "LxcContainer":
        ct_dir = self.lxcpath / self.name
        rootfs = make_rootfs(ct_dir / "rootfs", f"ct{self.name}")
        ro, rw = _shared_paths(self.share)
        lines = [
            f"lxc.uts.name = ct{self.name}",
            f"lxc.rootfs.path = dir:{rootfs}",
            "lxc.net.0.type = empty",
            "lxc.apparmor.profile = unconfined",
            "lxc.mount.auto = proc:mixed sys:ro",
            "lxc.autodev = 1",
            "lxc.mount.entry = /usr usr none bind,ro 0 0",
            *(f"lxc.mount.entry = {p} {str(p)[1:]} none bind,ro,create=dir 0 0" for p in ro),
            *(f"lxc.mount.entry = {p} {str(p)[1:]} none bind,create=dir 0 0" for p in rw),
            "lxc.signal.halt = SIGTERM",
            f"lxc.init.cmd = {os.path.realpath(sys.executable)} -I -S /dflash-init.py",
            f"lxc.log.file = {ct_dir / 'lxc.log'}",
            "lxc.log.level = WARN",
        ]
        (ct_dir / "config").write_text("\n".join(lines) + "\n")
        return self

    def stop(self) -> None:
        self.tool("stop", self.name)

    def running(self) -> bool:
        return self.tool("status", self.name).stdout.strip() == "status: running"

    def init_host_pid(self) -> int:
        res = _run(["lxc-info", "-P", str(self.lxcpath), "-n", self.name, "-p", "-H"], self.env)
        return int(res.stdout.strip())

    def destroy(self) -> None:
        _run(["lxc-stop", "-P", str(self.lxcpath), "-n", self.name, "--kill"], self.env)


class PodmanContainer(RealContainer):
    """A real podman container with its own storage (DFLASH_PODMAN_ROOT), answering as docker."""

    kind = "docker"

    def __init__(self, state: Path, name: str, share: Path) -> None:
        super().__init__(state, name, share)
        # podman refuses a run root longer than 50 characters: a short directory of its own.
        self.root = Path(tempfile.mkdtemp(prefix="dflash-pm-"))
        self.env["DFLASH_PODMAN_ROOT"] = str(self.root)

    def create(self, *run_args: str) -> "PodmanContainer":
        """`run_args`: more of `podman create`'s options (a test's own limits: `--memory 512m`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        rootfs = make_rootfs(self.state / f"rootfs-{self.name}", self.name)
        ro, rw = _shared_paths(self.share)
        vols = ["-v", "/usr:/usr:ro"]
        for p in ro:
            vols += ["-v", f"{p}:{p}:ro"]
        for p in rw:
            vols += ["-v", f"{p}:{p}"]
        self.tool("create", "--name", self.name, "--network", "none", "--hostname", self.name,
                  *run_args, *vols, "--rootfs", str(rootfs),
                  os.path.realpath(sys.executable), "-I", "-S", "/dflash-init.py")
        return self

    def stop(self) -> None:
        self.tool("stop", "-t", "5", self.name)

    def running(self) -> bool:
        return self.tool("inspect", "-f", "{{.State.Running}}", self.name).stdout.strip() == "true"

    def init_host_pid(self) -> int:
        return int(self.tool("inspect", "-f", "{{.State.Pid}}", self.name).stdout.strip())

    def destroy(self) -> None:
        _run([self.kind, "rm", "-f", "-t", "0", self.name], self.env)
        # conmon starts `podman container cleanup` once the container has exited, which may
        # write into the store after it is gone: remove it until it stays removed.
        deadline = time.monotonic() + 5
        while True:
            shutil.rmtree(self.root, ignore_errors=True)
            time.sleep(0.3)
            if not self.root.exists() or time.monotonic() > deadline:
                break
