"""Faithful stand-ins for Proxmox `pct` and `docker`, reached as tests/support/bin/{pct,docker}.

A "container" is a real PID + mount namespace: `start` runs a small reaping init under
`unshare --pid --fork --mount-proc`, fully detached, and `exec` enters it with `nsenter -p -m`,
so processes inside have container PIDs (NSpid shows both views), die when the container stops,
and see only the container's /proc. State lives in $PCT_STANDIN_DIR/pct/<id>/ (docker:
$DOCKER_STANDIN_DIR/docker/<name>/). The file `mode` there picks how `exec` behaves:

  ok       run the command, pass stdin/stdout/stderr and the exit status through
  noop     exit 0 and run nothing (the incident: the launch "succeeded", nothing started)
  hup      run it; when it returns, tear the exec session down: SIGHUP to its process group
           and to every process still holding the exec's stdin/stdout/stderr, then SIGKILL to
           the group (a naive `setsid cmd &` that kept the channel's fds dies; a fully
           detached one survives)
  ptyhang  run it, then do not return while any process still holds the exec's
           stdin/stdout/stderr, as a PTY-backed exec does
  stopped  behave as if the container is not running (exec fails like the real tool, status
           says stopped)

Needs unshare and nsenter (util-linux) and either root or unprivileged user namespaces (then
the container gets its own user namespace too, like an unprivileged LXC). Python 3.8+, stdlib.
"""

import os
import signal
import subprocess
import sys
import time

MODES = ("ok", "noop", "hup", "ptyhang", "stopped")

# Without root, a user namespace (mapping us to root inside) makes PID namespaces possible,
# like an unprivileged LXC container.
ROOTLESS = os.geteuid() != 0
USERNS_UNSHARE = ["--user", "--map-root-user"] if ROOTLESS else []
USERNS_NSENTER = ["-U", "--preserve-credentials"] if ROOTLESS else []

# PID 1 of a container must reap orphans, or every detached process that ends stays a zombie.
REAPER = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.2)\n"
)


