#!/usr/bin/env python3
"""Writes the corpus of malformed decks in tests/decks/ (each named for its defect) and
the manifest expected.txt that maps each file to a substring its one-line error must
contain. tests/e2e/test_bad_decks.py runs the program on every one; scripts/fuzz.sh
seeds its corpus with them.

    python3 tests/decks/make_bad_decks.py            # regenerate in place
    python3 tests/decks/make_bad_decks.py --check    # fail if a committed deck differs

Plain h5py, as a colleague would write a deck (docs/deck.md), in the HDF5 1.8 file
format so that the HDF5 1.10 of Debian reads every file. Each deck is a valid one-case
deck with exactly one thing spoilt, so the error is about that thing and nothing else.
"""
import base64
import hashlib
import io
import pathlib
import sys
import zlib

import h5py
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
STR = h5py.string_dtype()  # variable-length UTF-8, what h5py writes for str

# A valid case: passes validation and fits 1, 2 or 4 ranks (so no deck below is
# refused for its layout instead of its defect).
GOOD = dict(batch=1, seq_len=256, heads=8, head_dim=64, dtype="bf16", qk_norm="rms", rope="1d",
            fused_qkv=1, ulysses=0, tp=1, warmup=0, iterations=1)

# (file, expected substring of the error, how to spoil the deck); build(f) gets the
# open h5py.File after the valid deck has been written into it.
DECKS = []


def deck(name, expected):
    def register(fn):
        DECKS.append((name, expected, fn))
        return fn
    return register


def write_good(f, case="c1", fields=None):
    f.attrs["schema_version"] = 1
    f.attrs.create("cases", [case], dtype=STR)
    g = f.create_group(f"cases/{case}")
    for k, v in (fields or GOOD).items():
        g.attrs[k] = v
    return g


@deck("missing_seq_len.h5", "seq_len: missing (required field)")
def _(f):
    del f["cases/c1"].attrs["seq_len"]


@deck("string_where_int.h5", "batch: expected an integer, found a string")
def _(f):
    f["cases/c1"].attrs["batch"] = "1"


@deck("int_where_string.h5", "dtype: expected a string, found an integer")
def _(f):
    f["cases/c1"].attrs["dtype"] = 16


@deck("unknown_dtype.h5", "dtype: unknown value 'fp8'")
def _(f):
    f["cases/c1"].attrs["dtype"] = "fp8"


@deck("soft_link_case.h5", "c1: is a soft link")
def _(f):
    f.move("cases/c1", "elsewhere")
    f["cases/c1"] = h5py.SoftLink("/elsewhere")


@deck("external_link_case.h5", "c1: is an external link")
def _(f):
    del f["cases/c1"]
    # Would read another file (here a system file) if it were followed.
    f["cases/c1"] = h5py.ExternalLink("/etc/passwd", "/cases/c1")


@deck("hard_link_cycle.h5", "unknown field")
def _(f):
    # /cases/c1 is the root group itself: its attributes are not case fields.
    del f["cases/c1"]
    f["cases/c1"] = f["/"]


@deck("schema_v99.h5", "unknown schema version 99")
def _(f):
    f.attrs["schema_version"] = 99


@deck("heads_not_divisible.h5", "heads: 6 is not divisible by tp = 4")
def _(f):
    f["cases/c1"].attrs["heads"] = 6
    f["cases/c1"].attrs["tp"] = 4


@deck("fewer_heads_than_ranks.h5", "heads/tp = 3 is fewer than ulysses = 4")
def _(f):
    f["cases/c1"].attrs["heads"] = 3
    f["cases/c1"].attrs["ulysses"] = 4


@deck("odd_head_dim_with_rope.h5", "head_dim: 63 is odd")
def _(f):
    f["cases/c1"].attrs["head_dim"] = 63


@deck("negative_batch.h5", "batch: -1 is out of range")
def _(f):
    f["cases/c1"].attrs["batch"] = -1


@deck("absurd_seq_len.h5", "seq_len: 1000000000 is out of range")
def _(f):
    f["cases/c1"].attrs["seq_len"] = 10**9


@deck("int_overflow_heads.h5", "heads: 1099511627776 is out of range")
def _(f):
    f["cases/c1"].attrs["heads"] = 2**40


@deck("nan_tolerance.h5", "tol_max_abs: nan is out of range")
def _(f):
    f["cases/c1"].attrs["tol_max_abs"] = float("nan")


@deck("inf_watchdog.h5", "watchdog_s: inf is out of range")
def _(f):
    f["cases/c1"].attrs["watchdog_s"] = float("inf")


@deck("array_where_scalar.h5", "batch: expected a single value, found shape (2,)")
def _(f):
    f["cases/c1"].attrs["batch"] = np.array([1, 2], dtype=np.int64)


@deck("matrix_where_list.h5", "transports: expected a 1-D list, found shape (2, 1)")
def _(f):
    f["cases/c1"].attrs.create("transports", [["nccl"], ["ipc"]], dtype=STR)


