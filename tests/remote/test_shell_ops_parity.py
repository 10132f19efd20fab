"""AgentOps and ShellOps give the same answers about the same files and processes."""

from __future__ import annotations

import os
from dataclasses import replace
import signal
import subprocess
import sys
import time

import pytest

from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps, parse_stat_time
from dflash_tui.remote.ssh_dest import SSHDest

# a process whose argv carries arbitrary strings (sleep would reject extra arguments)
SLEEPER = (sys.executable, "-c", "import time; time.sleep(30)")
HOSTILE = ["sp ace", "quo'te", 'dq"uote', "$(touch pwned)", "`touch pwned`", "new\nline", "semi;colon",
           "-dash", "star*", "back\\slash", "ünï"]


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "run dir $(x)"
    root.mkdir()
    (root / "train.log").write_bytes(b"line 1\nline 2\n" + bytes(range(256)) + b"\ntail\n")
    (root / "empty").write_bytes(b"")
    (root / "sub").mkdir()
    (root / ".hidden").write_text("h")
    (root / "..dots").write_text("d")
    (root / "dangling").symlink_to(root / "missing-target")
    for name in HOSTILE:
        (root / name).write_text(name)
    return root


@pytest.fixture
async def both():
    target = LocalTarget()
    agent = await AgentOps.start(target)
    shell = await ShellOps.start(target)
    yield agent, shell
    await agent.close()


async def test_stat_read_list_parity(both, tree):
    agent, shell = both
    paths = [str(tree / n) for n in ["train.log", "empty", "sub", "dangling", "nope", *HOSTILE]]
    paths += [str(tree / "train.log" / "x")]   # ENOTDIR
    a, s = await agent.stat(paths), await shell.stat(paths)
    assert a == s
    assert [x.exists for x in a[:5]] == [True, True, True, False, False]
    assert a[-1].error == "Not a directory"
    log = str(tree / "train.log")
    for off, n in [(0, 1 << 20), (3, 5), (10_000, 10), (0, 0), (0, 1 << 40)]:
        assert await agent.read(log, off, n) == await shell.read(log, off, n)
    for n in (1, 7, 1 << 20):
        assert await agent.read_tail(log, n) == await shell.read_tail(log, n)
    assert (await shell.read(log)).data == (tree / "train.log").read_bytes()
    for name in HOSTILE:
        p = str(tree / name)
        assert (await shell.read(p)).data == name.encode()
        assert await agent.read_tail(p) == await shell.read_tail(p)
    missing = str(tree / "nope")
    assert await agent.read(missing, 4) == await shell.read(missing, 4)
    assert await agent.read_tail(missing) == await shell.read_tail(missing)
    listing = await agent.list_dir(str(tree))
    assert listing == await shell.list_dir(str(tree))
    assert listing == await shell.list_dir(str(tree) + "/")
    assert {os.path.basename(x.path) for x in listing} == {
        "train.log", "empty", "sub", ".hidden", "..dots", "dangling", *HOSTILE}
    assert await agent.list_dir(missing) == await shell.list_dir(missing) == []
    assert not (tree / "pwned").exists() and not os.path.exists("pwned")


async def test_errors_have_the_same_words(both, tree):
    agent, shell = both
    for op, args in [("read", (str(tree / "sub"),)), ("read_tail", (str(tree / "sub"),)),
                     ("list_dir", (str(tree / "train.log"),))]:
        msgs = []
        for ops in both:
            with pytest.raises(Exception) as exc:
                await getattr(ops, op)(*args)
            msgs.append(str(exc.value))
        assert msgs[0] == msgs[1]
        assert ("Is a directory" in msgs[0]) or ("Not a directory" in msgs[0])


