"""Where a silent run is stuck, said by the real engine about real programs that are not ours
(tests/programs/), each watched past the limits it is judged by, on this machine and (the
collective and the deadlock) over the loopback sshd into the pct stand-in.

Every program here keeps its run probe report fresh (Python runs in it), so the stacks come
from the probe: a collective one rank never joins under torchrun with gloo, a lock-order
deadlock, a DataLoader worker stuck in a read, a healthy loop whose only progress is its stack,
and a real torch.compile that outlasts stall_after_s followed by a busy silence that is no
compile. stall_after_s is 4 s; compile_stall_after_s 90 s, longer than the compile takes here.
A C call that holds the GIL (the probe cannot write) needs the stack dumps of a stale report;
test_run_hang.py covers it with constructed evidence.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.run.verdict.checklist import CheckState, Verdict

from tests.run.verdict.test_verdicts_programs import program_profile

pytestmark = pytest.mark.timeout(400)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable
STALL_S, COMPILE_LIMIT_S = 4.0, 90.0
TORCHRUN = (PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")


def scenarios(tmp_path: Path, label: str) -> dict[str, tuple[str, ...]]:
    both = {"collective": (*TORCHRUN, str(PROGRAMS / "collective_skip.py")),
            "deadlock": (PY, str(PROGRAMS / "lock_deadlock.py"))}
    if label != "local":
        return both
    shard = tmp_path / "remote-shard"
    os.mkfifo(shard)
    return {**both,
            "loader": (PY, str(PROGRAMS / "loader_stuck.py"), str(shard)),
            "quiet": (PY, str(PROGRAMS / "quiet_loop.py")),
            "compile": (PY, str(PROGRAMS / "compile_then_spin.py"))}


@pytest.fixture
def where(place, sessions, monkeypatch):
    """(make_session(run_dir, command) -> Session, label), with this module's limits."""
    label, keys = place
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    limits = dict(stall_after_s=STALL_S, compile_stall_after_s=COMPILE_LIMIT_S)
    return (lambda run_dir, command: sessions(program_profile(run_dir, command, **keys, **limits))), label


Look = tuple[float, Verdict, str, dict]     # (uptime, verdict, summary, checks by id)


def _done(name: str, looks: list[Look]) -> bool:
    """Watched long enough: past its stall for a while, or (the healthy loop) for 3 stall limits."""
    if not looks:
        return False
    if name == "quiet":
        return looks[-1][0] > 3 * STALL_S + 2
    return len(looks) >= 4 and all(x[1] is Verdict.STALLED for x in looks[-4:])


