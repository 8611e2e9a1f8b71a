"""cuDNN SDPA through PyTorch on the anchor shape (B1 H6 S16384 D128 bf16, FLUX 2048's
Ulysses4 share), in the same run as bench_kernels' own cuDNN SDPA, for the ratio between
the two. Times with CUDA events (median of repeats, after warm-up) on fresh random
inputs, in the (B, S, H, D) memory layout the project uses (a transposed view) and in
PyTorch's own contiguous (B, H, S, D), for the cuDNN and the FlashAttention backends;
reads the GPU's SM clock before and after each, so that a difference between runs can be
told apart from the card's clocks. Run with the GPU machine's /opt/torch/.venv python.
"""
import statistics
import subprocess

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, S, D = 1, 6, 16384, 128
FLOPS = 4.0 * B * H * S * S * D


def clocks():
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    return out


def time_ms(fn, warmup=5, iters=10, reps=7):
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


def main():
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
    for layout, (q, k, v) in layouts.items():
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(q, k, v, scale=scale)
                    before = clocks()
                    med, lo, hi = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, scale=scale))
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


if __name__ == "__main__":
    main()
