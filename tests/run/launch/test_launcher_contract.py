"""The Launcher contract (run/launch/launcher.py), for every backend of `backends.BACKENDS`, with
real parts: this machine's processes, the real sshd, the docker stand-in (a real PID and mount
namespace, tests/support/standin.py) and Slurm's own commands (sbatch, squeue, scontrol) against
a controller nobody answers for; a Slurm cluster's runs are tests/backends/slurm/'s. For each backend:
it recognises its own profile and no earlier backend does (first match wins), its targets are
built or one line names the bad field, a transport that fails is `Detached.error` and never an
exception, a placement is carried out only by a backend that places nodes (refused before
anything is touched by every other), `stop` on a copy of a live run's dir signals nothing, and
the next launch puts every one of its RUN_FILES aside. A backend added to BACKENDS fails
`test_every_backend_has_its_contract_setup` until it has its rows below."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dflash_tui.backends import BACKENDS, launcher_class, launcher_for
from dflash_tui.config_file import parse_config
from dflash_tui.backends.process import ContainerLauncher, LocalLauncher, SSHLauncher
from dflash_tui.backends.slurm.commands import sbatch_argv
from dflash_tui.backends.slurm.launcher import SlurmLauncher
from dflash_tui.config import ConfigError, Profile
from dflash_tui.contract.rundir import LAUNCH_JSON, SLURM_JSON, SlurmJobRecord, to_json
from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.base import Target
from dflash_tui.remote.container import ContainerTarget
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.launch.launch import HISTORY_DIR, LaunchRefused, launch_run
from dflash_tui.run.launch.launcher import Launcher
from dflash_tui.run.launch.preflight import PER_RUN_FILES
from dflash_tui.run.launch.request import OWN_NODES, LaunchRequest, Placement
from tests.support.ports import free_port
from tests.support.runs import alive, standin_profile

pytestmark = pytest.mark.timeout(90)

IDS = [cls.__name__ for cls in BACKENDS]
each_backend = pytest.mark.parametrize("cls", BACKENDS, ids=IDS)

# One profile of each backend's own kind, as a config file writes it.
CONFIG = {
    SlurmLauncher: 'scheduler = "slurm"\nhost = "login1"\nrun_dir = "/shared/p"',
    ContainerLauncher: 'host = "gpu1"\ncontainer = "docker:trainer"\nrun_dir = "/srv/p"',
    SSHLauncher: 'host = "gpu1"\nrun_dir = "/srv/p"',
    LocalLauncher: 'run_dir = "/srv/p"',
}
# A field each backend's targets refuse (which config.py lets through), and its bad value.
BAD_FIELD = {
    SlurmLauncher: ("port", 0),
    ContainerLauncher: ("container", "lxc:200"),
    SSHLauncher: ("port", 70000),
    LocalLauncher: ("user", "root"),
}


def own_profile(cls: type[Launcher]) -> Profile:
    return parse_config(f"[profile.p]\n{CONFIG[cls]}\n", "c.toml").profiles["p"]


def unanswered_slurm(tmp_path: Path, monkeypatch) -> None:
    """Slurm's client commands, pointed at a controller on a port nobody listens on: each of them
    fails in a second or two with its own words ("Unable to contact slurm controller")."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort={free_port()}\n"
                    "AuthType=auth/none\nMessageTimeout=2\nNodeName=n1 CPUs=1 State=UNKNOWN\n"
                    "PartitionName=debug Nodes=n1 Default=YES State=UP\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))


def real_launcher(cls: type[Launcher], request, tmp_path: Path, monkeypatch, run_dir: Path,
                  profile: Profile | None = None) -> Launcher:
    """`cls` over its real parts, for `profile` (default: the stand-in trainer's, in `run_dir`):
    this machine, the real sshd, the docker stand-in on this machine, or this machine as a Slurm
    login host whose controller does not answer."""
    base = profile or standin_profile(run_dir, "beat", name="p")
    if cls is LocalLauncher:
        return launcher_for(base, targets=(LocalTarget(), LocalTarget()))
    if cls is SSHLauncher:
        return launcher_for(replace(base, **request.getfixturevalue("sshd").profile()))
    if cls is ContainerLauncher:
        standin = request.getfixturevalue("standin")
        spec = standin.container("docker:contract")
        host = LocalTarget(env=standin.env)
        return launcher_for(replace(base, container=spec), targets=(host, ContainerTarget(host, spec)))
    if cls is SlurmLauncher:
        unanswered_slurm(tmp_path, monkeypatch)
        return launcher_for(replace(base, scheduler=own_profile(SlurmLauncher).scheduler),
                            targets=(LocalTarget(), LocalTarget()))
    raise AssertionError(f"no real setup for {cls.__name__}: add one to this module")


