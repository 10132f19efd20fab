"""The log progress parser over lines in the formats real trainers print.

tqdm bars come from the real tqdm (installed with transformers), written to a buffer exactly as
they reach a log file: carriage-return updates on one line. The Trainer and Lightning lines are
verbatim shapes of what transformers' ProgressCallback and Lightning's TQDMProgressBar print.
"""

from __future__ import annotations

import io

import pytest
import tqdm

from dflash_tui.progress_regex import ProgressRegexError, compile_progress_regex
from dflash_tui.run.evidence.progress import ProgressParser, parse_text


def test_step_loss_lines():
    p = parse_text("loading data\nstep 1 loss 2.5000\nstep 2 loss 2.2500\n")
    assert (p.step, p.loss, p.records) == (2, 2.25, 2)
    p = parse_text("Step 30/100 | loss: 1.25e-1 | 12.5 it/s\n")
    assert (p.step, p.total, p.loss, p.rate, p.rate_unit) == (30, 100, 0.125, 12.5, "it/s")
    p = parse_text("iter 7, train_loss=0.9, 3.1 s/it\n")
    assert (p.step, p.loss, p.rate, p.rate_unit) == (7, 0.9, 3.1, "s/it")
    p = parse_text("10:01:02 step 99/2000 loss 0.4312 acc 0.710 tok/s 1234\n")   # the bundled trainer
    assert (p.step, p.total, p.loss) == (99, 2000, 0.4312)


def test_lines_that_are_not_progress():
    p = parse_text("dflash-tui: run 1 started by pid 3 at 2026-01-01T00:00:00Z\n"
                   "Downloading model...\nwarming up on 12/31\nmax_steps_total set\n")
    assert not p.seen and p.step is None


def test_real_tqdm_bar_carriage_returns_and_the_unfinished_line():
    buf = io.StringIO()
    bar = tqdm.tqdm(total=1000, file=buf, mininterval=0, miniters=1, ascii=False)
    parser = ProgressParser()
    offset = 0
    for i in range(5):
        bar.update(100)
        bar.set_postfix(loss=f"{2.0 - i * 0.1:.2f}", refresh=True)
        text = buf.getvalue()
        parser.feed(text[offset:])
        offset = len(text)
        # No newline yet: the bar's current state is read all the same.
        assert parser.progress.step == 100 * (i + 1), repr(text[-120:])
        assert parser.progress.total == 1000
        assert parser.progress.loss == pytest.approx(2.0 - i * 0.1)
    assert "\n" not in buf.getvalue().rstrip("\n")
    assert parser.progress.rate_unit in ("it/s", "s/it")
    bar.close()


def test_lightning_bar():
    line = ("\rEpoch 0:  45%|████▌     | 450/1000 [00:10<00:12, 44.30it/s, v_num=0, train_loss=2.100]"
            "\rEpoch 0:  46%|████▌     | 460/1000 [00:10<00:12, 44.31it/s, v_num=0, train_loss=2.050]")
    p = parse_text(line)
    assert (p.step, p.total, p.loss, p.rate, p.epoch) == (460, 1000, 2.05, 44.31, 0.0)


def test_lightning_s_step_counts_within_its_epoch_and_says_it():
    # Lightning's TQDMProgressBar: "51/64" is the 51st batch of epoch 2's 64, not a step of 64.
    p = parse_text("\rEpoch 2:  80%|████████  | 51/64 [00:10<00:02, 5.10it/s, v_num=0, train_loss=2.100]")
    assert (p.step, p.total, p.step_epoch) == (51, 64, 2.0)
    # A step said without an epoch (or by another form) counts within none.
    assert parse_text("Step 30/100 loss 1.2\n").step_epoch is None
    assert parse_text("epoch 3 step 120 loss 1.2\n").step_epoch is None


def test_a_step_and_its_total_come_from_one_line():
    # A Lightning bar, then a crash whose exception text names a step: the bar's total (the
    # epoch's batches) is not the total of that step.
    bar = "\rEpoch 1:  92%|█████████▏| 59/64 [00:11<00:00, 5.10it/s, v_num=0, train_loss=2.100]"
    p = parse_text(bar + "\nTraceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
                   "RuntimeError: loss is NaN at step 120\n")
    assert (p.step, p.total, p.step_epoch) == (120, None, None), p
    # A total said once holds for the later steps of the same form.
    p = parse_text("Step 10/200 loss 2.0\nstep 11 loss 1.9\n")
    assert (p.step, p.total) == (11, 200)


