"""TensorBoard event files: scalars from Event/Summary protobufs.

Decoded with the `tensorboard` package's own protos (tensorboard.compat.proto, generated from
the published .proto files; importing them loads protobuf only, not TensorBoard's server or
TensorFlow): the messages TensorBoard itself reads, decoded by protobuf's C parser, and no
hand-written wire-format reader. A scalar is a Summary.Value with `simple_value` (torch's and
tensorboardX's SummaryWriter, Lightning, TorchTitan) or a rank-0 float/double/int tensor
(TensorFlow 2's tf.summary.scalar, TensorBoard's scalar plugin); images, histograms, text
and anything else are left alone. Several event files of one directory are one run, read in
name order, as TensorBoard does.
"""

from __future__ import annotations

import math
import struct
from typing import NamedTuple

try:
    from tensorboard.compat.proto import event_pb2
except ImportError:            # a dashboard installed without it: the reader says so
    event_pb2 = None

from google.protobuf.message import DecodeError

EVENT_FILE = "events.out.tfevents.*"
MISSING = "TensorBoard event files need the tensorboard package (pip install tensorboard) to be decoded"
# DataType numbers of types.proto: DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF.
_FLOAT, _DOUBLE, _INT32, _INT64, _HALF = 1, 2, 3, 9, 19
_RAW = {_FLOAT: "<f", _DOUBLE: "<d", _INT32: "<i", _INT64: "<q", _HALF: "<e"}


class Scalar(NamedTuple):
    tag: str
    step: int
    value: float
    wall_time: float


def available() -> bool:
    return event_pb2 is not None


def _tensor_scalar(t) -> float | None:
    if len(t.tensor_shape.dim) != 0:
        return None
    if t.dtype == _FLOAT and t.float_val:
        return t.float_val[0]
    if t.dtype == _DOUBLE and t.double_val:
        return t.double_val[0]
    if t.dtype == _INT32 and t.int_val:
        return float(t.int_val[0])
    if t.dtype == _INT64 and t.int64_val:
        return float(t.int64_val[0])
    fmt = _RAW.get(t.dtype)
    if fmt and len(t.tensor_content) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, t.tensor_content)[0])
    return None


def scalars(records: list[bytes]) -> tuple[list[Scalar], int]:
    """The scalars of event records, and how many records could not be decoded."""
    out: list[Scalar] = []
    bad = 0
    ev = event_pb2.Event()
    for data in records:
        try:
            ev.ParseFromString(data)
        except DecodeError:
            bad += 1
            continue
        if not ev.HasField("summary"):
            continue
        for v in ev.summary.value:
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                x = v.simple_value
            elif kind == "tensor":
                x = _tensor_scalar(v.tensor)
            else:
                continue
            # NaN and Inf kept: the divergence watch reads them (MetricFiles.take keeps them off the charts).
            if x is not None:
                out.append(Scalar(v.tag, ev.step, float(x), ev.wall_time))
    return out, bad
