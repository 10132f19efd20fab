"""The run-directory contract validates every field where a record is read.

A record a program wrote with a wrong type, a non-finite or absurd number, or JSON nested too
deep is a SchemaError that names the file, the field and the value; never another exception.
"""

from __future__ import annotations

import json
import random

import pytest

from dflash_tui.contract.rundir import (SchemaError, make_event, parse_events, parse_exit, parse_launch,
                                        parse_status, parse_stop)

LAUNCH = {"v": 1, "run_id": "r1", "pid": 42, "pgid": 42, "start_ticks": 100, "start_time": 1.0e9,
          "argv": ["python3", "train.py"], "host": "h", "user": "u", "python": "", "cwd": "/tmp", "log_error": ""}
STATUS = {"v": 1, "run_id": "r1", "pid": 42, "time": 1.0e9, "phase": "training", "step": 3,
          "threads": [{"name": "main", "role": "main", "device": "cpu"}]}


def _with(base, **changes):
    d = json.loads(json.dumps(base))
    d.update(changes)
    return json.dumps(d)


def test_good_records_parse_with_their_types():
    rec = parse_launch(json.dumps(LAUNCH))
    assert rec.pid == 42 and rec.argv == ["python3", "train.py"] and isinstance(rec.start_time, float)
    st = parse_status(json.dumps(STATUS))
    assert st.step == 3 and st.threads[0].name == "main"
    assert parse_exit('{"v":1,"run_id":"r1","exit_code":null,"signal":15,"end_time":5}').signal == 15
    assert parse_stop('{"v":1,"run_id":"r1","pid":7,"requested_time":3}').pid == 7


@pytest.mark.parametrize("parse,base,field,value,words", [
    (parse_launch, LAUNCH, "pid", "abc", "launch.json: field 'pid' is 'abc', expected an integer"),
    (parse_launch, LAUNCH, "pid", 0, "launch.json: field 'pid' is 0, expected at least 1"),
    (parse_launch, LAUNCH, "pid", -5, "expected at least 1"),
    (parse_launch, LAUNCH, "pid", True, "expected an integer"),
    (parse_launch, LAUNCH, "log_error", ["a"], "launch.json: field 'log_error' is ['a'], expected a string"),
    (parse_launch, LAUNCH, "argv", "python3 train.py", "field 'argv'"),
    (parse_launch, LAUNCH, "argv", ["ok", 3], "field 'argv'[1] is 3, expected a string"),
    (parse_launch, LAUNCH, "start_ticks", 2 ** 70, "field 'start_ticks'"),
    (parse_status, STATUS, "step", "3", "status.json: field 'step' is '3', expected an integer"),
    (parse_status, STATUS, "loss", "nan", "field 'loss'"),
    (parse_status, STATUS, "threads", {"name": "x"}, "field 'threads'"),
    (parse_status, STATUS, "threads", [{"name": 1, "role": "r", "device": "d"}], "field 'name' is 1"),
])
def test_a_wrong_type_names_the_file_field_and_value(parse, base, field, value, words):
    with pytest.raises(SchemaError) as err:
        parse(_with(base, **{field: value}))
    assert words in str(err.value)


@pytest.mark.parametrize("text,words", [
    ("[" * 100000 + "]" * 100000, "nested more than"),
    ('{"v":1,"run_id":"r","pid":' + "9" * 5000 + ',"pgid":1}', "cannot be read"),
    ('{"v":1,"run_id":"r","exit_code":0,"signal":null,"end_time":Infinity}', "finite"),
    ('{"v":1,"run_id":"r","exit_code":0,"signal":null,"end_time":1e999}', "finite"),
    ('{"v":true,"run_id":"r"}', "schema version"),
    ("", "not valid JSON"),
    ("\x00\x01", "not valid JSON"),
])
def test_hostile_json_is_a_schema_error(text, words):
    with pytest.raises(SchemaError) as err:
        parse_exit(text)
    assert words in str(err.value)


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _nested(rng: random.Random, depth: int):
    """A JSON value `depth` deep, wide at random, its strings full of brackets and quotes."""
    if depth == 0:
        return rng.choice(['a[b{', '"]}', "x\\[", 1, 2.5, None])
    inner = [_nested(rng, rng.randrange(depth)) for _ in range(rng.randrange(3))] + [_nested(rng, depth - 1)]
    rng.shuffle(inner)
    return inner if rng.random() < 0.5 else {f"k{i}[": v for i, v in enumerate(inner)}