class Usage(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


# -- container state ---------------------------------------------------------------------


def start_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


class Container(object):
    def __init__(self, kind, name):
        env = "PCT_STANDIN_DIR" if kind == "pct" else "DOCKER_STANDIN_DIR"
        root = os.environ.get(env) or os.environ.get("PCT_STANDIN_DIR")
        if not root:
            raise Usage("%s stand-in: set %s to its state directory" % (kind, env), 2)
        self.kind, self.name = kind, name
        self.dir = os.path.join(root, kind, name)

    @property
    def exists(self):
        return os.path.isdir(self.dir)

    def create(self):
        os.makedirs(self.dir, exist_ok=True)

    @property
    def mode(self):
        try:
            with open(os.path.join(self.dir, "mode")) as f:
                mode = f.read().strip() or "ok"
        except OSError:
            return "ok"
        if mode not in MODES:
            raise Usage("stand-in: unknown mode %r in %s/mode (one of %s)"
                        % (mode, self.dir, ", ".join(MODES)), 2)
        return mode

    def set_mode(self, mode):
        if mode not in MODES:
            raise Usage("stand-in: unknown mode %r (one of %s)" % (mode, ", ".join(MODES)), 2)
        with open(os.path.join(self.dir, "mode"), "w") as f:
            f.write(mode + "\n")

    def init_pid(self):
        """Host pid of the container's PID 1, if it is still the one we started."""
        try:
            with open(os.path.join(self.dir, "init")) as f:
                pid, ticks, _unshare = (int(x) for x in f.read().split())
        except (OSError, ValueError):
            return None
        return pid if start_ticks(pid) == ticks else None

    def running(self):
        return self.init_pid() is not None

    def start(self):
        proc = subprocess.Popen(
            ["unshare", *USERNS_UNSHARE, "--pid", "--fork", "--mount-proc", "--kill-child", "--",
             sys.executable, "-c", REAPER],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)
        children = "/proc/%d/task/%d/children" % (proc.pid, proc.pid)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(children) as f:
                    kids = f.read().split()
            except OSError:
                kids = []
            if kids:
                init = int(kids[0])
                ticks = start_ticks(init)
                if ticks is not None:
                    with open(os.path.join(self.dir, "init"), "w") as f:
                        f.write("%d %d %d\n" % (init, ticks, proc.pid))
                    return
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        raise Usage("stand-in: could not start the namespace for %s (unshare exited %s)"
                    % (self.name, proc.poll()), 1)

    def stop(self):
        init = self.init_pid()
        if init is None:
            return
        os.kill(init, signal.SIGKILL)   # the kernel then kills everything in the namespace
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and start_ticks(init) is not None:
            time.sleep(0.01)
        try:
            os.unlink(os.path.join(self.dir, "init"))
        except OSError:
            pass


# -- exec ------------------------------------------------------------------------------------


def _fd_ids(pid, fds=None):
    base = "/proc/%d/fd" % pid
    try:
        names = fds if fds is not None else os.listdir(base)
    except OSError:
        return set()
    out = set()
    for n in names:
        try:
            out.add(os.readlink("%s/%s" % (base, n)))
        except OSError:
            pass
    return out


def _pidns(pid):
    try:
        return os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None


def _holders(channel, init):
    """Live processes inside the container that hold any of the exec's stdio streams (the
    other ends, held by sshd or the caller on the host, do not count)."""
    ns = _pidns(init)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == init or _pidns(pid) != ns or start_ticks(pid) is None:
            continue
        if _fd_ids(pid) & channel:
            found.append(pid)
    return found


def _channel_ids():
    # Only pipes and sockets identify the exec's channel; a tty or /dev/null is shared by all.
    ids = _fd_ids(os.getpid(), ["0", "1", "2"])
    return {i for i in ids if i.startswith(("pipe:", "socket:"))}


def _signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def run_exec(ct, argv):
    init = ct.init_pid()
    proc = subprocess.Popen(["nsenter", "-t", str(init), *USERNS_NSENTER, "-p", "-m", "--"] + argv,
                            start_new_session=True)   # the exec's own session + group
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    rc = proc.wait()
    mode = ct.mode
    channel = _channel_ids()
    if mode == "hup":
        _signal_all(_holders(channel, init), signal.SIGHUP)
        try:
            os.killpg(proc.pid, signal.SIGHUP)
            time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    elif mode == "ptyhang" and channel:
        while _holders(channel, init):
            time.sleep(0.1)
    return rc if rc >= 0 else 128 - rc


# -- command lines -----------------------------------------------------------------------------


def _vmid(arg):
    if not arg.isdigit() or not 100 <= int(arg) <= 999999999:
        raise Usage("400 Parameter verification failed.\nvmid: invalid format - value does "
                    "not look like a valid VM ID", 255)
    return arg


def pct_main(args):
    if not args:
        raise Usage("ERROR: no command specified", 255)
    cmd, rest = args[0], args[1:]
    if cmd in ("create", "start", "stop", "status", "exec", "standin-mode") and not rest:
        raise Usage("400 not enough arguments\npct %s <vmid>" % cmd, 255)
    ct = Container("pct", _vmid(rest[0])) if rest else None
    if cmd == "create":
        ct.create()
        return 0
    if not ct or not ct.exists:
        raise Usage("Configuration file 'nodes/standin/lxc/%s.conf' does not exist"
                    % (rest[0] if rest else "?"), 2)
    running = ct.running() and ct.mode != "stopped"
    if cmd == "status":
        print("status: %s" % ("running" if running else "stopped"))
        return 0
    if cmd == "start":
        if ct.running():
            raise Usage("CT %s already running" % ct.name, 2)
        ct.start()
        return 0
    if cmd == "stop":
        ct.stop()
        return 0
    if cmd == "standin-mode":
        ct.set_mode(rest[1] if len(rest) > 1 else "ok")
        return 0
    if cmd == "exec":
        argv = rest[1:]
        if argv[:1] == ["--"]:
            argv = argv[1:]
        if not running:   # pve-container's pct.pm since Proxmox VE 7, exit status Perl's errno
            raise Usage("container '%s' not running!" % ct.name, 2)
        if not argv:
            raise Usage("missing command", 255)
        if ct.mode == "noop":
            return 0
        return run_exec(ct, argv)
    raise Usage("ERROR: unknown command 'pct %s'" % cmd, 255)


def docker_main(args):
    if not args:
        raise Usage("Usage:  docker [OPTIONS] COMMAND", 1)
    cmd, rest = args[0], args[1:]
    if cmd == "exec":
        while rest and rest[0].startswith("-"):
            if rest[0] not in ("-i", "--interactive"):
                raise Usage("unknown flag: %s (the stand-in knows -i)" % rest[0], 125)
            rest = rest[1:]
        if len(rest) < 2:
            raise Usage('"docker exec" requires at least 2 arguments.', 1)
        ct = Container("docker", rest[0])
        if not ct.exists:
            raise Usage("Error response from daemon: No such container: %s" % rest[0], 1)
        if not ct.running() or ct.mode == "stopped":
            raise Usage("Error response from daemon: container %s is not running" % rest[0], 1)
        if ct.mode == "noop":
            return 0
        return run_exec(ct, rest[1:])
    if cmd == "inspect":
        if rest[:1] == ["-f"] and len(rest) == 3 and rest[1] == "{{.State.Running}}":
            ct = Container("docker", rest[2])
            if not ct.exists:
                print("", flush=True)
                raise Usage("Error: No such object: %s" % rest[2], 1)
            print("true" if ct.running() and ct.mode != "stopped" else "false")
            return 0
        raise Usage("the stand-in supports only: docker inspect -f {{.State.Running}} NAME", 1)
    if cmd in ("create", "start", "stop", "standin-mode"):
        if not rest:
            raise Usage('"docker %s" requires at least 1 argument.' % cmd, 1)
        ct = Container("docker", rest[0])
        if cmd == "create":
            ct.create()
        elif not ct.exists:
            raise Usage("Error response from daemon: No such container: %s" % rest[0], 1)
        elif cmd == "start" and not ct.running():
            ct.start()
        elif cmd == "stop":
            ct.stop()
        elif cmd == "standin-mode":
            ct.set_mode(rest[1] if len(rest) > 1 else "ok")
        if cmd in ("start", "stop", "create"):
            print(rest[0])
        return 0
    raise Usage("docker: '%s' is not a docker command (stand-in)" % cmd, 1)


def main():
    # bin/pct and bin/docker run `python3 standin.py TOOL ARGS...`
    tool, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    try:
        if tool == "docker":
            return docker_main(args)
        if tool == "pct":
            return pct_main(args)
        raise Usage("usage: standin.py pct|docker ARGS...", 2)
    except Usage as exc:
        sys.stderr.write("%s\n" % exc)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