@deck("null_dataspace.h5", "batch: has no value (empty dataspace)")
def _(f):
    f["cases/c1"].attrs["batch"] = h5py.Empty("<i8")


@deck("empty_transports.h5", "transports: empty list")
def _(f):
    f["cases/c1"].attrs.create("transports", np.array([], dtype=object), dtype=STR)


@deck("duplicate_schedule.h5", "schedules: duplicate name 'v-first'")
def _(f):
    f["cases/c1"].attrs.create("schedules", ["v-first", "v-first"], dtype=STR)


@deck("unknown_field.h5", "batchsize: unknown field")
def _(f):
    f["cases/c1"].attrs["batchsize"] = 2


@deck("control_chars_in_name.h5", "unknown field")
def _(f):
    # A field name with a newline and a terminal escape sequence: the error must stay
    # one line and must not pass the escape sequence to the terminal.
    f["cases/c1"].attrs["batch\n\x1b[2J\x1b[31mFAKE"] = 1


@deck("non_utf8_field_name.h5", "unknown field")
def _(f):
    # A field name that is not UTF-8 (0xff) and holds a C1 control (U+009B, CSI, which
    # some terminals take as an escape): printed, it must be valid UTF-8 and harmless.
    f["cases/c1"].attrs[b"batch\xff\xc2\x9b31m"] = 1


@deck("name_differs.h5", "differs from the case's group name 'c1'")
def _(f):
    f["cases/c1"].attrs["name"] = "other"


@deck("cases_list_mismatch.h5", "group is not listed in the root attribute 'cases'")
def _(f):
    f.move("cases/c1", "cases/c2")
    f.attrs.create("cases", ["c1"], dtype=STR)
    g = f.create_group("cases/c1")
    for k, v in GOOD.items():
        g.attrs[k] = v


@deck("case_listed_but_missing.h5", "missing: the root attribute 'cases' lists it")
def _(f):
    f.attrs.create("cases", ["c1", "c2"], dtype=STR)


@deck("duplicate_case_name.h5", "duplicate case name 'c1'")
def _(f):
    f.attrs.create("cases", ["c1", "c1"], dtype=STR)


@deck("no_cases.h5", "the deck has no cases")
def _(f):
    del f["cases/c1"]
    f.attrs.create("cases", np.array([], dtype=object), dtype=STR)


@deck("compressed_case_dataset.h5", "c1: is not a group")
def _(f):
    # The case stored as a chunked, gzip-compressed dataset with the fields as its
    # attributes: refused as not a group, without reading (or decompressing) it.
    del f["cases/c1"]
    d = f.create_dataset("cases/c1", data=np.arange(64, dtype=np.int32), chunks=(16,), compression="gzip",
                         shuffle=True)
    for k, v in GOOD.items():
        d.attrs[k] = v


@deck("huge_memory.h5", "memory")
def _(f):
    # Valid fields, at the 2^36-element bound: batch*seq_len*heads*head_dim = 2^36,
    # far more memory than any machine has. Refused by the memory estimate, before
    # anything is allocated.
    g = f["cases/c1"]
    g.attrs.update(batch=1024, seq_len=65536, heads=16, head_dim=64)


# Files that are not decks at all: bytes written directly.
def not_hdf5():
    return b"this is not an HDF5 file\n"


def zero_length():
    return b""


