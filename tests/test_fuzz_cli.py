"""Seeded fuzzing of the headless CLI over hostile configs, argument lists and run-directory
files: every case ends within 10 s, with an exit code from the README's table, one line on
stderr at most for an error, never a traceback or "internal error", and never a control
character but newline in what it prints (escape sequences, lone surrogates and integers too
large for a float are thrown into every string and number a run dir holds; pathological
progress_regex values and host names no resolver takes into the config).

Most cases call `dflash_tui.cli.main` in this process (a worker thread, so a hang is seen and
not waited out); the run-directory cases go through real agents and real files (FIFOs, device
symlinks, directories, crafted records), and a sample of every kind is repeated as a real
`python -m dflash_tui` process. The probe-directory cases forge what a run writes into probe/:
Flight Recorder pickles (numbers no int64 holds or int() refuses, "²", names of deep lists and
escapes, opcodes the pickle machine fails on plain data with, cut and flipped bytes),
torchelastic error files, probe reports and stack dumps (line numbers and thread ids of any
length, escapes); their readers are also fuzzed straight, many more cases than --check could
run. DFLASH_FUZZ_SEED and DFLASH_FUZZ_SCALE (a multiplier of the
case counts) reproduce or widen a run; the counts are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dflash_tui import cli
from tests.test_cli_modes import write_config

pytestmark = pytest.mark.timeout(170)

SEED = int(os.environ.get("DFLASH_FUZZ_SEED", "20261201"))
SCALE = float(os.environ.get("DFLASH_FUZZ_SCALE", "1"))
CASES = {"config": int(250 * SCALE), "argv": int(100 * SCALE), "rundir": int(25 * SCALE), "probe": int(20 * SCALE)}
PARSER_CASES = int(300 * SCALE)    # of each probe-file kind, straight through its reader
REAL_PROCESS_SAMPLE = max(1, int(2 * SCALE))   # of each kind, also run as a real process
CASE_LIMIT_S = 10.0
EXIT_CODES = {0, 1, 2, 3, 4}       # the README table's, but 130 (only Ctrl-C gives it)
TAG = "--fuzz-tag"                 # the programs a case may launch are `true`, `false`, `sleep 0`

# -- values ---------------------------------------------------------------------------------

HOSTILE_STRINGS = ["", " ", "a\x00b", "line\nbreak", "\x1b[31mred", "$(touch /tmp/dflash-pwned)", "'; rm -rf /",
                   "../../etc", "~", "-oProxyCommand=sh", "é" * 3, "x" * 5000, "\ud7ff", "nan", "None"]
# What a terminal would act on: OSC 52 (clipboard), OSC 2 (title), CSI, a C1 CSI, BEL, CR, DEL,
# a lone surrogate, a line separator.
ESCAPES = ["\x1b]52;c;ZXZpbA==\x07", "\x1b]2;pwned\x07", "\x1b[2J", "\x9b1m", "\x07", "\rX", "\x7f", "\ud800",
           "\u2028", "\x1bP+q\x1b\\"]
HUGE_INT = "9" * 400     # no float holds it
REGEXES = ["(?P<step>a{1000000000})", "(?P<step>\\d+){1000}{1000}", "(" * 1000 + "(?P<step>a)" + ")" * 1000,
           "(?P<step>(a|aa)+)+$", "(?P<step>\\d+)(?=x)", "(a)\\1(?P<step>\\d)", "(?P<step>\\d++)",
           "(?P<step>\\d+", "(?P<step>\\d+)", "x" * 3000]
NUMBERS = ["nan", "inf", "-inf", "+inf", "0", "-0.0", "-1", "1e308", "1e-308", "5", "0.5", "600", "601",
           "1" * 5000, "9223372036854775808", "true", '"3"', "[1]", "{a = 1}", "0x10", "1_000"]
PATHS = ["/dev/zero", "/dev/null", "/proc/self/mem", "/etc", "/", "relative/x", "~/nope", "/x/../../etc",
         "/nonexistent/dflash", "FIFO", "DIR", "NOTUTF8", "GOOD"]


def toml_value(rng: random.Random, key: str, ctx: dict) -> str:
    numeric = key in ("stall_after_s", "compile_stall_after_s", "launch_deadline_s", "stop_grace_s",
                      "min_free_gb", "port")
    roll = rng.random()
    if numeric and roll < 0.8:
        return rng.choice(NUMBERS + ["22", str(ctx["closed_port"])] * (key == "port"))
    if key in ("ssh_config", "known_hosts", "identity_file") and roll < 0.85:
        p = rng.choice(PATHS)
        return json.dumps(ctx["files"].get(p, p))
    if key == "run_dir" and roll < 0.85:
        return json.dumps(rng.choice([str(ctx["tmp"] / "run"), "/x/../../etc", "/etc", "/", "/usr/local/../bin",
                                      "relative", str(ctx["tmp"] / "run") + "/", "//" + str(ctx["tmp"]),
                                      "/dev", "/proc/1", str(ctx["tmp"] / "a\nb"), "/dev/shm/../../etc"]))
    if key in ("command", "train_args") and roll < 0.85:
        items = rng.choice([["true", TAG], ["/bin/false", TAG], [], [""], ["a\x00b"], ["sleep", "0", TAG],
                            ["relative/prog", TAG], [1, 2], [["nested"]]])
        return json.dumps(items)
    if key == "host" and roll < 0.85:
        return json.dumps(rng.choice(["127.0.0.1", "-oProxyCommand=x", "h o", "", "a\x00", "127.0.0.1 ", "a..b",
                                      ".a", "a" * 64 + ".x", "ab." * 90, "é..x"]))
    if key == "progress_regex" and roll < 0.9:
        return json.dumps(rng.choice(REGEXES))
    if key == "metrics" and roll < 0.85:       # paths with escapes and C1 controls: refused, exit 2
        return json.dumps([rng.choice(["runs/", "~/tb", "trackio"]) + rng.choice(ESCAPES + ["", "\x85", "\x9b31m"])])
    if key == "container" and roll < 0.85:
        return json.dumps(rng.choice(["pct:200", "pct:", "docker:", "docker:-x", "lxc:1", "pct:1\n", "docker:a b"]))
    pool = [json.dumps(rng.choice(HOSTILE_STRINGS)), rng.choice(NUMBERS), "true", "[]", '["x", 1]', "{}",
            "1979-05-27T07:32:00Z", "[[1], [2]]", '"""multi\nline"""']
    return rng.choice(pool)


KEYS = ["host", "user", "port", "identity_file", "container", "run_dir", "python", "train_args", "command",
        "known_hosts", "ssh_config", "stall_after_s", "compile_stall_after_s", "launch_deadline_s",
        "stop_grace_s", "min_free_gb", "progress_regex", "metrics", "bogus_key"]
NAMES = ["p", "gpu1", "local", '"a b"', '"x\\ny"', '"-lead"', '"é"', '"a.b"', "_", '"' + "n" * 300 + '"']


def fuzz_config(rng: random.Random, ctx: dict) -> bytes:
    roll = rng.random()
    if roll < 0.06:
        return rng.choice([b"\xff\xfe\x00garbage", b"[profile.p\n", b"x = " + b"[" * 20000, b"",
                           b"[profile]\n", b"profile = 3\n", b"[[profile.p]]\n", b"x = " + b"1" * 5000])
    lines = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        name = rng.choice(NAMES)
        lines.append(f"[profile.{name}]")
        keys = rng.sample(KEYS, rng.randint(0, 6))
        if rng.random() < 0.7:      # mostly local profiles that would otherwise load
            keys = [k for k in keys if k not in ("host", "user", "port", "identity_file")]
            lines.append(f"run_dir = {json.dumps(str(ctx['tmp'] / 'run'))}")
            lines.append(f'command = ["true", "{TAG}"]')
            keys = [k for k in keys if k not in ("run_dir", "command")]
        for key in keys:
            lines.append(f"{key} = {toml_value(rng, key, ctx)}")
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def fuzz_argv(rng: random.Random, ctx: dict) -> list[str]:
    modes = ["--check", "--stop", "--list-profiles", "--launch", "--relaunch", "--version", "--help"]
    extra = ["--json", "--no-preflight", "--wait", "--profile", "-p", "--config", "--", "-", "", "--wait=nan",
             "--check=1", "-x", "--verbose", "é", "a\nb", "--prof", "--ch"]
    values = ["nan", "inf", "-1", "0", "1e309", "0.2", "", "1" * 400, "p", "nope", str(ctx["cfg"]), "/dev/zero",
              str(ctx["files"]["FIFO"]), str(ctx["tmp"])]
    argv = ["--config", str(ctx["cfg"])] if rng.random() < 0.8 else []
    for _ in range(rng.randint(0, 5)):
        argv.append(rng.choice(extra + values + modes))
    if not any(m in argv for m in modes):
        argv.append(rng.choice(modes[:3]))
    if argv[:2] != ["--config", str(ctx["cfg"])]:
        # Without our config the built-in profile is the bundled trainer: check it, never launch it.
        argv = ["--check" if a in ("--launch", "--relaunch") else a for a in argv]
    return argv


# -- run-directory files --------------------------------------------------------------------

def _launch_record(rng: random.Random) -> dict:
    pid = rng.choice([4194000 + rng.randint(0, 300), 0, -7, 2 ** 63, 2 ** 40])
    return {"v": 1, "run_id": "fuzz-run", "pid": pid, "pgid": pid, "start_ticks": rng.choice([None, 12345]),
            "start_time": time.time() - 30, "argv": ["sh", "./launch.sh"], "host": "h", "user": "u",
            "log_error": ""}


RECORDS = {
    "launch.json": _launch_record,
    "status.json": lambda rng: {"v": 1, "run_id": "fuzz-run", "pid": 4194301, "time": time.time(), "step": 3,
                                "phase": "training", "heartbeat_time": time.time(),
                                "threads": [{"name": "main", "role": "main", "device": "cpu"}]},
    "exit.json": lambda rng: {"v": 1, "run_id": "fuzz-run", "exit_code": 1, "signal": None, "end_time": time.time()},
    "stop.json": lambda rng: {"v": 1, "run_id": "fuzz-run", "pid": 4194301, "requested_time": time.time()},
    ".launch-claim": lambda rng: {"v": 1, "token": "t", "launcher": "x@y", "pid": 4194302, "machine": "m"},
}
BAD_VALUES = ["3", "abc", [], {}, None, True, 1e308, -1, 0, [[[[[[]]]]]], "x" * 10000, {"nested": [1, {"a": []}]},
              *ESCAPES, ["sh", "\x1b]2;t\x07"], int(HUGE_INT)]
# Every string field of every record a run dir holds: where an escape is thrown in.
STRING_FIELDS = {"launch.json": ["run_id", "host", "user", "python", "cwd", "log_error"],
                 "status.json": ["phase", "node", "last_error"], "stop.json": ["requested_by", "signal_sent"],
                 "exit.json": [], ".launch-claim": ["launcher", "machine"]}
RAW_BAD = ["NaN", "Infinity", "-Infinity", "1" * 5000, "[" * 5000 + "]" * 5000, '{"v": 1', "\xff\xfe", "",
           "null", "[]", '"a string"', '{"v": "1"}', '{"v": 2}', "{" * 40 + "}" * 40]


def write_run_file(rng: random.Random, run: Path, name: str) -> str:
    path = run / name
    how = rng.choice(["record", "record", "mutated", "mutated", "raw", "fifo", "dir", "devzero", "loop",
                      "huge", "binary"])
    if name in ("launch.sh", "train.log", "launch.out", "events.jsonl") and how in ("record", "mutated", "raw"):
        how = rng.choice(["text", "fifo", "dir", "devzero", "binary"])
    if how in ("record", "mutated"):
        rec = RECORDS[name](rng)
        if how == "mutated":
            for _ in range(rng.randint(1, 3)):
                rec[rng.choice(list(rec) + ["v", "extra"])] = rng.choice(BAD_VALUES)
        elif rng.random() < 0.6:    # a valid record whose strings carry escapes
            for key in STRING_FIELDS[name]:
                rec[key] = rng.choice(["", "x"]) + rng.choice(ESCAPES)
            for t in rec.get("threads", []):
                t.update(name="t" + rng.choice(ESCAPES), device=rng.choice(ESCAPES), error=rng.choice(ESCAPES))
        text = json.dumps(rec)
        if rng.random() < 0.3:      # numbers JSON can say but a record must not hold
            text = text.replace("12345", rng.choice(["NaN", "1" * 5000, "1e999", "-0"]), 1)
        path.write_text(text)
    elif how == "raw":
        path.write_bytes(rng.choice(RAW_BAD).encode("utf-8", "surrogateescape"))
    elif how == "text":
        e = rng.choice(ESCAPES)
        path.write_text(rng.choice(["#!/bin/sh\n# dflash-run-id: fuzz-run\n", "# dflash-run-id: \x1b[2J\n",
                                    "Traceback (most recent call last):\n  x\nValueError: y\n" * 50,
                                    '{"v":1,"kind":"step","step":"x"}\n' * 20,
                                    f"Traceback (most recent call last):\n  File \"{e}\", line 1\nValueError: {e}\n",
                                    f'step 1 loss {HUGE_INT}\n{{"step": 2, "loss": {HUGE_INT}}}\n{e}\n',
                                    f'{{"v":1,"kind":"step","time":1,"step":3,"loss":1,"g":{HUGE_INT}}}\n'
                                    f'{{"v":1,"kind":"error","time":1,"message":{json.dumps(e)}}}\n']),
                        errors="surrogateescape")
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "dir":
        path.mkdir()
    elif how == "devzero":
        path.symlink_to("/dev/zero")
    elif how == "loop":
        path.symlink_to(path)
    elif how == "huge":
        path.write_bytes(b"{" + b" " * (300 << 10) + b"}")
    else:
        path.write_bytes(bytes(rng.randrange(256) for _ in range(200)))
    return how


def _endless_sqlite(path: Path) -> None:
    """A store whose `metrics` and `runs` are recursive views that never end."""
    import sqlite3
    if path.exists():           # the same kind drawn twice for one run dir
        return
    con = sqlite3.connect(path)
    endless = ("WITH RECURSIVE c(id, run_name, step, metrics, run_uuid, start_time) AS (SELECT 1, 'r', 0, '{}', "
               "'r', 1 UNION ALL SELECT id + 1, run_name, step + 1, metrics, run_uuid, start_time + 1 FROM c) "
               "SELECT * FROM c")
    con.execute(f"CREATE VIEW metrics AS {endless}")
    con.execute(f"CREATE VIEW runs AS {endless}")
    con.commit()
    con.close()


# Metric files no writer writes (issue 49): a field over csv's limit, JSON deeper than the
# parser goes, steps and totals beyond 2^53, stores whose query never ends, escapes in names.
METRIC_FILES = {
    "csv_quote": lambda run: (run / "metrics.csv").write_bytes(b'step,loss\n1,0.5\n2,"' + (b"x" * 1023 + b"\n") * 300),
    "csv_line": lambda run: (run / "metrics.csv").write_bytes(b"step,loss\n" + b"y" * (1100 << 10)),
    "csv_escape": lambda run: (run / "metrics.csv").write_text(f"step,{ESCAPES[0]}\n{HUGE_INT},1\n1e999,2\n"),
    "hf_deep": lambda run: (run / "trainer_state.json").write_bytes(b"[" * 100_000 + b"]" * 100_000),
    "hf_huge": lambda run: (run / "trainer_state.json").write_text(
        f'{{"global_step": {HUGE_INT}, "max_steps": {2 ** 63}, "log_history": [{{"step": {2 ** 60}, "loss": 1}}]}}'),
    "hf_digits": lambda run: (run / "trainer_state.json").write_text('{"global_step": ' + "9" * 5000 + "}"),
    "trackio_endless": lambda run: ((run / "trackio").mkdir(exist_ok=True), _endless_sqlite(run / "trackio" / "p.db")),
    "mlflow_endless": lambda run: _endless_sqlite(run / "mlflow.db"),
}


def write_metric_file(rng: random.Random, run: Path) -> str:
    kind = rng.choice(sorted(METRIC_FILES))
    try:
        METRIC_FILES[kind](run)
    except FileExistsError:
        pass
    return f"metric:{kind}"


def fuzz_rundir(rng: random.Random, ctx: dict, i: int) -> tuple[list[str], str]:
    run = ctx["tmp"] / f"rd{i}"
    run.mkdir()
    made = []
    for name in rng.sample(["launch.json", "status.json", "exit.json", "stop.json", "launch.sh", "train.log",
                            "launch.out", "events.jsonl", ".launch-claim"], rng.randint(1, 5)):
        made.append(f"{name}:{write_run_file(rng, run, name)}")
    for _ in range(rng.randint(0, 2)):
        made.append(write_metric_file(rng, run))
    cfg_dir = ctx["tmp"] / f"rdc{i}"
    cfg_dir.mkdir()
    cfg = write_config(cfg_dir, p={"run_dir": str(run), "command": ["true", TAG], "min_free_gb": 0,
                                   "stop_grace_s": 0.5, "launch_deadline_s": 2, "metrics": ["trackio"]})
    mode = rng.choice(["--check", "--check", "--check", "--stop", "--launch", "--relaunch"])
    return ["--config", str(cfg), mode, *(["--json"] if rng.random() < 0.5 else [])], ",".join(made)


# -- probe directory files: Flight Recorder dumps, torchelastic error files, probe reports, stack dumps

# Numbers int() or float() refuse or no int64 holds, and digits that are not ASCII ones.
FR_NUMBERS = [0, 1, -1, 7, 2 ** 63 - 1, 2 ** 63, -(2 ** 63) - 1, 10 ** 400, 10 ** 5000 - 1, 1.5, float("nan"),
              float("inf"), True, None, "3", "-3", "9" * 5001, "²", "٣", "1e3", "0x10", " 5", "", "1_0"]
LINE_NUMBERS = ["7", "0", "123456789", "9" * 10, "9" * 5000, "²", "٣٣", "???", "-1", ""]


def fuzz_value(rng: random.Random, depth: int = 0):
    """A value where a dump holds a number or a name: a hostile number, an escape, or a container
    (a tuple, deep lists, a dict)."""
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(FR_NUMBERS)
    if roll < 0.75:
        return rng.choice(["", "x", "default_pg", "nccl:all_reduce"]) + rng.choice(ESCAPES + [""])
    if roll < 0.85 and depth < 3:
        return tuple(fuzz_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    if roll < 0.92:
        deep: object = "x"
        for _ in range(rng.choice([2, 40, 900])):
            deep = [deep]
        return deep
    return {rng.choice(["a", "b"]): rng.choice(FR_NUMBERS)} if depth < 3 else b"\x00bytes"


def _fr_entry(rng: random.Random, i: int) -> dict:
    entry = {"pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": i,
             "profiling_name": "nccl:all_reduce", "time_created_ns": 1_700_000_000_000_000_000 + i,
             "state": rng.choice(["scheduled", "started", "completed"]), "is_p2p": False}
    for key in rng.sample(list(entry), rng.randint(0, 3)):
        entry[key] = fuzz_value(rng)
    return entry


# Pickles of plain data that the pickle machine itself fails on, and ones no dump is.
FR_RAW = [b"\x80\x04}\x94}\x94(\x8c\x01a\x94K\x01ub.",           # BUILD on a dict
          b"\x80\x02}X\x01\x00\x00\x00xa.",                       # APPEND to a dict
          b"\x80\x04](K\x01\x90.",                                 # ADDITEMS to a list
          b"\x80\x04}(\x8c\x01x" + b"\x85" * 200 + b"K\x01u.",       # a dict key of tuples 200 deep
          b"\x80\x04\x8c\x05posix\x8c\x06system\x93.",                # a global
          b"\x80\x04)\x81.", b"\x80\x04.", b"\x80\x04(((.", b"", b"\x80", b"{", b'{"entries": [' + b"9" * 5000 + b"]}"]


def fuzz_fr_dump(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(FR_RAW)
    groups = rng.choice([1, 2, 40])
    status = {}
    for g in range(groups):
        key = rng.choice([str(g), g, fuzz_value(rng)]) if rng.random() < 0.2 else str(g)
        try:
            hash(key)
        except TypeError:
            key = str(g)
        status[key] = {"last_enqueued_collective": fuzz_value(rng) if rng.random() < 0.3 else 5,
                       "last_started_collective": -1, "last_completed_collective": 4}
    dump = {"version": "2.10",
            "pg_config": {str(g): {"name": str(g), "desc": fuzz_value(rng) if rng.random() < 0.3 else "default_pg"}
                          for g in range(groups)},
            "pg_status": status, "entries": [_fr_entry(rng, i) for i in range(rng.choice([0, 1, 5, 300]))]}
    try:
        data = pickle.dumps(dump, protocol=rng.randint(0, 5))
    except (TypeError, RecursionError, ValueError):     # an unhashable key the generator drew
        return rng.choice(FR_RAW)
    if roll > 0.85:                                      # bytes flipped or cut off
        data = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data[: rng.randint(1, len(data))])
    return data


def fuzz_error_json(rng: random.Random) -> bytes:
    stamp = rng.choice(['"1700000000"', "1700000000", '"' + "9" * 320 + '"', "9" * 320, '"²"', "1e999", "null",
                        "[]", '"' + rng.choice(ESCAPES) + '"'])
    message = json.dumps("ValueError: shard" + rng.choice(ESCAPES))
    return rng.choice([
        '{"message": {"message": %s, "extraInfo": {"py_callstack": %s, "timestamp": %s}}}'
        % (message, json.dumps('  File "t.py", line 3' + rng.choice(ESCAPES)), stamp),
        '{"message": %s}' % message, '{"message": 3}', "[" * 5000, "{"]).encode("utf-8", "surrogatepass")


def _frame(rng: random.Random) -> str:
    return (f"/srv/t{rng.choice(ESCAPES + [''])}.py:{rng.choice(LINE_NUMBERS)} "
            f"{rng.choice(['main', 'parse', 'f' + rng.choice(ESCAPES)])}")


def fuzz_probe_report(rng: random.Random, run_id: str, pid: int) -> bytes:
    threads = [{"name": "MainThread" + rng.choice(ESCAPES + [""]), "ident": rng.choice([1, 2 ** 64, -1]),
                "frames": [_frame(rng) for _ in range(rng.randint(0, 4))],
                "stack_since": rng.choice([None, time.time(), 1e308])} for _ in range(rng.randint(0, 3))]
    text = json.dumps({"v": 1, "run_id": run_id, "pid": pid, "time": time.time(), "threads": threads,
                       "start_ticks": 12345, "stack_signal": rng.choice([None, 60, 99])})
    if rng.random() < 0.2:     # numbers JSON can say but a report must not hold
        text = text.replace("12345", rng.choice(["9" * 5000, "1e999", "NaN", "-0"]), 1)
    return text.encode("utf-8", "surrogatepass")


def fuzz_stack_text(rng: random.Random) -> str:
    """faulthandler's or py-spy's form, with escapes, idents and line numbers of any length."""
    lines = []
    for _ in range(rng.randint(1, 3)):
        ident = "0x" + "f" * rng.choice([12, 16, 17, 5000])
        if rng.random() < 0.5:
            lines.append(f"Thread {ident} (most recent call first):")
            lines += [f'  File "/srv/x{rng.choice(ESCAPES)}.py", line {rng.choice(LINE_NUMBERS)} in '
                      f"f{rng.choice(ESCAPES)}" for _ in range(rng.randint(0, 4))]
        else:
            tid = rng.choice([ident, "812", "9" * rng.choice([10, 11, 5000])])
            lines.append(f'Thread {tid} (idle): "n{rng.choice(ESCAPES)}"')
            lines += [f"    f{rng.choice(ESCAPES)} (x{rng.choice(ESCAPES)}.py:{rng.choice(LINE_NUMBERS)})"
                      for _ in range(rng.randint(0, 4))]
    return "\n".join(lines) + rng.choice(["\n", "", "\r\n" + rng.choice(ESCAPES)])


def fuzz_probe_dir(rng: random.Random, ctx: dict, i: int) -> tuple[list[str], str]:
    """A run that ended (its wrapper gone), its probe directory full of forged files."""
    run = ctx["tmp"] / f"pd{i}"
    probe = run / "probe"
    probe.mkdir(parents=True)
    rec = RECORDS["launch.json"](rng)
    rec["pid"] = rec["pgid"] = 4194000 + i
    (run / "launch.json").write_text(json.dumps(rec))
    (run / "launch.sh").write_text("#!/bin/sh\n# dflash-run-id: fuzz-run\n")
    (run / "train.log").write_text("step 1 loss 2.0\n")
    (run / "exit.json").write_text(json.dumps(RECORDS["exit.json"](rng)))
    made = []
    for r in range(rng.randint(0, 2)):
        (probe / f"fr_rank_{r}").write_bytes(fuzz_fr_dump(rng))
        made.append(f"fr_rank_{r}")
    if rng.random() < 0.5:
        (probe / "error.json").write_bytes(fuzz_error_json(rng))
        made.append("error.json")
    if rng.random() < 0.4:
        local = probe / "torchelastic" / "run" / "attempt_0" / str(rng.randint(0, 3))
        local.mkdir(parents=True)
        (local / "error.json").write_bytes(fuzz_error_json(rng))
        made.append("torchelastic error.json")
    for pid in rng.sample(range(4194100, 4194200), rng.randint(0, 3)):
        (probe / f"{pid}.json").write_bytes(fuzz_probe_report(rng, "fuzz-run", pid))
        (probe / f"{pid}.stack").write_text(fuzz_stack_text(rng), errors="surrogatepass")
        made.append(f"{pid}.json")
    cfg_dir = ctx["tmp"] / f"pdc{i}"
    cfg_dir.mkdir()
    cfg = write_config(cfg_dir, p={"run_dir": str(run), "command": ["true", TAG], "min_free_gb": 0})
    return ["--config", str(cfg), "--check", *(["--json"] if rng.random() < 0.5 else [])], ",".join(made)


# -- running a case -------------------------------------------------------------------------

def run_in_process(argv: list[str]) -> tuple[int | None, str, str, float]:
    """(exit code or None if it hung, stdout, stderr, seconds) of cli.main(argv)."""
    out, err = io.StringIO(), io.StringIO()
    result: dict = {}

    def work():
        try:
            result["code"] = cli.main(argv)
        except SystemExit as exc:      # argparse's --help, --version and usage errors
            result["code"] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except BaseException as exc:   # what main let through: printed as the interpreter would
            import traceback
            err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc)))
            result["code"] = 1
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        worker.join(CASE_LIMIT_S)
    return result.get("code"), out.getvalue(), err.getvalue(), time.monotonic() - t0


def run_as_process(argv: list[str], env: dict) -> tuple[int | None, str, str, float]:
    t0 = time.monotonic()
    try:
        res = subprocess.run([sys.executable, "-m", "dflash_tui", *argv], capture_output=True, text=True,
                             env=env, timeout=CASE_LIMIT_S, errors="replace")
    except subprocess.TimeoutExpired as exc:
        return None, str(exc.stdout or ""), str(exc.stderr or ""), time.monotonic() - t0
    return res.returncode, res.stdout, res.stderr, time.monotonic() - t0


def judge(kind: str, case: str, code, out: str, err: str, took: float) -> str | None:
    """What is wrong with a case's outcome, or None."""
    if code is None:
        return f"hung past {CASE_LIMIT_S:.0f} s"
    if code not in EXIT_CODES:
        return f"exit code {code} is not in the README's table"
    if "Traceback" in err or "Traceback" in out:
        return "printed a traceback"
    if "internal error" in err or "internal error" in out:
        return "printed 'internal error'"
    if code != 0 and err.strip() and len(err.strip().splitlines()) > 1:
        return f"a {len(err.strip().splitlines())}-line error"
    shown = [c for c in out + err if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f
             or 0xd800 <= ord(c) <= 0xdfff or c in "\u2028\u2029"]
    if shown:
        return f"printed control characters {sorted(set(shown))!r}"
    return None


