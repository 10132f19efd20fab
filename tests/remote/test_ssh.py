"""SSHTarget against a real OpenSSH sshd: quoting, one connection, host keys, errors, reconnect."""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import subprocess
import uuid

import pytest

from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.base import CommandTimeout, TargetUnreachable
from dflash_tui.remote.container import ContainerTarget
from dflash_tui.remote.factory import make_host_target
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.ssh import SSHTarget
from dflash_tui.remote.ssh_connection import SSHPool
from dflash_tui.remote.ssh_dest import SSHDest

pytestmark = pytest.mark.sshd

HOSTILE = ["plain", "with space", "it's", 'dq"uote', "$(touch /tmp/pwned)", "`touch /tmp/pwned`",
           "new\nline", "tab\there", "semi;colon && echo x", "back\\slash", "*", "~", "-n", "",
           "$HOME", "ünïcödé", "'\"'\"'"]


def ssh_kw(sshd, **over):
    kw = {k: v for k, v in sshd.profile().items() if k != "host"}
    kw.update(over)
    return kw


@pytest.fixture
async def target(sshd):
    t = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd)))
    yield t
    await t.close()


async def test_hostile_strings_round_trip_exactly_everywhere(sshd, standin, tmp_path):
    pwned = "/tmp/pwned"
    existed = os.path.exists(pwned)
    ssh = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd)))
    targets = [LocalTarget(), ssh, ContainerTarget(ssh, standin.container("pct:210"))]
    try:
        for t in targets:
            res = await t.run(["printf", "%s\\0", *HOSTILE])
            assert res.ok, (t.label, res.stderr)
            assert res.stdout.split("\0")[:-1] == HOSTILE, t.label
            data = "".join(HOSTILE).encode() * 3
            res = await t.run(["sh", "-c", 'cat; printf "%s" "$1"', "sh", HOSTILE[4]],
                              input=data)
            assert res.stdout == data.decode() + HOSTILE[4]
            path = tmp_path / f"{t.__class__.__name__} $(touch pwned) 'q'"
            await t.write_file(str(path), b"content\n$(x)\n", mode=0o600)
            assert path.read_bytes() == b"content\n$(x)\n"
            assert oct(path.stat().st_mode & 0o777) == "0o600"
            assert not (tmp_path / "pwned").exists()
    finally:
        await ssh.close()
    assert os.path.exists(pwned) == existed, "a hostile string was executed"


async def test_one_connection_for_every_command_stream_and_agent(sshd):
    pool = SSHPool()
    a = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd)), pool=pool)
    b = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd)), pool=pool)
    before = sshd.accepted_connections()
    try:
        results = await asyncio.gather(*(t.run(["echo", str(i)]) for i, t in
                                         enumerate([a, b] * 6)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
        ops = await open_ops(a)
        assert ops.kind == "agent" and (await ops.stat(["/"]))[0].is_dir
        lines = [ln async for ln in b.stream(["sh", "-c", "echo one; echo two"])]
        assert lines == ["one", "two"]
        await ops.close()
        assert len(pool) == 1
        assert sshd.accepted_connections() == before + 1
        assert a.state.connected and a.state.connects == 1
    finally:
        await a.close()
        await b.close()
    assert len(pool) == 0


async def test_exit_status_signal_and_hang(target):
    res = await target.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.exit_status, res.stdout, res.stderr, res.ok) == (3, "out\n", "err\n", False)
    res = await target.run(["sh", "-c", "kill -KILL $$"])
    assert res.exit_status is None and res.exit_signal == "KILL"
    with pytest.raises(CommandTimeout, match="did not finish within 1s"):
        await target.run(["sleep", "30"], timeout=1)
    assert (await target.run(["true"])).ok   # the connection survived the timeout


async def test_more_concurrent_commands_than_sshd_allows_channels(target):
    # OpenSSH's MaxSessions is 10; 14 at once must queue, not fail.
    results = await asyncio.gather(*(target.run(["sh", "-c", "sleep 0.2; echo ok"])
                                     for _ in range(14)))
    assert all(r.stdout == "ok\n" for r in results)


async def test_unknown_host_key_is_refused_with_the_command_that_accepts_it(sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    t = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd, known_hosts=str(kh))))
    with pytest.raises(TargetUnreachable) as exc:
        await t.run(["true"])
    msg = str(exc.value)
    assert f"unknown host key for [127.0.0.1]:{sshd.port}" in msg and "refusing" in msg
    hint = exc.value.hint
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}" in hint
    await t.close()
    # Following the hint really works.
    keyscan = subprocess.run(["ssh-keyscan", "-p", str(sshd.port), "127.0.0.1"],
                             capture_output=True, text=True, timeout=30)
    kh.write_text(keyscan.stdout)
    t2 = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd, known_hosts=str(kh))))
    try:
        assert (await t2.run(["true"])).ok
    finally:
        await t2.close()


async def test_changed_host_key_is_refused_and_named(sshd, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True, timeout=30)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {other.with_suffix('.pub').read_text()}")
    t = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd, known_hosts=str(kh))))
    with pytest.raises(TargetUnreachable) as exc:
        await t.run(["true"])
    assert f"host key of [127.0.0.1]:{sshd.port} has CHANGED" in str(exc.value)
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {kh}" in exc.value.hint
    await t.close()


