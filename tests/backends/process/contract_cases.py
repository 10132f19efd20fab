"""The process backends' part of the launcher contract (tests/run/launch/test_launcher_contract.py):
each over its real parts, this machine's processes, the real sshd, and the docker stand-in (a
real PID and mount namespace, tests/support/standin.py)."""

from __future__ import annotations

from dataclasses import replace

from dflash_tui.backends import launcher_for
from dflash_tui.backends.process import ContainerLauncher, LocalLauncher, SSHLauncher
from dflash_tui.remote.container import ContainerTarget
from dflash_tui.remote.local import LocalTarget
from tests.support.launcher_contract import ContractCase


def _local(profile, request, tmp_path, monkeypatch):
    return launcher_for(profile, targets=(LocalTarget(), LocalTarget()))


def _ssh(profile, request, tmp_path, monkeypatch):
    return launcher_for(replace(profile, **request.getfixturevalue("sshd").profile()))


def _container(profile, request, tmp_path, monkeypatch):
    standin = request.getfixturevalue("standin")
    spec = standin.container("docker:contract")
    host = LocalTarget(env=standin.env)
    return launcher_for(replace(profile, container=spec), targets=(host, ContainerTarget(host, spec)))


CASES = (
    ContractCase(ContainerLauncher, config='host = "gpu1"\ncontainer = "docker:trainer"\nrun_dir = "/srv/p"',
                 bad_field=("container", "lxc:200"), real=_container),
    ContractCase(SSHLauncher, config='host = "gpu1"\nrun_dir = "/srv/p"', bad_field=("port", 70000), real=_ssh),
    ContractCase(LocalLauncher, config='run_dir = "/srv/p"', bad_field=("user", "root"), real=_local),
)