def test_every_backend_has_its_contract_setup():
    assert set(CONFIG) == set(BAD_FIELD) == set(BACKENDS), "add the new backend's rows to this module"


@each_backend
def test_it_runs_its_own_profile_and_no_backend_before_it_does(cls):
    own = own_profile(cls)
    assert cls.handles(own) and launcher_class(own) is cls
    for other in BACKENDS:
        if other is not cls and cls.handles(own_profile(other)):
            # First match wins: `other`'s profile has this backend's keys too (a Slurm profile
            # names its login host), so `other` must come first.
            assert BACKENDS.index(other) < BACKENDS.index(cls), (cls.__name__, other.__name__)


@each_backend
def test_its_targets_are_built_or_one_line_names_the_bad_field(cls):
    own = own_profile(cls)
    host = cls.make_host(own)
    assert isinstance(host, Target) and isinstance(cls.make_run_target(own, host), Target)
    name, value = BAD_FIELD[cls]
    bad = replace(own, **{name: value})
    assert cls.handles(bad)
    with pytest.raises(ValueError) as err:
        cls.make_run_target(bad, cls.make_host(bad))
    assert name in str(err.value) and "\n" not in str(err.value), err.value
    with pytest.raises(ConfigError) as err:
        launcher_for(bad)
    assert str(err.value).startswith("c.toml: [profile.p]: ") and name in str(err.value), err.value


@each_backend
async def test_a_transport_that_fails_is_detacheds_error_never_an_exception(cls, tmp_path):
    """The backend's own targets, to a host whose SSH port nobody answers on."""
    p = replace(own_profile(cls), host="127.0.0.1", port=free_port(), run_dir=str(tmp_path / "run"))
    host = cls.make_host(p)
    target = cls.make_run_target(p, host)
    try:
        started = await cls(p, host, target).detach(p.run_dir, "r-contract", Placement())
    finally:
        await target.close()
        await host.close()
    assert started.error and started.exit_status is None and started.pid is None, started


