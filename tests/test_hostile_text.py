"""What a run writes cannot drive the terminal, and no number or text it writes crashes a view.

A real program (run by the real wrapper, under the real run probe) writes escape sequences into
every string field it can reach: its thread names (status.json and the probe's report), a frame's
file name, status.json's device, role, error and node, events.jsonl's keys and messages, its log
lines and the traceback it dies with; a forged stop.json names a requester with an OSC 52, and
launch.json's host and user get OSC 2 and a lone surrogate. It also writes integers too large for
a float into a log line, a step event and the previous run's events (history/). Then text
`--check`, `--check --json` and `--check --all` (real processes), and the dashboard (Textual
Pilot, every tab), must show all of it with no byte below 0x20 but newline, no DEL and no C1
control, `--json` must stay valid JSON, and nothing may crash.

The escapes are drawn from a seeded generator (DFLASH_FUZZ_SEED).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.sources.watch_source import WatchSource
from dflash_tui.watch import open_watch
from tests.support.runs import alive
from tests.test_cli_modes import cli, local, write_config
from tests.ui.test_app import until

pytestmark = [pytest.mark.timeout(240)]

SEED = int(os.environ.get("DFLASH_FUZZ_SEED", "20261201"))

# What an attacker writes: OSC 52 (clipboard), OSC 2 (title), CSI, a one-byte C1 CSI, BEL, CR,
# backspace, DEL, a lone surrogate, a line separator, NUL.
ESCAPES = ["\x1b]52;c;ZXZpbA==\x07", "\x1b]2;pwned\x07", "\x1b[2J\x1b[H", "\x9b31m", "\x07", "\rOVER",
           "\x08\x08", "\x7f", "\ud800", "\u2028", "\x00", "\x1bP+q\x1b\\", "\x1b]8;;http://x\x1b\\"]
HUGE = "9" * 400        # an integer no float holds


def escapes(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(ESCAPES) + rng.choice(["", "x", "é"]) for _ in range(n)]


# The hostile program: runs until RUN_DIR/die appears, then dies with a traceback whose
# exception line carries an escape.
PROGRAM = r"""
import json, os, sys, threading, time
E = json.loads(sys.argv[1])
run, rid = os.environ["DFLASH_RUN_DIR"], os.environ["DFLASH_RUN_ID"]
HUGE = "9" * 400
def out(text):   # raw bytes: a lone surrogate reaches the log as the bytes that encode it
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass") + b"\n")
    sys.stdout.buffer.flush()
def no_surrogate(text):
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
threading.current_thread().name = "main" + E[0]
ns = {"time": time}
exec(compile("def spin():\n    while True:\n        time.sleep(0.1)\n", "frame" + no_surrogate(E[1]) + ".py",
             "exec"), ns)
threading.Thread(target=ns["spin"], name="worker" + E[2], daemon=True).start()
out("step 1 loss 2.0 " + E[3])
out('{"step": 2, "loss": ' + HUGE + ', "epoch": ' + HUGE + '}')
out("step 3 loss " + HUGE + " tok/s " + HUGE)
def event(**kw):
    with open(os.path.join(run, "events.jsonl"), "a") as f:
        f.write(json.dumps({"v": 1, "time": time.time(), **kw}) + "\n")
