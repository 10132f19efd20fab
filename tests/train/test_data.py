"""Data sources and batches: determinism, buckets, exact resume, clear errors."""

from __future__ import annotations

import json

import pytest
import torch

from dflash_train.config import EOS_ID
from dflash_train.data import (BatchSource, ByteTokenizer, DataError, SyntheticCorpus, TokenStream,
                               default_buckets, load_jsonl, load_text, open_stream)


@pytest.fixture(scope="module")
def stream():
    return SyntheticCorpus().stream(50_000, seed=0)


def test_synthetic_corpus_is_deterministic_and_structured():
    a, b = SyntheticCorpus().stream(5_000, seed=1), SyntheticCorpus().stream(5_000, seed=1)
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, SyntheticCorpus().stream(5_000, seed=2).tokens)
    text = ByteTokenizer().decode(a.tokens.tolist())
    corpus = SyntheticCorpus()
    words = text.replace(".", " ").split()[1:-1]  # the first/last may be cut by the window
    assert words and all(w in corpus.words for w in words)
    # Learnable structure: each word is followed only by its three successors.
    succ = {w: {corpus.words[j] for j in corpus.successors[i]} for i, w in enumerate(corpus.words)}
    for sentence in text.split(".\n")[1:-1]:
        ws = sentence.split()
        assert all(nxt in succ[cur] for cur, nxt in zip(ws, ws[1:]))


def test_batches_are_bucketed_deterministic_and_resume_exactly(stream):
    src = BatchSource(stream, 4, (64, 128), seed=7)
    seen = [next(src) for _ in range(12)]
    assert {b.input_ids.shape[1] for b in seen} == {64, 128}
    assert all(b.input_ids.shape[0] == 4 and b.loss_mask.shape == b.input_ids.shape for b in seen)
    # Resume from the state after 5 batches reproduces batches 5.. bit for bit.
    src2 = BatchSource(stream, 4, (64, 128), seed=7)
    for _ in range(5):
        next(src2)
    resumed = BatchSource.from_state(stream, json.loads(json.dumps(src2.state())))
    for want in seen[5:]:
        assert torch.equal(next(resumed).input_ids, want.input_ids)
    other = BatchSource(stream, 4, (64, 128), seed=8)
    assert not torch.equal(next(other).input_ids, seen[0].input_ids)


def test_resume_refuses_different_data(stream):
    state = BatchSource(stream, 2, (64,), seed=0).state()
    with pytest.raises(DataError, match="resume with the same --data"):
        BatchSource.from_state(SyntheticCorpus().stream(40_000, seed=0), state)


def test_heldout_prompts_never_overlap_training_windows():
    # Tokens 0..99 everywhere, 200 only in the held-out tail: no batch may ever contain 200.
    n = 20_000
    tokens = torch.arange(n) % 100
    tokens[n - n // 10:] = 200
    src = BatchSource(TokenStream(tokens, torch.ones(n, dtype=torch.bool), "probe"), 8, (128,),
                      seed=0, heldout_fraction=0.1)
    for _ in range(200):
        assert not (next(src).input_ids == 200).any()
    prompts = src.heldout_prompts(6, 32)
    assert prompts.shape == (6, 32) and (prompts == 200).all()
    assert torch.equal(src.heldout_prompts(6, 32), prompts)


def test_jsonl_text_and_prompt_response(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"text": "hello"}) + "\n\n"
                 + json.dumps({"prompt": "Q?", "response": "ok"}) + "\n")
    s = load_jsonl(p)
    assert s.tokens.tolist() == list(b"hello") + [EOS_ID] + list(b"Q?ok") + [EOS_ID]
    assert s.loss_mask.tolist() == [True] * 5 + [False] + [False, False, True, True] + [False]
    assert open_stream(str(p)).tokens.tolist() == s.tokens.tolist()


def test_text_file_paragraphs(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text("one\n\n\n\ntwo")
    assert load_text(p).tokens.tolist() == list(b"one") + [EOS_ID] + list(b"two") + [EOS_ID]


@pytest.mark.parametrize("content, message", [
    (None, "data file not found"),
    ("", "data file is empty"),
    ('{"text": "a"}\n{oops\n', r"d.jsonl:2: not valid JSON"),
    ('[1, 2]\n', r"d.jsonl:1: expected a JSON object"),
    ('{"txt": "a"}\n', r"needs a string \"text\" field"),
    ('{"prompt": "only prompt", "response": ""}\n', "no trainable text"),
])
def test_bad_jsonl_gives_one_clear_line(tmp_path, content, message):
    p = tmp_path / "d.jsonl"
    if content is not None:
        p.write_text(content)
    with pytest.raises(DataError, match=message) as err:
        load_jsonl(p)
    assert "\n" not in str(err.value)


def test_data_too_short_for_buckets(tmp_path):
    p = tmp_path / "small.txt"
    p.write_text("tiny text")
    with pytest.raises(DataError, match="fewer than the longest sequence bucket 64"):
        BatchSource(open_stream(str(p)), 2, (64,), seed=0)


def test_default_buckets():
    assert default_buckets("cpu", 256) == (64, 128)
    assert default_buckets("cuda", 8192) == (1024, 2048, 4096)
    assert default_buckets("cuda", 2048) == (1024, 2048)
    assert default_buckets("cpu", 32) == (32,)
