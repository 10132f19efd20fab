"""The metric lines of TorchTitan, Megatron-LM and the transformers Trainer as named series
(run/evidence/log_series.py), in the forms those programs print (colours, thousands commas,
Megatron's padded "iteration N/ M |" fields, transformers 5's values as strings)."""

from __future__ import annotations

from dflash_tui.run.evidence.log_series import LogSeries

TITAN = ("\x1b[31mstep:  10  \x1b[32mloss:  7.1234  \x1b[33mmemory: 36.86GiB(46.55%)  "
         "\x1b[34mtps: 6,543  \x1b[36mtflops: 321.0  \x1b[35mmfu: 32.4%\x1b[39m\n")
MEGATRON = (" [2025-01-01 10:00:00] iteration       10/     500 | consumed samples:          640 | "
            "elapsed time per iteration (ms): 1234.5 | learning rate: 1.500000E-04 | global batch size:    64 | "
            "lm loss: 1.036860E+01 | loss scale: 1.0 | grad norm: 3.421 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 | throughput per GPU (TFLOP/s/GPU): 123.4 |\n")


def test_torchtitan_line():
    s = LogSeries()
    s.feed(TITAN)
    assert {p.name: (p.step, p.value) for p in s.take()} == {
        "loss": (10, 7.1234), "memory": (10, 36.86), "tps": (10, 6543.0), "tflops": (10, 321.0), "mfu": (10, 32.4)}


def test_megatron_line_with_its_total():
    s = LogSeries()
    s.feed(MEGATRON.encode())
    got = {p.name: p.value for p in s.take()}
    assert got["lm_loss"] == 10.3686 and got["tflops_per_gpu"] == 123.4 and got["learning_rate"] == 1.5e-4
    assert got["iteration_ms"] == 1234.5 and "global_batch_size" not in got
    assert (s.step, s.total) == (10, 500)


def test_trainer_dicts_at_the_bar_step_split_across_reads():
    s = LogSeries()
    s.feed(" 25%|██▌       | 10/40 [00:01<00:03, 9.1it/s]\r{'loss': '3.917', 'grad_norm': '1.479', 'le")
    assert s.take() == []                       # the dict's line is not whole yet
    s.feed("arning_rate': '2.5e-06', 'epoch': '1.25'}\n{'eval_loss': 3.5, 'epoch': 1.25}\n")
    got = [(p.name, p.step, p.value) for p in s.take()]
    assert got == [("loss", 10, 3.917), ("grad_norm", 10, 1.479), ("learning_rate", 10, 2.5e-06), ("epoch", 10, 1.25),
                   ("eval_loss", 10, 3.5), ("epoch", 10, 1.25)]