async def test_sbatch_that_cannot_reach_its_controller_is_detacheds_error_in_its_words(tmp_path, monkeypatch):
    unanswered_slurm(tmp_path, monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.sh").write_text("#!/bin/sh\ntrue\n")
    launcher = launcher_for(replace(own_profile(SlurmLauncher), host=None, run_dir=str(run_dir)),
                            targets=(LocalTarget(), LocalTarget()))
    started = await launcher.detach(str(run_dir), "r-contract", Placement())
    assert started.error.startswith("sbatch refused the job: ") and "controller" in started.error, started
    assert not (run_dir / SLURM_JSON).exists()


@each_backend
async def test_a_placement_is_carried_out_only_where_the_backend_places_nodes(cls, request, tmp_path, monkeypatch):
    """A backend that picks no nodes refuses a placement in one line before the run dir is
    touched (a recovery asks `PLACES_NODES` first); one that does hands it to its scheduler."""
    run_dir = tmp_path / "run"
    launcher = real_launcher(cls, request, tmp_path, monkeypatch, run_dir)
    placed = LaunchRequest(preflight=False, argv=("true",), placement=Placement(exclude=("n2",)))
    try:
        ops = await open_ops(launcher.target)
        if not launcher.PLACES_NODES:
            with pytest.raises(LaunchRefused) as err:
                await launch_run(launcher.profile, launcher, ops, placed)
            assert str(err.value) == f"{launcher.label}: cannot launch excluding node n2: {OWN_NODES}"
            assert not run_dir.exists()
        else:
            assert isinstance(launcher, SlurmLauncher), "a new placing backend: show where its placement goes"
            argv = sbatch_argv(launcher.spec, str(run_dir), "dflash-run", placed.placement)
            assert "--exclude=n2" in argv, argv
            out = await launch_run(launcher.profile, launcher, ops, placed)
            assert out.attempt.error.startswith("sbatch refused the job: "), out.attempt
    finally:
        await launcher.target.close()
        await launcher.host.close()


async def _wait_alive(pid: int) -> None:
    for _ in range(100):
        if alive(pid):
            return
        await asyncio.sleep(0.05)


@each_backend
async def test_stop_on_a_copied_run_dir_signals_nothing(cls, request, tmp_path, monkeypatch):
    """`cp -a` of a live run's dir names the original's process (and job): a stop on the copy
    must leave it running. A Slurm copy's slurm.json names the original's job; with the
    controller not answering, nothing proves it the copy's, so nothing is cancelled (the
    cluster's own copy test: tests/backends/slurm/test_runs.py)."""
    original, copy = tmp_path / "run", tmp_path / "copy"
    # The live run: a process backend's own; under Slurm a local process whose run dir names a job.
    runner = real_launcher(LocalLauncher if cls is SlurmLauncher else cls, request, tmp_path, monkeypatch, original)
    ops = await open_ops(runner.target)
    stopper = None
    try:
        out = await launch_run(runner.profile, runner, ops, LaunchRequest(preflight=False))
        assert out.evidence is not None and out.evidence.launch is not None, out.checklist
        live = json.loads((original / LAUNCH_JSON).read_text())
        if cls is SlurmLauncher:
            (original / SLURM_JSON).write_text(to_json(SlurmJobRecord(run_id=out.run_id, job_id="4242",
                                                                      submit_time=0.0)) + "\n")
        shutil.copytree(original, copy, symlinks=True)
        stopper = real_launcher(cls, request, tmp_path, monkeypatch, copy,
                                replace(runner.profile, run_dir=str(copy)))
        stopper_ops = await open_ops(stopper.target)
        stopped = await stopper.stop(stopper_ops, str(copy), grace_s=1.0)
        assert stopped.outcome not in ("terminated", "killed"), stopped
        assert not stopped.ok or stopped.outcome in ("not-running", "no-run"), stopped
        await asyncio.sleep(1.0)   # a signal sent would have ended it by now
        ev = await runner.observe(ops, str(original))
        assert runner.alive(ev) and ev.exit is None and ev.stop is None, (stopped, ev.exit, ev.stop)
        assert ev.launch.pid == live["pid"] and ev.launch.start_ticks == live["start_ticks"], ev.launch
    finally:
        await runner.stop(ops, str(original), grace_s=1.0)
        for launcher in {runner, stopper} - {None}:
            await launcher.target.close()
            await launcher.host.close()


@each_backend
async def test_the_next_launch_puts_every_run_file_aside(cls, request, tmp_path, monkeypatch):
    """RUN_FILES are everyone's run files and the backend's own, plain names in the run dir; a
    launch moves each of them, as the last run left it, into history/."""
    assert set(PER_RUN_FILES) <= set(cls.RUN_FILES) and len(set(cls.RUN_FILES)) == len(cls.RUN_FILES)
    assert all(n and "/" not in n and n not in (".", "..", HISTORY_DIR) for n in cls.RUN_FILES), cls.RUN_FILES
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in cls.RUN_FILES:   # what a run that no record describes left behind
        (run_dir / name).write_text(f"left by the last run: {name}\n")
    launcher = real_launcher(cls, request, tmp_path, monkeypatch, run_dir)
    try:
        ops = await open_ops(launcher.target)
        await launch_run(launcher.profile, launcher, ops, LaunchRequest(preflight=False, argv=("true",)))
    finally:
        await launcher.target.close()
        await launcher.host.close()
    (aside,) = (run_dir / HISTORY_DIR).iterdir()
    assert sorted(p.name for p in aside.iterdir()) == sorted(cls.RUN_FILES)
    assert all((aside / n).read_text() == f"left by the last run: {n}\n" for n in cls.RUN_FILES)
