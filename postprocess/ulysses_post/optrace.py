"""The byte form of one rank's op trace (model/trace.cpp, serialize()), read with numpy.

The report's `op_*` columns say what each op is; the few fields they leave out live only
in the byte form stored beside them (`trace_rank<R>`): which 64-bit word an epoch write
or wait touches (needed to pair a wait with the write that releases it, as the
simulator does), the op's dimensions (GEMM M N K, copy width/height) and the peer a
wait is labelled with. The layout is fixed, little-endian and packed; every count is
checked against the bytes left, as the C++ reader does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

# The byte string's first word: "TRC2" since the ops carry their host times; "TRC1" before
# (the traces stored in older reports, read with NaN host times).
MAGIC, MAGIC_TRC1 = 0x54524332, 0x54524331

# One op, in serialize()'s field order (TRC1: without the last field).
_TRC1_FIELDS = [
    ("kind", "<i4"), ("stream", "<i4"), ("kernel", "<i4"), ("collective", "<i4"),
    ("flops", "<f8"), ("bytes", "<f8"), ("dims", "<i8", (4,)),
    ("src_mem", "<u8"), ("dst_mem", "<u8"), ("src_via", "<i4"), ("dst_via", "<i4"),
    ("word_mem", "<u8"), ("word_offset", "<u8"), ("value", "<u8"),
    ("label_peer", "<i4"), ("waits_for", "<i4"), ("group", "<i4"), ("sequence", "<i8"),
    ("measured_start_ms", "<f8"), ("measured_end_ms", "<f8"),
]
OP_DTYPE_TRC1 = np.dtype(_TRC1_FIELDS)
OP_DTYPE = np.dtype(_TRC1_FIELDS + [("measured_host_us", "<f8")])


class TraceBytesError(ValueError):
    """A byte string that is not a well-formed trace."""


@dataclass
class RankOps:
    rank: int
    world: int
    ops: np.ndarray  # OP_DTYPE, in issue order
    prior_writes: list[tuple[int, int, int]]  # (mem, offset, value) written before the trace


class _Cursor:
    def __init__(self, b: bytes) -> None:
        self.b, self.pos = b, 0

    def get(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.b):
            raise TraceBytesError("truncated byte string")
        v = struct.unpack_from(fmt, self.b, self.pos)
        self.pos += size
        return v

    def count(self, each: int) -> int:
        (n,) = self.get("<Q")
        if n > (len(self.b) - self.pos) // max(each, 1):
            raise TraceBytesError("count past the end")
        return n


def parse(b: bytes) -> RankOps:
    c = _Cursor(b)
    magic, rank, world = c.get("<Iii")
    if magic not in (MAGIC, MAGIC_TRC1):
        raise TraceBytesError("not a trace byte string")
    dtype = OP_DTYPE if magic == MAGIC else OP_DTYPE_TRC1
    n = c.count(1)
    c.get(f"<{n}B")  # stream priorities (also in stream_high_priority)
    n = c.count(8)
    c.get(f"<{n}Q")  # exported memory ids
    for _ in range(c.count(8)):
        k = c.count(4)
        c.get(f"<{k}i")
    n = c.count(24)
    flat = c.get(f"<{3 * n}Q")
    prior = [tuple(flat[i:i + 3]) for i in range(0, 3 * n, 3)]
    n = c.count(dtype.itemsize)
    if c.pos + n * dtype.itemsize != len(b):
        raise TraceBytesError("trailing bytes")
    ops = np.frombuffer(b, dtype, n, c.pos)
    if dtype is OP_DTYPE_TRC1:
        old, ops = ops, np.empty(n, OP_DTYPE)
        for name in OP_DTYPE_TRC1.names:
            ops[name] = old[name]
        ops["measured_host_us"] = np.nan
    return RankOps(rank=rank, world=world, ops=ops, prior_writes=prior)


def word_key(mem: int, offset: int, rank: int) -> tuple[int, int, int]:
    """The identity of a 64-bit word, as model/simulator.cpp keys it: a word in a rank's
    private memory (mem 0) is that rank's; an exported buffer's id names it for every rank."""
    return (0, offset, rank) if mem == 0 else (mem, offset, -1)