async def test_pid_info_parity_alive_zombie_gone():
    child = subprocess.Popen([*SLEEPER, "$(touch /tmp/pwned)", "a b"], start_new_session=True)
    zombie = subprocess.Popen(["true"])
    time.sleep(0.2)   # let `true` exit; not reaped, so it is a zombie
    target = LocalTarget()
    agent, shell = await AgentOps.start(target), await ShellOps.start(target)
    try:
        pids = [child.pid, zombie.pid, os.getppid(), 4_000_000]   # not our own: R vs S
        a, s = await agent.pid_info(pids), await shell.pid_info(pids)
        assert a == s
        assert a[0].alive and a[0].cmdline == (*SLEEPER, "$(touch /tmp/pwned)", "a b")
        assert a[0].pgid == child.pid and a[0].start_ticks > 0 and a[0].nspid[0] == child.pid
        assert not a[1].alive and a[1].state == "Z"
        assert not a[3].alive and a[3].start_ticks is None
    finally:
        child.kill()
        child.wait()
        zombie.wait()
        await agent.close()


@pytest.mark.parametrize("kind", ["agent", "shell"])
async def test_signal_is_verified_against_start_time_and_cmdline(kind):
    target = LocalTarget()
    ops = await (AgentOps.start(target) if kind == "agent" else ShellOps.start(target))
    child = subprocess.Popen([*SLEEPER, "marker $(x)"], start_new_session=True)
    inner = subprocess.Popen(["sh", "-c", "sleep 31 & wait"])   # not a group leader
    try:
        (info,) = await ops.pid_info([child.pid])
        bad_start = await ops.signal(child.pid, signal.SIGTERM, start_ticks=info.start_ticks + 1,
                                     cmdline=None)
        bad_cmd = await ops.signal(child.pid, signal.SIGTERM, start_ticks=info.start_ticks,
                                   cmdline=["python", "train"])
        not_leader = await ops.signal(inner.pid, signal.SIGTERM, start_ticks=None,
                                      cmdline=None, group=True)
        assert (bad_start, bad_cmd, not_leader) == ("mismatch", "mismatch", "mismatch")
        assert child.poll() is None and inner.poll() is None
        sent = await ops.signal(child.pid, signal.SIGTERM, start_ticks=info.start_ticks,
                                cmdline=[*SLEEPER, "marker $(x)"], group=True)
        assert sent == "sent"
        assert child.wait(5) == -signal.SIGTERM
        assert await ops.signal(child.pid, signal.SIGTERM, start_ticks=info.start_ticks,
                                cmdline=None) == "gone"
    finally:
        for p in (child, inner):
            if p.poll() is None:
                p.kill()
            p.wait()
        await ops.close()


async def test_preflight_parity(both, tmp_path):
    agent, shell = both
    names = ["sh", "kill", "sleep", "definitely-not-here", "/bin/sh", "/etc/passwd"]
    assert await agent.which(names) == await shell.which(names)
    a = await agent.disk_free(str(tmp_path / "not/yet"))
    s = await shell.disk_free(str(tmp_path / "not/yet"))
    assert (a.path, a.checked, a.total) == (s.path, s.checked, s.total) and a.checked == str(tmp_path)
    assert abs(a.free - s.free) < 256 << 20   # other writers share the disk
    for sub in ["new/deep dir", "new/deep dir"]:
        pa = await agent.probe_dir(str(tmp_path / "a" / sub))
        ps = await shell.probe_dir(str(tmp_path / "s" / sub))
        assert (pa.exists, pa.created, pa.writable, pa.error) == \
            (ps.exists, ps.created, ps.writable, ps.error)
    (tmp_path / "file").write_text("x")
    for create in (True, False):
        pa = await agent.probe_dir(str(tmp_path / "file"), create)
        ps = await shell.probe_dir(str(tmp_path / "file"), create)
        assert pa == ps and pa.error == "exists and is not a directory"
    pa = await agent.probe_dir(str(tmp_path / "absent"), create=False)
    assert pa == await shell.probe_dir(str(tmp_path / "absent"), create=False)
    assert abs(await agent.now() - await shell.now()) < 5


