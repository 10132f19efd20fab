"""Whether a checkpoint file is whole, from a few bounded bytes of it; no tensor is ever loaded.

Pure: each judge takes the bytes a caller read (the head or the tail of the file, never more
than the constants below) and the file's size, and answers "" when the file is whole, else why
it is not ("no end-of-central-directory record: cut short"). Read through RemoteOps by
run/evidence/checkpoints.py, so the same answers come over the agent and over ShellOps.

- zip (`torch.save` since PyTorch 1.6, Lightning's `.ckpt`, HF's `pytorch_model.bin`): the
  end-of-central-directory record is written last; present, and the central directory it
  points at ends exactly where that record (or its ZIP64 twin) begins. A forged directory (an
  offset past the end, a size that overlaps the record, more entries than bytes) is not whole,
  and nothing in it is followed further than the tail read.
- safetensors: 8 bytes of header length, the JSON header, then the data; the largest
  `data_offsets` end is exactly the rest of the file.
- trainer_state.json (Hugging Face's, written last into `checkpoint-N/`): parses, with a step.
"""

from __future__ import annotations

import json
import struct

# The end record is 22 bytes plus a comment of at most 65,535; ZIP64 adds a 20-byte locator
# and a 56-byte record before it.
ZIP_TAIL_BYTES = 22 + 0xFFFF + 20 + 56
ZIP_MAGIC = b"PK\x03\x04"
_EOCD, _LOC64, _EOCD64, _CDIR = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06", b"PK\x01\x02"
_CDIR_ENTRY_MIN = 46
# safetensors' own limit on its header (the reference reader refuses a longer one).
SAFETENSORS_HEADER_MAX = 100 << 20
SAFETENSORS_HEAD_BYTES = 256 << 10   # the first read; a longer header is read once more, whole
TRAINER_STATE_MAX = 4 << 20


def is_zip(head: bytes) -> bool:
    return head[:4] == ZIP_MAGIC


def judge_zip(tail: bytes, size: int) -> str:
    """"" when the zip whose last `len(tail)` bytes are `tail` (of `size` bytes) is whole."""
    if size < 22 or len(tail) < 22:
        return f"{size} bytes: too short for a zip"
    base = size - len(tail)   # where the tail starts in the file
    i = tail.rfind(_EOCD)
    while i >= 0:
        # The record whose comment reaches exactly to the end is the real one; a comment may
        # itself hold the signature.
        if i + 22 <= len(tail) and i + 22 + struct.unpack_from("<H", tail, i + 20)[0] == len(tail):
            break
        i = tail.rfind(_EOCD, 0, i)
    if i < 0:
        return "no end-of-central-directory record: cut short or still being written"
    entries, cd_size, cd_offset = struct.unpack_from("<xxxxxxxxxxHII", tail, i)[0:3]
    end_at = base + i          # where the central directory must end
    j = i - 20
    # A ZIP64 locator just before the end record (PyTorch writes one always) says where the
    # directory ends: at the ZIP64 end record.
    has_zip64 = j >= 0 and tail[j:j + 4] == _LOC64
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF or has_zip64:
        if not has_zip64:
            return "a ZIP64 end record is named but its locator is missing"
        (rec64,) = struct.unpack_from("<Q", tail, j + 8)
        k = rec64 - base
        if not 0 <= k <= j - 56 or tail[k:k + 4] != _EOCD64:
            return f"the ZIP64 end record at offset {rec64} is not where its locator says"
        entries, cd_size, cd_offset = struct.unpack_from("<QQQ", tail, k + 32)
        end_at = rec64
    if cd_offset + cd_size != end_at:
        return (f"its central directory ({cd_size} bytes at offset {cd_offset}) does not end where "
                f"the end record begins (offset {end_at}): forged or cut")
    if entries * _CDIR_ENTRY_MIN > cd_size:
        return f"its central directory of {cd_size} bytes cannot hold the {entries} entries it names"
    k = cd_offset - base
    if entries and 0 <= k <= len(tail) - 4 and tail[k:k + 4] != _CDIR:
        return f"no central directory entry at offset {cd_offset}"
    return ""


def safetensors_header_length(head: bytes) -> int | None:
    """The header length the first 8 bytes say; None when fewer were read."""
    return struct.unpack_from("<Q", head)[0] if len(head) >= 8 else None


def judge_safetensors(head: bytes, size: int) -> str:
    """"" when the safetensors file whose first bytes are `head` (its whole header, unless the
    header is longer than the file or SAFETENSORS_HEADER_MAX) is whole."""
    n = safetensors_header_length(head)
    if n is None:
        return f"{size} bytes: too short for a safetensors header"
    if n > SAFETENSORS_HEADER_MAX:
        return f"a header of {n} bytes is longer than safetensors allows"
    if 8 + n > size:
        return f"a header of {n} bytes does not fit in {size} bytes: cut short"
    if len(head) < 8 + n:
        return f"only {len(head) - 8} of its header's {n} bytes were read"
    try:
        header = json.loads(head[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    end = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        offsets = t.get("data_offsets") if isinstance(t, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
                or offsets[0] > offsets[1]):
            return "a tensor's data_offsets are not two ordered byte offsets"
        end = max(end, offsets[1])
    if 8 + n + end != size:
        return f"its tensors end at byte {8 + n + end} but the file has {size}: cut short or padded"
    return ""


def judge_trainer_state(data: bytes, size: int) -> tuple[str, int | None]:
    """("" and its global_step) when Hugging Face's trainer_state.json parses; else why not."""
    if size > TRAINER_STATE_MAX:
        return f"trainer_state.json of {size} bytes is larger than a trainer's", None
    try:
        state = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "trainer_state.json does not parse: cut short or still being written", None
    step = state.get("global_step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return "trainer_state.json names no global_step", None
    return "", step