async def test_where_silent_runs_are_stuck(where, tmp_path):
    make, label = where
    cmds = scenarios(tmp_path, label)
    sessions = {name: make(tmp_path / name, cmd) for name, cmd in cmds.items()}
    await asyncio.gather(*(s.launch(preflight=False) for s in sessions.values()))
    seen: dict[str, list[Look]] = {n: [] for n in sessions}
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300 and not all(_done(n, seen[n]) for n in sessions):
        looks = await asyncio.gather(*(s.check() for s in sessions.values()))
        for name, (ev, cl) in zip(sessions, looks):
            up = ev.now - ev.launch.start_time if ev.launch is not None else 0.0
            seen[name].append((up, cl.verdict, cl.summary, {c.id: c for c in cl.checks}))
        await asyncio.sleep(0.5)

    def stalled(name: str) -> list[Look]:
        return [x for x in seen[name] if x[1] is Verdict.STALLED]

    def last(name: str) -> Look:
        return seen[name][-1]

    # A collective rank 1 never joins: rank 0 waits in all_reduce; rank 1 is elsewhere, named.
    col = last("collective")
    assert col[1] is Verdict.STALLED, (label, [x[:3] for x in seen["collective"][-5:]])
    assert re.match(r"hung in a collective: rank 0 waits in all_reduce \(collective_skip\.py:\d+\) for \d+ s; "
                    r"rank 1 is not in it: checkpoint_to_slow_disk \(collective_skip\.py:\d+\)", col[2]), (label, col[2])
    assert "(limit stall_after_s 4 s)" in col[3]["progress"].cause, col[3]["progress"]
    assert col[3]["stacks"].state is CheckState.FAIL, col[3]["stacks"]

    # A lock-order deadlock: both threads named where they block; the main thread's join is not.
    dl = last("deadlock")
    assert dl[1] is Verdict.STALLED, (label, [x[:3] for x in seen["deadlock"][-5:]])
    m = re.match(r"deadlock: checkpointer is blocked in save_checkpoint \(lock_deadlock\.py:\d+\) \(a lock or "
                 r"another C call\); metrics-writer is blocked in write_metrics \(lock_deadlock\.py:\d+\) \(a lock "
                 r"or another C call\) for \d+ s, (\d+) % CPU", dl[2])
    # The deadlocked threads spend nothing; what the process spends is the probe's beat and its
    # stack samples, which a loaded machine rounds up to a percent or two.
    assert m and int(m.group(1)) <= 3, (label, dl[2])
    # Both went STALLED within a few seconds of stall_after_s after their last output, never later.
    for name in ("collective", "deadlock"):
        first = stalled(name)[0]
        silent = float(re.search(r"no output for (\d+) s", first[3]["progress"].cause).group(1))
        assert STALL_S <= silent <= STALL_S + 4, (label, name, first[3]["progress"].cause)
    if label != "local":
        return

    # A DataLoader worker stuck in a read: the main process waits; the worker is named.
    ld = last("loader")
    assert ld[1] is Verdict.STALLED, [x[:3] for x in seen["loader"][-5:]]
    assert re.match(r"waiting for DataLoader workers: worker pid \d+ in read_remote_shard \(loader_stuck\.py:\d+\) "
                    r"for \d+ s", ld[2]), ld[2]

    # A loop that prints nothing but whose stack moves: RUNNING past every stall limit, warned.
    quiet = seen["quiet"]
    late = [x for x in quiet if x[0] > STALL_S + 2]
    assert late and all(x[1] is Verdict.RUNNING for x in late), [x[:3] for x in quiet]
    progress = late[-1][3]["progress"]
    assert progress.state is CheckState.WARN and "but its stack moves (MainThread in " in progress.cause, progress
    assert progress.hint.startswith("its progress does not reach the log"), progress
    assert all(x[1] is not Verdict.STALLED for x in quiet), [x[:3] for x in quiet]

    # A real compile outlasting stall_after_s: never STALLED while it compiles, said "compiling";
    # the busy silence after it, in a loop of its own, STALLED after stall_after_s.
    comp = seen["compile"]
    compiling = [x for x in comp if x[2].startswith("compiling: ")]
    assert compiling and all(x[1] in (Verdict.STARTING, Verdict.RUNNING) for x in compiling), [x[:3] for x in comp]
    outlasted = [x for x in compiling if (m := re.search(r"^no output for (\d+) s", x[3]["progress"].cause))
                 and int(m.group(1)) >= STALL_S + 2]
    assert outlasted, [(x[:3], x[3]["progress"].cause) for x in compiling]
    assert stalled("compile"), [x[:3] for x in comp[-5:]]
    assert all(x[2].startswith("busy in its own code: MainThread in spin_summaries (compile_then_spin.py:")
               for x in stalled("compile")), [x[:3] for x in stalled("compile")]
    assert "(limit stall_after_s 4 s)" in stalled("compile")[-1][3]["progress"].cause


def test_one_shot_check_reads_stacks_from_two_looks(tmp_path, monkeypatch):
    """`dflash-tui --check` has no memory of earlier polls: its second look a second later (the
    probe's next reports) tells a loop that prints nothing but moves from a deadlock, and
    `--json` threads[] carries each thread's class, where and since."""
    import json

    from tests.test_cli_modes import cli, write_config

    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    common = {"stall_after_s": 2, "compile_stall_after_s": 600, "min_free_gb": 0, "python": PY}
    cfg = write_config(tmp_path, quiet={"run_dir": str(tmp_path / "quiet"), "command": [PY, str(PROGRAMS / "quiet_loop.py")],
                                        **common},
                       deadlock={"run_dir": str(tmp_path / "deadlock"),
                                 "command": [PY, str(PROGRAMS / "lock_deadlock.py")], **common})
    try:
        for name in ("quiet", "deadlock"):
            res = cli(tmp_path, "--config", str(cfg), "--profile", name, "--launch", "--no-preflight")
            assert res.returncode in (0, 4), res.stdout + res.stderr
        time.sleep(4)
        quiet = cli(tmp_path, "--config", str(cfg), "--profile", "quiet", "--check")
        assert quiet.returncode == 0 and "RUNNING: no output yet but its stack moves (MainThread in " in quiet.stdout, \
            quiet.stdout
        dl = json.loads(cli(tmp_path, "--config", str(cfg), "--profile", "deadlock", "--check", "--json").stdout)
        assert dl["verdict"] == "STALLED" and dl["summary"].startswith("deadlock: checkpointer is blocked in "
                                                                       "save_checkpoint (lock_deadlock.py:"), dl
        probed = {t["name"]: t for t in dl["threads"] if "pid" in t}
        assert probed["checkpointer"]["class"] == "blocked" and probed["checkpointer"]["state"] == "STUCK", probed
        assert re.fullmatch(r"write_metrics \(lock_deadlock\.py:\d+\)", probed["metrics-writer"]["where"]), probed
        assert probed["MainThread"]["class"] == "lock" and probed["MainThread"]["doing"] == "Thread.join", probed
        assert all(isinstance(t["since"], float) and t["source"] == "probe" for t in probed.values()), probed
        # The text says where the threads are itself: it points at no pane of the dashboard.
        text = cli(tmp_path, "--config", str(cfg), "--profile", "deadlock", "--check").stdout
        assert text.startswith("deadlock · local") and "STALLED: deadlock:" in text, text
        assert "  thread  pid " in text and "checkpointer: blocked" in text, text
        assert "pane" not in text.lower() and "see the threads" not in text.lower(), text
    finally:
        for name in ("quiet", "deadlock"):
            cli(tmp_path, "--config", str(cfg), "--profile", name, "--stop")