async def test_host_keys_are_verified_by_default(sshd, tmp_path):
    # No known_hosts given: ~/.ssh/known_hosts applies, and it has never seen this server.
    t = SSHTarget(SSHDest(sshd.host, port=sshd.port, user=sshd.user,
                          identity_file=str(sshd.client_key)))
    with pytest.raises(TargetUnreachable, match="unknown host key"):
        await t.run(["true"])
    await t.close()


async def test_ssh_config_alias_supplies_host_port_user_key_and_known_hosts(sshd):
    t = SSHTarget(SSHDest(sshd.alias, ssh_config=str(sshd.ssh_config)))
    try:
        assert t.label == f"{sshd.user}@{sshd.alias}"
        res = await t.run(["sh", "-c", 'echo "$SSH_CONNECTION"'])
        assert res.stdout.split()[2:] == ["127.0.0.1", str(sshd.port)]
    finally:
        await t.close()


async def test_proxyjump_from_ssh_config(sshd, tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(sshd.ssh_config.read_text() + "\n".join([
        "Host behind-jump",
        "  HostName 127.0.0.1",
        f"  Port {sshd.port}",
        f"  User {sshd.user}",
        f'  IdentityFile "{sshd.client_key}"',
        f'  UserKnownHostsFile "{sshd.known_hosts}"',
        f"  ProxyJump {sshd.alias}",
        ""]))
    before = sshd.accepted_connections()
    t = SSHTarget(SSHDest("behind-jump", ssh_config=str(cfg)))
    try:
        res = await t.run(["sh", "-c", 'echo "$SSH_CLIENT"'])
        assert res.ok
        # The inner session arrives from the jump host's forwarding, not straight from us.
        assert sshd.accepted_connections() == before + 2
    finally:
        await t.close()


async def test_reconnects_after_sshd_restart_and_restarts_the_agent(sshd):
    t = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd)))
    ops = await open_ops(t)
    try:
        assert (await t.run(["true"])).ok and (await ops.stat(["/"]))[0].exists
        sshd.restart()
        assert (await t.run(["echo", "back"])).stdout == "back\n"
        assert (await ops.stat(["/"]))[0].exists
        assert t.state.connected and t.state.connects == 2 and ops.starts == 2
    finally:
        await ops.close()
        await t.close()


async def test_connection_errors_are_one_line_with_a_hint(sshd, tmp_path, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)   # no agent to fall back on
    wrong_key = tmp_path / "wrong"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)],
                   check=True, timeout=30)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    encrypted = tmp_path / "encrypted"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(encrypted)],
                   check=True, timeout=30)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)          # accepts TCP, never says a word of SSH
    cases = [
        (dict(identity_file=str(wrong_key)), "authentication failed for user", "identity_file"),
        (dict(port=closed_port), f"connection refused by 127.0.0.1:{closed_port}", "sshd"),
        (dict(port=silent.getsockname()[1], connect_timeout=1), "no answer from", "network"),
        (dict(identity_file=str(tmp_path / "nope")), "identity_file", "fix `identity_file`"),
        (dict(known_hosts=str(tmp_path / "nope")), "known_hosts", "ssh-keyscan"),
        (dict(identity_file=str(encrypted)), "cannot use the private key", "ssh-add"),
    ]
    try:
        for over, message, hint in cases:
            timeout = over.pop("connect_timeout", None)
            t = SSHTarget(SSHDest(sshd.host, **ssh_kw(sshd, **over)), **({"connect_timeout": timeout} if timeout else {}))
            with pytest.raises(TargetUnreachable) as exc:
                await t.run(["true"])
            assert message in exc.value.message and hint in exc.value.hint
            assert "\n" not in str(exc.value)
            await t.close()
        t = SSHTarget(SSHDest(f"no-such-host-{uuid.uuid4().hex[:8]}.invalid"), connect_timeout=5)
        with pytest.raises(TargetUnreachable, match="cannot resolve host name"):
            await t.run(["true"])
        # Backoff: an immediate retry does not hammer the host, it says when it will retry.
        with pytest.raises(TargetUnreachable, match="next attempt in"):
            await t.run(["true"])
        assert t.state.attempts == 1 and not t.state.connected and t.state.last_error
        await t.close()
    finally:
        silent.close()


def test_bad_profile_fields_are_refused_before_connecting(sshd):
    with pytest.raises(ValueError, match="not understood: write pct:ID"):
        ContainerTarget(make_host_target(SSHDest("h")), "lxc:200")
    with pytest.raises(ValueError, match="user given without host"):
        make_host_target(SSHDest(None, user="root"))
    with pytest.raises(ValueError, match="port must be a number"):
        make_host_target(SSHDest("h", port=70000))
    with pytest.raises(ValueError, match="not a usable SSH host name"):
        make_host_target(SSHDest("-oProxyCommand=touch /tmp/pwned"))
    host_t = make_host_target(SSHDest(**sshd.profile()))
    run_t = ContainerTarget(host_t, "pct:200")
    assert isinstance(host_t, SSHTarget)
    assert run_t.label == f"{sshd.user}@127.0.0.1 · pct:200"
    assert isinstance(make_host_target(SSHDest(None)), LocalTarget)
    assert shlex.join(["a b"]) == "'a b'"


async def test_closing_a_stream_ends_the_remote_command(target):
    import contextlib

    lines = []
    async with contextlib.aclosing(
            target.stream(["sh", "-c", "echo $$; exec tail -F /etc/hostname"])) as stream:
        async for line in stream:
            lines.append(line)
            if len(lines) == 2:
                break
    pid = int(lines[0])
    for _ in range(40):
        if not os.path.exists(f"/proc/{pid}"):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the remote `tail -F` outlived its stream")
