"""Shared fixtures: a real loopback sshd (session-scoped) and its pct stand-in state; real LXC and
podman containers (module-scoped); each test's own state and config folders.

Under pytest-xdist (`make test` runs two workers) a test module stays on one worker, so its
module-scoped daemons and programs are started once; the Slurm modules share one worker, one
cluster at a time.

Outside CI a missing sshd skips the tests that need it, with the reason; with CI=true it fails,
so CI can never pass by skipping the transport tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.containers import Standins
from tests.support.realct import LxcContainer, PodmanContainer, RealContainer, need_runtime
from tests.support.sshd import SshdServer, SshdUnavailable, start_sshd


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups off the marks
def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.has_plugin("xdist"):
        return
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = "slurm" if path.startswith("tests/backends/slurm/") else path
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def own_state_dirs(tmp_path_factory, monkeypatch):
    """The product's state and config folders ($XDG_STATE_HOME, $XDG_CONFIG_HOME: the watch store,
    launch attempts, default run dirs) are the test's own, never the user's, nor shared by tests
    running side by side. A test that sets its own wins."""
    base = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI=true requires these real-system tests to run")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SshdServer:
    """A running OpenSSH server on 127.0.0.1 (see tests/support/sshd.py for the fields)."""
    try:
        server = start_sshd(tmp_path_factory.mktemp("sshd"))
    except SshdUnavailable as exc:
        _unavailable(str(exc))
    yield server
    Standins(server.standin_dir).stop_all()   # nothing outlives the session
    server.stop()


@pytest.fixture
def standin(sshd: SshdServer, need_unshare) -> Standins:
    """The pct/docker stand-ins, sharing state with the sshd sessions; `standin.env` runs them
    locally. Every container is stopped after the test."""
    helper = Standins(sshd.standin_dir)
    yield helper
    helper.stop_all()


@pytest.fixture(scope="session")
def need_unshare():
    """The container stand-in needs util-linux and PID namespaces: root, or unprivileged user
    namespaces (then the stand-in makes a user namespace too)."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        _unavailable("unshare/nsenter not installed (util-linux)")
    if os.geteuid() != 0:
        probe = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"],
                               capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            _unavailable("the pct stand-in needs root or unprivileged user namespaces "
                         f"({probe.stderr.strip()})")


@pytest.fixture(scope="module", params=["lxc", "podman"])
def real_container(request, tmp_path_factory) -> RealContainer:
    """A running container of a real runtime, one per test module and runtime: LXC behind
    Proxmox's `pct` (pct:ID) and podman answering as `docker` (docker:NAME); see
    tests/support/realct.py. Run dirs go under its `share`. Removed after the module."""
    why = need_runtime(request.param)
    if why:
        _unavailable(why)
    base = tmp_path_factory.mktemp(f"ct-{request.param}")
    share = base / "share"
    share.mkdir()
    # A name of this test session's own: LXC names its cgroups after it, and another test
    # session on the same machine may run the same tests.
    if request.param == "lxc":
        ct: RealContainer = LxcContainer(base, str(100000 + os.getpid() % 800000), share)
    else:
        ct = PodmanContainer(base, f"trainer-{os.getpid()}", share)
    try:
        ct.create()
        ct.start()
    except RuntimeError as exc:
        ct.destroy()
        _unavailable(f"{request.param} cannot start a container here: {exc}")
    yield ct
    ct.destroy()