def test_fuzz_configs_arguments_and_run_dirs(tmp_path, monkeypatch, capsys):
    rng = random.Random(SEED)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))      # no ~/.ssh of this machine's user
    monkeypatch.delenv("DFLASH_TUI_DEBUG", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    files = {"FIFO": tmp_path / "fifo", "DIR": tmp_path / "adir", "NOTUTF8": tmp_path / "latin",
             "GOOD": tmp_path / "good_ssh_config"}
    os.mkfifo(files["FIFO"])
    files["DIR"].mkdir()
    files["NOTUTF8"].write_bytes(b"Host *\n  User caf\xe9\n")
    files["GOOD"].write_text("Host *\n  ConnectTimeout 2\n")
    ctx = {"tmp": tmp_path, "closed_port": closed_port, "files": {k: str(v) for k, v in files.items()},
           "cfg": write_config(tmp_path, p={"run_dir": str(tmp_path / "run"), "command": ["true", TAG],
                                            "min_free_gb": 0, "launch_deadline_s": 2})}
    env = {**os.environ}

    cases: list[tuple[str, str, list[str]]] = []
    for i in range(CASES["config"]):
        path = tmp_path / f"c{i}.toml"
        path.write_bytes(fuzz_config(rng, ctx))
        mode = rng.choice(["--check", "--check", "--list-profiles", "--stop"])
        cases.append(("config", path.read_bytes()[:300].decode("utf-8", "replace"), ["--config", str(path), mode]))
    for _ in range(CASES["argv"]):
        argv = fuzz_argv(rng, ctx)
        cases.append(("argv", repr(argv), argv))
    for i in range(CASES["rundir"]):
        argv, made = fuzz_rundir(rng, ctx, i)
        cases.append(("rundir", made, argv))
    for i in range(CASES["probe"]):
        argv, made = fuzz_probe_dir(rng, ctx, i)
        cases.append(("probe", made, argv))

    failures, tried, started = [], {"config": 0, "argv": 0, "rundir": 0, "probe": 0, "process": 0}, time.monotonic()
    spent = dict.fromkeys(tried, 0.0)
    sampled: dict[str, int] = {}
    for kind, desc, argv in cases:
        code, out, err, took = run_in_process(argv)
        tried[kind] += 1
        spent[kind] += took
        why = judge(kind, desc, code, out, err, took)
        if why:
            failures.append(f"{kind} {desc!r} {argv}: {why}\n    stderr: {err.strip()[:400]}")
        if sampled.get(kind, 0) < REAL_PROCESS_SAMPLE and rng.random() < 0.1:
            sampled[kind] = sampled.get(kind, 0) + 1
            code, out, err, took = run_as_process(argv, {**env, **{k: os.environ[k] for k in
                                                                   ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "HOME")}})
            tried["process"] += 1
            spent["process"] += took
            why = judge(kind, desc, code, out, err, took)
            if why:
                failures.append(f"process {kind} {desc!r} {argv}: {why}\n    stderr: {err.strip()[:400]}")
    seconds = time.monotonic() - started
    with capsys.disabled():
        print(f"\nfuzz seed {SEED}: {sum(tried.values())} cases ({tried}) in {seconds:.1f} s, "
              f"{len(failures)} failed; seconds per kind {({k: round(v, 1) for k, v in spent.items()})}")
    assert not failures, f"{len(failures)} of {sum(tried.values())} cases failed:\n" + "\n".join(failures[:25])