# Programs that hang for good in a C call (time.sleep) beside a library's idle helper threads.
HELPERS = {
    # tqdm drawn as Lightning draws ("Epoch 2: ...| 29/64"), its monitor thread beside: 30
    # steps 0.15 s apart in train(), then the hang at another line of train().
    "tqdm": (PY, str(PROGRAMS / "tqdm_then_hang.py"), "30", "0.15"),
    # rich's refresh thread redrawing the bar beside a loop that hangs after 20 steps.
    "rich": (PY, str(PROGRAMS / "rich_bar.py"), "100000", "0.1", "20"),
    # 1,000 ThreadPoolExecutor workers parked at their queue.
    "pool": (PY, str(PROGRAMS / "pool_then_hang.py"), "1000"),
}


async def test_idle_helper_threads_beside_a_hang_are_no_party_of_it(sessions, tmp_path, monkeypatch):
    """tqdm's monitor, rich's refresh thread and a thread pool's parked workers wait for the
    program: the hang is the program's thread blocked in a C call, never a "deadlock"; the
    helpers are named by their library, and not STUCK. How long it is blocked counts from when
    its stack stopped changing, not from when it entered its function."""
    for name in ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "FORCE_COLOR", "PYTHONUNBUFFERED"):
        monkeypatch.delenv(name, raising=False)
    made = {name: sessions(program_profile(tmp_path / name, cmd, stall_after_s=STALL_S,
                                           compile_stall_after_s=COMPILE_LIMIT_S))
            for name, cmd in HELPERS.items()}
    await asyncio.gather(*(s.launch(preflight=False) for s in made.values()))
    seen: dict[str, list[tuple[float, Verdict, str, dict, list]]] = {n: [] for n in made}
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120 and not all(
            len(v) >= 4 and all(x[1] is Verdict.STALLED for x in v[-4:]) for v in seen.values()):
        looks = await asyncio.gather(*(s.check() for s in made.values()))
        for name, (ev, cl) in zip(made, looks):
            up = ev.now - ev.launch.start_time if ev.launch is not None else 0.0
            seen[name].append((up, cl.verdict, cl.summary, {c.id: c for c in cl.checks}, cl.threads))
        await asyncio.sleep(0.5)

    main_fn = {"tqdm": r"train \(tqdm_then_hang\.py:\d+\)", "rich": r"<module> \(rich_bar\.py:\d+\)",
               "pool": r"wait_for_peer \(pool_then_hang\.py:\d+\)"}
    helper = {"tqdm": r"tqdm monitor \(tqdm/_monitor\.py:\d+\)", "rich": r"rich refresh \(rich/live\.py:\d+\)",
              "pool": r"thread pool worker \(concurrent/futures/thread\.py:\d+\)"}
    for name, looks in seen.items():
        up, verdict, summary, checks, threads = looks[-1]
        assert verdict is Verdict.STALLED, (name, [x[:3] for x in looks[-5:]])
        assert not any("deadlock" in x[2] for x in looks), (name, [x[2] for x in looks if "deadlock" in x[2]][:1])
        m = re.match(rf"blocked in a C call: MainThread in {main_fn[name]} for (\d+) s, \d+ % CPU; "
                     rf"no step, no log output for (\d+) s", summary)
        assert m, (name, summary)
        # Blocked since its last step, give or take a beat: not since train() began (4.5 s before).
        assert int(m.group(1)) <= int(m.group(2)) + 2, (name, summary)
        stuck = [t for t in threads if t.trouble]
        assert [t.name for t in stuck] == ["MainThread"], (name, [(t.name, t.state, t.why) for t in stuck][:3])
        helpers = [t for t in threads if t.name != "MainThread" and t.pid is not None]
        assert helpers and all(re.fullmatch(helper[name], t.where) for t in helpers), \
            (name, [(t.name, t.where, t.doing) for t in helpers][:3])
        assert not any("_bootstrap" in t.doing or "threading.py" in t.where for t in threads), name
    # Lightning's step counts within its epoch: said with it while the loop ran.
    running = [x[2] for x in seen["tqdm"] if x[1] is Verdict.RUNNING]
    assert any(re.match(r"epoch 2, \d+/64, loss ", s) for s in running), running[-3:]
