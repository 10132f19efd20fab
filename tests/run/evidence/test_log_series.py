"""The metric lines of TorchTitan, Megatron-LM and the transformers Trainer as named series
(run/evidence/log_series.py), in the forms those programs print: TorchTitan's and Megatron's
lines built by their own format code, quoted from their sources (colours, thousands commas,
Megatron's padded "iteration N/ M |" fields), transformers 5's values as strings."""

from __future__ import annotations

from dflash_tui.run.evidence.log_series import LogSeries
from dflash_tui.run.evidence.progress import parse_text

# The lines as the programs build them: their format code quoted verbatim, run on fixed values.

class _TitanColor:
    """torchtitan/tools/utils.py `Color` (pytorch/torchtitan b5bcd76c)."""
    red, green, yellow, blue, magenta, cyan = "\033[31m", "\033[32m", "\033[33m", "\033[34m", "\033[35m", "\033[36m"
    reset, orange, turquoise = "\033[39m", "\033[38;2;180;60;0m", "\033[38;2;54;234;195m"


def titan_lines(step=20, global_avg_loss=7.12345, grad_norm=1.5, gib=36.86, pct=46.55, tps=16543.4,
                tflops=1321.0, mfu=32.4, loss=6.5):
    """torchtitan/components/metrics.py `MetricsProcessor.log` and `log_validation` (b5bcd76c,
    lines 524-535 and 569-575): the training line and the validation line."""
    color = _TitanColor
    max_reserved_gib, max_reserved_pct = gib, pct
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    train = (
        f"{color.red}step: {step:2}  "
        f"{color.green}loss: {global_avg_loss:8.5f}  "
        f"{color.orange}grad_norm: {grad_norm:7.4f}  "
        f"{color.turquoise}memory: {max_reserved_gib:5.2f}GiB"
        f"({max_reserved_pct:.2f}%)  "
        f"{color.blue}tps: {round(tps):,}  "
        f"{color.cyan}tflops: {tflops:,.2f}  "
        f"{color.magenta}mfu: {mfu_str}{color.reset}"
    )
    validate = (
        f"{color.yellow}validate step: {step:2}  "
        f"{color.green}loss: {loss:7.4f}  "
        f"{color.turquoise}memory: {max_reserved_gib:5.2f}GiB"
        f"({max_reserved_pct:.2f}%)  "
        f"{color.blue}tps: {round(tps):,}{color.reset}"
    )
    return train, validate


def megatron_line(iteration=10, train_iters=500, consumed_train_samples=640, elapsed_time_per_iteration=1.2345,
                  throughput=123.44, learning_rate=1.5e-4, batch_size=64, total_loss_dict=None,
                  loss_scale=1.0, grad_norm=3.4214, skipped=0, nan=0):
    """megatron/training/training.py `training_log` (NVIDIA/Megatron-LM d98e8a64, lines 3567-3641;
    --log-throughput on; a log time fixed for the datetime.now() of the first line)."""
    total_loss_dict = total_loss_dict or {"lm loss": 10.3686}
    log_string = f" [{'2026-08-22 15:00:00.123456'}]"
    log_string += ' iteration {:8d}/{:8d} |'.format(iteration, train_iters)
    log_string += ' consumed samples: {:12d} |'.format(consumed_train_samples)
    log_string += ' elapsed time per iteration (ms): {:.1f} |'.format(
        elapsed_time_per_iteration * 1000.0
    )
    log_string += f' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |'
    log_string += f' learning rate: {learning_rate:.6E} |'
    log_string += f' global batch size: {batch_size:5d} |'
    for key, avg in total_loss_dict.items():
        log_string += ' {}: {:.6E} |'.format(key, avg)
    log_string += f' loss scale: {loss_scale:.1f} |'
    log_string += f' grad norm: {grad_norm:.3f} |'
    log_string += ' number of skipped iterations: {:3d} |'.format(skipped)
    log_string += ' number of nan iterations: {:3d} |'.format(nan)
    return log_string