def bad_chars(text: str) -> list[str]:
    return sorted({repr(c) for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f
                   or 0xd800 <= ord(c) <= 0xdfff or c in "\u2028\u2029"})


def test_fuzz_probe_file_readers():
    """Each reader of a file the run writes into probe/, straight: a Flight Recorder dump is
    progress or one FlightRecorderError line naming the file; an error file a failure or one
    line; a probe report a report or one SchemaError line; a stack dump threads whose every
    name and frame is inert, and whose frames a classifier reads. Nothing else is raised, and
    each case ends in well under a second."""
    from dflash_tui.contract.rundir import ProbeReport, SchemaError, parse_probe
    from dflash_tui.remote.ops import StackDumpAnswer
    from dflash_tui.run.evidence.flight_recorder import FlightRecorderError, failure_of, load_dump, progress_of
    from dflash_tui.run.evidence.stack_dumps import stack_dump_of
    from dflash_tui.run.stacks.classify import classify, parse_frame

    rng = random.Random(SEED + 35)
    slow: list[str] = []

    def timed(what: str, fn):
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            if time.monotonic() - t0 > 2:
                slow.append(f"{what}: {time.monotonic() - t0:.1f} s")

    def one_line(exc: Exception, name: str) -> None:
        said = str(exc)
        assert said.startswith(name) and "\n" not in said and not bad_chars(said), said

    for i in range(PARSER_CASES):
        data = fuzz_fr_dump(rng)
        try:
            got, notes = timed(f"dump {i}", lambda: progress_of(load_dump(data, "probe/fr_rank_0"), rank=0, time=1.0,
                                                              what="probe/fr_rank_0"))
            for c in got:
                assert not bad_chars(c.process_group + c.pending_op), c
                json.dumps([c.last_enqueued_seq, c.pending_seq, c.pending_since])   # every number prints
        except FlightRecorderError as exc:
            one_line(exc, "probe/fr_rank_0")

        text = fuzz_error_json(rng).decode("utf-8", "replace")
        try:
            failure = failure_of(text, "probe/error.json", mtime=1.0)
            json.dumps(failure.time)
        except FlightRecorderError as exc:
            one_line(exc, "probe/error.json")

        report_text = fuzz_probe_report(rng, "r", 7).decode("utf-8", "surrogatepass")
        try:
            report = parse_probe(report_text, "probe/7.json")
            for t in report.threads:
                classify(t.frames)
                assert not bad_chars(t.name + "".join(t.frames)), t
        except SchemaError as exc:
            one_line(exc, "probe/7.json")

        stack = fuzz_stack_text(rng).encode("utf-8", "surrogatepass")
        for source in ("faulthandler", "py-spy"):
            dump = timed(f"stack {i}", lambda: stack_dump_of(ProbeReport(run_id="r", pid=7, time=1.0), StackDumpAnswer(
                "dumped", stack, 1.0), source))
            for t in dump.threads:
                assert not bad_chars(t.name + "".join(t.frames)), t
                for f in t.frames:
                    assert parse_frame(f).line is None or parse_frame(f).line < 10 ** 9, f
                classify(t.frames)
            assert not bad_chars(dump.problem), dump.problem
    assert not slow, slow


