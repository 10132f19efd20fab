"""A full disk, for real: the run dir on a small tmpfs mounted inside the pct stand-in container
(its own mount namespace), reached over the loopback sshd. A print loop runs until the disk is
filled under it; the verdict names the full disk, no `.tmp` file is left, and the preflight of
the next launch says "disk full" instead of "fix its permissions"."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.run.verdict.checklist import CheckState, Verdict
from dflash_tui.watch.session import Session
from tests.run.verdict.test_verdicts_programs import program_profile

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]

PRINT_LOOP = str(Path(__file__).resolve().parents[1] / "programs" / "print_loop.py")


def in_container(standin, script: str, *args: str):
    return standin.tool("pct", "exec", "200", "--", "sh", "-c", script, "sh", *args, check=False)


@pytest.fixture
def small_disk(standin, tmp_path, monkeypatch):
    """A 256 KiB tmpfs mounted inside the running stand-in container pct:200 (unmounted after)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    standin.container("pct:200", mode="ok")
    disk = tmp_path / "small-disk"
    disk.mkdir()
    res = in_container(standin, 'mount -t tmpfs -o size=256k dflash-test "$1"', str(disk))
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in the stand-in container: {res.stderr.strip()}")
    yield disk
    in_container(standin, 'umount "$1"', str(disk))


def _profile_on(disk, sshd, argv):
    return program_profile(disk / "run", argv, host=sshd.host, port=sshd.port, user=sshd.user,
                           identity_file=str(sshd.client_key), known_hosts=str(sshd.known_hosts),
                           container="pct:200")


async def test_disk_full_is_said_on_the_verdict_and_the_preflight(sshd, standin, small_disk):
    disk, run = small_disk, small_disk / "run"
    s = Session(_profile_on(disk, sshd, (sys.executable, PRINT_LOOP, "1000000", "0.05")))
    try:
        out = await s.launch()
        assert out.preflight.ok, out.preflight.checks
        deadline = time.monotonic() + 30
        while True:
            ev, cl = await s.check()
            if cl.verdict is Verdict.RUNNING or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert cl.verdict is Verdict.RUNNING, cl
        # Fill the disk under the running program.
        in_container(standin, 'dd if=/dev/zero of="$1/fill" bs=4k 2>/dev/null; true', str(disk))
        deadline = time.monotonic() + 30
        while True:
            ev, cl = await s.check()
            if cl.verdict.failing or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        assert cl.verdict in (Verdict.KILLED, Verdict.CRASHED, Verdict.STALLED), cl
        assert "disk full" in cl.summary, cl.summary
        check = {c.id: c for c in cl.checks}["disk"]
        assert check.state is CheckState.FAIL and "free space" in check.hint, check
        listing = in_container(standin, 'ls -a "$1"', str(run)).stdout.split()
        assert not [n for n in listing if ".tmp" in n], listing
        # The next launch's preflight names the full disk.
        out = await s.launch()
        assert out.checklist.verdict is Verdict.NOT_LAUNCHED, out.checklist
        pre = {c.id: c for c in out.preflight.checks}
        assert pre["pre_run_dir"].state is CheckState.FAIL, pre
        assert pre["pre_run_dir"].cause.startswith("disk full:") and "permissions" not in pre["pre_run_dir"].hint
        listing = in_container(standin, 'ls -a "$1"', str(run)).stdout.split()
        assert not [n for n in listing if n.startswith(".dflash-write-probe") or ".tmp" in n], listing
    finally:
        try:
            await s.stop(grace_s=0.5)
        finally:
            await s.close()


async def test_a_stop_on_a_full_disk_still_reads_stopped(sshd, standin, small_disk):
    # stop.json cannot be written on a full disk (nor exit.json): the stop this machine asked
    # for is remembered here, so the run reads STOPPED, not KILLED, now and to a later --check.
    disk = small_disk
    profile = _profile_on(disk, sshd, (sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"))
    s = Session(profile)
    try:
        out = await s.launch()
        assert out.preflight.ok, out.preflight.checks
        deadline = time.monotonic() + 30
        while True:
            ev, cl = await s.check()
            if ev.launch is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert ev.launch is not None, cl
        in_container(standin, 'dd if=/dev/zero of="$1/fill" bs=4k 2>/dev/null; true', str(disk))
        res = await s.stop(grace_s=2)
        assert res.ok and not res.recorded, res
        ev, cl = await s.check()
        assert cl.verdict is Verdict.STOPPED, cl
        later = Session(profile)          # a later --check, another process's Session
        try:
            ev, cl = await later.check()
            assert cl.verdict is Verdict.STOPPED and res.record.requested_by in cl.summary, cl
        finally:
            await later.close()
    finally:
        await s.close()
