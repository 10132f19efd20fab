"""The two entry points of a fresh clone, as make would run them (`make -n`, against a venv
path that does not exist yet): `make run` says what each install step does and shows pip's
progress (it used to sit silent for ~45 s); `make test` says the same steps with pip quiet."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def planned(target: str, tmp_path: Path) -> list[str]:
    res = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def pip_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "/bin/pip install" in line]


def test_make_run_shows_each_install_step_and_pips_progress(tmp_path):
    lines = planned("run", tmp_path)
    says = [line for line in lines if line.startswith('echo "make: ')]
    assert [s.split(":")[1].split()[0] for s in says] == ["creating", "installing", "installing"], says
    pips = pip_lines(lines)
    assert len(pips) == 2 and not any(" -q" in p for p in pips), pips
    assert lines[-1].endswith("/bin/dflash-tui")


def test_make_test_keeps_pip_quiet(tmp_path):
    lines = planned("test", tmp_path)
    pips = pip_lines(lines)
    assert len(pips) == 2 and all(" -q " in p for p in pips), pips
    assert sum(line.startswith('echo "make: ') for line in lines) == 3


def test_make_installs_the_lock_with_hashes_and_then_the_project_alone(tmp_path):
    pips = pip_lines(planned("test", tmp_path))
    assert "--require-hashes -r requirements/lock.txt" in pips[0], pips
    assert "--no-deps" in pips[1] and pips[1].endswith("-e ."), pips


def _locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        if line and line[0].isalnum():
            name, _, version = line.split(" ")[0].partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_the_lock_pins_every_requirement_of_the_project_and_its_extras():
    """Every dependency pyproject.toml names (runtime and every extra) is pinned in the lock at a
    version its range allows, and torch is the CPU build that requirements/torch.in names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    wanted += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = _locked()
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements/lock.txt: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req} but the lock has {pins[name]}"
    torch_in = [Requirement(line) for line in (ROOT / "requirements" / "torch.in").read_text().splitlines()
                if line and not line.startswith("#")]
    assert torch_in and torch_in[0].specifier.contains(pins["torch"])
    assert pins["torch"].endswith("+cpu"), pins["torch"]
