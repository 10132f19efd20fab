"""What the run tests that launch real programs share: sessions that are always cleaned up, and
the two places a run goes (this machine, and a pct container over the loopback sshd)."""

from __future__ import annotations

from typing import Callable

import pytest

from dflash_tui.config import Profile
from dflash_tui.remote.local import LocalTarget
from dflash_tui.watch.session import Session


@pytest.fixture
async def sessions(monkeypatch, tmp_path) -> Callable[[Profile], Session]:
    """open(profile) -> Session, on this machine unless the profile names a host or a container.
    Every session is stopped and closed after the test, and the state dir is the test's own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    made: list[Session] = []

    def open_session(profile: Profile) -> Session:
        local = profile.host is None and profile.container is None
        s = Session(profile, targets=(LocalTarget(), LocalTarget())) if local else Session(profile)
        made.append(s)
        return s
    yield open_session
    for s in made:
        try:
            await s.stop(grace_s=0.5)
        except Exception:   # noqa: BLE001 - cleanup of a test that already failed must go on
            pass
        await s.close()


@pytest.fixture(params=["local", "ssh_pct"])
def place(request) -> tuple[str, dict]:
    """(label, profile keys) of where a run goes: this machine (no keys), or container pct:200
    (a running stand-in) over the loopback sshd."""
    if request.param == "local":
        return "local", {}
    sshd = request.getfixturevalue("sshd")
    request.getfixturevalue("standin").container("pct:200", mode="ok")
    return "ssh_pct", {**sshd.profile(), "container": "pct:200"}
