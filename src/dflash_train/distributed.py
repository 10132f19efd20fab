"""torch.distributed for the trainer: one process per node under torchrun, the thread pool inside.

torchrun starts the trainer once per node (`--nnodes N --nproc_per_node 1`), or several times on
one machine (`--standalone --nproc_per_node 2`), and tells each process who it is through the
environment: RANK, WORLD_SIZE, LOCAL_RANK, and MASTER_ADDR/MASTER_PORT, the rendezvous store.
Without that environment the trainer runs alone, as it always did.

What crosses processes, and who sends it:
- every step, ONE all_reduce of the flat gradient buffer (with the stop flag in its last
  element), issued by the single drafter thread that runs the pool's gradient sync while the
  others wait: every rank issues the same collectives in the same order, and no communicator is
  ever used by two threads at once (NCCL communicators are not thread-safe). NCCL when the
  drafters are on CUDA, gloo on CPU;
- from the main thread, before the pool starts and after it ends: rank 0's checkpoint on
  --resume, and every rank's replica count and weight digest (they must agree). These travel on
  the gloo group (the default one), so no Python object goes through NCCL;
- a liveness beat of every rank in the rendezvous store (`PeerWatch`), so a rank that dies or
  hangs is named by the others. A gloo collective fails at once when a peer's socket closes, an
  NCCL one only at its timeout; either way the survivors say which rank is gone and exit,
  instead of waiting in a collective for ever.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
BEAT_KEY = "dflash/beat/{rank}"


class WorldError(ValueError):
    """The torchrun environment is incomplete or inconsistent; the message says which variable."""


@dataclass(frozen=True)
class World:
    """Who this process is among the run's processes."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node: str = ""
    launched: bool = False     # started by torchrun (its environment is set): use torch.distributed
    store_addr: str = ""
    store_port: int = 0

    @property
    def is_leader(self) -> bool:
        """Rank 0: writes checkpoints and runs eval."""
        return self.rank == 0

    @classmethod
    def from_env(cls, env: Any = os.environ) -> "World":
        node = socket.gethostname()
        present = [v for v in TORCHRUN_VARS if v in env]
        if not present:
            return cls(node=node)
        missing = [v for v in TORCHRUN_VARS if v not in env]
        if missing:
            raise WorldError(f"{', '.join(present)} set but {', '.join(missing)} not: start the trainer with "
                             "torchrun (it sets all of them), or unset them to train alone")
        try:
            rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
            local_rank, port = int(env.get("LOCAL_RANK", "0")), int(env["MASTER_PORT"])
        except ValueError:
            raise WorldError("RANK, WORLD_SIZE, LOCAL_RANK and MASTER_PORT must be integers (got "
                             f"{env.get('RANK')!r}, {env.get('WORLD_SIZE')!r}, {env.get('LOCAL_RANK')!r}, "
                             f"{env.get('MASTER_PORT')!r})") from None
        if not 0 <= rank < world_size:
            raise WorldError(f"RANK {rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE {world_size})")
        return cls(rank=rank, world_size=world_size, local_rank=local_rank, node=node, launched=True,
                   store_addr=env["MASTER_ADDR"], store_port=port)


