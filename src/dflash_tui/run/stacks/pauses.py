"""Known pauses of a training run, from a thread's stack: a checkpoint save, an evaluation.

Pure. A run that steps every second may save a checkpoint for a minute or evaluate for ten
seconds; its silence then is no hang, and the silence limit learned from its pace does not
apply (run/verdict/stall_limit.py). A thread is in such a pause while its frames (the probe's
innermost ones, "file:line function") show:

- a checkpoint save: torch.save (torch/serialization.py), torch.distributed.checkpoint,
  safetensors' save, or a function of the program's own code named like a save
  (`save_checkpoint`, `save_model`, `checkpoint`, `_save`);
- an evaluation: a function of the program's own code named like one (`evaluate`, `eval_epoch`,
  `run_validation`, `validation_step`), or the evaluation loops of transformers and Lightning.

Activation checkpointing (torch/utils/checkpoint.py) runs inside a step: no pause. A daemon
thread, or one parked on a lock or a queue (a saver thread waiting for work), is in none,
whatever its functions are named. The bundled trainer says its pauses itself: its phase in
status.json (`phase_pause`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

from ...contract.rundir import Phase, ProbeReport
from .classify import ThreadClass, classify, own_code, parse_frame
from .kept import KeptByList
from .records import StackDump

_SAVE_PATHS = ("/torch/distributed/checkpoint/", "/safetensors/torch.py", "/safetensors/__init__.py")
_SERIALIZATION = "/torch/serialization.py"
_SERIALIZATION_SAVES = frozenset({"save", "_save", "_legacy_save"})
_SAVE_NAME = re.compile(r"(^|_)(save|checkpoint|ckpt|checkpointing)(_|$)", re.IGNORECASE)
_EVAL_PATHS = (("/transformers/trainer.py", frozenset({"evaluate", "evaluation_loop", "prediction_step", "predict"})),
               ("/lightning/pytorch/loops/evaluation_loop.py", None),
               ("/pytorch_lightning/loops/evaluation_loop.py", None))
_EVAL_NAME = re.compile(r"(^|_)(eval|evaluate|evaluation|validate|validation|valid)(_|$)", re.IGNORECASE)


def pause_in(frames: list[str] | tuple[str, ...]) -> str:
    """What known pause a thread with these frames (innermost first) is in, in words:
    "saving a checkpoint (torch.save)", "evaluating (evaluate)"; "" for none."""
    return _pause_in(tuple(frames))


# Every look asks of every thread; a stack that stands still is asked again and again.
@functools.lru_cache(maxsize=1024)
def _pause_in(frames: tuple[str, ...]) -> str:
    for text in frames:
        f = parse_frame(text)
        if f.path.endswith(_SERIALIZATION) and f.function in _SERIALIZATION_SAVES:
            return "saving a checkpoint (torch.save)"
        if any(p in f.path for p in _SAVE_PATHS):
            return f"saving a checkpoint ({f.function})"
        if any(p in f.path and (names is None or f.function in names) for p, names in _EVAL_PATHS):
            return f"evaluating ({f.function})"
        if own_code(f):
            if _SAVE_NAME.search(f.function):
                return f"saving a checkpoint ({f.function})"
            if _EVAL_NAME.search(f.function):
                return f"evaluating ({f.function})"
    return ""


_PHASE_PAUSES = {Phase.CHECKPOINTING.value: "saving a checkpoint (the trainer's phase)",
                 Phase.EVALUATING.value: "evaluating (the trainer's phase)"}


def phase_pause(phase: str | None) -> str:
    """The bundled trainer's pause from its phase in status.json ("" for none)."""
    return _PHASE_PAUSES.get(phase or "", "")


def known_pause(phase: str | None, probes: Iterable[ProbeReport],
                dumps: Mapping[int, StackDump] | None = None, kept: KeptByList | None = None) -> str:
    """The known pause a run is in now, in words ("" for none): the trainer's phase, else a
    non-daemon thread of a live process whose stack (its report's, or the stack dump taken
    after a stale report) is in a save or an evaluation, and not parked on a lock. `kept`: the
    watch's memory of each process's pause (a look asks this of every process twice: the
    tracker, the stall limit), None to work each out afresh."""
    pause = phase_pause(phase)
    if pause:
        return pause
    for p in probes:
        if p.ended:
            continue
        dump = (dumps or {}).get(p.pid)
        if dump is not None and dump.time > p.time:
            pause = _threads_pause(dump.threads)
        else:
            pause = kept.get(p.pid, p.threads) if kept is not None else None
            if pause is None:
                pause = _threads_pause(p.threads)
                if kept is not None:
                    kept.put(p.pid, p.threads, pause)
        if pause:
            return pause
    return ""



def _threads_pause(threads) -> str:
    for t in threads:
        if t.daemon:
            continue
        pause = pause_in(t.frames)
        if pause and (pause.endswith("(torch.save)")
                      or classify(t.frames, t.compile_state).cls is not ThreadClass.LOCK):
            return pause
    return ""
