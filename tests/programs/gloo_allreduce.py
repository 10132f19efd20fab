"""A small real torch.distributed program (gloo, CPU) that runs like one node of a trainer.

Run by launch.sh with the environment torchrun gives its workers (MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK), it joins the process group, then each step all-reduces a tensor, checks the
sum, and publishes its rank's status file (status.json, status.rank1.json, ...; a heartbeat
thread beats every 0.25 s, through the rendezvous too). Options, `--name=value`:
  --steps=N       exit 0 after N steps (default: run until stopped)
  --interval=S    seconds between steps (default 0.1)
  --timeout=S     the process group's collective timeout (default 20)
A SIGTERM on any node ends every node with 0 after the same step: each step's all-reduce carries
a "stop" flag, so the nodes agree instead of racing each other's signals. A collective that
fails (a peer died) prints the traceback and exits 1, as a trainer does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent.parent / "src"))

from dflash_tui.contract.rundir import (STATUS_JSON, ThreadStatus, TrainStatus, atomic_write_text,  # noqa: E402
                                       rank_file, to_json)

PROGRAM = str(HERE)


class Beat:
    def __init__(self, run_dir: Path, run_id: str, rank: int, world: int) -> None:
        # The contract's per-rank name: status.json for rank 0, status.rank<R>.json after it.
        self.path, self.run_id, self.rank, self.world = run_dir / rank_file(STATUS_JSON, rank), run_id, rank, world
        self.name = f"rank{rank}"
        self.step, self.phase, self.last_step = 0, "starting", None
        self.lock = threading.Lock()
        self.done = threading.Event()

    def write(self) -> None:
        now = time.time()
        with self.lock:
            thread = ThreadStatus(name=self.name, role="drafter", device="cpu", compile_state="compiled",
                                  step=self.step, last_step_time=self.last_step, last_beat_time=now)
            st = TrainStatus(run_id=self.run_id, pid=os.getpid(), time=now, phase=self.phase, step=self.step,
                             heartbeat_time=now, threads=[thread], rank=self.rank, world_size=self.world,
                             node=os.environ.get("DFLASH_NODE", ""))
            atomic_write_text(self.path, to_json(st))

    def run(self) -> None:
        while not self.done.wait(0.25):
            self.write()


def main(argv: list[str]) -> int:
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    steps = int(opts.get("steps", "0"))
    interval = float(opts.get("interval", "0.1"))
    timeout = float(opts.get("timeout", "20"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    beat = Beat(Path(os.environ["DFLASH_RUN_DIR"]), os.environ["DFLASH_RUN_ID"], rank, world)
    beat.write()
    threading.Thread(target=beat.run, daemon=True).start()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    import torch   # after the first heartbeat: the import takes seconds on a busy machine
    import torch.distributed as dist
    if os.environ["MASTER_ADDR"].startswith("127."):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")   # loopback "hosts" talk over lo
    print(f"rank {rank}/{world} pid {os.getpid()} joining {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
          flush=True)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout))
    with beat.lock:
        beat.phase = "training"
    stop_all = False
    try:
        while not stop_all and (steps == 0 or beat.step < steps):
            t = torch.ones(5) * (rank + 1)
            t[4] = 1.0 if stopping.is_set() else 0.0
            dist.all_reduce(t)
            want = world * (world + 1) / 2
            if not torch.allclose(t[:4], torch.full((4,), want)):
                raise RuntimeError(f"all_reduce gave {t.tolist()}, expected {want}")
            stop_all = t[4].item() > 0
            with beat.lock:
                beat.step += 1
                beat.last_step = time.time()
            print(f"step {beat.step} sum {t[0].item():g}", flush=True)
            if not stop_all:
                time.sleep(interval)
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        beat.done.set()
    if stop_all:
        # This node's own SIGTERM may arrive only now (a peer's came first); Python restores the
        # default action while it shuts down, so the late signal would turn a clean stop into
        # "killed by SIGTERM". The stop is decided: ignore it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with beat.lock:
        beat.phase = "finished"
    beat.write()
    print("stopped with every node" if stop_all else f"finished {beat.step} steps", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