def test_torchtitan_lines_from_its_format_code_validation_apart():
    train, validate = titan_lines()
    s = LogSeries()
    s.feed(f"[rank0]:[titan] 2026-08-22 15:00:00,000 - root - INFO - {train}\n"
           f"[rank0]:[titan] 2026-08-22 15:00:01,000 - root - INFO - {validate}\n")
    got = {p.name: (p.step, p.value) for p in s.take()}
    assert got == {"loss": (20, 7.12345), "grad_norm": (20, 1.5), "memory": (20, 36.86), "tps": (20, 16543.0),
                   "tflops": (20, 1321.0), "mfu": (20, 32.4),
                   # the validation line's values are series of their own, not the training loss
                   "validate_loss": (20, 6.5), "validate_memory": (20, 36.86), "validate_tps": (20, 16543.0)}
    assert s.step == 20
    # The progress the summary shows keeps the training loss too.
    assert parse_text(f"{train}\n{validate}\n").loss == 7.12345
    s.feed(titan_lines(step=30, mfu=None)[0] + "\n")      # no MFU known: "mfu: N/A"
    assert {p.name for p in s.take()} == {"loss", "grad_norm", "memory", "tps", "tflops"}


def test_megatron_line_from_its_format_code():
    s = LogSeries()
    s.feed(megatron_line(total_loss_dict={"lm loss": 10.3686, "mtp_1 loss": 10.5}) + "\n")
    got = {p.name: (p.step, p.value) for p in s.take()}
    assert got == {"iteration_ms": (10, 1234.5), "tflops_per_gpu": (10, 123.4), "learning_rate": (10, 1.5e-4),
                   "lm_loss": (10, 10.3686), "mtp_1_loss": (10, 10.5), "loss_scale": (10, 1.0),
                   "grad_norm": (10, 3.421)}
    assert (s.step, s.total) == (10, 500)


def test_trainer_dicts_at_the_bar_step_split_across_reads():
    s = LogSeries()
    s.feed(" 25%|██▌       | 10/40 [00:01<00:03, 9.1it/s]\r{'loss': '3.917', 'grad_norm': '1.479', 'le")
    assert s.take() == []                       # the dict's line is not whole yet
    s.feed("arning_rate': '2.5e-06', 'epoch': '1.25'}\n{'eval_loss': 3.5, 'epoch': 1.25}\n")
    got = [(p.name, p.step, p.value) for p in s.take()]
    assert got == [("loss", 10, 3.917), ("grad_norm", 10, 1.479), ("learning_rate", 10, 2.5e-06), ("epoch", 10, 1.25),
                   ("eval_loss", 10, 3.5), ("epoch", 10, 1.25)]


def _plain_lines(n: int, start: int = 0) -> str:
    """The house load's lines (benchmarks/dashboard_cost.py): a step word, but no form's."""
    return "".join(f"1796456656.{k:06d} step {k} loss 2.3456 acc 0.4567 tau 3.21 tok/s 18450 thread drafter-{k % 16}\n"
                   for k in range(start, start + n))


def test_every_form_found_inside_a_big_chunk_of_other_lines(monkeypatch):
    """The chunk-level pre-test (may_hold_series) lets through each form a 1,000-line chunk
    holds, a colour-split word and a line whose word arrives in the next read included; a
    chunk of only other lines is not read line by line at all."""
    from dflash_tui.run.evidence import log_series
    train, _ = titan_lines(step=7)
    s = LogSeries()
    s.feed(_plain_lines(400) + megatron_line(iteration=12) + "\n" + _plain_lines(300, 400)
           + f"[rank0]:[titan] INFO - {train}\n" + _plain_lines(200, 700)
           + " 40%|████      | 16/40 [00:04<00:06, 4.0it/s]\r{'loss': 0.75, 'epoch': 0.4}\n" + _plain_lines(100, 900))
    got = [(p.name, p.step, p.value) for p in s.take()]
    assert ("lm_loss", 12, 10.3686) in got and ("mfu", 7, 32.4) in got
    assert ("loss", 16, 0.75) in got            # the dict at the bar's step, both inside the chunk
    assert s.forms == {"megatron", "torchtitan", "transformers"}
    # "step" and ":" apart by a colour, and a line whose "step:" is split across two reads.
    s.feed(_plain_lines(50) + "\x1b[31mstep\x1b[0m: 30  loss: 2.5\n" + _plain_lines(50, 50) + "ste")
    s.feed("p: 31  loss: 2.25\n")
    assert [(p.name, p.step, p.value) for p in s.take()] == [("loss", 30, 2.5), ("loss", 31, 2.25)]
    calls = []
    monkeypatch.setattr(log_series, "parse_line", lambda seg: calls.append(seg))
    s.feed(_plain_lines(1000, 1000))
    assert calls == [] and s.take() == []
