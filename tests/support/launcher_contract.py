"""What a backend gives the launcher contract test (tests/run/launch/test_launcher_contract.py),
and where the test finds it: each backend of `backends.BACKENDS` has a `ContractCase` in
`tests/backends/NAME/contract_cases.py`'s `CASES`, NAME being its module's or folder's name under
src/dflash_tui/backends/. The shared test holds no backend's rows: a new backend's folder of
tests brings its own."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from dflash_tui import backends
from dflash_tui.config import Profile
from dflash_tui.config_file import parse_config
from dflash_tui.remote.ops import RemoteOps
from dflash_tui.run.launch.launcher import Launcher
from dflash_tui.run.launch.request import LaunchRequest

# (profile, request, tmp_path, monkeypatch) -> the backend's Launcher over its real parts, for
# `profile` (the stand-in trainer's, in its run dir).
RealSetup = Callable[[Profile, pytest.FixtureRequest, Path, pytest.MonkeyPatch], Launcher]
# (launcher, ops, run_dir, a launch request with a placement) -> asserts where the placement went.
PlacementCheck = Callable[[Launcher, RemoteOps, Path, LaunchRequest], Awaitable[None]]


@dataclass(frozen=True)
class ContractCase:
    """One backend's part of the launcher contract."""

    launcher: type[Launcher]
    config: str                       # a profile of the backend's own kind, as a config file writes it
    bad_field: tuple[str, object]     # a field its targets refuse (which config.py lets through), and its bad value
    real: RealSetup                   # the backend over its real parts
    # The live run that a stop on a copy of its run dir must leave running, where `real` cannot
    # start one here (a scheduler whose controller does not answer), and what the backend's
    # run dir then says of the run's job (run dir, run id).
    live: RealSetup | None = None
    names_its_job: Callable[[Path, str], None] | None = None
    # A backend that places nodes (PLACES_NODES): where the placement goes.
    carries_out: PlacementCheck | None = None


def backend_name(cls: type[Launcher]) -> str:
    """The backend's module or folder under src/dflash_tui/backends/ ("process", "slurm")."""
    return cls.__module__.removeprefix(backends.__name__ + ".").split(".")[0]


def cases_module(cls: type[Launcher]) -> str:
    return f"tests.backends.{backend_name(cls)}.contract_cases"


def contract_case(cls: type[Launcher]) -> ContractCase | None:
    """`cls`'s case from its backend's tests, None where they give it none."""
    module = cases_module(cls)
    try:
        cases = importlib.import_module(module).CASES
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise   # the file is there, and an import inside it fails: its own error says which
        return None
    return next((case for case in cases if case.launcher is cls), None)


def no_case_words(cls: type[Launcher]) -> str:
    return (f"{cls.__name__} is in backends.BACKENDS but {cases_module(cls).replace('.', '/')}.py gives it "
            "no contract case: add a ContractCase for it to that file's CASES (tests/support/launcher_contract.py)")


def case_of(cls: type[Launcher]) -> ContractCase:
    """`cls`'s case; the test fails, in words that say where the case goes, where there is none."""
    case = contract_case(cls)
    if case is None:
        pytest.fail(no_case_words(cls), pytrace=False)
    return case


def own_profile(case: ContractCase) -> Profile:
    """The case's profile, as the config file's loader reads it."""
    return parse_config(f"[profile.p]\n{case.config}\n", "c.toml").profiles["p"]
