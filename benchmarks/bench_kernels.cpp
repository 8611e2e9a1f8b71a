// Times the CUDA kernels and the strided copy on one GPU and prints one table (nothing
// else is written): attention (cuDNN SDPA and the reference kernel), fused Q/K norm +
// RoPE, the QKV-sized GEMM, and cudaMemcpy2DAsync of the strided V view. Compare with
// the anchor figures in shared/device/README.md. With two GPUs or more it also measures
// the link between GPUs 0 and 1 with the copy engine, in the shape of the Ulysses2
// scatter (strided rows of half the heads into a peer's buffer, both directions at
// once): that rate is the bound the IPC scatter is held against.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "comm/cuda_device.hpp"
#include "kernels/cuda_kernels.hpp"

namespace {

using namespace uipc;

struct Row {
  std::string what, shape;
  double ms;
  double rate;
  const char* unit;
  std::string note;
};

// Median-free, simple: `warmup` untimed runs, then the mean of `iters` runs between two
// events on the stream.
double time_ms(Device& dev, Stream& s, int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  auto a = dev.create_event(), b = dev.create_event();
  a->record(s);
  for (int i = 0; i < iters; ++i) fn();
  b->record(s);
  b->synchronize();
  return dev.elapsed_ms(*a, *b) / iters;
}

// A device buffer of n random values in [-1, 1) of type t (generated on the host in
// fp32, converted on the device).
DeviceBuffer random_buffer(Device& dev, Stream& s, LayerKernels& k, size_t n, DType t, unsigned seed) {
  std::vector<float> h(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : h) x = u(rng);
  auto f = dev.alloc(n * 4);
  dev.copy_to_device(f.get(), h.data(), n * 4);
  auto out = dev.alloc(n * dtype_size(t));
  k.convert_from_f32(s, f.as<float>(), out.get(), static_cast<int64_t>(n), t);
  s.synchronize();
  return out;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(e));
}

// GPU 0 <-> GPU 1 over cudaMemcpy2DAsync, each device's copy on its own stream: one
// direction, then both at once (what each rank of a Ulysses2 scatter does). The strided
// source is the K/V view of a fused QKV buffer (pitch 3 rows), half of its heads.
void peer_rows(std::vector<Row>& rows) {
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n < 2) {
    std::printf("bench_kernels: one GPU: no peer-link rows\n");
    return;
  }
  int can01 = 0, can10 = 0;
  check(cudaDeviceCanAccessPeer(&can01, 0, 1), "cudaDeviceCanAccessPeer");
  check(cudaDeviceCanAccessPeer(&can10, 1, 0), "cudaDeviceCanAccessPeer");
  const int64_t S = 65536;  // tokens per rank
  const size_t row = 24 * 128 * 2, half = row / 2;
  void *src[2], *dst[2];
  cudaStream_t st[2];
  cudaEvent_t e0[2], e1[2];
  for (int d = 0; d < 2; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    if ((d == 0 ? can01 : can10) != 0) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(1 - d, 0);
      if (e != cudaErrorPeerAccessAlreadyEnabled) check(e, "cudaDeviceEnablePeerAccess");
    }
    check(cudaMalloc(&src[d], S * 3 * row), "cudaMalloc");
    check(cudaMemset(src[d], 1, S * 3 * row), "cudaMemset");
    check(cudaMalloc(&dst[d], S * half), "cudaMalloc");
    check(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&e0[d]), "cudaEventCreate");
    check(cudaEventCreate(&e1[d]), "cudaEventCreate");
  }
  // Device d sends the second half of its heads of the V view to device 1 - d.
  auto copy = [&](int d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaMemcpy2DAsync(dst[1 - d], half, static_cast<char*>(src[d]) + 2 * row + half, 3 * row, half, S,
                            cudaMemcpyDefault, st[d]),
          "cudaMemcpy2DAsync to peer");
  };
  for (int both = 0; both < 2; ++both) {
    const int senders = both ? 2 : 1, iters = 20;
    for (int i = 0; i < 3; ++i)
      for (int d = 0; d < senders; ++d) copy(d);
    for (int d = 0; d < senders; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaStreamSynchronize(st[d]), "cudaStreamSynchronize");
      check(cudaEventRecord(e0[d], st[d]), "cudaEventRecord");
    }
    for (int i = 0; i < iters; ++i)
      for (int d = 0; d < senders; ++d) copy(d);
    double worst = 0;
    for (int d = 0; d < senders; ++d) {
      check(cudaSetDevice(d), "cudaSetDevice");
      check(cudaEventRecord(e1[d], st[d]), "cudaEventRecord");
      check(cudaEventSynchronize(e1[d]), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0[d], e1[d]), "cudaEventElapsedTime");
      worst = std::max(worst, static_cast<double>(ms) / iters);
    }
    const double bytes = static_cast<double>(S) * half;
    rows.push_back({both ? "peer 2D copy, both directions at once" : "peer 2D copy, GPU0 -> GPU1",
                    "S65536 12 of 24x128 bf16 heads, pitch 3 rows", worst, bytes / worst * 1e-6, "GB/s",
                    std::string("per direction; peer access ") + (can01 && can10 ? "yes" : "no (staged)")});
  }
  for (int d = 0; d < 2; ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    cudaFree(src[d]);
    cudaFree(dst[d]);
    cudaStreamDestroy(st[d]);
    cudaEventDestroy(e0[d]);
    cudaEventDestroy(e1[d]);
  }
  check(cudaSetDevice(0), "cudaSetDevice");
}

}  // namespace