def test_the_nesting_limit_is_the_depth_of_lists_and_objects_not_of_brackets_in_strings():
    rng = random.Random(7)
    for _ in range(400):
        record = {"v": 1, "run_id": "r", "exit_code": 0, "signal": None, "end_time": 1.0,
                  "extra": _nested(rng, rng.randrange(20, 40))}
        deep = _depth(record) > 32
        try:
            parse_exit(json.dumps(record))
            assert not deep, _depth(record)
        except SchemaError as err:
            assert deep and "nested more than 32 levels" in str(err), (_depth(record), err)


def test_a_missing_required_field_is_named():
    d = dict(LAUNCH)
    del d["pid"]
    with pytest.raises(SchemaError, match="launch.json: field 'pid' is missing"):
        parse_launch(json.dumps(d))


def test_events_are_typed_and_bad_lines_are_counted_not_raised():
    good = json.dumps(make_event("step", 1.0, step=3, loss=2.5, accuracy=0.4, tokens_per_s=10.0))
    lines = [good,
             '{"v":1,"kind":"step","time":1,"step":"3"}',      # wrong type: skipped
             '{"v":1,"kind":"eval","time":1,"step":3,"tau":2}',  # int tau is a number
             '{"v":1,"kind":"custom","time":2,"anything":[1]}',  # unknown kinds pass through
             '{"v":1,"kind":"step","time":1,"st',                # half-written last line
             "[" * 50000]
    batch = parse_events(lines)
    assert batch.skipped == 3
    assert [e["kind"] for e in batch.events] == ["step", "eval", "custom"]
    assert batch.events[1]["tau"] == 2.0 and isinstance(batch.events[1]["tau"], float)


def test_make_event_refuses_what_a_reader_would_refuse():
    with pytest.raises(SchemaError, match="step event: field 'loss'"):
        make_event("step", 1.0, step=1, loss="low")


def test_each_rank_has_its_own_files_and_rank_0_keeps_the_plain_names():
    from dflash_tui.contract.rundir import PER_RANK_FILES, parse_rank_file, rank_file

    assert [rank_file(n, 0) for n in PER_RANK_FILES] == ["status.json", "events.jsonl", "train.log"]
    assert [rank_file(n, 3) for n in PER_RANK_FILES] == ["status.rank3.json", "events.rank3.jsonl", "train.rank3.log"]
    for name in PER_RANK_FILES:
        for rank in (0, 1, 12):
            assert parse_rank_file(rank_file(name, rank)) == (name, rank)
    for other in ("launch.json", "status.rank.json", "status.rank01.json", "status.rank-1.json",
                  "status.rank١.json", "events.rank2.json", "status.json.tmp"):
        assert parse_rank_file(other) is None, other
    with pytest.raises(ValueError, match="not a per-rank file"):
        rank_file("launch.json", 1)
    with pytest.raises(ValueError, match="rank must be an integer >= 0"):
        rank_file("status.json", -1)


def test_status_and_events_carry_rank_and_node_validated():
    st = parse_status(_with(STATUS, rank=1, world_size=2, node="gpu2"))
    assert (st.rank, st.world_size, st.node) == (1, 2, "gpu2")
    old = parse_status(json.dumps(STATUS))            # a writer of one process: rank 0 of 1
    assert (old.rank, old.world_size, old.node) == (0, 1, "")
    with pytest.raises(SchemaError, match="field 'rank' is 2, expected less than world_size 2"):
        parse_status(_with(STATUS, rank=2, world_size=2))
    with pytest.raises(SchemaError, match="field 'world_size' is 0, expected at least 1"):
        parse_status(_with(STATUS, world_size=0))
    with pytest.raises(SchemaError, match="field 'node' is 5, expected a string"):
        parse_status(_with(STATUS, node=5))
    ev = parse_events([json.dumps(make_event("heartbeat", 1.0, rank=1, node="gpu2", phase="training")),
                       '{"v":1,"kind":"heartbeat","time":1}',
                       '{"v":1,"kind":"heartbeat","time":1,"rank":-1}',
                       '{"v":1,"kind":"custom","time":1,"node":["x"]}'])
    assert ev.skipped == 2
    assert [(e["rank"], e["node"]) for e in ev.events] == [(1, "gpu2"), (0, "")]
    with pytest.raises(SchemaError, match="step event: field 'rank'"):
        make_event("step", 1.0, step=1, rank="one")


