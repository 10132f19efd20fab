"""`dflash-tui --bundle` as a person runs it: a real CLI process per bundle, real runs (a dead
one that printed secrets, a STALLED gloo run of 4 ranks under torchrun, one in the pct
stand-in over the loopback sshd), an unreachable target. Every member of every archive is read."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.run_standins import PROGRAM as STANDIN_PROGRAM
from tests.test_cli_modes import cli, local, one_line_error, write_config

pytestmark = pytest.mark.timeout(240)

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
HF_TOKEN = "hf_" + "Qm7sLkT2vXw9Zp4RbN8cYd3FgHj6Ke1Aa"
DB_PASSWORD = "hunter2-c0rrect-h0rse"
DB_URL = f"postgresql://trainer:{DB_PASSWORD}@db.internal.example:5432/runs"
WANDB_KEY = "0123456789abcdef0123456789abcdef01234567"
NOTIFY_SECRET = "tk_9f8e7d6c5b4a"
NOTIFY_URL = f"ntfy://ntfy.example.com/{NOTIFY_SECRET}"
SECRETS = (HF_TOKEN, DB_PASSWORD, WANDB_KEY, NOTIFY_SECRET, "s3cr3t-flag-value")

LEAKY = f"""
import os, sys
print("logging in with token " + {HF_TOKEN!r}, flush=True)
print("DATABASE_URL=" + {DB_URL!r}, flush=True)
print("wandb: key " + {WANDB_KEY!r} + " posting to " + {NOTIFY_URL!r}, flush=True)
print("\\x1b]0;owned\\x07\\x1b[2J" + "Traceback (most recent call last):", flush=True)
print("ValueError: the shard is corrupt", flush=True)
probe = os.path.join(os.getcwd(), "probe")
os.makedirs(probe, exist_ok=True)
with open(os.path.join(probe, "weights.bin"), "wb") as f:        # cannot be scanned: left out
    f.write(bytes(range(256)) * 4)
with open(os.path.join(probe, "odd\\x1b[31mname\\x07.json"), "w") as f:   # an escape in a name
    f.write('{{"note": "\\u001b[2J", "api_key": "s3cr3t-flag-value"}}')
