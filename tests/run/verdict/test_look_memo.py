"""A steady look's memos never change what it finds: the reports parsed, the stacks sampled and
the verdict with its threads, rank groups and stragglers are what the same looks give without
them (issue 37: the CPU of a look at many ranks).

The looks are a watch's: 64 ranks' reports parsed from their JSON after their last read
(contract/rundir.py parse_probe_after), most of them kept copies (run/evidence/probe_files.py),
some read again with nothing moved, one rank whose main thread moves to a queue and back, one
whose report goes stale, one whose thread is renamed, one that saves a checkpoint, half of them from an older probe (no since of its own: the tracker's
alone), a new watch's tracker midway, and at last a silence long enough for STALLED (the hang's
words and the STUCK rows). Each look is judged with the memos warm from the looks before and again cold.
"""

from __future__ import annotations

import dataclasses
import json

from dflash_tui.contract.rundir import ProbeReport, parse_probe, parse_probe_after
from dflash_tui.run.evidence.activity import Activity, ProgressTracker, WaitShare
from dflash_tui.run.evidence.probe_files import ProbeReports
from dflash_tui.run.evidence.memory import LookMemory
from dflash_tui.run.stacks.pauses import known_pause
from dflash_tui.run.stacks.kept import KeptByList
from dflash_tui.run.verdict import hang
from dflash_tui.run.verdict.health import evaluate
from tests.support import scenarios as R

RANKS, MOVER, STALE, RENAMED, SAVER = 64, 5, 9, 40, 33
SAVE_FRAMES = ["/srv/dflash/train.py:120 save_checkpoint", "/srv/dflash/train.py:80 step"]


def _text(p: ProbeReport) -> str:
    return json.dumps(dataclasses.asdict(p))


def _beat(p: ProbeReport, now: float, frames: list[str] | None = None) -> ProbeReport:
    """The rank's next report at `now`: a new beat, its main thread at `frames` if given."""
    threads = p.threads
    if frames is not None and list(frames) != threads[0].frames:
        threads = [dataclasses.replace(threads[0], frames=list(frames), stack_since=now, frames_since=now),
                   *threads[1:]]
    return dataclasses.replace(p, time=now, seq=p.seq + 1, cpu_s=p.cpu_s + 0.5, threads=threads)


def _looks():
    """(now, the look's reports as a watch holds them, the pids read this look) per look."""
    files = {p.pid: p for p in R.rank_probes(RANKS)}     # each rank's report as its file holds it
    for pid, p in files.items():   # half the ranks run an older probe: since when, the tracker alone knows
        if pid - 60_000 >= RANKS // 2:
            files[pid] = dataclasses.replace(p, threads=[dataclasses.replace(t, stack_since=None, frames_since=None)
                                                         for t in p.threads])
    held: dict[int, tuple] = {}                          # pid -> (the last read's parse, `before`)
    now = R.T0
    mover = files[60_000 + MOVER].threads[0].frames
    plan = [  # (seconds on, ranks read, the mover's main thread)
        (0, range(RANKS), None), (2, range(0, 16), None), (2, [MOVER, *range(16, 32)], R.QUEUE_FRAMES),
        (2, range(32, 48), None), (2, [MOVER, *range(48, 64)], mover),
        (2, range(0, 16), None), (300, range(16, 32), None)]
    for on, read, frames in plan:
        now += on
        for pid, p in files.items():
            if pid != 60_000 + STALE or now < R.T0 + 4:       # the stale rank's probe stops beating
                files[pid] = _beat(p, now - 0.5, frames if pid == 60_000 + MOVER else None)
        if now == R.T0 + 6:   # a rank saves a checkpoint (a known pause)
            saver = files[60_000 + SAVER]
            files[saver.pid] = dataclasses.replace(saver, threads=[
                dataclasses.replace(saver.threads[0], frames=list(SAVE_FRAMES)), saver.threads[1]])
        if now == R.T0 + 6:   # a thread renamed, its frames as they were: nothing else tells
            renamed = files[60_000 + RENAMED]
            files[renamed.pid] = dataclasses.replace(renamed, threads=[
                renamed.threads[0], dataclasses.replace(renamed.threads[1], name="pin_memory_thread")])
        reports, fresh = [], set()
        for pid, p in files.items():
            if pid - 60_000 in read or pid not in held:
                text = _text(p)
                got, after = parse_probe_after(text, f"probe/{pid}.json", held.get(pid, (None, None))[1])
                assert got == parse_probe(text, f"probe/{pid}.json")      # the memo's parse is the parse
                held[pid] = (got, after)
                reports.append(got)
                fresh.add(pid)
            else:   # a kept copy: the file beat since, so its time is the file's
                kept = held[pid][0]
                reports.append(dataclasses.replace(kept, time=p.time) if p.time > kept.time else kept)
        probes = ProbeReports(reports)
        probes.cached, probes.fresh = len(reports) - len(fresh), fresh
        yield now, probes


def _evidence(now: float, probes: ProbeReports, act: Activity):
    base = dataclasses.replace(R._running_evidence(), status=None)
    activity = dataclasses.replace(
        ranks_activity(), stack_since=act.stack_since, frames_since=act.frames_since,
        stack_moved_at=act.stack_moved_at, stack_moved_where=act.stack_moved_where)
    return dataclasses.replace(base, now=now, probes=probes, activity=activity)


