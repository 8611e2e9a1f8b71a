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


def test_the_latest_run_of_an_appended_log_is_taken():
    # A warm GPU machine keeps build-gpu/logs: a second call appended its bench run to the first's
    # (1.2605 ms, then 1.2910 ms on one H100, 2026-12-07); the ratio must use the second.
    text = STORED.read_text()
    second = text.replace("|    1.2558 |   656.634 TFLOP/s", "|    1.2910 |   638.778 TFLOP/s")
    assert second != text
    assert tsb.ours_from_bench_log(text + second) == (1.2910, 638.778)


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


def test_the_rows_are_written_to_hdf5_and_read_back(tmp_path):
    import h5py

    class Version(str):  # torch.__version__ is a str subclass (TorchVersion), which h5py refuses as it is
        pass

    rows = [{"backend": "cudnn", "layout": "BSHD view", "ms": 1.2717, "min_ms": 1.1947, "max_ms": 1.3677,
             "tflops": 648.5, "rel_err": 0.0, "clocks_before": "1980 MHz", "clocks_after": "1695 MHz"},
            {"backend": "flash", "layout": "BSHD view", "ms": 2.3269, "min_ms": 2.2803, "max_ms": 2.3727,
             "tflops": 354.4, "rel_err": 3.1e-3, "clocks_before": "1950 MHz", "clocks_after": "1890 MHz"}]
    path = tmp_path / "t.h5"
    tsb.write_h5(str(path), Version("2.11.0+cu130"), rows, (1.2605, 654.2))
    with h5py.File(path) as f:
        g = f["torch_sdpa"]
        assert g.attrs["torch"] == "2.11.0+cu130" and g.attrs["shape"] == tsb.SHAPE
        assert [b.decode() for b in g["backend"][...]] == ["cudnn", "flash"]
        assert list(g["ms"][...]) == [1.2717, 2.3269]
        assert g.attrs["ours_ms"] == 1.2605
