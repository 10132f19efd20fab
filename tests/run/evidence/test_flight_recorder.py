"""Collectives per rank and the first failure, from the files a real torchrun (gloo, CPU) leaves
in the run dir under the wrapper's environment: the probe's Flight Recorder dump of the rank
that waits in a collective no other rank joins, torchelastic's error file of the rank that
raised. Dumps are read by an unpickler that refuses every global."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.contract.rundir import FR_DUMP_PREFIX, PROBE_DIR
from dflash_tui.run.evidence.flight_recorder import (MAX_FR_GROUPS, FlightRecorderError, failure_of, load_dump,
                                                     progress_of)
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
    assert not ev.hang.problems and not ev.hang.bad_files, (ev.hang.problems, ev.hang.bad_files)

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
    (got,), notes = progress_of(load_dump(pickle.dumps(dump), "x"), rank=0, time=1.0)
    assert notes == []
    assert (got.pending_op, got.pending_seq, got.last_completed_seq, got.last_started_seq) == ("all_reduce", 5, 4, None)
    assert got.pending_since == 1_700_000_000.0 and got.process_group == "default_pg"


def test_error_file_forms():
    f = failure_of('{"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback...", '
                   '"timestamp": "1700000000"}}}', "e.json", rank=1)
    assert (f.time, f.message, f.rank, f.traceback) == (1700000000.0, "ValueError: x", 1, "Traceback...")
    for hostile in ("{", "[" * 100_000, '{"message": 3}'):
        with pytest.raises(FlightRecorderError, match="e.json is not"):
            failure_of(hostile, "e.json")


def dump_of(*entries, **status) -> bytes:
    return pickle.dumps({"pg_status": {"0": status}, "entries": list(entries)}, protocol=4)


def nested_lists(depth: int) -> bytes:
    """{"entries": [{"pg_id": 0, "collective_seq_id": 1, "process_group": ("0", [[[...]]])}]},
    the name `depth` lists deep: pickle's own opcodes (pickle.dumps would recurse)."""
    return (b"\x80\x04}(\x8c\x07entries](}(\x8c\x05pg_idK\x00\x8c\x11collective_seq_idK\x01"
            b"\x8c\rprocess_group\x8c\x010" + b"]" * depth + b"a" * (depth - 1) + b"\x86ue" + b"u.")


# What the run (or anyone who can write its run dir) may leave as probe/fr_rank_<R>: each is one
# line naming the file and what is wrong, never another exception.
HOSTILE_DUMPS = {
    # The pickle machine's opcodes on plain data of the wrong kind.
    "BUILD on a dict": (b"\x80\x04}\x94}\x94(\x8c\x01a\x94K\x01ub.", r"is not plain data \(pickle's BUILD\)"),
    "APPEND to a dict": (b"\x80\x02}X\x01\x00\x00\x00xa.", r"not a Flight Recorder dump \(AttributeError"),
    "ADDITEMS to a list": (b"\x80\x04](K\x01\x90.", r"not a Flight Recorder dump \(AttributeError"),
    # Numbers no int64 holds, or that int() refuses.
    "a 5,000-digit pg_id": (dump_of({"pg_id": 10 ** 5000 - 1, "collective_seq_id": 1}),
                            r"entries\[0\]\.pg_id is an integer of more than 19 digits"),
    "time_created_ns of 10**400": (dump_of({"pg_id": 0, "collective_seq_id": 1, "time_created_ns": 10 ** 400}),
                                   r"time_created_ns is an integer of more than 19 digits"),
    "a superscript two as a number": (dump_of({"pg_id": 0, "collective_seq_id": "²"}),
                                      r"entries\[0\]\.collective_seq_id is '²', not a number"),
    "a 5,001-digit sequence number": (dump_of({"pg_id": 0, "collective_seq_id": "9" * 5001}),
                                      r"collective_seq_id is a text of 5001 characters, not a number"),
    "a 5,001-digit completed number": (dump_of(last_completed_collective="9" * 5001),
                                       r"pg_status\[0\]\.last_completed_collective is a text of 5001"),
    # A name that str() cannot draw (RecursionError), or a name that is not text at all.
    "a 50,000-deep group name": (nested_lists(50_000), r"a process_group name is a list, not a name"),
}


@pytest.mark.parametrize("case", HOSTILE_DUMPS)
def test_hostile_dumps_are_one_line_naming_the_file_and_field(case):
    data, words = HOSTILE_DUMPS[case]
    with pytest.raises(FlightRecorderError, match=words) as err:
        progress_of(load_dump(data, "probe/fr_rank_3"), rank=3, time=1.0, what="probe/fr_rank_3")
    said = str(err.value)
    assert said.startswith("probe/fr_rank_3") and "\n" not in said and len(said) < 300, said


def test_tuples_nested_to_overflow_the_c_stack_are_refused_before_loading():
    """A dict key of tuples nested millions deep: hashing it recurses in C and kills the process
    (SIGSEGV), so the dump is refused while its opcodes are walked. In a child: the old reader
    dies, and the test says so instead of dying with it."""
    code = textwrap.dedent("""
        from dflash_tui.run.evidence.flight_recorder import FlightRecorderError, load_dump
        deep = b"\\x80\\x04}(\\x8c\\x01x" + b"\\x85" * 5_000_000 + b"K\\x01u."
        try:
            load_dump(deep, "probe/fr_rank_0")
        except FlightRecorderError as exc:
            print(exc)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, (res.returncode, res.stderr[-500:])
    assert res.stdout.strip() == "probe/fr_rank_0 nests tuples more than 64 deep: not a Flight Recorder dump"


def test_a_huge_dump_is_read_in_bounded_linear_work():
    """30k process groups and 30k entries (~600 KB): one pass, MAX_FR_GROUPS groups kept, those
    with a collective pending first, and a note of each bound (it once took minutes)."""
    n = 30_000
    status = {"last_enqueued_collective": 1}
    dump = {"pg_status": {i: status for i in range(n)},
            "entries": [{"pg_id": i, "collective_seq_id": 1, "state": "scheduled" if i % 1000 == 7 else "completed"}
                        for i in range(n)]}
    data = pickle.dumps(dump, protocol=4)
    assert 500_000 < len(data) < 700_000, len(data)
    t0 = time.monotonic()
    got, notes = progress_of(load_dump(data, "probe/fr_rank_0"), rank=0, time=1.0, what="probe/fr_rank_0")
    took = time.monotonic() - t0
    assert took < 10, took
    assert len(got) == MAX_FR_GROUPS
    pending = sorted(int(c.process_group) for c in got if c.pending_seq is not None)
    assert pending == [i for i in range(10_000, n) if i % 1000 == 7], pending   # the newest 20,000 entries
    assert notes == ["probe/fr_rank_0 holds 30000 entries; the newest 20000 were read",
                     "probe/fr_rank_0 holds 30000 process groups; 32 were read, those with a collective pending first"]


def test_error_file_timestamps_no_float_holds():
    for stamp in ('"' + "9" * 320 + '"', "9" * 320, '"²"'):
        text = '{"message": {"message": "x", "extraInfo": {"timestamp": %s}}}' % stamp
        with pytest.raises(FlightRecorderError, match=r"^probe/error.json: its timestamp is .*, so it is not read$"):
            failure_of(text, "probe/error.json")
