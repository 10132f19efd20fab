"""TFRecord framing (TensorBoard event files): records cut from bytes, each checked by CRC.

A record is: length (uint64 little-endian), masked CRC-32C of those 8 bytes, `length` bytes of
data, masked CRC-32C of the data. The CRC is google-crc32c's (C, GB/s; TensorBoard's own is
pure Python), masked as TensorFlow masks it. Bytes that end mid-record are left for the next
read (a writer that has not finished the record, or a file cut short); a length whose CRC fails
cannot be framed past, so the file is read no further and says why; a record whose data CRC
fails is skipped and counted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import google_crc32c

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
# A record longer than this is not a scalar summary worth reading (an image, a graph): its
# bytes are skipped unread when they are in hand, never asked for whole.
MAX_RECORD = 64 << 20


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass
class Framed:
    records: list[bytes] = field(default_factory=list)
    consumed: int = 0          # bytes of the input used up (whole records, skipped ones too)
    bad_data: int = 0          # records whose data CRC failed (skipped)
    broken: str = ""           # the framing is broken here: nothing past it can be read
    skip: int = 0              # bytes of a too-long record still to skip past `consumed`


def split_records(buf: bytes | memoryview, offset: int = 0) -> Framed:
    """The whole records at the start of `buf` (`offset`: where `buf` starts in the file, for
    the words of a problem)."""
    out = Framed()
    view = memoryview(buf)
    pos, n = 0, len(view)
    while n - pos >= _HEADER.size:
        length, len_crc = _HEADER.unpack_from(view, pos)
        if masked_crc(bytes(view[pos:pos + 8])) != len_crc:
            out.broken = f"a record's length fails its CRC at byte {offset + pos}"
            break
        end = pos + _HEADER.size + length + _FOOTER.size
        if length > MAX_RECORD:
            out.consumed = min(end, n)
            out.skip = max(0, end - n)
            pos = out.consumed
            continue
        if end > n:
            break          # the rest of this record is not written (or not read) yet
        data = view[pos + _HEADER.size:end - _FOOTER.size]
        (data_crc,) = _FOOTER.unpack_from(view, end - _FOOTER.size)
        if masked_crc(bytes(data)) == data_crc:
            out.records.append(bytes(data))
        else:
            out.bad_data += 1
        pos = end
    if not out.skip:
        out.consumed = pos
    return out


# How far into a buffer a resync looks for a record's start before giving up on that buffer.
RESYNC_SCAN = 256 << 10


def resync(buf: bytes | memoryview) -> int | None:
    """Where the first whole record starts in `buf`, which begins at an arbitrary byte (a read
    of a file's newest part): the first position whose length and data both pass their CRCs
    (a false start needs two 32-bit CRCs to match by chance). None: none within RESYNC_SCAN."""
    view = memoryview(buf)
    n = len(view)
    for pos in range(min(n - _HEADER.size, RESYNC_SCAN)):
        length, len_crc = _HEADER.unpack_from(view, pos)
        if length > MAX_RECORD or masked_crc(bytes(view[pos:pos + 8])) != len_crc:
            continue
        end = pos + _HEADER.size + length + _FOOTER.size
        if end > n:
            return pos        # a length that passed its CRC, its data not all here yet
        (data_crc,) = _FOOTER.unpack_from(view, end - _FOOTER.size)
        if masked_crc(bytes(view[pos + _HEADER.size:end - _FOOTER.size])) == data_crc:
            return pos
    return None


def frame(data: bytes) -> bytes:
    """One record as a writer frames it (what tests and benchmarks write with)."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))
