// Internal to the CUDA kernels: the launchers of kernels/cuda_kernels.cu and the
// library-backed pieces (cuBLASLt GEMM, cuDNN SDPA), kept apart so that the heavy
// library headers are compiled by the host compiler, not by nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/dtype.hpp"
#include "kernels/kernels.hpp"

namespace uipc {

// kernels/cuda_kernels.cu
// Which norm+RoPE kernel: the vector kernel where the view allows it, else the general
// one (kAuto, what the layer uses); or one of them by force (benchmarks and tests).
// `batch`: the vector kernel's passes in flight per warp, 8 or 12 (0: chosen by the
// head count); `pipe`: its software-pipelined walk for per-head norms and RoPE (two
// batches of 4, 6 or 8 passes, the next loading while the current is computed), 0 off,
// -1 chosen; both for the benchmark's and the tests' comparisons.
// `staged`: the vector kernel's shared-memory staged walk (whole rows copied in with
// cp.async, the next in flight while the current is computed; batches of 4 or 8 passes
// read back at once), 0 off, -1 chosen (where batch and pipe are left to the launcher).
// `pipe` kNormRopeFlatPipe: the vector kernel's flat walk (a block a row, each thread's
// 16-byte chunks taken across head boundaries so that every lane carries data, per-head
// sums through shared memory; every norm kind, rows of at most 1536 chunks); the
// launcher's pick where bench_kernels measured it ahead (flat_is_pick in cuda_kernels.cu;
// rows "(vector, flat)").
// `pipe` kNormRopeLaneRowsPipe: the vector kernel's lane-rows walk (a lane a head: tiles of
// 128 head rows through shared memory, each thread normalising one head row whole; per-head
// norms and RoPE, heads of 8, 9 or 16 chunks at 16-bit types, 16 or 18 at fp32); the
// launcher's pick for 16-bit LayerNorm at head_dim 72 (lane_rows_is_pick in cuda_kernels.cu);
// rows "(vector, lane rows)".
enum class NormRopeKernel { kAuto, kVector, kGeneral };
inline constexpr int kNormRopeFlatPipe = 32;
inline constexpr int kNormRopeLaneRowsPipe = 48;
// Whether the lane-rows walk (pipe kNormRopeLaneRowsPipe) serves heads of this head_dim and dtype,
// `heads` a row: the launcher refuses it elsewhere.
bool norm_rope_lane_rows_serve(DType dtype, int head_dim, int heads);
// The lane-rows walk with one tile a block at 8 blocks a multiprocessor (LayerNorm's statistics in
// one pass, shifted by the head's first value), measured beside it: per-head norms and RoPE at 16-bit
// types on heads of 8 or 9 chunks only. Rows "(vector, lane rows 1t)".
inline constexpr int kNormRopeLaneSinglePipe = 49;
bool norm_rope_lane_single_serve(NormKind norm, DType dtype, int head_dim, int heads);
void launch_norm_rope(cudaStream_t s, const QkView& x, DType dtype, const NormRopeParams& p,
                      NormRopeKernel which = NormRopeKernel::kAuto, int batch = 0, int pipe = -1, int staged = -1);
// Q and K in one launch of the vector kernel (the grid's halves take one view each: one
// ramp-up and one drain instead of two), where both views have one shape, kind, RoPE and
// eps and both fit the vector kernel; else two launch_norm_rope calls. Same results as
// two launch_norm_rope calls. The layer's LayerKernels::norm_rope_qk.
void launch_norm_rope_qk(cudaStream_t s, const QkView& q, const NormRopeParams& pq, const QkView& k,
                         const NormRopeParams& pk, DType dtype, NormRopeKernel which = NormRopeKernel::kAuto,
                         int batch = 0, int pipe = -1, int staged = -1);
// What the calling thread's last launch_norm_rope launched: the kernel and walk, its
// grid, the blocks of it resident per multiprocessor
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor), its registers per thread and dynamic
// shared memory per block. For the benchmark's account of where time goes.
struct NormRopeLaunchInfo {
  std::string kernel;
  int blocks = 0, threads = 0, blocks_per_sm = 0, regs = 0;
  size_t smem = 0;
  size_t inflight_per_warp = 0;  // bytes a warp has loading at once (the vector kernel's walks)
};
NormRopeLaunchInfo last_norm_rope_launch();
// The current device's peak memory bandwidth (GB/s, kernels/norm_rope_walk.hpp) and SM count,
// read once per device: what 16-bit LayerNorm's pick of walk goes by.
struct MemoryBandwidth {
  double peak_gbs = 0;
  int sms = 0;
};
MemoryBandwidth memory_bandwidth();
void launch_attention_reference(cudaStream_t s, const void* q, const void* k, const void* v, void* o, int64_t batch,
                                int64_t seq, int heads, int head_dim, DType dtype, float scale);
void launch_convert_from_f32(cudaStream_t s, const float* in, void* out, int64_t n, DType dtype);
// LayerKernels::row_change: a block per row, fp64 partial sums reduced in shared memory.
void launch_row_change(cudaStream_t s, const void* now, const void* last, DType dtype, int64_t rows, int64_t row_elems,
                       double* out);
// out row r = round(in row r) for `rows` rows of `cols` values, rows ld_in / ld_out apart.
void launch_convert_from_f32_2d(cudaStream_t s, const float* in, int64_t ld_in, void* out, int64_t ld_out, int64_t rows,
                                int64_t cols, DType dtype);

// kernels/cuda_gemm.cpp: out (row-major M x N, ldo) = in (M x K, lda) * w (K x N, ldw),
// fp32 accumulation, through cuBLASLt.
class CublasLtGemm {
 public:
  CublasLtGemm();
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;
  void run(cudaStream_t s, const void* in, int64_t lda, const void* w, int64_t ldw, void* out, int64_t ldo, int64_t M,
           int64_t N, int64_t K, DType dtype, DType out_dtype);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// kernels/cuda_sdpa.cpp: attention through cuDNN's fused SDPA (bf16/fp16 only).
class CudnnSdpa {
 public:
  CudnnSdpa();
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;
  // Enqueues the attention and returns "" , or returns why cuDNN cannot serve it (then
  // nothing was enqueued).
  std::string run(cudaStream_t s, const void* q, const void* k, const void* v, void* o, int64_t batch, int64_t seq,
                  int heads, int head_dim, DType dtype, float scale);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uipc
