"""The verdicts on the ground floor (src/dflash_tui/verdicts.py): what each verdict is, said once,
and nowhere else a verdict's word spelled out by hand."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import dflash_tui
from dflash_tui.recording.notify.settings import NOTIFY_EVENTS
from dflash_tui.recording.recovery.settings import DEFAULT_ON, RESTARTABLE
from dflash_tui.run.verdict import checklist
from dflash_tui.verdicts import TargetState, Verdict, state_named, verdict_named

SRC = Path(dflash_tui.__file__).parent.parent
VERDICT_MODULE = SRC / "dflash_tui" / "verdicts.py"

# Where a verdict's spelling legitimately means something else, and why: (file under src/, the
# Enum class whose member values may share a spelling).
EXEMPT_ENUMS = {
    # Slurm's own job states (squeue %T, scontrol, sacct) as Slurm spells them: RUNNING,
    # STOPPED, CANCELLED, TIMEOUT and PREEMPTED are Slurm's states, not verdicts; the verdict is
    # backends/slurm/verdict.py's to draw from them.
    ("dflash_tui/backends/slurm/job.py", "JobState"),
}


def spelled_verdicts(source: str, path: str = "<text>") -> list[str]:
    """"file:line 'WORD'" for every string constant of `source` equal to a verdict's word, outside
    the member values of its exempt Enum classes."""
    words = {v.value for v in Verdict}
    tree = ast.parse(source)
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and (path, node.name) in EXEMPT_ENUMS:
            exempt |= {id(stmt.value) for stmt in node.body if isinstance(stmt, ast.Assign)}
    return [f"{path}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words
            and id(node) not in exempt]


def test_the_scan_finds_a_spelled_verdict_and_keeps_an_exemption_to_its_class():
    assert spelled_verdicts('if state == "STALLED":\n    pass\n') == ["<text>:1 'STALLED'"]
    assert spelled_verdicts('ENDED = ("FINISHED", "NODE FAIL")\nx = "RUNNING fast"\n') == [
        "<text>:1 'FINISHED'", "<text>:1 'NODE FAIL'"]
    exempt_path = "dflash_tui/backends/slurm/job.py"
    enum = 'class JobState(StrEnum):\n    RUNNING = "RUNNING"\n'
    assert spelled_verdicts(enum, exempt_path) == []
    # The exemption is the class's member values only: the same file's other spellings count.
    assert spelled_verdicts(enum + 'OTHER = "RUNNING"\n', exempt_path) == [f"{exempt_path}:3 'RUNNING'"]
    assert spelled_verdicts(enum, "dflash_tui/elsewhere.py") == ["dflash_tui/elsewhere.py:2 'RUNNING'"]


def test_no_verdict_is_spelled_as_a_string_outside_the_verdict_module():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == VERDICT_MODULE:
            continue
        found += spelled_verdicts(path.read_text(), path.relative_to(SRC).as_posix())
    assert found == [], ("read the verdict's type (dflash_tui/verdicts.py: a member, a property), "
                         f"not its word: {found[:10]}")


def test_each_exempt_class_exists_and_is_an_enum():
    for path, name in EXEMPT_ENUMS:
        tree = ast.parse((SRC / path).read_text())
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
        assert cls is not None and any("Enum" in ast.unparse(b) for b in cls.bases), (path, name)


def test_the_engine_names_the_same_type():
    assert checklist.Verdict is Verdict


def test_the_published_words():
    # `--check --json` "verdict", the store's states, `[recover] on`, `[notify] on`: contracts.
    assert [v.value for v in Verdict] == [
        "NEVER STARTED", "LOG MISSING", "FINISHED", "CRASHED", "KILLED", "STALLED", "RUNNING", "STARTING",
        "NO RUN", "NOT LAUNCHED", "GPU LOST", "STOPPED", "STOPPING", "QUEUED", "BLOCKED", "PREEMPTED",
        "TIMEOUT", "OUT OF MEMORY", "NODE FAIL", "CANCELLED", "DIVERGED"]
    assert [s.value for s in TargetState] == ["UNREACHABLE", "CONNECTING", "CONFIG ERROR"]
    assert RESTARTABLE == ("NEVER STARTED", "LOG MISSING", "CRASHED", "KILLED", "STALLED", "NOT LAUNCHED",
                           "GPU LOST", "BLOCKED", "PREEMPTED", "TIMEOUT", "OUT OF MEMORY", "NODE FAIL", "CANCELLED",
                           "DIVERGED")
    assert set(DEFAULT_ON) == {"CRASHED", "STALLED", "KILLED", "PREEMPTED", "NODE FAIL", "TIMEOUT"}
    assert NOTIFY_EVENTS == ("failing", "FINISHED", "STOPPED", "UNREACHABLE", "recovered", "warning")
    assert all(type(w) is str for w in (*RESTARTABLE, *NOTIFY_EVENTS))   # a message's repr() is the word's
    assert json.dumps([Verdict.NO_RUN, TargetState.CONFIG_ERROR]) == '["NO RUN", "CONFIG ERROR"]'
    assert f"{Verdict.GPU_LOST}|{Verdict.GPU_LOST:<10}|" == "GPU LOST|GPU LOST  |"


def _with(prop: str) -> set[str]:
    return {v.value for v in Verdict if getattr(v, prop)}


def test_each_class_of_verdicts():
    assert _with("healthy") == {"RUNNING", "FINISHED", "STOPPED"}
    assert _with("failing") == set(RESTARTABLE) == _with("restartable")
    assert _with("ended") == {"FINISHED", "STOPPED", "CRASHED", "KILLED", "NEVER STARTED", "NOT LAUNCHED",
                              "PREEMPTED", "TIMEOUT", "OUT OF MEMORY", "NODE FAIL", "CANCELLED"}
    # LOG MISSING stands until a new launch, but its process may live on: final, not ended.
    assert _with("final") == _with("ended") | {"LOG MISSING"}
    # Nothing happens on the target without a launch: final, or nothing launched at all.
    assert _with("settled") == _with("final") | {"NO RUN"}
    assert _with("ended_well") == {"FINISHED", "STOPPED"}
    assert _with("alive") == {"RUNNING", "STARTING", "STALLED", "GPU LOST", "DIVERGED"}
    assert _with("stuck") == {"STALLED", "GPU LOST"}
    assert _with("queued") == {"QUEUED", "BLOCKED"}
    assert _with("program_failed") == {"CRASHED", "KILLED"}
    assert _with("names_a_node") == {"NODE FAIL"}
    assert _with("restarted_by_default") == set(DEFAULT_ON)


def test_the_classes_agree_with_each_other():
    for v in Verdict:
        assert not (v.healthy and v.failing), v
        assert not (v.alive and v.final), v
        assert not v.stuck or (v.alive and v.failing), v
        assert not v.restarted_by_default or v.restartable, v
        assert not v.program_failed or v.ended, v


@pytest.mark.parametrize("word, state", [("RUNNING", Verdict.RUNNING), ("NO RUN", Verdict.NO_RUN),
                                         ("UNREACHABLE", TargetState.UNREACHABLE), ("running", None),
                                         ("", None), (b"RUNNING", None), (None, None), (3, None)])
def test_a_written_word_is_read_to_its_state_once(word, state):
    assert state_named(word) is state
    assert verdict_named(word) is (state if isinstance(state, Verdict) else None)
    assert len({s.value for s in (*Verdict, *TargetState)}) == len(Verdict) + len(TargetState)