def is_collective_error(exc: BaseException) -> bool:
    """An error that a peer's death or hang causes in this rank's collective (gloo raises a plain
    RuntimeError naming the peer's socket; NCCL a DistError)."""
    text = str(exc)
    return isinstance(exc, dist.DistError) or any(m in text for m in (
        "Connection reset by peer", "Connection closed by peer", "Timed out waiting", "gloo/transport"))


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes, in order: equal digests mean bit-identical weights."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Collectives:
    """The process group of a launched run; for a process alone every call is the identity."""

    def __init__(self, world: World, grad_group: Any = None) -> None:
        self.world = world
        self._grad_group = grad_group

    @classmethod
    def join(cls, world: World, timeout_s: float) -> "Collectives":
        """Join the run's default (gloo) group: every rank calls this once, at start-up."""
        if world.launched:
            dist.init_process_group(backend="gloo", init_method="env://", rank=world.rank,
                                    world_size=world.world_size, timeout=timedelta(seconds=timeout_s))
        return cls(world)

    def use_devices(self, drafter_device: str, timeout_s: float) -> None:
        """The gradients' group: NCCL for CUDA drafters (a collective: every rank, same order)."""
        if not self.world.launched:
            return
        if drafter_device.startswith("cuda"):
            device = torch.device(drafter_device)
            torch.cuda.set_device(device)
            self._grad_group = dist.new_group(backend="nccl", timeout=timedelta(seconds=timeout_s))
        else:
            self._grad_group = dist.group.WORLD

    @property
    def backend(self) -> str:
        return dist.get_backend(self._grad_group) if self._grad_group is not None else "none"

    @property
    def all_reduce(self) -> Callable[[torch.Tensor], None] | None:
        """The in-place sum across processes the pool calls once per step; None when alone."""
        return self._sum if self.world.launched else None

    def _sum(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self._grad_group)

    def broadcast_from_leader(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.world.launched:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.world.launched:
            return [obj]
        out: list[Any] = [None] * self.world.world_size
        dist.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        if self.world.launched and dist.is_initialized():
            dist.destroy_process_group()


@dataclass
class _Peer:
    beats: int = -1
    changed: float = 0.0        # monotonic time the beat count last changed (the watcher's clock)
    info: dict | None = None


class PeerWatch:
    """Every rank's liveness beat in the rendezvous store, and the judgement of the others'.

    A beat is a counter, not a time stamp: the watcher judges a peer by how long ago (on its own
    clock) the counter last moved, so the nodes' clocks need not agree. A rank that fails on its
    own error says so in its beat (`report_failed`), so the others name the cause, not just the
    rank. `on_lost(message)` is called once, from the watch thread, when a peer has been silent
    for `timeout_s`, reported a failure, or the store itself is gone.
    """

    def __init__(self, world: World, on_lost: Callable[[str], None], *, timeout_s: float,
                 interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.world = world
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self._on_lost = on_lost
        self._clock = clock
        self._store: Any = None
        self._store_lock = threading.Lock()     # one store client, used by two threads
        self._state_lock = threading.Lock()
        self._beats = 0
        self._peers = {r: _Peer(changed=clock()) for r in range(world.world_size) if r != world.rank}
        self._store_problem: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost = False

    def start(self) -> None:
        if not self.world.launched or not self._peers:
            return
        self._store = dist.TCPStore(self.world.store_addr, self.world.store_port, is_master=False,
                                    timeout=timedelta(seconds=max(5.0, 3 * self.interval_s)))
        self._publish("alive")
        now = self._clock()
        with self._state_lock:
            for peer in self._peers.values():
                peer.changed = now       # every rank has joined by now: silence counts from here
        self._thread = threading.Thread(target=self._loop, name="peer-watch", daemon=True)
        self._thread.start()

    def report_failed(self, message: str) -> None:
        """This rank is failing: tell the others why before it exits (best effort)."""
        self.stop("failed", message)

    def stop(self, state: str = "done", error: str = "") -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        if self._store is not None:
            try:
                self._publish(state, error)
            except Exception:  # noqa: BLE001 - the store may be gone already; nothing to tell
                pass

    def _publish(self, state: str, error: str = "") -> None:
        self._beats += 1
        value = json.dumps({"beats": self._beats, "state": state, "pid": os.getpid(),
                            "node": self.world.node, "error": error[:500]})
        with self._store_lock:
            self._store.set(BEAT_KEY.format(rank=self.world.rank), value)

    def _read(self, rank: int) -> dict | None:
        key = BEAT_KEY.format(rank=rank)
        with self._store_lock:
            if not self._store.check([key]):
                return None
            return json.loads(self._store.get(key))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._publish("alive")
                seen = {r: self._read(r) for r in self._peers}
            except Exception as exc:  # noqa: BLE001 - any store failure means the store is gone
                if self._stop.is_set():
                    return
                with self._state_lock:
                    self._store_problem = (
                        f"the rendezvous store at {self.world.store_addr}:{self.world.store_port} is gone "
                        f"({type(exc).__name__}): rank 0's node (whose torchrun holds it) is down")
                self._lose(self._store_problem)
                return
            now = self._clock()
            with self._state_lock:
                for r, info in seen.items():
                    peer = self._peers[r]
                    if info is not None and info.get("beats") != peer.beats:
                        peer.beats, peer.changed, peer.info = info.get("beats"), now, info
            message = self.problem(stall_s=self.timeout_s)
            if message is not None:
                self._lose(message)
                return

    def _lose(self, message: str) -> None:
        if not self._lost:
            self._lost = True
            self._on_lost(message)

    def problem(self, stall_s: float) -> str | None:
        """The first peer that failed or has been silent for `stall_s`, in words; None if all are well."""
        now = self._clock()
        with self._state_lock:
            if self._store_problem is not None:
                return self._store_problem
            for r, peer in sorted(self._peers.items()):
                info = peer.info or {}
                who = f"rank {r} (node {info.get('node', '?')}, pid {info.get('pid', '?')})"
                if info.get("state") == "failed":
                    return f"{who} failed: {info.get('error') or 'no reason given'}"
                if info.get("state") == "done":
                    continue
                silent = now - peer.changed
                if silent >= stall_s:
                    if peer.info is None:
                        return f"rank {r} never sent a heartbeat in {silent:.0f} s"
                    return f"{who} stopped responding: no heartbeat for {silent:.1f} s"
        return None

    def diagnose(self, wait_s: float = 6.0) -> str | None:
        """After a collective failed: which peer is gone. A peer that is still alive keeps beating,
        so one whose beat stalls for three intervals within `wait_s` is the one."""
        if self._thread is None:
            return None
        deadline = self._clock() + wait_s
        while True:
            message = self.problem(stall_s=3 * self.interval_s)
            if message is not None or self._clock() >= deadline:
                return message
            time.sleep(self.interval_s / 4)
