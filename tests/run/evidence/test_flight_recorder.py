"""Collectives per rank and the first failure, from the files a real torchrun (gloo, CPU) leaves
in the run dir under the wrapper's environment: the probe's Flight Recorder dump of the rank
that waits in a collective no other rank joins, torchelastic's error file of the rank that
raised. Dumps are read by an unpickler that refuses every global."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.contract.rundir import FR_DUMP_PREFIX, PROBE_DIR
from dflash_tui.run.evidence.flight_recorder import FlightRecorderError, failure_of, load_dump, progress_of
from dflash_tui.watch.session import Session

from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(240)

PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "gloo_stuck_rank.py"


def torchrun(mode: str, port: int) -> tuple[str, ...]:
    return (sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
            f"--master-port={port}", str(PROGRAM), mode)


@pytest.fixture
def torchrun_runs(sessions, monkeypatch, tmp_path):
    """make(name, command) -> Session; torch's own dump paths unset, the probe's dump after 2 s."""
    monkeypatch.setenv("DFLASH_FR_DUMP_AFTER_S", "2")
    for name in ("TORCHELASTIC_ERROR_FILE", "PET_LOG_DIR", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        monkeypatch.delenv(name, raising=False)
    return lambda name, command: sessions(Profile(name=name, run_dir=str(tmp_path / name), python=sys.executable,
                                                  command=command, stall_after_s=30.0, stop_grace_s=2.0,
                                                  min_free_gb=0.0))


async def watch(session: Session, ok, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        ev = await session.evidence()
        if ok(ev) or time.monotonic() > deadline:
            return ev
        await asyncio.sleep(0.5)


async def test_a_rank_that_never_joins_and_a_rank_that_raised(torchrun_runs, tmp_path):
    hang = torchrun_runs("hang", torchrun("hang", free_port()))
    crash = torchrun_runs("crash", torchrun("crash", free_port()))
    await asyncio.gather(hang.launch(preflight=False), crash.launch(preflight=False))

    ev = await watch(hang, lambda ev: any(c.pending_op for c in ev.hang.collectives))
    (rank0,) = [c for c in ev.hang.collectives if c.rank == 0]
    # Three all-reduces completed, the fourth pending.
    assert rank0.pending_op == "all_reduce" and rank0.pending_seq == rank0.last_completed_seq + 1, rank0
    assert rank0.last_completed_seq >= 3 and rank0.last_enqueued_seq == rank0.pending_seq, rank0
    assert rank0.pending_since is not None and 0 < ev.now - rank0.pending_since < 120, (ev.now, rank0)
    worker0 = next(p for p in ev.probes if p.rank == 0)
    assert rank0.pid == worker0.pid
    # Rank 1 is not in a collective, so it dumped nothing.
    assert not (tmp_path / "hang" / PROBE_DIR / f"{FR_DUMP_PREFIX}1").exists()
    assert not ev.hang.problems, ev.hang.problems

    ev = await watch(crash, lambda ev: ev.hang.root_cause is not None and ev.hang.root_cause.rank is not None)
    cause = ev.hang.root_cause
    assert cause.rank == 1 and cause.message == "ValueError: shard 1 is corrupt", cause
    assert "in load_shard" in cause.traceback and cause.time > 0, cause


class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_dumps_are_read_as_plain_data_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FlightRecorderError, match="refers to posix.system, and only plain data is read"):
        load_dump(pickle.dumps({"entries": [Evil()]}), "probe/fr_rank_0")
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(FlightRecorderError, match="not a Flight Recorder dump"):
        load_dump(b"\x80\x04garbage", "probe/fr_rank_0")
    with pytest.raises(FlightRecorderError, match="more than a Flight Recorder dump"):
        load_dump(b"x" * (9 << 20), "probe/fr_rank_0")
    with pytest.raises(FlightRecorderError, match="no entries"):
        load_dump(pickle.dumps([1, 2]), "probe/fr_rank_0")
    # torch's own format, as the real dump of a gloo all_reduce writes it (tuples, None, nested).
    dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": 5, "last_started_collective": -1,
                                "last_completed_collective": 4}},
            "entries": [{"pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 5,
                         "profiling_name": "nccl:all_reduce", "time_created_ns": 1_700_000_000_000_000_000,
                         "state": "scheduled", "is_p2p": False}]}
    (got,) = progress_of(load_dump(pickle.dumps(dump), "x"), rank=0, time=1.0)
    assert (got.pending_op, got.pending_seq, got.last_completed_seq, got.last_started_seq) == ("all_reduce", 5, 4, None)
    assert got.pending_since == 1_700_000_000.0 and got.process_group == "default_pg"


def test_error_file_forms():
    f = failure_of('{"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback...", '
                   '"timestamp": "1700000000"}}}', "e.json", rank=1)
    assert (f.time, f.message, f.rank, f.traceback) == (1700000000.0, "ValueError: x", 1, "Traceback...")
    for hostile in ("{", "[" * 100_000, '{"message": 3}'):
        with pytest.raises(FlightRecorderError, match="e.json is not"):
            failure_of(hostile, "e.json")
