"""Training data: a synthetic corpus with learnable structure, JSONL / plain-text files, a
byte-level tokenizer, and BatchSource, which cuts bucketed windows deterministically.

Every batch is a pure function of (seed, batch index), so resuming is exact: state() is just
that pair plus the shape settings, and nothing about the data has to be checkpointed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from .config import BOS_ID, BYTE_VOCAB_SIZE, EOS_ID, MASK_ID, PAD_ID

CPU_BUCKETS = (64, 128)
GPU_BUCKETS = (1024, 2048, 4096)


class DataError(ValueError):
    """Data that cannot be used: missing, empty, unparseable, too short for the buckets."""


# ---------------------------------------------------------------------------------------------
# Tokenizers


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255 plus the specials of config.py. Needs no files or downloads."""

    vocab_size = BYTE_VOCAB_SIZE
    pad_id, bos_id, eos_id, mask_id = PAD_ID, BOS_ID, EOS_ID, MASK_ID

    def encode(self, text: str | bytes) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)

    def decode(self, ids: Sequence[int]) -> str:
        special = {PAD_ID: "", BOS_ID: "", EOS_ID: "\n", MASK_ID: "\u2588"}
        out, run = [], bytearray()
        for i in ids:
            i = int(i)
            if i < 256:
                run.append(i)
                continue
            out.append(run.decode("utf-8", "replace"))
            run = bytearray()
            out.append(special.get(i, "?"))
        out.append(run.decode("utf-8", "replace"))
        return "".join(out)


# ---------------------------------------------------------------------------------------------
# Token streams


@dataclass
class TokenStream:
    """One long token sequence (documents joined by EOS) and which positions carry loss."""

    tokens: torch.Tensor     # [N] int64
    loss_mask: torch.Tensor  # [N] bool
    name: str

    def __len__(self) -> int:
        return int(self.tokens.numel())


class SyntheticCorpus:
    """A made-up language a tiny LM can learn: a fixed lexicon of words, each followed by one
    of three successor words with probabilities 0.6 / 0.3 / 0.1, sentences of 4-12 words.

    Inside a word every byte is determined; at a word boundary the target's greedy choice is
    the most likely successor. So a good drafter can predict long runs, and acceptance length
    measures something real. `language_seed` fixes the language; `seed` of stream() only picks
    which text is sampled from it.
    """

    NUM_WORDS = 64
    SUCCESSOR_PROBS = (0.6, 0.3, 0.1)

    def __init__(self, language_seed: int = 0) -> None:
        rng = random.Random(f"dflash-language-{language_seed}")
        words: list[str] = []
        seen: set[str] = set()
        while len(words) < self.NUM_WORDS:
            w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
            if w not in seen:
                seen.add(w)
                words.append(w)
        self.words = words
        self.successors = [rng.sample(range(self.NUM_WORDS), len(self.SUCCESSOR_PROBS))
                           for _ in range(self.NUM_WORDS)]
        self.language_seed = language_seed

    def text(self, num_bytes: int, seed: int) -> str:
        rng = random.Random(f"dflash-text-{self.language_seed}-{seed}")
        parts: list[str] = []
        size = 0
        while size < num_bytes:
            w = rng.randrange(self.NUM_WORDS)
            sentence = [self.words[w]]
            for _ in range(rng.randint(3, 11)):
                w = rng.choices(self.successors[w], weights=self.SUCCESSOR_PROBS)[0]
                sentence.append(self.words[w])
            s = " ".join(sentence) + ".\n"
            parts.append(s)
            size += len(s)
        return "".join(parts)[:num_bytes]

    def stream(self, num_tokens: int = 400_000, seed: int = 0, tokenizer: Any | None = None) -> TokenStream:
        """Byte ids by default. With a model's own `tokenizer` (a checkpoint target), the same
        text is tokenized by it instead, so the ids are ones that model knows; the stream is
        then shorter than `num_tokens` (its length is counted in bytes of text)."""
        text = self.text(num_tokens, seed)
        name = f"synthetic(language={self.language_seed})"
        if tokenizer is None or isinstance(tokenizer, ByteTokenizer):
            data = text.encode("ascii")
            tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)
        else:
            # In chunks cut at line ends: one 400 kB call would hold the whole text in one
            # encoding, one call per sentence would pay the call overhead 40k times.
            lines = text.splitlines(keepends=True)
            ids: list[int] = []
            for i in range(0, len(lines), 64):
                ids.extend(tokenizer.encode("".join(lines[i:i + 64])))
            if not ids:
                raise DataError(f"the tokenizer ({getattr(tokenizer, 'name', type(tokenizer).__name__)}) "
                                "turned the synthetic text into no tokens; use --data with a text file")
            tokens = torch.tensor(ids, dtype=torch.int64)
            name = f"synthetic(language={self.language_seed}, {getattr(tokenizer, 'name', type(tokenizer).__name__)})"
        return TokenStream(tokens, torch.ones_like(tokens, dtype=torch.bool), name)


