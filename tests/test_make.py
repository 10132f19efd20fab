"""The two entry points of a fresh clone, as make would run them (`make -n`, against a venv
path that does not exist yet): `make run` says what each install step does and shows pip's
progress (it used to sit silent for ~45 s); `make test` says the same steps with pip quiet."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

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