def test_fuzz_metric_file_readers(tmp_path):
    """Every metric file of METRIC_FILES, and bytes cut and flipped from them, through the real
    agent's metric_read and MetricFiles: points whose every step is at most 2^53, notes of one
    line without a control character, and each poll within the agent's budget (2 s of SQLite,
    1.5 s of search), never an exception."""
    import asyncio

    from dflash_tui.remote.agent import open_ops
    from dflash_tui.remote.local import LocalTarget
    from dflash_tui.run.evidence.metric_files.reader import MetricFiles
    from dflash_tui.run.evidence.metric_point import MAX_STEP

    rng = random.Random(SEED + 49)

    async def main():
        ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
        try:
            for i in range(int(12 * SCALE)):
                run = tmp_path / f"m{i}"
                run.mkdir()
                kinds = [write_metric_file(rng, run) for _ in range(rng.randint(1, 3))]
                for f in [p for p in run.rglob("*") if p.is_file() and p.suffix != ".db"][:1]:
                    if rng.random() < 0.5:        # cut, or a byte flipped
                        data = bytearray(f.read_bytes())
                        if data:
                            data[rng.randrange(len(data))] ^= 0xFF
                            f.write_bytes(bytes(data[: rng.randint(1, len(data))]))
                files = MetricFiles(("trackio",))
                for poll in range(2):
                    t0 = time.monotonic()
                    await files.poll(ops, str(run), time.time() + 60 * poll)
                    assert time.monotonic() - t0 < 6, (kinds, time.monotonic() - t0)
                    view = files.view()
                    assert all(0 <= p.step <= MAX_STEP for p in view.points), (kinds, view.points[:3])
                    p = view.progress
                    assert p is None or (p.step <= MAX_STEP and (p.total is None or p.total <= MAX_STEP)), p
                    for note in [s.note for s in view.sources] + list(view.notes):
                        assert "\n" not in note and not bad_chars(note), (kinds, note)
        finally:
            await ops.close()

    asyncio.run(main())


