"""What reading a large TensorBoard event file costs: its first read, each poll after, and a
re-read of the whole file (what a reader without cursors pays every poll).

    .venv/bin/python benchmarks/metric_files_cost.py [--size-mb 1024] [--new 100] [--polls 20] [--append]

Writes an event file of --size-mb (Event/Summary records made with the tensorboard package's
protos, framed with their CRCs, a 4 MiB block of them written over and over) into a temporary
run dir, then, through the real agent on this machine (run/evidence/metric_files/reader.py):

  first read   polls until the cursor reaches the end (a file over TB_FIRST_TAIL is read from its
               newest TB_FIRST_TAIL bytes, resynced by CRC; TB_WINDOW bytes per poll), counting
               polls, bytes read, and CPU (this process: decoding; the agent: reading, base64);
  each poll    --polls times: --new scalars appended, one poll; bytes read and CPU per poll;
  whole        split_records + scalars over the whole file, as a reader without cursors would
               each poll (bytes = the file's size), CPU of this process.

--append writes the section into benchmarks/RESULTS.md (replacing an earlier one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from tensorboard.compat.proto import event_pb2, summary_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dflash_tui.remote.agent import open_ops  # noqa: E402
from dflash_tui.remote.local import LocalTarget  # noqa: E402
from dflash_tui.run.evidence.metric_files import tensorboard  # noqa: E402
from dflash_tui.run.evidence.metric_files.reader import TB_FIRST_TAIL, TB_WINDOW, MetricFiles  # noqa: E402
from dflash_tui.run.evidence.metric_files.tfrecord import frame, split_records  # noqa: E402

from harness import replace_section  # noqa: E402

HEADING = "## metrics: a large TensorBoard event file, first read and each poll (benchmarks/metric_files_cost.py)"


def record(step: int, tag: str = "train/loss") -> bytes:
    ev = event_pb2.Event(wall_time=time.time(), step=step,
                         summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=1.0 / (step + 1))]))
    return frame(ev.SerializeToString())


def write_file(path: Path, size: int) -> int:
    block = b"".join(record(i) for i in range((4 << 20) // 60))
    written = 0
    with open(path, "wb") as f:
        f.write(frame(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString()))
        while written < size:
            f.write(block)
            written += len(block)
    return path.stat().st_size


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


async def main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tbcost-"))
    logdir = tmp / "runs" / "big"
    logdir.mkdir(parents=True)
    path = logdir / "events.out.tfevents.0.bench"
    size = write_file(path, args.size_mb << 20)
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    agent = [c.pid for c in psutil.Process().children(recursive=True)]
    files = MetricFiles()
    try:
        c0, a0, t0 = time.process_time(), cpu_of(agent), time.monotonic()
        polls = points = 0
        src = None
        while True:
            await files.poll(ops, str(tmp), time.time())
            points += len(files.take())
            polls += 1
            src = src or files.sources.get(str(logdir))
            if src is not None and src.files[str(path)].offset >= size:
                break
        first = (polls, size - src.tail_from, (time.process_time() - c0) * 1000, (cpu_of(agent) - a0) * 1000, time.monotonic() - t0, points)
        per = []
        step = 10 ** 9
        for _ in range(args.polls):
            with open(path, "ab") as f:
                for _ in range(args.new):
                    step += 1
                    f.write(record(step))
            before = src.files[str(path)].offset
            c0, a0 = time.process_time(), cpu_of(agent)
            await files.poll(ops, str(tmp), time.time())
            got = len(files.take())
            per.append((src.files[str(path)].offset - before, (time.process_time() - c0) * 1000,
                        (cpu_of(agent) - a0) * 1000, got))
        c0 = time.process_time()
        data = path.read_bytes()
        framed = split_records(data)
        whole_points = len(tensorboard.scalars(framed.records)[0])
        whole_ms = (time.process_time() - c0) * 1000
    finally:
        await ops.close()
        shutil.rmtree(tmp)
    med = lambda i: statistics.median(p[i] for p in per)
    lines = [
        HEADING, "",
        f"Command: `.venv/bin/python benchmarks/metric_files_cost.py --size-mb {args.size_mb} --new {args.new} "
        f"--polls {args.polls}{' --append' if args.append else ''}`", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores (shared), CPython {platform.python_version()}, "
        f"the agent on this machine (LocalTarget); load average {os.getloadavg()[0]:.1f}. The file: {size / 2**20:.0f} MiB, "
        f"{first[5]} scalars read first (its newest {TB_FIRST_TAIL >> 20} MiB); TB_WINDOW {TB_WINDOW >> 10} KiB per file per poll.", "",
        "| read | polls | bytes read | CPU dashboard | CPU agent | scalars |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| first read (its newest part, over polls) | {first[0]} | {first[1] / 2**20:.1f} MiB | {first[2]:.0f} ms "
        f"({first[2] / first[0]:.1f} ms/poll) | {first[3]:.0f} ms | {first[5]} |",
        f"| each poll after, {args.new} new scalars (median of {args.polls}) | 1 | {med(0):.0f} B | {med(1):.2f} ms | "
        f"{med(2):.2f} ms | {int(med(3))} |",
        f"| re-reading the whole file (no cursor), per poll | 1 | {size / 2**20:.0f} MiB | {whole_ms:.0f} ms | (read) | {whole_points} |",
        "",
        f"Each poll after the first read costs {whole_ms / max(med(1), 0.01):.0f}x less CPU here than re-reading the file "
        f"and reads {size / max(med(0), 1):.0f}x fewer bytes; the first read ({first[4]:.1f} s wall over {first[0]} polls) "
        "is spread over polls so no poll holds the dashboard for long; the re-read is what a reader without cursors "
        "(or one that reads a whole file first) pays.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.append:
        replace_section(HEADING, text + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--new", type=int, default=100)
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--append", action="store_true")
    asyncio.run(main(ap.parse_args()))
