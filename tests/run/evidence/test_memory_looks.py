"""MemoryLooks between samples (run/evidence/memory_runway.py): a look that samples nothing hands
out the runway of the last sample, the same object, so its `memory` check is worked out once;
each use carries the step it was sampled at."""

from dflash_tui.gpu.sample import GpuProcess, GpuSample, GpuSnapshot
from dflash_tui.run.evidence.memory_runway import MemoryLooks
from dflash_tui.run.verdict.checks.memory import memory_check

MB = 1 << 20


def snapshot(used: int) -> GpuSnapshot:
    gpu = GpuSample(0, "GPU", "uuid-0", mem_total_bytes=8 << 30,
                    processes=(GpuProcess(4242, used, is_run_process=True),))
    return GpuSnapshot(0.0, "fake", (gpu,))


def test_the_runway_and_its_check_stand_until_a_sample_changes_them():
    looks = MemoryLooks(every_s=5.0)
    looks.note_gpus(100.0, 40, "run-1", snapshot(1024 * MB))
    first = looks.runway()
    check = memory_check(first)
    assert first is not None and first.gpus[0].used == 1024 * MB and first.gpus[0].step == 40
    # 2 s on, at a later step: within every_s no sample is taken, and nothing is worked out again.
    looks.note_gpus(102.0, 60, "run-1", snapshot(2048 * MB))
    assert looks.runway() is first and memory_check(looks.runway()) is check
    assert first.gpus[0].step == 40          # the step of the sample, not of the look
    # Past every_s the new sample makes a new runway and a new check.
    looks.note_gpus(106.0, 80, "run-1", snapshot(2048 * MB))
    later = looks.runway()
    assert later is not first and later.gpus[0].used == 2048 * MB and later.gpus[0].step == 80
    assert memory_check(later) is not check and "2.0 GiB of 8.0 GiB" in memory_check(later).cause
    # A new run starts afresh.
    looks.note_gpus(107.0, 1, "run-2", snapshot(512 * MB))
    assert looks.runway().gpus[0].used == 512 * MB