# -- a Slurm login host's answers -----------------------------------------------------------

SLURM_CASES = int(24 * SCALE)
JOB_IDS = ["42", "\u00b2", "\u0663", "\uff14\uff12", "1" * 25, "-1", "$(touch /tmp/dflash-pwned)", "4\x1b2", " 42",
           "42\n", "0x2a", ""]
STATES = ["RUNNING", "PENDING", "COMPLETED", "FAILED", "CANCELLED by 0", "", "RUNNING\x1b]2;t\x07", "\u00b2", "x" * 5000]
# What squeue, scontrol and scancel print (the scheduler's side), besides well-formed answers.
NOISE = [*ESCAPES, "", "slurm_load_jobs error: Invalid job id specified", "Socket timed out on send/recv operation",
         "x" * 100_000, "|||||||", "JobId=42 JobState=COMPLETED JobState=RUNNING", "\xff\xfe"]


def fuzz_slurm_login_host(rng: random.Random, ctx: dict, i: int) -> tuple[list[str], str, dict[str, str]]:
    """A Slurm profile's run dir with a slurm.json, and the scheduler's answers about its job:
    (argv, what was made, the scripts that stand for squeue, scontrol, scancel and sacct).
    After scancel, every command says the job is gone, so a stop ends within the case's limit."""
    run = ctx["tmp"] / f"slurm{i}" / rng.choice(["run", "a JobState=COMPLETED b", "r\x1b]2;t\x07", "r Command=x"])
    run.mkdir(parents=True)
    job_id = rng.choice(JOB_IDS)
    answer_id = job_id if rng.random() < 0.6 else "42"
    (run / "launch.sh").write_text("#!/bin/sh\n# dflash-run-id: fuzz-run\n", errors="surrogateescape")
    record = {"v": 1, "run_id": "fuzz-run", "job_id": job_id, "submit_time": time.time()}
    if rng.random() < 0.2:
        record[rng.choice(list(record))] = rng.choice(BAD_VALUES)
    (run / "slurm.json").write_text(json.dumps(record))
    if rng.random() < 0.5:
        (run / "launch.json").write_text(json.dumps(_launch_record(rng)))
    where = rng.choice([str(run), str(run) + "/", str(run.parent / "elsewhere"), rng.choice(ESCAPES)])
    state = rng.choice(STATES)
    squeue = rng.choice([f"{answer_id}|{state}|{rng.choice(NOISE)}|n{rng.choice(NOISE)}|{rng.choice(NOISE)}|x|1:00|0:01",
                         rng.choice(NOISE)])
    scontrol = rng.choice([f"JobId={answer_id} JobName=dflash-run JobState={state} Reason={rng.choice(NOISE)} "
                           f"Restarts={rng.choice(['0', HUGE_INT, '²'])} Partition={rng.choice(NOISE)} "
                           f"NodeList=n1 Command={where}/launch.sh WorkDir={where} StdErr={where}/slurm.out Power=",
                           rng.choice(NOISE)])
    files = ctx["tmp"] / f"slurm{i}" / "answers"
    files.mkdir()
    for name, text in (("squeue", squeue), ("scontrol", scontrol),
                       ("scancel", rng.choice(NOISE)), ("sacct", rng.choice(NOISE))):
        (files / name).write_bytes(text.encode("utf-8", "surrogatepass"))
    gone = {"squeue": "exit 0", "scontrol": "echo 'slurm_load_jobs error: Invalid job id specified'; exit 1",
            "sacct": "exit 1", "scancel": f'cat "{files}/scancel" >&2; touch "{files}/cancelled"; exit {rng.choice([0, 1])}'}
    scripts = {name: (gone[name] if name == "scancel" else
                      f'if [ -e "{files}/cancelled" ]; then {gone[name]}; fi\n'
                      f'cat "{files}/{name}"; exit {rng.choice([0, 0, 1])}')
               for name in gone}
    cfg_dir = ctx["tmp"] / f"slurm{i}" / "cfg"
    cfg_dir.mkdir()
    cfg = write_config(cfg_dir, p={"scheduler": "slurm", "run_dir": str(run), "command": ["true", TAG],
                                   "stop_grace_s": 0.5})
    mode = rng.choice(["--check", "--check", "--stop", "--stop"])
    made = f"job_id={job_id!r} state={state[:40]!r} where={where[-40:]!r} squeue={squeue[:80]!r} scontrol={scontrol[:120]!r}"
    return ["--config", str(cfg), mode, *(["--json"] if rng.random() < 0.5 else [])], made, scripts