def test_transformers_trainer_dicts():
    text = ("{'loss': 2.1043, 'grad_norm': 1.532, 'learning_rate': 4.5e-05, 'epoch': 0.3}\n"
            "{'eval_loss': 1.9, 'eval_runtime': 1.2, 'epoch': 0.5}\n"
            "{'loss': 1.7, 'grad_norm': 0.9, 'learning_rate': 4e-05, 'epoch': 0.6}\n"
            "Saving model checkpoint to out/checkpoint-500\n")
    p = parse_text(text)
    assert (p.loss, p.epoch, p.records) == (1.7, 0.6, 4)
    assert p.checkpoint == "out/checkpoint-500"


def test_json_lines():
    p = parse_text('{"step": 10, "loss": 2.5, "max_steps": 50}\n{"step": 11, "loss": 2.4}\n')
    assert (p.step, p.total, p.loss, p.records) == (11, 50, 2.4, 2)
    # Hostile numbers and shapes are no progress, never an exception.
    p = parse_text('{"step": "3", "loss": NaN}\n{"step": 1e400}\n{' + "[" * 5000 + "\n")
    assert p.step is None and p.loss is None


def test_profile_regex_first_and_its_validation():
    rx = compile_progress_regex(r"it=(?P<step>\d+) of (?P<total>\d+) L=(?P<loss>[0-9.]+)")
    p = parse_text("it=5 of 9 L=0.5\n", rx)
    assert (p.step, p.total, p.loss) == (5, 9, 0.5)
    with pytest.raises(ProgressRegexError, match="not a valid regular expression"):
        compile_progress_regex("step (")
    with pytest.raises(ProgressRegexError, match="only"):
        compile_progress_regex(r"(?P<epoch>\d+)")
    with pytest.raises(ProgressRegexError, match="names no group"):
        compile_progress_regex(r"step \d+")


def test_a_segment_split_across_reads_counts_once():
    parser = ProgressParser()
    assert parser.feed(b"step 4") == 0
    assert parser.feed(b"2 loss 1.0\n") == 1
    assert parser.progress.step == 42 and parser.progress.records == 1
    assert parser.feed(b"x" * 100_000) == 0            # no newline: bounded, not buffered whole
    assert len(parser._partial) <= 4096


def test_a_rate_written_after_its_unit():
    # The bundled trainer's own line: the number after "tok/s" is the rate, not tau's before it.
    p = parse_text("step 12/2000 loss 2.3000 acc 0.400 tau 1.21 tok/s 18,450\n")
    assert (p.step, p.total, p.loss, p.rate, p.rate_unit) == (12, 2000, 2.3, 18450.0, "tok/s")
    p = parse_text(" 45%|████▌     | 450/1000 [00:10<00:12, 44.3it/s, loss=2.1]")
    assert (p.rate, p.rate_unit) == (44.3, "it/s")


def test_a_busy_poll_parses_its_newest_lines_and_counts_them_all():
    text = "".join(f"step {i} loss {2 + i / 1000:.3f} tok/s {1000 + i}\n" for i in range(5000))
    p = parse_text(text)
    assert (p.step, p.loss, p.rate, p.records, p.output) == (4999, 6.999, 5999.0, 5000, 5000)


PLAIN_LINES = ("step 12 loss 2.5", "Step 3/100", "iter 7", "  ", "", "dflash-tui: run 2 started",
               "{'loss': 1.5, 'epoch': 0.3}", ' {"step": 4}', "{'grad_norm': 0.9}", "loading shards", "ERROR in rank 3",
               "tok/s 1,234 loss nan", " 45%|████▌ | 450/1000 [00:10<00:12, 44.3it/s, loss=2.1]",
               "EPOCH 2 ı", "warming up on 12/31", "Epoch 0/9 ━━━━╸ 450/1000 0:00:10")