event(kind="step", step=4, loss=1.5, grad_norm=int(HUGE))
event(kind="step", step=5, loss=1.4, **{"k" + E[4]: 1.0})
event(kind="error", message="bad" + E[5], fatal=False)
step = 5
while not os.path.exists(os.path.join(run, "die")):
    step += 1
    now = time.time()
    threads = [{"name": "main" + E[0], "role": "drafter" + E[6], "device": "cpu" + E[7], "step": step, "compile_state": "compiled",
                "last_step_time": now, "last_beat_time": now, "error": "e" + E[8]}]
    st = {"v": 1, "run_id": rid, "pid": os.getpid(), "time": now, "phase": "training", "step": step,
          "loss": 1.0, "heartbeat_time": now, "threads": threads, "last_error": "le" + E[9], "node": "n" + E[10]}
    tmp = os.path.join(run, ".st.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(st))
    os.replace(tmp, os.path.join(run, "status.json"))
    out(f"step {step} loss 1.0")
    time.sleep(0.2)
raise RuntimeError("died" + E[11])
"""

# A C0 control but newline, DEL, or a C1 control: none may reach any output.
def bad_chars(text: str) -> list[str]:
    return sorted({repr(c) for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f
                   or 0xd800 <= ord(c) <= 0xdfff or c in "\u2028\u2029"})


def assert_inert(where: str, raw: bytes) -> None:
    text = raw.decode("utf-8")     # a lone surrogate could not even be encoded
    assert not bad_chars(text), f"{where} let through {bad_chars(text)}: {text[:3000]!r}"


def json_strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from json_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from json_strings(v)


def run_cli(tmp: Path, *args: str):
    import subprocess
    env = {**os.environ, "XDG_STATE_HOME": str(tmp / "state"), "XDG_CONFIG_HOME": str(tmp / "cfg")}
    return subprocess.run([sys.executable, "-m", "dflash_tui", *args], capture_output=True, env=env, timeout=60)


def check_all_outputs(tmp: Path, cfg: Path, what: str) -> dict:
    """Text, --json and --check --all: every byte inert, the JSON valid and inert inside."""
    text = run_cli(tmp, "--config", str(cfg), "--profile", "evil", "--check")
    assert_inert(f"{what}: --check stdout", text.stdout)
    assert_inert(f"{what}: --check stderr", text.stderr)
    js = run_cli(tmp, "--config", str(cfg), "--profile", "evil", "--check", "--json")
    assert_inert(f"{what}: --check --json", js.stdout + js.stderr)
    out = json.loads(js.stdout)
    for s in json_strings(out):
        assert not bad_chars(s), f"{what}: --json holds {bad_chars(s)} in {s!r}"
    every = run_cli(tmp, "--config", str(cfg), "--check", "--all")
    assert_inert(f"{what}: --check --all", every.stdout + every.stderr)
    every_js = run_cli(tmp, "--config", str(cfg), "--check", "--all", "--json")
    for s in json_strings(json.loads(every_js.stdout)):
        assert not bad_chars(s), f"{what}: --all --json holds {bad_chars(s)} in {s!r}"
    for res in (text, js, every, every_js):
        assert b"Traceback" not in res.stderr and b"internal error" not in res.stdout + res.stderr, res.stderr
    return out


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    rng = random.Random(SEED)
    marks = escapes(rng, 12)
    run = tmp / "run"
    # The previous run of this run dir, set aside in history/, wrote integers too large for a float.
    old = run / "history" / "20261130-000000-aaaaaa"
    old.mkdir(parents=True)
    (old / "events.jsonl").write_text(
        json.dumps({"v": 1, "kind": "step", "time": 1.0, "step": 1, "loss": 2.0}) + "\n"
        + '{"v": 1, "kind": "step", "time": 2.0, "step": 2, "loss": ' + HUGE + ', "gn": ' + HUGE + "}\n")
    (old / "launch.json").write_text(json.dumps({"v": 1, "run_id": "20261130-000000-aaaaaa", "pid": 4194001,
                                                 "pgid": 4194001, "start_ticks": 1, "start_time": 1.0,
                                                 "argv": ["x"], "host": "h" + marks[0]}))
    prog = tmp / "hostile.py"
    prog.write_text(PROGRAM)
    fields = local(run, "beat", stall_after_s=60)
    fields["command"] = [sys.executable, str(prog), json.dumps(marks)]
    cfg = write_config(tmp, evil=fields, other=local(tmp / "other", "beat"))
    # Its thread reports an error, so the verdict may be a failing one: what matters is the text.
    res = cli(tmp, "--config", str(cfg), "--profile", "evil", "--launch", "--json", "--wait", "20")
    pid = json.loads(res.stdout)["pid"]
    assert pid and alive(pid), (res.stdout, res.stderr)
    deadline = time.monotonic() + 20
    while not any((run / "probe").glob("[0-9]*.json")):
        assert time.monotonic() < deadline, "the run probe wrote no report"
        time.sleep(0.1)
    # launch.json as a hostile writer leaves it: host and user with OSC 2 and a lone surrogate.
    rec = json.loads((run / "launch.json").read_text())
    rec["host"], rec["user"] = "gpu" + marks[1], "u" + "\ud800" + marks[2]
    (run / "launch.json").write_text(json.dumps(rec))
    yield tmp, cfg, run, pid, marks
    if alive(pid):
        os.killpg(pid, 9)


def test_no_escape_reaches_the_cli_from_any_run_dir_field(hostile_run):
    tmp, cfg, run, pid, marks = hostile_run
    out = check_all_outputs(tmp, cfg, "live run")
    assert out["verdict"] in ("RUNNING", "STALLED"), out
    # Shown, not dropped: the escape is visible as text.
    assert "\\x1b" in json.dumps(out) or "\\\\x1b" in json.dumps(out), out

    stop = {"v": 1, "run_id": json.loads((run / "launch.json").read_text())["run_id"], "pid": pid,
            "requested_time": time.time(), "requested_by": "mallory\x1b]52;c;ZXZpbA==\x07@\x1b]2;t\x07",
            "signal_sent": "SIGTERM\x9b2J"}
    (run / "stop.json").write_text(json.dumps(stop))
    out = check_all_outputs(tmp, cfg, "stop requested")
    assert "mallory" in json.dumps(out), out
    (run / "stop.json").unlink()


async def test_the_dashboard_shows_every_field_inert_and_survives_huge_numbers(hostile_run, tmp_path, monkeypatch):
    tmp, cfg, run, pid, marks = hostile_run
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp / "state"))
    fields = local(run, "beat", stall_after_s=60)
    profile = Profile(name="evil", run_dir=str(run), command=tuple(fields["command"]), python=sys.executable,
                      stall_after_s=60.0, min_free_gb=0.0)
    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "evil")
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None
                    and app.run_view.report.checklist.verdict in (Verdict.RUNNING, Verdict.STALLED), 30)
        for key in ("1", "2", "3", "4", "k", "1"):
            await pilot.press(key)
            await pilot.pause(0.6)
            svg = app.export_screenshot()
            assert not bad_chars(svg), f"the dashboard drew {bad_chars(svg)} after key {key!r}"
        assert app.is_running and app.return_code is None


def test_a_traceback_with_escapes_is_shown_inert(hostile_run):
    tmp, cfg, run, pid, marks = hostile_run
    (run / "die").write_text("")
    deadline = time.monotonic() + 20
    while not (run / "exit.json").exists():
        assert time.monotonic() < deadline, "the program did not die"
        time.sleep(0.1)
    out = check_all_outputs(tmp, cfg, "crashed run")
    assert out["verdict"] == "CRASHED" and "died" in out["summary"], out


def test_gpu_answers_are_inert_and_huge_numbers_are_a_bad_answer():
    """Another user's process on the GPU names itself; the agent's GPU answer carries it."""
    from dflash_tui.gpu.codec import ProbeAnswerError, snapshot_from_dict
    rng = random.Random(SEED)
    e = escapes(rng, 6)
    snap = snapshot_from_dict({"time": 1.0, "driver_version": "x", "error": {"kind": "unknown", "message": e[0]},
                               "gpus": [{"index": 0, "name": "H200" + e[1], "uuid": "GPU-" + e[2],
                                         "throttle_reasons": [e[3]],
                                         "processes": [{"pid": 7, "name": "evil" + e[4], "user": "u" + e[5]}]}]})
    g = snap.gpus[0]
    for text in (snap.error.message, g.name, g.uuid, *g.throttle_reasons, g.processes[0].name, g.processes[0].user):
        assert not bad_chars(text), text
    with pytest.raises(ProbeAnswerError):
        snapshot_from_dict({"time": 1.0, "gpus": [{"index": 0, "power_w": int(HUGE)}]})


# A program that writes its own stack dump: probe/<pid>.stack, rewritten every 0.3 s (so the
# agent answers with it as a recent dump, signalling nothing) by a child of its own with what
# RUN_DIR/stack_text holds, while its main thread holds the GIL for good (its report goes stale).
SELF_DUMPING = r"""
import os, re, subprocess, sys, threading, time
run = os.environ["DFLASH_RUN_DIR"]
with open(os.path.join(run, "main_ident"), "w") as f:
    f.write("%016x" % threading.get_ident())
WRITER = ("import sys, time\nwhile True:\n    text = open(sys.argv[2]).read()\n"
          "    open(sys.argv[1], 'w').write(text)\n    time.sleep(0.3)\n")
subprocess.Popen([sys.executable, "-S", "-c", WRITER, os.path.join(run, "probe", "%d.stack" % os.getpid()),
                  os.path.join(run, "stack_text")], env={})
print("parsing metadata", flush=True)
time.sleep(1.5)
re.match(r"(a+)+$", "a" * 64 + "b")
"""


def stack_text(ident: str, marks: list[str], line: str = "7") -> str:
    return (f"Thread 0x{ident} (most recent call first):\n"
            f'  File "/srv/evil{marks[0]}.py", line {line} in parse{marks[1]}\n'
            f'  File "/srv/evil.py", line 3 in main{marks[2]}\n')


@pytest.fixture(scope="module")
def self_dumping_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("selfdump")
    marks = escapes(random.Random(SEED + 1), 3)
    marks[0] = "\x1b]2;pwned\x07"      # always an OSC and a one-byte CSI, whatever the seed
    marks[1] = "\x9b31m"
    run = tmp / "run"
    run.mkdir()
    (run / "stack_text").write_text("")
    prog = tmp / "self_dumping.py"
    prog.write_text(SELF_DUMPING)
    fields = {"run_dir": str(run), "command": [sys.executable, str(prog)], "stall_after_s": 3,
              "stop_grace_s": 1, "min_free_gb": 0}
    cfg = write_config(tmp, evil=fields)
    res = cli(tmp, "--config", str(cfg), "--launch", "--json", "--wait", "20")
    pid = json.loads(res.stdout)["pid"]
    deadline = time.monotonic() + 20
    while not (run / "main_ident").exists():
        assert time.monotonic() < deadline, "the program never started"
        time.sleep(0.1)
    ident = (run / "main_ident").read_text()
    (run / "stack_text").write_text(stack_text(ident, marks))
    yield tmp, cfg, run, fields, ident, marks
    if alive(pid):
        os.killpg(pid, 9)


def stalled_check(tmp: Path, cfg: Path, what: str) -> dict:
    deadline = time.monotonic() + 60
    while True:
        out = check_all_outputs(tmp, cfg, what)
        if out["verdict"] == "STALLED" and any(t.get("stale") for t in out["threads"]) or time.monotonic() > deadline:
            return out
        time.sleep(1)


def test_a_stack_dump_the_run_writes_itself_is_shown_inert(self_dumping_run):
    """Its escapes reach neither text --check's stuck-thread line nor --json; a frame line number
    int() refuses (5,000 digits) leaves the frame out with a note naming the file."""
    tmp, cfg, run, fields, ident, marks = self_dumping_run
    out = stalled_check(tmp, cfg, "self-written stack dump")
    assert out["verdict"] == "STALLED", out
    (main,) = [t for t in out["threads"] if t.get("stale")]
    assert main["state"] == "STUCK" and main["where"] == "parse\\x9b31m (evil\\x1b]2;pwned\\x07.py:7)", main
    text = run_cli(tmp, "--config", str(cfg), "--check").stdout.decode()
    assert "thread  pid" in text and "parse\\x9b31m (evil\\x1b]2;pwned\\x07.py:7)" in text, text

    (run / "stack_text").write_text(stack_text(ident, marks, line="9" * 5000))
    time.sleep(1)
    out = stalled_check(tmp, cfg, "a 5,000-digit line number")
    notes = [c for c in out["checks"] if c["id"] == "probe_files"]
    assert notes and "a frame's line number has 5000 digits" in notes[0]["cause"], out["checks"]
    assert notes[0]["cause"].startswith("probe/") and ".stack:" in notes[0]["cause"], notes
    (run / "stack_text").write_text(stack_text(ident, marks))


async def test_the_threads_tab_shows_a_self_written_stack_dump_inert(self_dumping_run, monkeypatch):
    tmp, cfg, run, fields, ident, marks = self_dumping_run
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp / "state"))
    profile = Profile(name="evil", run_dir=str(run), command=tuple(fields["command"]), python=sys.executable,
                      stall_after_s=3.0, min_free_gb=0.0)
    app = DashboardApp(lambda name: WatchSource(open_watch(profile)), "evil")
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None and any(
            t.source == "faulthandler" for t in app.run_view.report.checklist.threads), 60)
        for key in ("1", "2", "3", "4"):
            await pilot.press(key)
            await pilot.pause(0.6)
            svg = app.export_screenshot()
            assert not bad_chars(svg), f"the dashboard drew {bad_chars(svg)} after key {key!r}"
        assert "parse\\x9b31m" in app.export_screenshot() or any(
            "parse\\x9b31m" in t.where for t in app.run_view.report.checklist.threads)