def ranks_activity() -> Activity:
    """A healthy run's tracker facts (a step 0.4 s before T0, busy CPU, every rank's wait share)."""
    waits = {60_000 + r: WaitShare(samples=30, waiting=17, doing="all_reduce") for r in range(RANKS)}
    return Activity(samples=30, log_grew_at=R.T0 - 0.4, program_output=True, output_polls=30, step=1527,
                    step_at=R.T0 - 0.4, step_source="log", cpu_cores=float(RANKS), cpu_window_s=3.0,
                    procs=RANKS + 1, threads=2 * RANKS, waits=waits)


def _stacks(tracker: ProgressTracker, now: float) -> tuple:
    a = tracker.activity(now, None)
    return dict(a.stack_since), dict(a.frames_since), a.stack_moved_at, a.stack_moved_where


def test_a_look_with_its_memos_finds_what_a_look_without_them_finds():
    warm, cold = ProgressTracker(), ProgressTracker()
    memory = warm.looks       # the watch's: kept from look to look
    verdicts, moved, since, pausing = [], [], [], []
    for look, (now, probes) in enumerate(_looks()):
        if look == 5:   # a new watch of the same run: the tracker's since of every thread starts now
            warm, cold = ProgressTracker(), ProgressTracker()
            memory = warm.looks
        warm.sample_stacks(probes)
        cold._sampled.clear()          # every thread sampled as if seen for the first time this look
        cold.sample_stacks(probes)
        cold._since = None             # and its since made afresh
        assert _stacks(warm, now) == _stacks(cold, now)
        pause = known_pause(None, probes, kept=memory.pauses)
        assert pause == known_pause(None, probes)
        pausing.append(pause)
        ev = _evidence(now, probes, warm.activity(now, None))
        with_memo = evaluate(ev, memory=memory).to_dict()
        without = evaluate(ev, memory=LookMemory()).to_dict()
        assert with_memo == without
        verdicts.append(without["verdict"])
        moved.append([t for t in without["threads"] if t["pid"] == 60_000 + MOVER and t["name"] == "MainThread"][0])
        since.append([t for t in without["threads"] if t["pid"] == 60_000 + RANKS - 1 and t["name"] == "pin_memory"][0])
    # The looks went where the memos could go wrong: the mover's thread was judged where it
    # stood each look, and the run ended STALLED with the hang's words.
    assert [m["class"] for m in moved] == ["collective", "collective", "lock", "lock", "collective", "collective",
                                           "collective"]
    assert verdicts[0] == "RUNNING" and verdicts[-1] == "STALLED"
    assert since[4]["since"] < since[5]["since"]
    assert pausing == [""] * 3 + ["saving a checkpoint (save_checkpoint)"] * 4
    assert "pin_memory_thread" in {t["name"] for t in without["threads"] if t["pid"] == 60_000 + RENAMED}    # the new watch's since, from its own first look


def test_the_memos_hold_one_entry_a_process_and_forget_the_oldest():
    memory = LookMemory()
    probes = R.rank_probes(2)
    ev = dataclasses.replace(R._running_evidence(), status=None, probes=probes)
    hang.thread_views(ev, memory)
    hang.thread_views(dataclasses.replace(ev, probes=[dataclasses.replace(p, threads=list(p.threads)) for p in probes]),
                      memory)
    for kept in (memory.classified, memory.views):
        assert sorted(kept) == [p.pid for p in probes]     # a process's new list took its last one's place
    small = KeptByList(limit=3)
    for pid in range(5):
        small.put(pid, [], pid)
    assert list(small) == [2, 3, 4]
    threads = [*probes[0].threads]
    small.put(9, threads, "x")
    assert small.get(9, threads) == "x" and small.get(9, list(threads)) is None
    threads[0] = probes[1].threads[0]     # the same list, another thread in it: not the one kept
    assert small.get(9, threads) is None


def test_two_targets_whose_pids_coincide_keep_their_own_memos(monkeypatch):
    """Two containers (or hosts) each run ranks with pids 60000..: one watch's looks never evict
    the other's, so a steady look at either classifies nothing again."""
    here = R.rank_probes(8)
    there = [dataclasses.replace(p, threads=[dataclasses.replace(t) for t in p.threads]) for p in R.rank_probes(8)]
    assert [p.pid for p in here] == [p.pid for p in there]
    base = dataclasses.replace(R._running_evidence(), status=None)
    ev_here, ev_there = (dataclasses.replace(base, probes=ProbeReports(ps)) for ps in (here, there))
    mem_here, mem_there = LookMemory(), LookMemory()
    first_here = evaluate(ev_here, memory=mem_here).to_dict()
    evaluate(ev_there, memory=mem_there)
    classified = []
    real = hang.classify
    monkeypatch.setattr(hang, "classify", lambda *a: classified.append(a) or real(*a))
    assert evaluate(ev_here, memory=mem_here).to_dict() == first_here
    assert evaluate(ev_there, memory=mem_there)
    assert classified == []      # each target's threads were still its own watch's, worked out once
    evaluate(ev_here, memory=LookMemory())
    assert classified             # a fresh memory (a one-shot look) works every thread out
