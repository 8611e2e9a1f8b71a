"""scripts/torch_sdpa_bench.py's parsing, without torch: our cuDNN row read from a stored
bench_kernels table, and the ratio line against PyTorch's rows."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import torch_sdpa_bench as tsb  # noqa: E402  (a script folder, not a package)

STORED = REPO / "docs/measured/2026-12-07-h100-6cf8e34/bench_kernels-6cf8e34.txt"


def test_reads_our_row_from_a_stored_bench_table():
    ms, tflops = tsb.ours_from_bench_log(STORED.read_text())
    # The row as printed: "attention (ULYSSES_ATTENTION=cudnn) | B1 H6 S16384 D128 bf16 | 1.2558 | 656.634 TFLOP/s".
    assert ms == 1.2558
    assert tflops == 656.634
    # The printed rate agrees with the shape's FLOPs over the printed time.
    assert abs(tsb.FLOPS / ms * 1e-9 - tflops) / tflops < 1e-3


def test_other_rows_and_shapes_are_not_taken():
    text = (
        "attention  | attention (reference kernel)        | B1 H6 S16384 D128 bf16 | 132.2166 | 6.237 TFLOP/s |  | reference\n"
        "attention  | attention (ULYSSES_ATTENTION=cudnn) | B1 H6 S4096 D128 bf16  |   0.0800 | 600.0 TFLOP/s |  | cudnn\n"
    )
    assert tsb.ours_from_bench_log(text) is None
    assert tsb.ours_from_bench_log("") is None


def test_ratio_is_torch_over_ours():
    rows = [
        {"backend": "cudnn", "layout": "BSHD view", "ms": 1.30},
        {"backend": "flash", "layout": "BSHD view", "ms": 2.40},
        {"backend": "cudnn", "layout": "BHSD contiguous", "ms": 1.17},
    ]
    line = tsb.ratio_line(1.2, rows)
    assert "BSHD view: 1.083x" in line
    assert "BHSD contiguous: 0.975x" in line
    assert "flash" not in line
    assert tsb.ratio_line(1.2, rows[1:2]) == "ours / torch cuDNN: no torch cuDNN row"