@pytest.mark.parametrize("escape", ["\x1b]2;pwned\x07", "\x9b31m", "\u2028", "\x7f", "\r", "\t"])
def test_text_that_decodes_to_a_control_is_made_inert_and_the_newline_a_file_ends_with_is_not_one(escape):
    # Raw, the C0 controls are refused inside a JSON string, so a record's trailing newline
    # (whitespace between tokens) is no reason to walk the record; escaped, each is made inert.
    rec = parse_launch(json.dumps({**LAUNCH, "host": f"h{escape}x"}, ensure_ascii=False) + "\n")
    assert rec.host.startswith("h\\") and rec.host.endswith("x") and escape not in rec.host
    raw_tab = json.dumps({**LAUNCH, "host": "h"}).replace('"h"', '"h\tx"')
    with pytest.raises(SchemaError, match="not valid JSON"):
        parse_launch(raw_tab)
    assert parse_launch(json.dumps(LAUNCH) + "\n\r\n").host == "h"


def test_a_report_read_again_keeps_the_parse_of_its_threads_that_did_not_move():
    """parse_probe_after: the answer of parse_probe, its unmoved threads' parse kept, its
    errors those of parse_probe."""
    from dflash_tui.contract.rundir import ProbeReport, ProbeThread, parse_probe, parse_probe_after, to_json

    def report(t: float, main_line: int, helper=None) -> str:
        threads = [ProbeThread(name="MainThread", ident=1, frames=[f"/w/train.py:{main_line} step"], stack_since=t),
                   helper or ProbeThread(name="pin_memory", ident=2, daemon=True, frames=["/w/data.py:9 get"])]
        return to_json(ProbeReport(run_id="r", pid=7, time=t, rank=3, threads=threads))

    first, after = parse_probe_after(report(100.0, 40), "probe/7.json", None)
    assert first == parse_probe(report(100.0, 40))
    second, after2 = parse_probe_after(report(101.0, 41), "probe/7.json", after)
    assert second == parse_probe(report(101.0, 41)) and second.time == 101.0
    assert second.threads[1] is first.threads[1] and second.threads[0] is not first.threads[0]
    # a thread that turned bad is named as parse_probe names it
    bad = report(102.0, 41).replace('"/w/data.py:9 get"', "17")
    with pytest.raises(SchemaError) as direct:
        parse_probe(bad, "probe/7.json")
    with pytest.raises(SchemaError) as after:
        parse_probe_after(bad, "probe/7.json", after2)
    assert str(after.value) == str(direct.value) and "threads" in str(after.value)
    # so is a thread that moved to a frame of an overlong line number
    long = report(102.0, 12345678901)
    with pytest.raises(SchemaError) as direct:
        parse_probe(long, "probe/7.json")
    with pytest.raises(SchemaError) as after:
        parse_probe_after(long, "probe/7.json", after2)
    assert str(after.value) == str(direct.value) and "11 digits" in str(after.value)


def test_a_report_whose_beat_alone_moved_is_its_last_parse_with_the_new_beat():
    """parse_probe_after: when only the beat's fields (time, seq, CPU, step) moved, the report
    is the last one with them replaced (its other fields not checked again), the same answer
    as parse_probe; any other field that moved, or a beat field of the wrong type, is parsed
    and named as parse_probe does."""
    from dflash_tui.contract.rundir import ProbeReport, ProbeThread, parse_probe, parse_probe_after, to_json

    def report(t: float, seq: int, **kw) -> str:
        threads = [ProbeThread(name="MainThread", ident=1, frames=["/w/train.py:40 step"])]
        return to_json(ProbeReport(run_id="r", pid=7, time=t, seq=seq, cpu_s=t / 10, rank=3,
                                   argv=["python", "train.py"], threads=threads, **kw))

    first, after = parse_probe_after(report(100.0, 1), "probe/7.json", None)
    second, after = parse_probe_after(report(101.0, 2, step=5, step_time=0.5), "probe/7.json", after)
    assert second == parse_probe(report(101.0, 2, step=5, step_time=0.5))
    assert (second.time, second.seq, second.cpu_s, second.step) == (101.0, 2, 10.1, 5)
    assert second.argv is first.argv and second.threads[0] is first.threads[0]
    assert first.time == 100.0 and first.seq == 1   # the last report itself is left as it was
    # a field other than the beat moved: parsed again
    third, after = parse_probe_after(report(102.0, 3, step=6, errors=2), "probe/7.json", after)
    assert third == parse_probe(report(102.0, 3, step=6, errors=2)) and third.errors == 2
    # a beat field of the wrong type, or missing, is named as parse_probe names it
    for bad in (report(103.0, 4, step=6, errors=2).replace('"seq":4', '"seq":"x"'),
                report(103.0, 4, step=6, errors=2).replace('"time":103.0,', '')):
        assert bad != report(103.0, 4, step=6, errors=2)
        with pytest.raises(SchemaError) as direct:
            parse_probe(bad, "probe/7.json")
        with pytest.raises(SchemaError) as got:
            parse_probe_after(bad, "probe/7.json", after)
        assert str(got.value) == str(direct.value)