async def test_remove_if_holds_removes_only_a_file_that_holds_the_token(both, tmp_path):
    """The launch claim's release: gone only if it is a regular file still holding our token."""
    token = "5a7e0c1d9b2f4e60"
    for ops, side in zip(both, ("agent", "shell")):
        d = tmp_path / side
        d.mkdir()
        ours, theirs, link, directory = d / "ours", d / "theirs", d / "link", d / "dir"
        ours.write_text('{"token": "%s"}' % token)
        theirs.write_text('{"token": "0000000000000000"}')
        link.symlink_to(ours)
        directory.mkdir()
        late = d / "late"   # the token past the first 4 KiB is not a claim's
        late.write_text("x" * 4096 + token)
        assert [await ops.remove_if_holds(str(p), token) for p in (theirs, link, directory, late)] == [False] * 4
        assert await ops.remove_if_holds(str(d / "absent"), token) is False
        assert await ops.remove_if_holds(str(ours), token) is True
        assert not ours.exists() and theirs.exists() and link.is_symlink() and directory.is_dir() and late.exists()
        assert await ops.remove_if_holds(str(ours), token) is False   # already given back


def test_stat_time_parsing_matches_os_stat(tmp_path):
    f = tmp_path / "t"
    f.write_text("x")
    os.utime(f, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    out = subprocess.run(["stat", "-c", "%y", str(f)], capture_output=True, text=True).stdout
    assert parse_stat_time(out) == os.stat(f).st_mtime
    assert parse_stat_time("2023-11-14 22:13:20.5 -0130") == 1700000000.5 + 5400


# -- the same answers through SSH and through a container on it ---------------------------


@pytest.mark.sshd
@pytest.mark.slow
async def test_parity_over_ssh_and_inside_a_container(sshd, standin, tree):
    from dflash_tui.remote.container import ContainerTarget
    from dflash_tui.remote.ssh import SSHTarget

    ssh = SSHTarget(SSHDest(**sshd.profile()))
    ct = ContainerTarget(ssh, standin.container("pct:220"))
    try:
        for target in (ssh, ct):
            agent, shell = await AgentOps.start(target), await ShellOps.start(target)
            paths = [str(tree / n) for n in ["train.log", "sub", "nope", *HOSTILE]]
            assert await agent.stat(paths) == await shell.stat(paths)
            log = str(tree / "train.log")
            assert await agent.read_tail(log, 9) == await shell.read_tail(log, 9)
            assert await agent.list_dir(str(tree)) == await shell.list_dir(str(tree))
            pid = agent.info["pid"]   # the agent's own pid, as the target sees it
            a, s = await agent.pid_info([pid, 1]), await shell.pid_info([pid, 1])
            # the agent is running while it answers itself, sleeping when sh asks
            assert [replace(x, state="") for x in a] == [replace(x, state="") for x in s]
            assert a[0].alive and a[1].alive
            if target is ct:
                # Inside the container's PID namespace: pid 1 is its init, and the agent's
                # NSpid holds only the inner view (the container's /proc is its own).
                assert a[0].nspid == (pid,) and pid < 50
            await agent.close()
    finally:
        await ssh.close()


@pytest.mark.sshd
async def test_agent_in_a_container_that_is_stopped_or_runs_nothing(sshd, standin):
    from dflash_tui.remote.base import ContainerNotRunning, TargetError
    from dflash_tui.remote.container import ContainerTarget
    from dflash_tui.remote.agent import open_ops
    from dflash_tui.remote.ssh import SSHTarget

    ssh = SSHTarget(SSHDest(**sshd.profile()))
    try:
        ct = ContainerTarget(ssh, standin.container("pct:221", mode="stopped"))
        with pytest.raises(ContainerNotRunning, match="pct start 221"):
            await open_ops(ct)
        standin.set_mode("pct:221", "noop")
        with pytest.raises(TargetError, match="the transport did not run the command"):
            await open_ops(ct)
    finally:
        await ssh.close()


async def test_proc_tree_and_signal_prove_the_working_directory_alike(both, tmp_path):
    """in_run_dir and the signal's cwd/argv proof: the agent and the shell answer the same."""
    agent, shell = both
    here, elsewhere = tmp_path / "run dir $(x)", tmp_path / "other"
    here.mkdir()
    elsewhere.mkdir()
    child = subprocess.Popen([*SLEEPER, "sh", str(here / "launch.sh")], cwd=here, start_new_session=True)
    try:
        time.sleep(0.2)
        for run_dir, want in ((str(here), True), (str(elsewhere), False), (str(tmp_path / "gone"), None),
                              (None, None)):
            a, s = await agent.proc_tree(child.pid, run_dir=run_dir), await shell.proc_tree(child.pid, run_dir=run_dir)
            assert a.root == s.root and a.root.in_run_dir is want, (run_dir, a.root, s.root)
        (info,) = await agent.pid_info([child.pid])
        argv = [*SLEEPER, "sh", str(here / "launch.sh")]
        for ops in both:
            for cmdline, cwd in ((argv[:-1], str(here)), (argv, str(elsewhere)), (argv + ["x"], str(here))):
                assert await ops.signal(child.pid, signal.SIGTERM, start_ticks=info.start_ticks, cmdline=cmdline,
                                        cwd=cwd, group=True) == "mismatch", (ops.kind, cmdline, cwd)
        assert child.poll() is None
        assert await shell.signal(child.pid, signal.SIGTERM, start_ticks=info.start_ticks, cmdline=argv,
                                  cwd=str(here), group=True) == "sent"
        assert child.wait(5) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


async def test_find_files_parity(both, tree):
    """The same files found, with the same stats, by the agent's walk and by ShellOps' find:
    hidden and skipped directories not entered, the depth bounded, hostile names as they are."""
    agent, shell = both
    for d in ("a/b/c/d/e", ".hid", "history/x", "sub/deeper"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    for f in ("a/x.pt", "a/b/c/y.pt", "a/b/c/d/too-deep.pt", ".hid/z.pt", "history/x/h.pt",
              "sub/deeper/.metadata", "sub/model.safetensors", "sub/notes.txt", *(f"a/{n}.ckpt" for n in HOSTILE)):
        (tree / f).write_text(f)
    (tree / "a" / "unreadable.pt").write_text("u")
    (tree / "a" / "unreadable.pt").chmod(0)
    (tree / "a" / "link.pt").symlink_to(tree / "a" / "x.pt")
    roots = [str(tree), str(tree / "nope"), str(tree / "sub" / "model.safetensors")]
    patterns = ["*.pt", "*.ckpt", "*.safetensors", ".metadata"]
    a = await agent.find_files(roots, patterns, max_depth=3, skip=["history"])
    s = await shell.find_files(roots, patterns, max_depth=3, skip=["history"])
    assert a == s
    names = {os.path.relpath(f.path, tree) for f in a.files}
    assert {"a/x.pt", "a/b/c/y.pt", "sub/deeper/.metadata", "sub/model.safetensors", "a/unreadable.pt",
            *(f"a/{n}.ckpt" for n in HOSTILE)} <= names
    assert not names & {"a/b/c/d/too-deep.pt", ".hid/z.pt", "history/x/h.pt", "sub/notes.txt", "a/link.pt"}
    assert not a.notes
    few = await agent.find_files(roots, patterns, max_found=3), await shell.find_files(roots, patterns, max_found=3)
    assert [len(x.files) for x in few] == [3, 3] and all(x.notes for x in few)
    with pytest.raises(Exception, match="holds '/'"):
        await shell.find_files(roots, ["a/*.pt"])
    assert not (tree / "pwned").exists() and not os.path.exists("pwned")