def truncated_file():
    """A valid deck cut in half: the HDF5 signature is there, the rest is missing."""
    buf = io.BytesIO()
    with h5py.File(buf, "w", libver=("earliest", "v108")) as f:
        write_good(f)
        f.attrs["description"] = "x" * 2000  # long enough that half of it is still a header
    data = buf.getvalue()
    return data[: len(data) // 2]


# Two files found by scripts/fuzz.sh --long (raw mode) that break libhdf5 1.10.8 itself,
# as zlib-compressed base64: the first makes it crash (SIGSEGV while listing a
# group's attributes), the second loop forever (reading a variable-length string from
# a corrupt global heap). The program must turn both into one clean error (lib/
# deck_wire.cpp reads the deck in a child process with a time limit); with another
# libhdf5 they may give an ordinary error instead, which passes as well.
SEGV = (
    "eNrtmcFu2kAQQNeYtg6lClWihnApnxB6qCr1QpWQcKgS1ObQm2vwIhCxDV6TKP2C5pZjPiHHfEaOOfZPmpwIXu8sXhcwqBxa"
    "ZR4Sw653ZszsWKsZX9T39l/lSjkSYhgkSwokzkiw81Ydw/XvQmpC/hTyOgPzWX6tKOYLwn5Zj8Y3Yv74S60Wrh4lAD+XbyJp"
    "EOQpUq99aoTym8yjiNuMuq5lMcpi+Vj/S7+vhadkXufJB5Hf6+Rh9HvEWh3qWOYp9VnXc8f3Z0CuVpXnA2SeNMT4OdkcPx1w"
    "39uaxj0W5NrIiqZpU+1kPo6/7vTJ5MHu0WctFiG5EAJUUcdZIZvtyvtQClNS+g5T1oFexVYDdbmOSYogK+IHhgBBEARBEARB"
    "kFQ0/pl03KCDcb8RjYuik5bWcbsqkVj/AVluD1S5sm4PWbLZ804dY7MHeWrP4H/AP93sSXbe4TyolqbHu7Eiv18Pj/bCkwz8"
    "/dpK7Ks44MolzHUEQRAEUau+5CmZJzuyEsmPz9amFbQ6ZJH31aBncD1GB+YJdWfqwY+kvw61bDbHnyH9wfv1Naln2l0HzM/S"
    "r0r9aqziMogdnPfpvIorViFBhZVR7BjczqBnup7vpNrRY3Z0xc4zbsf3+O2k2olXfFklLjkel/aQUdsc9E5T4jJrH4cn5yys"
    "RWfu4x96OtcL+sv6e8H1zizfGfbJAv7gf77ket2A+lbQ9Vy2qN+61A8r7sC3XNb3/EDop1XeSR4BqAWTdw=="
)

LOOP = (
    "eNrtmTFPwkAUx68UsCIqBkIQFwY/gDoxYgRlMELUwa3W0oRGW6CtGr+Bbo6Ojo5+DEc+gh/DDdvru9KrFDBu8n6EPO567/8u"
    "l3cvV+6pWT9czZQzxEOSSJLkSJgR8LrNt9nzS7AC2EewbwnWn6TPStCfA/2K6Lffof/8tNHwRo8isDjPRd9KBFlEmo39tmcv"
    "gjzy+Ujw41TF1uxQPjb/GHcDIkXzOkuqkN/r7m+J2GpXMxT5TrNsvWe685NYrta4/cFslrShnSYFd3eweW8KAo2YC8b6KoIg"
    "TNTxpjOEvZRyv0cHrWMhtEDhcXR9djGXkDEC/YzrM8v3r7zfLhXnq88vZX5fIotdnytgq8VIfYb6o+7xbVanqr+Me3bSqnsZ"
    "zM4FwzyvF81jBEEQBEEQBMH3OXyfQ/B97n/VgbWJ/7t/bkGHGK4DJLYOIAiCIHiAxAMkggdIPEDGHyAjGqx2MJEK1IQs2YEY"
    "aXp5fqU4apfMc2nO/CT/0l0byDeaGevHfkTjdTWlY0+JJwXx2CX/cuAnd3SDycf51wL/WhC34I7sOA99jUy55Ae/JBlf6ic4"
    "HYnqDK5ls2cZM3XEkI7I6aSojtWj0+F0Zi79El2Ke8UybvvxS0B+LOEK9dMdzVIcvWfa05eQ2W/+b8OD"
)


def libhdf5_segv():
    return zlib.decompress(base64.b64decode("".join(SEGV)))


def libhdf5_infinite_loop():
    return zlib.decompress(base64.b64decode("".join(LOOP)))


RAW = [
    ("not_hdf5.h5", "not an HDF5 file", not_hdf5),
    ("zero_length.h5", "not an HDF5 file", zero_length),
    ("truncated_file.h5", "HDF5", truncated_file),
    # Every deck error names the file: the one substring that holds whichever libhdf5.
    ("libhdf5_segv.h5", "libhdf5_segv.h5", libhdf5_segv),
    ("libhdf5_infinite_loop.h5", "libhdf5_infinite_loop.h5", libhdf5_infinite_loop),
]


def build_all():
    """{file name: bytes} of every deck, and the manifest text."""
    out = {}
    lines = ["# Malformed decks (tests/decks/make_bad_decks.py) and a substring of the one-line",
             "# error each must give (exit code 2). FILE<TAB>SUBSTRING."]
    for name, expected, spoil in DECKS:
        buf = io.BytesIO()
        with h5py.File(buf, "w", libver=("earliest", "v108"), track_order=False) as f:
            write_good(f)
            spoil(f)
        out[name] = buf.getvalue()
        lines.append(f"{name}\t{expected}")
    for name, expected, make in RAW:
        out[name] = make()
        lines.append(f"{name}\t{expected}")
    out["expected.txt"] = ("\n".join(lines) + "\n").encode()
    return out


def main(argv):
    files = build_all()
    if argv[1:] == ["--check"]:
        bad = [n for n, b in files.items()
               if not (HERE / n).exists() or hashlib.sha256((HERE / n).read_bytes()).digest() != hashlib.sha256(b).digest()]
        if bad:
            print("make_bad_decks: out of date: " + ", ".join(sorted(bad)), file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    for n, b in files.items():
        (HERE / n).write_bytes(b)
    print(f"make_bad_decks: wrote {len(files) - 1} decks and expected.txt in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
