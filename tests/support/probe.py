"""Run real programs under the run probe, as launch.sh would, and read what the probe wrote."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

from dflash_tui.contract.rundir import PROBE_DIR, ProbeReport, SchemaError, parse_probe
from dflash_tui.run.launch.probe_install import write_probe_dir

PYTHON = sys.executable


def probe_env(run_dir: Path, *, install: bool = True, run_id: str = "run-probe-test",
              extra_path: str | None = None) -> dict[str, str]:
    """The environment launch.sh gives a program: run dir and id, the probe first on PYTHONPATH."""
    probe_dir = run_dir / PROBE_DIR
    if install:
        write_probe_dir(probe_dir)
    env = dict(os.environ, DFLASH_RUN_DIR=str(run_dir), DFLASH_RUN_ID=run_id)
    env.pop("PYTHONPATH", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(probe_dir), extra_path) if p)
    return env


def reports(run_dir: Path) -> list[ProbeReport]:
    out = []
    for path in sorted((run_dir / PROBE_DIR).glob("[0-9]*.json")):
        try:
            out.append(parse_probe(path.read_text()))
        except (OSError, SchemaError, json.JSONDecodeError):
            pass       # replaced between glob and read
    return out


def wait_reports(run_dir: Path, ok: Callable[[list[ProbeReport]], bool], timeout: float = 60.0) -> list[ProbeReport]:
    """Poll until `ok(reports)` holds (generous: the machine is shared), else fail showing them."""
    deadline = time.monotonic() + timeout
    while True:
        got = reports(run_dir)
        if ok(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"probe reports never matched in {timeout:.0f} s: {got!r}"[:4000])
        time.sleep(0.1)


def thread(report: ProbeReport, name: str):
    return next((t for t in report.threads if t.name == name), None)


def write_reports(run_dir: Path, reports: list[ProbeReport], mtimes: list[float]) -> None:
    """Write each report as the probe does (probe/<pid>.json, by a rename) with its file's mtime:
    a run dir of many ranks' reports without running them."""
    from dflash_tui.contract.rundir import probe_report_name, to_json
    probe_dir = run_dir / PROBE_DIR
    probe_dir.mkdir(parents=True, exist_ok=True)
    for report, mtime in zip(reports, mtimes):
        path = probe_dir / probe_report_name(report.pid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(to_json(report))
        os.utime(tmp, (mtime, mtime))
        tmp.replace(path)