def test_fuzz_a_slurm_login_hosts_answers_and_records(tmp_path, monkeypatch):
    """Hostile scheduler answers (escapes, a JobState spoofed by a path, a job id of digits
    that are not ASCII, 100 KB, noise) and slurm.json records, through --check and --stop:
    the same bar as every case above, from real scripts on PATH in place of the scheduler."""
    from tests.support.slurm import scheduler_shims

    rng = random.Random(SEED + 35)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DFLASH_TUI_DEBUG", raising=False)
    ctx = {"tmp": tmp_path}
    failures = []
    plain = os.environ["PATH"]
    for i in range(SLURM_CASES):
        argv, made, scripts = fuzz_slurm_login_host(rng, ctx, i)
        monkeypatch.setenv("PATH", scheduler_shims(tmp_path / f"slurm{i}" / "path", scripts=scripts))
        try:
            code, out, err, took = run_in_process(argv)
        finally:
            monkeypatch.setenv("PATH", plain)
        why = judge("slurm", made, code, out, err, took)
        if why:
            failures.append(f"slurm {made} {argv[2:]}: {why}\n    stderr: {err.strip()[:300]}\n    stdout: {out[-300:]}")
    assert not Path("/tmp/dflash-pwned").exists()
    assert not failures, f"{len(failures)} of {SLURM_CASES} cases failed:\n" + "\n".join(failures[:10])
