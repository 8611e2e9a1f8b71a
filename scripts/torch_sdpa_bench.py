"""cuDNN SDPA through PyTorch on the anchor shape (B1 H6 S16384 D128 bf16, FLUX 2048's
Ulysses4 share), in the same run as bench_kernels' own cuDNN SDPA, for the ratio between
the two. Times with CUDA events (median of repeats, after warm-up) on fresh random
inputs, in the (B, S, H, D) memory layout the project uses (a transposed view) and in
PyTorch's own contiguous (B, H, S, D), for the cuDNN and the FlashAttention backends;
reads the GPU's SM clock before and after each, so that a difference between runs can be
told apart from the card's clocks. Run with the GPU machine's /opt/torch/.venv python.

    python scripts/torch_sdpa_bench.py [--bench-log BENCH.txt] [-o OUT.h5]

--bench-log: bench_kernels' printed table from the same call; its row "attention
(ULYSSES_ATTENTION=cudnn)" is put beside PyTorch's and the ratio printed (ours / torch:
above 1 means ours is faster). -o: the rows as an HDF5 table (h5py), our row's ms and
TFLOP/s as attributes. The parsing (`ours_from_bench_log`, `ratio_line`) imports no torch, so the CPU
tests exercise it.
"""
import argparse
import re
import statistics
import subprocess

B, H, S, D = 1, 6, 16384, 128
FLOPS = 4.0 * B * H * S * S * D
SHAPE = f"B{B} H{H} S{S} D{D} bf16"
OURS_ROW = "attention (ULYSSES_ATTENTION=cudnn)"


def ours_from_bench_log(text):
    """(ms, TFLOP/s) of bench_kernels' own cuDNN SDPA row on SHAPE, or None when absent: the
    last such row, the latest run where a log holds several (the GPU check appends to its logs)."""
    found = None
    for line in text.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) >= 5 and cols[1] == OURS_ROW and cols[2] == SHAPE:
            m = re.match(r"([0-9.]+)\s+TFLOP/s", cols[4])
            found = float(cols[3]), (float(m.group(1)) if m else FLOPS / float(cols[3]) * 1e-9)
    return found


def ratio_line(ours_ms, torch_rows):
    """The summary line: ours against PyTorch's cuDNN in the project's layout (and its own)."""
    by = {(r["backend"], r["layout"]): r["ms"] for r in torch_rows}
    parts = []
    for layout in ("BSHD view", "BHSD contiguous"):
        t = by.get(("cudnn", layout))
        if t is not None:
            parts.append(f"ours / torch cuDNN {layout}: {t / ours_ms:.3f}x (ours {ours_ms:.4f} ms, torch {t:.4f} ms)")
    if not parts:
        return "ours / torch cuDNN: no torch cuDNN row"
    return "; ".join(parts)


def clocks():
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    return out


def time_ms(torch, fn, warmup=5, iters=10, reps=7):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) / iters)
    return statistics.median(t), min(t), max(t)


def measure():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    dev = "cuda"
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    bshd = [torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16) for _ in range(3)]
    layouts = {
        "BSHD view": [t.transpose(1, 2) for t in bshd],  # the project's layout
        "BHSD contiguous": [t.transpose(1, 2).contiguous() for t in bshd],
    }
    scale = 1.0 / D ** 0.5
    ref = None
    rows = []
    for layout, (q, k, v) in layouts.items():
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(q, k, v, scale=scale)
                    before = clocks()
                    med, lo, hi = time_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, scale=scale))
                    after = clocks()
            except RuntimeError as e:
                print(f"torch sdpa {name:5} {layout:16}: not available ({str(e).splitlines()[0][:100]})")
                continue
            if ref is None:
                ref = out.float()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            print(f"torch sdpa {name:5} {layout:16}: {med:.4f} ms (min {lo:.4f}, max {hi:.4f}) "
                  f"{FLOPS / med * 1e-9:.1f} TFLOP/s  rel.err vs first {err:.1e}  "
                  f"clocks before [{before}] after [{after}]")
            rows.append({"backend": name, "layout": layout, "ms": med, "min_ms": lo, "max_ms": hi,
                         "tflops": FLOPS / med * 1e-9, "rel_err": err, "clocks_before": before,
                         "clocks_after": after})
    return torch.__version__, rows


def write_h5(path, version, rows, ours):
    import h5py
    import numpy as np

    with h5py.File(path, "w") as f:
        g = f.create_group("torch_sdpa")
        g.attrs["shape"] = SHAPE
        g.attrs["torch"] = str(version)  # torch.__version__ is a str subclass h5py cannot store
        for key in ("backend", "layout", "clocks_before", "clocks_after"):
            g.create_dataset(key, data=np.array([r[key] for r in rows], dtype=h5py.string_dtype()))
        for key in ("ms", "min_ms", "max_ms", "tflops", "rel_err"):
            g.create_dataset(key, data=np.array([r[key] for r in rows], dtype=float))
        if ours is not None:
            g.attrs["ours_ms"], g.attrs["ours_tflops"] = float(ours[0]), float(ours[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-log", help="bench_kernels' printed table from the same call")
    ap.add_argument("-o", "--output", help="HDF5 file for the rows")
    args = ap.parse_args()
    ours = None
    if args.bench_log:
        with open(args.bench_log, encoding="utf-8", errors="replace") as f:
            ours = ours_from_bench_log(f.read())
        if ours is None:
            print(f"{args.bench_log}: no row '{OURS_ROW}' on {SHAPE}")
    version, rows = measure()
    if ours is not None:
        print(f"ours (bench_kernels, same call) {ours[0]:.4f} ms {ours[1]:.1f} TFLOP/s")
        print(ratio_line(ours[0], rows))
    if args.output:
        write_h5(args.output, version, rows, ours)
    if not rows or (args.bench_log and ours is None):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