int main() {
  try {
    std::string why;
    if (cuda_usable_device_count(&why) == 0) {
      std::printf("bench_kernels: no usable CUDA device: %s\n", why.c_str());
      return 0;
    }
    auto dev = make_cuda_device(0);
    dev->set_watchdog_seconds(600);
    auto s = dev->create_stream(StreamPriority::kNormal);
    std::vector<Row> rows;

    {  // attention, Flux 2K U4 share
      const int64_t B = 1, S = 16384;
      const int H = 6, D = 128;
      const size_t n = B * S * H * D;
      setenv("ULYSSES_ATTENTION", "reference", 1);
      auto ref = make_cuda_kernels();
      auto q = random_buffer(*dev, *s, *ref, n, DType::kBF16, 1);
      auto k = random_buffer(*dev, *s, *ref, n, DType::kBF16, 2);
      auto v = random_buffer(*dev, *s, *ref, n, DType::kBF16, 3);
      auto o = dev->alloc(n * 2);
      const double flops = 4.0 * B * H * S * S * D;
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      const std::string shape = "B1 H6 S16384 D128 bf16";
      setenv("ULYSSES_ATTENTION", "cudnn", 1);
      auto cudnn = make_cuda_kernels();
      unsetenv("ULYSSES_ATTENTION");
      const double ms_c = time_ms(*dev, *s, 3, 20, [&] {
        cudnn->attention(*s, q.get(), k.get(), v.get(), o.get(), B, S, H, D, DType::kBF16, scale);
      });
      rows.push_back({"attention (ULYSSES_ATTENTION=cudnn)", shape, ms_c, flops / ms_c * 1e-9, "TFLOP/s",
                      cuda_attention_path(*cudnn)});
      const double ms_r = time_ms(*dev, *s, 1, 3, [&] {
        ref->attention(*s, q.get(), k.get(), v.get(), o.get(), B, S, H, D, DType::kBF16, scale);
      });
      rows.push_back({"attention (reference kernel)", shape, ms_r, flops / ms_r * 1e-9, "TFLOP/s",
                      cuda_attention_path(*ref)});
    }
    auto kern = make_cuda_kernels();
    {  // fused norm + RoPE on Q and K of a fused QKV projection, Flux-sized
      const int64_t M = 16384 + 512;
      const int H = 24, D = 128;
      auto qkv = random_buffer(*dev, *s, *kern, M * 3 * H * D, DType::kBF16, 4);
      std::vector<float> g(D, 1.0f);
      auto gamma = dev->alloc(D * 4);
      dev->copy_to_device(gamma.get(), g.data(), D * 4);
      NormRopeParams p;
      p.norm = NormKind::kRmsPerHead;
      p.rope = RopeKind::k1D;
      p.gamma = gamma.as<float>();
      auto run = [&] {
        for (int j = 0; j < 2; ++j) {
          QkView v;
          v.data = qkv.as<uint16_t>() + j * H * D;
          v.row_pitch = 3 * H * D;
          v.batch = 1;
          v.tokens_per_batch = M;
          v.heads = H;
          v.head_dim = D;
          kern->norm_rope(*s, v, DType::kBF16, p);
        }
      };
      const double ms = time_ms(*dev, *s, 3, 20, run);
      const double bytes = 2.0 * 2.0 * M * H * D * 2;  // Q and K, read + write
      rows.push_back({"norm+RoPE (RMS per head, Q and K)", "M16896 H24 D128 bf16 fused view", ms,
                      bytes / ms * 1e-9, "TB/s", "bytes = read+write of Q and K"});
    }
    {  // the QKV projection GEMM
      const int64_t M = 16384, K = 3072, N = 9216;
      auto a = random_buffer(*dev, *s, *kern, M * K, DType::kBF16, 5);
      auto w = random_buffer(*dev, *s, *kern, K * N, DType::kBF16, 6);
      auto out = dev->alloc(M * N * 2);
      const double ms = time_ms(*dev, *s, 3, 20, [&] {
        kern->gemm(*s, a.get(), K, w.get(), out.get(), N, M, N, K, DType::kBF16, DType::kBF16);
      });
      rows.push_back({"gemm (cuBLASLt)", "M16384 K3072 N9216 bf16", ms, 2.0 * M * N * K / ms * 1e-9, "TFLOP/s", ""});
    }
    {  // the strided V view of a fused QKV buffer, copied by the copy engine
      const int64_t S = 65536;
      const int H = 24, D = 128;
      const size_t row_bytes = static_cast<size_t>(H) * D * 2;
      auto qkv = dev->alloc(S * 3 * row_bytes);
      auto dst = dev->alloc(S * row_bytes);
      for (int slices : {1, 4}) {
        const size_t w = row_bytes / slices;
        const double ms = time_ms(*dev, *s, 3, 20, [&] {
          for (int j = 0; j < slices; ++j) {
            dev->copy_2d(*s, dst.as<unsigned char>() + j * S * w, w, qkv.as<unsigned char>() + 2 * row_bytes + j * w,
                         3 * row_bytes, w, S);
          }
        });
        rows.push_back({"cudaMemcpy2DAsync strided V view", "S65536 24x128 bf16, " + std::to_string(slices) +
                            " head slice" + (slices > 1 ? "s" : ""),
                        ms, 2.0 * S * row_bytes / ms * 1e-9, "TB/s", "bytes = read+write"});
      }
    }
    peer_rows(rows);
    std::printf("\n%-38s | %-34s | %9s | %9s %-7s | %s\n", "kernel", "shape", "ms", "rate", "", "note");
    std::printf("%s\n", std::string(130, '-').c_str());
    for (const auto& r : rows) {
      std::printf("%-38s | %-34s | %9.3f | %9.2f %-7s | %s\n", r.what.c_str(), r.shape.c_str(), r.ms, r.rate, r.unit,
                  r.note.c_str());
    }
    std::printf("device: %s\n", dev->name().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 3;
  }
}