sys.exit(3)
"""


def members(path: Path) -> dict[str, bytes]:
    """Every member of the archive, read whole, in order."""
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def assert_no_secret_anywhere(path: Path, secrets=SECRETS) -> dict[str, bytes]:
    raw = path.read_bytes()
    plain = gzip.decompress(raw)
    got = members(path)
    for secret in secrets:
        s = secret.encode()
        assert s not in raw and s not in plain, secret
        for name, data in got.items():
            assert s not in data, (secret, name)
    return got


def assert_inert(got: dict[str, bytes]) -> None:
    for name, data in got.items():
        assert re.fullmatch(r"[A-Za-z0-9._/-]+", name), name
        assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", data), (name, data[:200])


def bundle(tmp_path: Path, cfg: Path, profile: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return cli(tmp_path, "--config", str(cfg), "--profile", profile, "--bundle", str(out), *extra, timeout=90)


def test_a_dead_run_that_printed_secrets_leaves_none_in_the_archive(tmp_path):
    program = tmp_path / "leaky.py"
    program.write_text(LEAKY)
    cfg = write_config(tmp_path, leaky={"run_dir": str(tmp_path / "run"), "python": sys.executable,
                                        "command": [sys.executable, str(program), "--hf-token", "s3cr3t-flag-value"],
                                        "min_free_gb": 0})
    cfg.write_text(cfg.read_text() + f'\n[notify]\nurls = ["{NOTIFY_URL}"]\n')
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--wait", "15")
    assert res.returncode == 1 and "CRASHED" in res.stdout, res.stdout + res.stderr

    out = tmp_path / "b.tar.gz"
    t0 = time.monotonic()
    res = bundle(tmp_path, cfg, "leaky", out)
    assert res.returncode == 0, res.stdout + res.stderr
    assert time.monotonic() - t0 < 30
    assert res.stdout.startswith(f"bundle {out}: ") and "verdict CRASHED" in res.stdout, res.stdout
    assert (out.stat().st_mode & 0o777) == 0o600

    got = assert_no_secret_anywhere(out)
    assert_inert(got)
    assert list(got)[0] == "manifest.json"
    manifest = json.loads(got["manifest.json"])
    assert manifest["format"] == "dflash-tui-bundle" and manifest["verdict"] == "CRASHED"
    assert [m["name"] for m in manifest["members"]] == list(got)[1:]
    assert manifest["redaction"]["masks"] >= 5
    # The log window: the traceback, its secrets masked, its escapes inert.
    log = got["log/train.log.window"].decode()
    assert "ValueError: the shard is corrupt" in log and "postgresql://trainer:…@db.internal.example" in log
    assert "\\x1b]0;owned" in log
    # Members the bundle could not take or scan are named, with why.
    missing = {m["name"]: m["reason"] for m in manifest["not_taken"]}
    assert "cannot be scanned" in missing["probe/weights.bin"], missing
    assert "wrapper is not alive" in missing["launch/environment_names.json"], missing
    odd = [n for n in got if n.startswith("probe/odd")]
    assert odd == ["probe/odd__31mname_.json"], list(got)
    assert json.loads(got[odd[0]])["api_key"] == "…"
    verdict = json.loads(got["verdict.json"])
    assert verdict["verdict"] == "CRASHED" and verdict["exit"]["exit_code"] == 3
    assert "the run's interpreter" in [m for m in manifest["members"] if m["name"] == "launch/pip_freeze.txt"][0]["what"]
    assert json.loads(got["config.json"])["profile"]["name"] == "leaky"

    # An existing file is never overwritten: one line, exit 2.
    res = bundle(tmp_path, cfg, "leaky", out)
    assert res.returncode == 2 and "exists" in one_line_error(res)


def test_the_size_bound_holds_and_names_what_it_left_out(tmp_path):
    program = tmp_path / "noisy.py"
    # 6 MiB of log that does not compress: the window is cut, the bound still holds.
    program.write_text("import os, base64\nfor _ in range(2000):\n"
                       "    print(base64.b64encode(os.urandom(2400)).decode(), flush=False)\n")
    cfg = write_config(tmp_path, noisy={"run_dir": str(tmp_path / "run"), "python": sys.executable,
                                        "command": [sys.executable, str(program)], "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--wait", "20")
    assert "FINISHED" in res.stdout, res.stdout + res.stderr
    out = tmp_path / "small.tar.gz"
    res = bundle(tmp_path, cfg, "noisy", out, "--bundle-max-mb", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert out.stat().st_size <= 1 << 20
    got = members(out)
    manifest = json.loads(got["manifest.json"])
    over = [m for m in manifest["not_taken"] if "size bound" in m["reason"]]
    assert over and "verdict.json" in got, manifest["not_taken"]
    res = bundle(tmp_path, cfg, "noisy", tmp_path / "x.tar.gz", "--bundle-max-mb", "0.5")
    assert res.returncode == 2 and "out of range" in one_line_error(res)


def test_an_unreachable_target_still_gives_a_bundle_that_says_why(tmp_path):
    cfg = write_config(tmp_path, far={"host": "127.0.0.1", "port": free_port(), "user": "nobody",
                                      "run_dir": "/tmp/dflash-far", "min_free_gb": 0})
    out = tmp_path / "far.tar.gz"
    t0 = time.monotonic()
    res = bundle(tmp_path, cfg, "far", out)
    assert res.returncode == 3, res.stdout + res.stderr
    assert time.monotonic() - t0 < 30
    got = members(out)
    manifest = json.loads(got["manifest.json"])
    assert manifest["unreachable"] and "127.0.0.1" in manifest["unreachable"], manifest
    assert {"manifest.json", "config.json", "timeline.json"} <= set(got), list(got)
    missing = {m["name"]: m["reason"] for m in manifest["not_taken"]}
    assert missing["verdict.json"].startswith("not taken: ") and "stacks/" in missing, missing
    assert "the target could not be looked at" in res.stdout


def _stalled(tmp_path: Path, cfg: Path, name: str, deadline_s: float) -> dict:
    deadline = time.monotonic() + deadline_s
    while True:
        res = cli(tmp_path, "--config", str(cfg), "--profile", name, "--check", "--json")
        out = json.loads(res.stdout)
        if out["verdict"] == "STALLED" or res.returncode == 2 or time.monotonic() > deadline:
            return out
        time.sleep(2)


def test_a_stalled_gloo_run_of_four_ranks_carries_the_odd_ranks_stack(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4",
               f"--master-port={free_port()}", str(PROGRAMS / "gloo_stuck_rank.py"), "hang"]
    cfg = write_config(tmp_path, gloo={"run_dir": str(tmp_path / "run"), "python": sys.executable,
                                       "command": command, "stall_after_s": 8,
                                       "stop_grace_s": 2, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch")
    try:
        out = _stalled(tmp_path, cfg, "gloo", 150)
        assert out["verdict"] == "STALLED", out
        before = {int(p) for p in os.listdir("/proc") if p.isdigit()}
        path = tmp_path / "gloo.tar.gz"
        res = bundle(tmp_path, cfg, "gloo", path)
        assert res.returncode == 0, res.stdout + res.stderr
        got = assert_no_secret_anywhere(path, ())
        assert_inert(got)
        assert json.loads(got["verdict.json"])["verdict"] == "STALLED"
        raw = json.loads(got["stacks/raw.json"])
        ranks = {p["rank"]: p for p in raw["processes"] if p["rank"] is not None}
        assert set(ranks) == {0, 1, 2, 3}, sorted(ranks)
        frames = lambda p: " ".join(f for t in p["threads"] for f in t.get("frames", []))   # noqa: E731
        assert "checkpoint_to_slow_disk" in frames(ranks[1]), ranks[1]
        assert all("checkpoint_to_slow_disk" not in frames(ranks[r]) for r in (0, 2, 3))
        grouped = json.loads(got["stacks/grouped.json"])
        assert grouped["rank_groups"][0]["ranks"] == [1], grouped["rank_groups"]
        assert "checkpoint_to_slow_disk" in grouped["rank_groups"][0]["where"]
        # The bundle signalled nothing: every rank still runs, STALLED as before.
        assert json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json").stdout)["verdict"] == "STALLED"
        assert {r["pid"] for r in ranks.values()} <= before
        assert all(Path(f"/proc/{r['pid']}").exists() for r in ranks.values())
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


@pytest.mark.sshd
def test_over_ssh_and_pct_the_kernel_log_comes_from_the_host_even_with_the_container_down(sshd, standin, tmp_path):
    standin.container("pct:200")
    prof = {**sshd.profile(), **local(tmp_path / "run", "beat"), "container": "pct:200", "python": sys.executable}
    cfg = write_config(tmp_path, ct=prof)
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--wait", "20")
    assert res.returncode == 0, res.stdout + res.stderr

    out = tmp_path / "ct.tar.gz"
    res = bundle(tmp_path, cfg, "ct", out)
    assert res.returncode == 0, res.stdout + res.stderr
    got = members(out)
    where = {m["name"]: m["where"] for m in json.loads(got["manifest.json"])["members"]}
    host_label = where["host/kernel.log"].removeprefix("host ")
    assert "127.0.0.1" in host_label and "pct" not in host_label, where   # the host, outside the container
    assert where["verdict.json"] == f"target {host_label} · pct:200", where
    assert where["launch/environment_names.json"].endswith("pct:200")
    assert "PATH" in json.loads(got["launch/environment_names.json"])["names"]

    cli(tmp_path, "--config", str(cfg), "--stop")
    standin.stop("pct:200")
    out = tmp_path / "down.tar.gz"
    res = bundle(tmp_path, cfg, "ct", out)
    assert res.returncode == 3, res.stdout + res.stderr
    got = members(out)
    manifest = json.loads(got["manifest.json"])
    assert "pct start 200" in manifest["unreachable"], manifest["unreachable"]
    assert "host/kernel.log" in got and {m["name"]: m["where"] for m in manifest["members"]}["host/kernel.log"] \
        == f"host {host_label}"