def _require_file(path: Path) -> None:
    if not path.exists():
        raise DataError(f"data file not found: {path} (check the --data path)")
    if not path.is_file():
        raise DataError(f"data path is not a file: {path} (give a .jsonl or text file)")


def _join(docs: list[tuple[list[int], list[bool]]], name: str, eos_id: int = EOS_ID) -> TokenStream:
    tokens: list[int] = []
    mask: list[bool] = []
    for ids, m in docs:
        tokens.extend(ids)
        mask.extend(m)
        tokens.append(eos_id)
        mask.append(False)
    if not tokens or not any(mask):
        raise DataError(f"{name} holds no trainable text (empty file or only prompts); add text")
    return TokenStream(torch.tensor(tokens, dtype=torch.int64),
                       torch.tensor(mask, dtype=torch.bool), name)


def load_text(path: str | Path, tokenizer: Any | None = None) -> TokenStream:
    """A plain-text file; blank-line-separated paragraphs become documents."""
    path = Path(path)
    _require_file(path)
    tokenizer = tokenizer or ByteTokenizer()
    raw = path.read_bytes()
    text = raw.decode("utf-8", "replace")
    docs = [p for p in text.split("\n\n") if p.strip()]
    if not docs:
        raise DataError(f"data file is empty: {path} (it needs some text)")
    enc = [tokenizer.encode(d) for d in docs]
    return _join([(ids, [True] * len(ids)) for ids in enc], str(path), tokenizer.eos_id)


def load_jsonl(path: str | Path, tokenizer: Any | None = None) -> TokenStream:
    """JSONL, one record per line: {"text": ...}, or {"prompt": ..., "response": ...} (loss on
    the response only; "completion" is accepted for "response")."""
    path = Path(path)
    _require_file(path)
    tokenizer = tokenizer or ByteTokenizer()
    docs: list[tuple[list[int], list[bool]]] = []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg}); "
                                "each line must be one JSON object") from None
            if not isinstance(rec, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            if isinstance(rec.get("text"), str):
                ids = tokenizer.encode(rec["text"])
                docs.append((ids, [True] * len(ids)))
                continue
            response = rec.get("response", rec.get("completion"))
            if isinstance(rec.get("prompt"), str) and isinstance(response, str):
                p, r = tokenizer.encode(rec["prompt"]), tokenizer.encode(response)
                docs.append((p + r, [False] * len(p) + [True] * len(r)))
                continue
            raise DataError(f"{path}:{lineno}: record needs a string \"text\" field, or "
                            "\"prompt\" and \"response\" fields")
    if not docs:
        raise DataError(f"data file is empty: {path} (it needs JSON lines with text)")
    return _join(docs, str(path), tokenizer.eos_id)


def open_stream(spec: str | None = "synthetic", *, seed: int = 0, tokenizer: Any | None = None,
                synthetic_tokens: int = 400_000) -> TokenStream:
    """`synthetic` (default), a .jsonl/.json file, or any other file read as plain text.
    `tokenizer` (default: bytes) tokenizes files and the synthetic text alike."""
    if spec in (None, "", "synthetic"):
        return SyntheticCorpus().stream(synthetic_tokens, seed, tokenizer)
    path = Path(spec)
    if path.suffix.lower() in (".jsonl", ".json"):
        return load_jsonl(path, tokenizer)
    return load_text(path, tokenizer)


# ---------------------------------------------------------------------------------------------
# Batches


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] int64
    loss_mask: torch.Tensor  # [B, T] bool

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


