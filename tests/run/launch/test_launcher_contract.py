"""The Launcher contract (run/launch/launcher.py), for every backend of `backends.BACKENDS`, with
real parts. Each backend's tests give its case (its own profile, a field its targets refuse, how
it is built over its real parts: tests/backends/NAME/contract_cases.py, tests/support/launcher_contract.py
says what a case holds). For each backend: it recognises its own profile and no earlier backend
does (first match wins), its targets are built or one line names the bad field, a transport that
fails is `Detached.error` and never an exception, a placement is carried out only by a backend
that places nodes (refused before anything is touched by every other), `stop` on a copy of a
live run's dir signals nothing, and the next launch puts every one of its RUN_FILES aside. A
backend added to BACKENDS fails `test_every_backend_gives_its_contract_case` (and each test
below, for it) until its tests give its case."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dflash_tui.backends import BACKENDS, launcher_class, launcher_for
from dflash_tui.config import ConfigError
from dflash_tui.contract.rundir import LAUNCH_JSON
from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.base import Target
from dflash_tui.run.launch.launch import HISTORY_DIR, LaunchRefused, launch_run
from dflash_tui.run.launch.launcher import Launcher
from dflash_tui.run.launch.preflight import PER_RUN_FILES
from dflash_tui.run.launch.request import OWN_NODES, LaunchRequest, Placement
from tests.support.launcher_contract import case_of, contract_case, no_case_words, own_profile
from tests.support.ports import free_port
from tests.support.runs import alive, standin_profile

pytestmark = pytest.mark.timeout(90)

IDS = [cls.__name__ for cls in BACKENDS]
each_backend = pytest.mark.parametrize("cls", BACKENDS, ids=IDS)


def real_launcher(cls: type[Launcher], request, tmp_path: Path, monkeypatch, run_dir: Path) -> Launcher:
    """`cls` over its real parts (its case's), for the stand-in trainer's profile in `run_dir`."""
    return case_of(cls).real(standin_profile(run_dir, "beat", name="p"), request, tmp_path, monkeypatch)


def test_every_backend_gives_its_contract_case():
    missing = [no_case_words(cls) for cls in BACKENDS if contract_case(cls) is None]
    assert not missing, "\n".join(missing)


@each_backend
def test_it_runs_its_own_profile_and_no_backend_before_it_does(cls):
    own = own_profile(case_of(cls))
    assert cls.handles(own) and launcher_class(own) is cls
    for other in BACKENDS:
        if other is not cls and cls.handles(own_profile(case_of(other))):
            # First match wins: `other`'s profile has this backend's keys too (a Slurm profile
            # names its login host), so `other` must come first.
            assert BACKENDS.index(other) < BACKENDS.index(cls), (cls.__name__, other.__name__)


@each_backend
def test_its_targets_are_built_or_one_line_names_the_bad_field(cls):
    case = case_of(cls)
    own = own_profile(case)
    host = cls.make_host(own)
    assert isinstance(host, Target) and isinstance(cls.make_run_target(own, host), Target)
    name, value = case.bad_field
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
    p = replace(own_profile(case_of(cls)), host="127.0.0.1", port=free_port(), run_dir=str(tmp_path / "run"))
    host = cls.make_host(p)
    target = cls.make_run_target(p, host)
    try:
        started = await cls(p, host, target).detach(p.run_dir, "r-contract", Placement())
    finally:
        await target.close()
        await host.close()
    assert started.error and started.exit_status is None and started.pid is None, started


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
            carries_out = case_of(cls).carries_out
            assert carries_out is not None, f"{cls.__name__} places nodes: its case's carries_out shows where"
            await carries_out(launcher, ops, run_dir, placed)
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
    """`cp -a` of a live run's dir names the original's process (and job, which the case's
    `names_its_job` writes): a stop on the copy must leave it running. With a scheduler's
    controller not answering, nothing proves the job the copy's, so nothing is cancelled (a
    cluster's own copy test is its backend's: tests/backends/slurm/test_runs.py)."""
    case = case_of(cls)
    original, copy = tmp_path / "run", tmp_path / "copy"
    # The live run: the backend's own where it can start one here (its case's `live` where not).
    runner = (case.live or case.real)(standin_profile(original, "beat", name="p"), request, tmp_path, monkeypatch)
    ops = await open_ops(runner.target)
    stopper = None
    try:
        out = await launch_run(runner.profile, runner, ops, LaunchRequest(preflight=False))
        assert out.evidence is not None and out.evidence.launch is not None, out.checklist
        live = json.loads((original / LAUNCH_JSON).read_text())
        if case.names_its_job is not None:
            case.names_its_job(original, out.run_id)
        shutil.copytree(original, copy, symlinks=True)
        stopper = case.real(replace(runner.profile, run_dir=str(copy)), request, tmp_path, monkeypatch)
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