@pytest.mark.parametrize("regex", [None, r"iter (?P<step>\d+)"])
def test_plain_lines_read_from_the_newest_back_agree_with_reading_each_in_order(regex):
    # A poll of plain new lines (no escapes, redraws, checkpoint or disk lines) is read from its
    # newest line back; the line-by-line reading every other chunk gets must say the same.
    import random
    rng = random.Random(23)
    for n in (0, 1, 5, 31, 32, 33, 90, 400):
        segs = [rng.choice(PLAIN_LINES) for _ in range(n)]
        newest, in_order = ProgressParser(regex), ProgressParser(regex)
        fast = newest._newest_candidates(segs)
        slow = in_order._candidates(segs, [False] * n, escapes=False, disk=False, checkpoint=False)
        assert fast == slow and newest.progress == in_order.progress, n
    # Through feed: a busy poll of mixed plain lines, in pieces, ends where one whole read does.
    text = "".join(rng.choice(PLAIN_LINES) + "\n" for _ in range(3000))
    whole, pieces = ProgressParser(regex), ProgressParser(regex)
    whole.feed(text)
    cut = len(text) // 3
    pieces.feed(text[:cut])
    pieces.feed(text[cut:])
    assert whole.progress.output == pieces.progress.output == sum(
        1 for line in text.splitlines() if line.strip() and not line.startswith("dflash-tui: "))
    assert (whole.progress.step, whole.progress.loss) == (pieces.progress.step, pieces.progress.loss)


def test_rare_lines_are_found_by_case_insensitive_words_beyond_ascii():
    # The checkpoint form matches case-insensitively; a substring test on the lowered chunk
    # decides whether it is searched at all, so the letters Python's re folds to ASCII count too.
    p = parse_text("step 1\nCHECKPOİNT: step 1 saved to /ck/1\n")
    assert p.checkpoint == "/ck/1"
    p = parse_text("step 2\n[Errno 28] No space left on device: '/ck'\n")
    assert "No space left on device" in p.disk_error


def test_each_search_still_runs_where_its_words_are(monkeypatch):
    """A segment's searches run only where their words are (progress.py's _segment): words in
    capitals, the characters `re` folds to an ASCII letter (ſ for s), a bar, an evaluation's
    line and an epoch are all still read; a plain step line runs no bar, evaluation or epoch
    search at all."""
    p = parse_text("STEP 4 LOSS 0.5 EPOCH 2\n")
    assert (p.step, p.loss, p.epoch) == (4, 0.5, 2.0)
    p = parse_text("ſtep 5/10 loſs 0.25\n")    # the "/" makes it a candidate line
    assert (p.step, p.total, p.loss) == (5, 10, 0.25)
    p = parse_text("Epoch 1:  40%|████      | 16/40 [00:04<00:06, 4.00it/s, loss=0.75]\n")
    assert (p.step, p.total, p.step_epoch, p.loss) == (16, 40, 1.0, 0.75)
    p = parse_text("Epoch 0/9 ━━━━━━━━━━━━ 450/1000 0:00:10 • 0:00:12 44.30it/s train_loss: 2.10\n")
    assert (p.step, p.total, p.loss) == (450, 1000, 2.1)
    p = parse_text("step: 20  loss: 7.1\nVALIDATE STEP: 20  LOSS: 6.5\n")   # not the training loss
    assert (p.step, p.loss, p.records) == (20, 7.1, 2)
    p = parse_text("step 9 loss 1.5\ncheckpoint: step 9 saved to /ckpt/9\n")
    assert p.checkpoint == "/ckpt/9"
    from dflash_tui.run.evidence import progress
    # The chunk's disk-full test: a capital of each word first, then the words.
    assert all(any(c in w for c in progress._DISK_FULL_CHARS) for w in progress._DISK_FULL_WORDS)
    for line in ("OSError: [Errno 28] No space left on device", "write failed: ENOSPC",
                 "Disk quota exceeded", "No space left on device"):
        plain = "".join(f"step {k} loss 2.5\n" for k in range(500))
        assert line in parse_text(plain + line + "\n" + plain).disk_error
    searched = []

    class Counted:
        def __init__(self, name, pattern):
            self.name, self.pattern = name, pattern

        def search(self, text):
            searched.append(self.name)
            return self.pattern.search(text)
    for name in ("_BAR", "_BAR_RICH", "_EVAL_STEP", "_EPOCH"):
        monkeypatch.setattr(progress, name, Counted(name, getattr(progress, name)))
    p = parse_text("".join(f"1796456656.{k:06d} step {k} loss 2.3456 acc 0.4567 tau 3.21 tok/s 18450\n"
                           for k in range(100)))
    assert (p.step, p.loss, p.rate, p.records) == (99, 2.3456, 18450.0, 100)
    assert searched == []