def default_buckets(device_type: str, max_seq_len: int) -> tuple[int, ...]:
    buckets = GPU_BUCKETS if device_type == "cuda" else CPU_BUCKETS
    fit = tuple(b for b in buckets if b <= max_seq_len)
    return fit or (max_seq_len,)


class BatchSource:
    """Yields Batch(input_ids, loss_mask) of shape [batch_size, T], T drawn per batch from
    `buckets` (a small fixed set, so compiled kernels see few shapes). The tail
    `heldout_fraction` of the stream is never trained on and feeds heldout_prompts().
    `skip`: batch indexes passed over, so index i yields batch i + skip: a rollback's diverged
    window is not trained on again (kept in the checkpoint, so a later resume keeps it)."""

    def __init__(self, stream: TokenStream, batch_size: int, buckets: Sequence[int], seed: int,
                 heldout_fraction: float = 0.05, index: int = 0, skip: int = 0) -> None:
        if batch_size < 1:
            raise DataError(f"batch size must be >= 1 (got {batch_size})")
        buckets = tuple(sorted({int(b) for b in buckets}))
        if not buckets or buckets[0] < 2:
            raise DataError(f"sequence buckets must be lengths >= 2 (got {buckets})")
        if not 0.0 <= heldout_fraction < 1.0:
            raise DataError(f"heldout_fraction must be in [0, 1) (got {heldout_fraction})")
        self.stream = stream
        self.batch_size = batch_size
        self.buckets = buckets
        self.seed = int(seed)
        self.index = int(index)
        self.skip = int(skip)
        self.heldout_fraction = heldout_fraction
        self.train_len = len(stream) - int(len(stream) * heldout_fraction)
        if self.train_len < buckets[-1] + 1:
            raise DataError(f"{stream.name} has {self.train_len} training tokens, fewer than the "
                            f"longest sequence bucket {buckets[-1]}; add data or use smaller buckets")

    def batch_at(self, index: int) -> Batch:
        index += self.skip
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + index) % (2**63))
        t = self.buckets[int(torch.randint(len(self.buckets), (1,), generator=g))]
        starts = torch.randint(self.train_len - t + 1, (self.batch_size,), generator=g)
        idx = starts[:, None] + torch.arange(t)
        return Batch(self.stream.tokens[idx], self.stream.loss_mask[idx])

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        b = self.batch_at(self.index)
        self.index += 1
        return b

    def heldout_prompts(self, n: int, length: int) -> torch.Tensor:
        """[n, length] windows from the held-out tail, evenly spaced, the same on every call."""
        lo, hi = self.train_len, len(self.stream)
        if self.heldout_fraction == 0 or hi - lo < length:
            raise DataError(f"held-out part of {self.stream.name} has {hi - lo} tokens, fewer "
                            f"than a prompt of {length}; add data or raise heldout_fraction")
        span = hi - lo - length
        starts = [lo + (span * i) // max(n - 1, 1) for i in range(n)]
        return torch.stack([self.stream.tokens[s:s + length] for s in starts])

    def state(self) -> dict[str, Any]:
        return {"seed": self.seed, "index": self.index, "batch_size": self.batch_size,
                "buckets": list(self.buckets), "heldout_fraction": self.heldout_fraction,
                "stream": self.stream.name, "stream_len": len(self.stream), "skip": self.skip}

    @classmethod
    def from_state(cls, stream: TokenStream, state: dict[str, Any]) -> "BatchSource":
        if state.get("stream_len") != len(stream) or state.get("stream") != stream.name:
            raise DataError(f"checkpoint was trained on {state.get('stream')} "
                            f"({state.get('stream_len')} tokens), not {stream.name} "
                            f"({len(stream)} tokens): resume with the same --data")
        return cls(stream, state["batch_size"], state["buckets"], state["seed"],
                   state["heldout_fraction"], index=state["index"], skip=int(state.get("skip", 0)))
