"""SlurmLauncher without a cluster: sbatch against a controller nobody answers for."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dflash_tui.backends import launcher_for
from dflash_tui.contract.rundir import SLURM_JSON
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.launch.request import Placement
from tests.backends.slurm.contract_cases import SLURM, unanswered_slurm
from tests.support.launcher_contract import own_profile

pytestmark = pytest.mark.timeout(90)


async def test_sbatch_that_cannot_reach_its_controller_is_detacheds_error_in_its_words(tmp_path, monkeypatch):
    unanswered_slurm(tmp_path, monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "launch.sh").write_text("#!/bin/sh\ntrue\n")
    launcher = launcher_for(replace(own_profile(SLURM), host=None, run_dir=str(run_dir)),
                            targets=(LocalTarget(), LocalTarget()))
    started = await launcher.detach(str(run_dir), "r-contract", Placement())
    assert started.error.startswith("sbatch refused the job: ") and "controller" in started.error, started
    assert not (run_dir / SLURM_JSON).exists()
