// The layer's compute kernels, as one interface with a host (Kokkos) and a CUDA
// implementation. All math in fp32; tensors stored in the case dtype. The exact math
// is written down in docs/math.md; the float64 references in tests/ follow that text.
// Kernels know nothing of MPI or of ranks: positions and slices come in as arguments.
#pragma once

#include <cstdint>
#include <memory>

#include "base/dtype.hpp"
#include "comm/device/device.hpp"

namespace uipc {

enum class NormKind : int {
  kNone = 0,
  kRmsPerHead = 1,     // RMS over head_dim, weight gamma[head_dim]
  kRmsAcrossHeads = 2, // RMS over heads*head_dim of a token, weight gamma[heads*head_dim]
  kLayerPerHead = 3,   // LayerNorm over head_dim, gamma[head_dim], beta[head_dim]
};

enum class RopeKind : int { kNone = 0, k1D = 1 };

// One Q or K tensor, seen as rows of `heads` x `head_dim` elements: row m is token
// (b = m / tokens_per_batch, s = m % tokens_per_batch), at global sequence position
// pos_offset + s. Rows are row_pitch elements apart (3*heads*head_dim inside a fused
// QKV projection).
// Heads [head_begin, head_begin + head_count) of every row written here instead of back
// in place: a rank's own slice of the Ulysses scatter, straight into its final-layout
// target, so that no separate copy of it remains. Row m = (b, s) of the view lands at
// data + b*batch_pitch + s*row_pitch + (h - head_begin)*head_dim (elements).
struct HeadSliceOut {
  void* data = nullptr;  // nullptr: every head stays in place
  int head_begin = 0;
  int head_count = 0;
  int64_t row_pitch = 0;
  int64_t batch_pitch = 0;
};

struct QkView {
  void* data = nullptr;
  int64_t row_pitch = 0;
  int64_t batch = 0;
  int64_t tokens_per_batch = 0;
  int64_t pos_offset = 0;
  int heads = 0;
  int head_dim = 0;
  HeadSliceOut out;  // optional destination of some heads (see above)
};

struct NormRopeParams {
  NormKind norm = NormKind::kNone;
  RopeKind rope = RopeKind::kNone;
  float eps = 1e-6f;
  float rope_theta = 10000.0f;
  const float* gamma = nullptr;  // device memory, fp32
  const float* beta = nullptr;   // device memory, fp32 (LayerNorm only)
};

class LayerKernels {
 public:
  virtual ~LayerKernels() = default;

  // out[m, n] = sum_k in[m, k] * w[k, n] for m < M, n < N, k < K, accumulated in fp32.
  // `in` rows are lda elements apart, `w` rows ldw (N for a whole weight; more for a
  // block of its columns), `out` rows ldo. in and w have type `dtype`; out has type
  // `out_dtype`.
  virtual void gemm(Stream& s, const void* in, int64_t lda, const void* w, int64_t ldw, void* out, int64_t ldo,
                    int64_t M, int64_t N, int64_t K, DType dtype, DType out_dtype) = 0;

  // In place: Q/K norm (per p.norm), then RoPE (per p.rope), per row of x; the heads of
  // x.out (if any) are written there instead of back into x.
  virtual void norm_rope(Stream& s, const QkView& x, DType dtype, const NormRopeParams& p) = 0;

  // norm_rope of Q and of K, the same results; a GPU takes both in one launch where it can
  // (one ramp-up and one drain instead of two). Here: the two calls, in that order.
  virtual void norm_rope_qk(Stream& s, const QkView& q, const NormRopeParams& pq, const QkView& k,
                            const NormRopeParams& pk, DType dtype) {
    norm_rope(s, q, dtype, pq);
    norm_rope(s, k, dtype, pk);
  }

  // o = softmax(q k^T * scale) v per (batch, head), exact, fp32 accumulation.
  // q, k, v, o contiguous (batch, seq, heads, head_dim) of type dtype.
  virtual void attention(Stream& s, const void* q, const void* k, const void* v, void* o,
                         int64_t batch, int64_t seq, int heads, int head_dim, DType dtype,
                         float scale) = 0;

  // out[i] = round_to(dtype, in[i]) for i < n (fp32 -> dtype).
  virtual void convert_from_f32(Stream& s, const float* in, void* out, int64_t n, DType dtype) = 0;

  // V-major selective communication's comparison, per row r < rows of two contiguous
  // (rows x row_elems) tensors of type dtype: out[2r] = sum (now - last)^2 and
  // out[2r+1] = sum last^2, the fp32 values' squares summed in fp64 (any order: the
  // result decides what to send, it is not part of the layer's math). out: device memory.
  virtual void row_change(Stream& s, const void* now, const void* last, DType dtype, int64_t rows, int64_t row_elems,
                          double* out) = 0;
};

// Host kernels (Kokkos, DefaultHostExecutionSpace) running on host-device streams.
std::unique_ptr<LayerKernels> make_host_kernels();

}  // namespace uipc
