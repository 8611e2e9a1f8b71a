// CUDA kernels of the layer: fused Q/K norm + RoPE on strided rows, the reference
// attention (fp32 accumulation, online softmax) and fp32 -> dtype conversion. Math as
// docs/math.md states it: fp32 arithmetic, accurate powf/sincosf/expf (no fast math),
// one rounding to the dtype at the end.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <type_traits>

#include "comm/device/cuda_check.hpp"
#include "kernels/cuda_internal.hpp"
#include "kernels/norm_rope_walk.hpp"

namespace uipc {
namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ------------------------------------------------------------------ norm + RoPE

// Where element 0 of head h of view row `row` is read from and written to: in place, or,
// for the heads of x.out, in the final-layout target.
struct RowPlace {
  int64_t row_pitch, tokens_per_batch;
  int head_dim;
  int out_begin, out_count;
  int64_t out_row_pitch, out_batch_pitch;
};

// Element 0 of head out_begin of view row `row` in the target (nullptr without one):
// once per row, not per head (a 64-bit division).
template <typename T>
__device__ __forceinline__ T* out_row_of(T* out, const RowPlace& pl, int64_t row) {
  if (out == nullptr) return nullptr;
  const int64_t b = row / pl.tokens_per_batch, t = row - b * pl.tokens_per_batch;
  return out + b * pl.out_batch_pitch + t * pl.out_row_pitch;
}

template <typename T>
__device__ __forceinline__ T* head_dst(T* x_row, T* out_row, const RowPlace& pl, int h) {
  if (out_row != nullptr && h >= pl.out_begin && h < pl.out_begin + pl.out_count)
    return out_row + static_cast<int64_t>(h - pl.out_begin) * pl.head_dim;
  return x_row + static_cast<int64_t>(h) * pl.head_dim;
}

// --- the general kernel (any head_dim, any alignment): one block per token row.
constexpr int kNormThreads = 128;
constexpr int kMaxPairsPerLane = 8;  // head_dim <= 2 * 32 * 8 = 512

template <typename T>
struct alignas(2 * sizeof(T)) Pair {
  T a, b;
};

// The RoPE cos/sin of the row's position are computed once into shared memory (they are
// the same for every head); each warp then takes whole heads, keeps a head in
// registers, normalizes it and rotates it, and stores it once. kPaired: two neighbouring
// elements are loaded and stored as one (row, pitch and head_dim allow it).
template <typename T, bool kPaired, int kPPL>
__global__ void __launch_bounds__(kNormThreads) norm_rope_kernel(T* __restrict__ data, T* __restrict__ out,
                                                                  RowPlace pl, int64_t pos_offset, int heads,
                                                                  int norm, int rope, float eps, float theta,
                                                                  const float* __restrict__ gamma,
                                                                  const float* __restrict__ beta) {
  extern __shared__ float shared[];
  const int D = pl.head_dim;
  const int half = D / 2;
  float* cos_t = shared;
  float* sin_t = shared + half;
  float* red = shared + 2 * half;  // 32 floats for the block reduction
  const int64_t row = blockIdx.x;
  T* x = data + row * pl.row_pitch;
  T* out_row = out_row_of(out, pl, row);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;

  if (rope) {
    const float pos = static_cast<float>(pos_offset + row % pl.tokens_per_batch);
    for (int i = tid; i < half; i += blockDim.x) {
      const float th = powf(theta, -(2.0f * static_cast<float>(i)) / static_cast<float>(D));
      sincosf(pos * th, &sin_t[i], &cos_t[i]);
    }
  }
  float across_denom = 1.0f;
  if (norm == static_cast<int>(NormKind::kRmsAcrossHeads)) {
    const int n = heads * D;
    float ss = 0.0f;
    for (int e = tid; e < n; e += blockDim.x) {
      const float v = to_float(x[e]);
      ss += v * v;
    }
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < nwarps; ++w) total += red[w];
    across_denom = sqrtf(total / static_cast<float>(n) + eps);
  }
  __syncthreads();

  const int pairs = (D + 1) / 2;
  // A warp takes kHU heads at a time and loads them all before using any: more bytes in
  // flight per warp (a memory-bound kernel is limited by them), same registers.
  constexpr int kHU = kMaxPairsPerLane / kPPL;
  for (int hb = warp * kHU; hb < heads; hb += nwarps * kHU) {
    float v0s[kHU][kPPL], v1s[kHU][kPPL];
#pragma unroll
    for (int hh = 0; hh < kHU; ++hh) {
      const T* xl = x + static_cast<int64_t>(hb + hh) * D;
#pragma unroll
      for (int j = 0; j < kPPL; ++j) {
        const int k = lane + 32 * j;
        v0s[hh][j] = 0.0f;
        v1s[hh][j] = 0.0f;
        if (hb + hh < heads && k < pairs) {
          if (kPaired) {
            const Pair<T> pr = reinterpret_cast<const Pair<T>*>(xl)[k];
            v0s[hh][j] = to_float(pr.a);
            v1s[hh][j] = to_float(pr.b);
          } else {
            v0s[hh][j] = to_float(xl[2 * k]);
            if (2 * k + 1 < D) v1s[hh][j] = to_float(xl[2 * k + 1]);
          }
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < kHU; ++hh) {
      const int h = hb + hh;
      if (h >= heads) break;  // uniform across the warp
      T* xh = head_dst(x, out_row, pl, h);
      float(&v0)[kPPL] = v0s[hh];
      float(&v1)[kPPL] = v1s[hh];
      if (norm == static_cast<int>(NormKind::kRmsPerHead)) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kPPL; ++j) ss += v0[j] * v0[j] + v1[j] * v1[j];
        const float denom = sqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
#pragma unroll
        for (int j = 0; j < kPPL; ++j) {
          const int k = lane + 32 * j;
          if (k < pairs) {
            v0[j] = v0[j] / denom * gamma[2 * k];
            if (2 * k + 1 < D) v1[j] = v1[j] / denom * gamma[2 * k + 1];
          }
        }
      } else if (norm == static_cast<int>(NormKind::kLayerPerHead)) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < kPPL; ++j) s += v0[j] + v1[j];
        const float mu = warp_sum(s) / static_cast<float>(D);
        float sq = 0.0f;
#pragma unroll
        for (int j = 0; j < kPPL; ++j) {
          const int k = lane + 32 * j;
          if (k < pairs) {
            sq += (v0[j] - mu) * (v0[j] - mu);
            if (2 * k + 1 < D) sq += (v1[j] - mu) * (v1[j] - mu);
          }
        }
        const float denom = sqrtf(warp_sum(sq) / static_cast<float>(D) + eps);
#pragma unroll
        for (int j = 0; j < kPPL; ++j) {
          const int k = lane + 32 * j;
          if (k < pairs) {
            v0[j] = (v0[j] - mu) / denom * gamma[2 * k] + beta[2 * k];
            if (2 * k + 1 < D) v1[j] = (v1[j] - mu) / denom * gamma[2 * k + 1] + beta[2 * k + 1];
          }
        }
      } else if (norm == static_cast<int>(NormKind::kRmsAcrossHeads)) {
        const float* g = gamma + static_cast<int64_t>(h) * D;
#pragma unroll
        for (int j = 0; j < kPPL; ++j) {
          const int k = lane + 32 * j;
          if (k < pairs) {
            v0[j] = v0[j] / across_denom * g[2 * k];
            if (2 * k + 1 < D) v1[j] = v1[j] / across_denom * g[2 * k + 1];
          }
        }
      }
      if (rope) {
#pragma unroll
        for (int j = 0; j < kPPL; ++j) {
          const int k = lane + 32 * j;
          if (k < half) {
            const float c = cos_t[k], s = sin_t[k];
            const float a = v0[j], b = v1[j];
            v0[j] = a * c - b * s;
            v1[j] = a * s + b * c;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kPPL; ++j) {
        const int k = lane + 32 * j;
        if (k < pairs) {
          if (kPaired) {
            Pair<T> pr;
            pr.a = from_float<T>(v0[j]);
            pr.b = from_float<T>(v1[j]);
            reinterpret_cast<Pair<T>*>(xh)[k] = pr;
          } else {
            xh[2 * k] = from_float<T>(v0[j]);
            if (2 * k + 1 < D) xh[2 * k + 1] = from_float<T>(v1[j]);
          }
        }
      }
    }
  }
}

// --- the vector kernel (head_dim a multiple of 16 bytes' worth of elements, rows and
// targets 16-byte aligned): one warp per token row, 16-byte loads and stores.
//
// A row's heads are split into 16-byte chunks of kVE elements; G lanes share a head
// (G = chunks per head when that fits a warp; lanes past the last whole group idle),
// lane l owning chunk l % G (and l % G + 32 for heads of more than 32 chunks), so a warp
// covers 32 / G heads per pass and walks the row's heads in passes. A lane always owns
// the same elements of every head: its RoPE frequencies and per-head norm weights are
// loaded or computed once per kernel and its cos/sin once per row (sincosf is the
// costliest thing here), never per head. Up to kNB passes are loaded before any is used,
// so that several KB per warp are in flight (the kernel is bound by bytes in flight),
// and their statistics are reduced together, so the shuffle chains of different heads
// overlap. Across-heads RMS needs the whole row first: held in registers when it fits
// in kNB passes, else summed in a first pass and re-read (from L2) in a second.
constexpr int kRowWarps = 4;  // rows per block
// The staged walk's batch (passes read from shared memory and reduced together) where the
// layer lets the launcher pick.
constexpr int kAutoStagedBatch = 4;

template <typename T>
struct Vec {
  static constexpr int kVE = 16 / sizeof(T);  // elements per 16-byte chunk
  uint4 raw;
  __device__ __forceinline__ void to_floats(float (&f)[kVE]) const {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kVE; ++i) f[i] = to_float(e[i]);
  }
  __device__ __forceinline__ void from_floats(const float (&f)[kVE]) {
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kVE; ++i) e[i] = from_float<T>(f[i]);
  }
};

// Sum over the G lanes of this lane's group (lanes [base, base + G)), on every lane of it.
template <int kN>
__device__ __forceinline__ void group_sums(float (&v)[kN], int G, int base) {
  if ((G & (G - 1)) == 0) {  // a power of two: butterfly within the aligned group
    for (int o = G >> 1; o > 0; o >>= 1) {
#pragma unroll
      for (int p = 0; p < kN; ++p) v[p] += __shfl_xor_sync(0xffffffffu, v[p], o);
    }
    return;
  }
  // Any other group size (head_dim 72: 9 lanes): a tree onto the group's first lane
  // (lane cl < o adds lane cl + o where that is still in the group), then that lane's sum
  // to the whole group: ceil(log2 G) + 1 shuffles, not G.
  const int cl = (threadIdx.x & 31) - base;
  int top = 1;
  while (top < G) top <<= 1;
  for (int o = top >> 1; o > 0; o >>= 1) {
#pragma unroll
    for (int p = 0; p < kN; ++p) {
      const float t = __shfl_down_sync(0xffffffffu, v[p], o);
      if (cl < o && cl + o < G) v[p] += t;
    }
  }
#pragma unroll
  for (int p = 0; p < kN; ++p) v[p] = __shfl_sync(0xffffffffu, v[p], base);
}

template <int kN>
__device__ __forceinline__ void warp_sums(float (&v)[kN]) {
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int p = 0; p < kN; ++p) v[p] += __shfl_xor_sync(0xffffffffu, v[p], o);
  }
}

// Sums of (x - c) and (x - c)^2 over one 16-byte chunk, added to s1 and s2.
template <typename T>
__device__ __forceinline__ void chunk_sums(const Vec<T>& v, float c, float& s1, float& s2) {
  float f[Vec<T>::kVE];
  v.to_floats(f);
#pragma unroll
  for (int i = 0; i < Vec<T>::kVE; ++i) {
    const float d = f[i] - c;
    s1 += d;
    s2 += d * d;
  }
}
// Sum of one chunk's values, added to s1.
template <typename T>
__device__ __forceinline__ void chunk_sum1(const Vec<T>& v, float& s1) {
  float f[Vec<T>::kVE];
  v.to_floats(f);
#pragma unroll
  for (int i = 0; i < Vec<T>::kVE; ++i) s1 += f[i];
}

// Every walk's last step on a 16-byte chunk before its store: normalise it given its
// head's (or row's) statistics, x * rinv * g (the RMS norms), (x - mu) * rinv * g + b
// (LayerNorm), x (none); rotate its pairs by (cs[q], sn[q]) (rope); round it back.
template <typename T, int kNorm>
__device__ __forceinline__ void finish_chunk(Vec<T>& v, const float* g, const float* b, float mu, float rinv, int rope,
                                             const float* cs, const float* sn) {
  constexpr int kVE = Vec<T>::kVE;
  float f[kVE];
  v.to_floats(f);
  if constexpr (kNorm == static_cast<int>(NormKind::kRmsAcrossHeads) ||
                kNorm == static_cast<int>(NormKind::kRmsPerHead)) {
#pragma unroll
    for (int i = 0; i < kVE; ++i) f[i] = f[i] * rinv * g[i];
  } else if constexpr (kNorm == static_cast<int>(NormKind::kLayerPerHead)) {
#pragma unroll
    for (int i = 0; i < kVE; ++i) f[i] = (f[i] - mu) * rinv * g[i] + b[i];
  }
  if (rope) {
#pragma unroll
    for (int q = 0; q < kVE / 2; ++q) {
      const float a = f[2 * q], c = f[2 * q + 1];
      f[2 * q] = a * cs[q] - c * sn[q];
      f[2 * q + 1] = a * sn[q] + c * cs[q];
    }
  }
  v.from_floats(f);
}

__device__ __forceinline__ void load_f32x(const float* __restrict__ src, float* dst, int n) {
  // n is a multiple of 4 and src 16-byte aligned (the weights are cudaMalloc'ed, offsets
  // multiples of 16 bytes' worth of elements).
  for (int i = 0; i < n; i += 4) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(src + i));
    dst[i] = q.x;
    dst[i + 1] = q.y;
    dst[i + 2] = q.z;
    dst[i + 3] = q.w;
  }
}

// How a warp walks its rows: loads a batch, then computes it (kPlain); loads the next
// batch into registers while computing the current (kPipelined); or copies whole rows
// into shared memory with cp.async, the next row in flight while the current is
// computed from shared memory (kStaged: a row's worth of bytes in flight per warp at no
// register cost, for every norm kind, the across-heads one included).
// kBlockRows (across-heads RMS): a block's four warps share a row, each holding a quarter
// of its passes in registers, the row's sum of squares reduced through shared memory
// with one barrier a row; the block's next row loads while this one is reduced and
// stored (two register buffers, as in kPipelined).
// kFlat (every norm kind, any head_dim): a block a row, thread t owning the row's 16-byte
// chunks t, t + 128, ... across head boundaries, so that every lane carries data where
// lane groups of G lanes a head leave 32 mod G idle (head_dim 72: 5 of 32 at 16-bit
// types, 14 of 32 at fp32); per-head sums through shared memory (see flat_rows).
// kLaneRows (per-head norms and RoPE only): a lane a head. Tiles of 128 head rows copied
// into shared memory, thread t taking head row t whole: its statistics summed in the
// thread, no shuffles and no idle lane whatever a head's chunk count (see lane_rows).
// kLaneSingle: kLaneRows with one tile a block (no next tile in flight) at 8 blocks a
// multiprocessor against 5, and LayerNorm's statistics in one pass over the head row, its
// values shifted by the row's first (the shift bounds the cancellation: (x0 - mean)^2 <=
// D var, so the variance loses at most log2(D) bits; the one pass is what fits 64 registers).
// Not yet run on a GPU (2026-12-07: no device machine started): bench_kernels' rows "(vector,
// lane rows 1t, Q+K one launch)" measure it beside kLaneRows, and the GPU test
// NormRopeLaneRowsSingle checks it against the float64 reference.
enum Walk : int { kPlain = 0, kPipelined = 1, kStaged = 2, kBlockRows = 3, kFlat = 4, kLaneRows = 5, kLaneSingle = 6 };
constexpr bool lane_walk(int walk) { return walk == kLaneRows || walk == kLaneSingle; }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kN>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kN) : "memory"); }

// Rows first, first + step, ... (first and step uniform across the block) with two
// register buffers in turn: the next row loads into one while the current one, in the
// other, is reduced and stored. load(r, buf) loads row r (nothing past the last row);
// row(r, buf, parity) computes and stores it, parity alternating row by row (for shared
// memory kept per row parity: a barrier a row then keeps two rows' uses apart).
template <typename Buf, typename Load, typename Row>
__device__ __forceinline__ void walk_two_buffers(int64_t r, int64_t step, int64_t rows, Buf& a, Buf& b,
                                                 const Load& load, const Row& row) {
  int parity = 0;
  load(r, a);
  while (r < rows) {
    load(r + step, b);
    row(r, a, parity);
    parity ^= 1;
    r += step;
    if (r >= rows) break;
    load(r + step, a);
    row(r, b, parity);
    parity ^= 1;
    r += step;
  }
}

// The block's sum of every thread's s (one barrier): each warp's sum into red (a row
// parity's slots, so that a barrier a row keeps two rows apart), then the warps' sums in
// the same order on every warp.
__device__ __forceinline__ float block_sum(float s, float (&red)[kRowWarps]) {
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kRowWarps; ++w) total += red[w];
  return total;
}

// One view's rows for the vector kernel: where they are, where moved heads go, their
// positions and norm weights. A launch takes one or two (Q and K in one launch).
template <typename T>
struct RowSet {
  T* data;
  T* out;
  RowPlace pl;
  int64_t pos_offset;
  const float* gamma;
  const float* beta;
};
template <typename T>
struct RowSets {
  RowSet<T> s0, s1;
  int n;  // 1 or 2
};
template <typename T>
__device__ __forceinline__ T pick2(bool second, T a, T b) {
  return second ? b : a;
}

// The view a block walks, its fields selected at run time. Two views (Q and K) in one
// launch: the grid's first half walks the first view's rows, the second half the
// second's; every warp keeps to one view (its weights loaded once). One launch instead of
// two: one ramp-up and one drain of the grid, not two.
// The view's fields, selected at run time, live in registers where the parameters of
// one view were read from the constant bank: nvcc -Xptxas -v (sm_90, against cdebad3)
// shows the layer's picks unchanged or lower (LayerNorm's two-pass variance: 117-166 ->
// 90-128), but some walks the layer does not pick higher: across-heads plain 12 at
// 16-bit 119 -> 168, fp32 114 -> 128; RoPE-only plain 12 at 16-bit 96 -> 110.
template <typename T>
struct BlockView : RowSet<T> {
  unsigned block, grid;  // this block's index within its view's half of the grid, and that half's size
};
template <typename T>
__device__ __forceinline__ BlockView<T> block_view(const RowSets<T>& sets) {
  const unsigned half_grid = sets.n == 2 ? (gridDim.x + 1) / 2 : gridDim.x;
  const bool second = blockIdx.x >= half_grid;
  const unsigned block = second ? blockIdx.x - half_grid : blockIdx.x;
  const unsigned grid = second ? gridDim.x - half_grid : half_grid;
  T* const data = pick2(second, sets.s0.data, sets.s1.data);
  T* const out = pick2(second, sets.s0.out, sets.s1.out);
  RowPlace pl;
  pl.row_pitch = pick2(second, sets.s0.pl.row_pitch, sets.s1.pl.row_pitch);
  pl.tokens_per_batch = pick2(second, sets.s0.pl.tokens_per_batch, sets.s1.pl.tokens_per_batch);
  pl.head_dim = sets.s0.pl.head_dim;  // the same for both views
  pl.out_begin = pick2(second, sets.s0.pl.out_begin, sets.s1.pl.out_begin);
  pl.out_count = pick2(second, sets.s0.pl.out_count, sets.s1.pl.out_count);
  pl.out_row_pitch = pick2(second, sets.s0.pl.out_row_pitch, sets.s1.pl.out_row_pitch);
  pl.out_batch_pitch = pick2(second, sets.s0.pl.out_batch_pitch, sets.s1.pl.out_batch_pitch);
  const int64_t pos_offset = pick2(second, sets.s0.pos_offset, sets.s1.pos_offset);
  const float* gamma = pick2(second, sets.s0.gamma, sets.s1.gamma);
  const float* beta = pick2(second, sets.s0.beta, sets.s1.beta);
  return {{data, out, pl, pos_offset, gamma, beta}, block, grid};
}

template <typename T, int kNorm, int kCPL, int kNB, int kWalk>
__device__ __forceinline__ void norm_rope_rows(const RowSets<T>& sets, int64_t rows, int heads, int G, int rope,
                                               float eps, float theta) {
  const BlockView<T> bv = block_view(sets);
  const unsigned block = bv.block, grid = bv.grid;
  T* const data = bv.data;
  T* const out = bv.out;
  const RowPlace pl = bv.pl;
  const int64_t pos_offset = bv.pos_offset;
  const float* __restrict__ gamma = bv.gamma;
  const float* __restrict__ beta = bv.beta;
  constexpr int norm = kNorm;  // a template parameter: no branches, no registers for other kinds
  using V = Vec<T>;
  constexpr int kVE = V::kVE;
  constexpr int kPairs = kVE / 2;
  const int lane = threadIdx.x & 31;
  const int D = pl.head_dim;
  const int chunks = D / kVE;  // per head
  const int hpw = 32 / G;      // heads per pass
  const int passes = (heads + hpw - 1) / hpw;
  const int hw = lane / G, cl = lane - hw * G, base = hw * G;
  const bool lane_used = hw < hpw;
  constexpr bool per_head = norm == static_cast<int>(NormKind::kRmsPerHead) ||
                            norm == static_cast<int>(NormKind::kLayerPerHead);
  // LayerNorm's statistics in one reduction (per_head_batch) at 16-bit types, on the walks
  // whose occupancy does not pay for it: the staged walk's is bound by its shared memory,
  // the plain walk of 8 passes sits at 4 blocks a multiprocessor either way (nvcc -Xptxas
  // -v, sm_90, 16-bit: staged 4 90-91 -> 96 registers, plain 8 120 -> 128), while the
  // pipelined walk of 4 would go from 96-104 to 114-121 registers and from 5 blocks to 4.
  // Measured on one H100 (Q and K in one launch, % of the copy bound; 0ccee14 -> 93ad383,
  // docs/measured/2026-12-05-h100-layernorm): head_dim 72's plain walk of 8, the pick there,
  // bf16 73.4-74.0 -> 77.6-78.2, fp16 75.2-75.8 -> 80.5-81.3; the staged walk of 4 (not the
  // H100's pick) 79.1-82.6 -> 78.9-82.0, within the runs' spread. Not yet on an H200.
  constexpr bool kOnePassLayerNorm = sizeof(T) == 2 && kCPL == 1 && kWalk != kPipelined;

  // What a lane needs for every row: which chunks it owns, their pairs' RoPE
  // frequencies, and (per-head norms) their weights.
  bool has[kCPL];
  float th[kCPL][kPairs], cs[kCPL][kPairs], sn[kCPL][kPairs];
  float g_own[1][kCPL][kVE];  // per-head gamma (the same for every head and row)
  float b_own[kCPL][kVE];     // LayerNorm beta
#pragma unroll
  for (int j = 0; j < kCPL; ++j) {
    const int c = cl + G * j;
    has[j] = lane_used && c < chunks;
#pragma unroll
    for (int q = 0; q < kPairs; ++q) th[j][q] = cs[j][q] = sn[j][q] = 0.0f;
#pragma unroll
    for (int i = 0; i < kVE; ++i) g_own[0][j][i] = b_own[j][i] = 0.0f;
    if (!has[j]) continue;
    if (rope) {
#pragma unroll
      for (int q = 0; q < kPairs; ++q) {
        const int i = c * kPairs + q;  // pair index within the head
        th[j][q] = powf(theta, -(2.0f * static_cast<float>(i)) / static_cast<float>(D));
      }
    }
    if constexpr (per_head) load_f32x(gamma + c * kVE, g_own[0][j], kVE);
    if constexpr (norm == static_cast<int>(NormKind::kLayerPerHead)) load_f32x(beta + c * kVE, b_own[j], kVE);
  }
  // A grid of resident warps walks the rows, one row per warp at a time.
  int64_t row = static_cast<int64_t>(block) * kRowWarps + (threadIdx.x >> 5);
  const int64_t row_step = static_cast<int64_t>(grid) * kRowWarps;
  T* x = nullptr;
  T* out_row = nullptr;

  auto head_of = [&](int p) { return p * hpw + hw; };
  auto load_row = [&](const T* xr, int p, V (&v)[kCPL]) {
    const int h = head_of(p);
#pragma unroll
    for (int j = 0; j < kCPL; ++j) {
      v[j].raw = make_uint4(0, 0, 0, 0);
      if (h < heads && has[j])
        v[j].raw = __ldg(reinterpret_cast<const uint4*>(xr + static_cast<int64_t>(h) * D + (cl + G * j) * kVE));
    }
  };
  auto load = [&](int p, V (&v)[kCPL]) { load_row(x, p, v); };
  // Normalises (given the group's statistics), rotates and stores one pass's chunks.
  auto finish = [&](int p, V (&v)[kCPL], float mu, float rinv) {
    const int h = head_of(p);
    if (h >= heads || !lane_used) return;
    T* dst = head_dst(x, out_row, pl, h);
#pragma unroll
    for (int j = 0; j < kCPL; ++j) {
      if (!has[j]) continue;
      const int e0 = (cl + G * j) * kVE;
      const float* g = g_own[0][j];
      float g_row[kVE];  // across heads: this head's weights
      if constexpr (norm == static_cast<int>(NormKind::kRmsAcrossHeads)) {
        load_f32x(gamma + static_cast<int64_t>(h) * D + e0, g_row, kVE);
        g = g_row;
      }
      finish_chunk<T, kNorm>(v[j], g, b_own[j], mu, rinv, rope, cs[j], sn[j]);
      *reinterpret_cast<uint4*>(dst + e0) = v[j].raw;
    }
  };
  // Sums of (x - c) and (x - c)^2 over one pass's values on this lane.
  auto lane_sums = [&](const V (&v)[kCPL], float c, float& s1, float& s2) {
#pragma unroll
    for (int j = 0; j < kCPL; ++j)
      if (has[j]) chunk_sums(v[j], c, s1, s2);
  };

  // Sum of one pass's values on this lane.
  auto lane_sums1 = [&](const V (&v)[kCPL], float& s1) {
#pragma unroll
    for (int j = 0; j < kCPL; ++j)
      if (has[j]) chunk_sum1(v[j], s1);
  };

  // A row's place (input, target) and its RoPE angles: once per row.
  auto begin_row = [&](int64_t r) {
    x = data + r * pl.row_pitch;
    out_row = out_row_of(out, pl, r);
    if (rope) {
      const float pos = static_cast<float>(pos_offset + r % pl.tokens_per_batch);
#pragma unroll
      for (int j = 0; j < kCPL; ++j)
#pragma unroll
        for (int q = 0; q < kPairs; ++q)
          if (has[j]) sincosf(pos * th[j][q], &sn[j][q], &cs[j][q]);
    }
  };
  // Per head (or no norm): each head's G lanes reduce among themselves, kNB heads' chains
  // at once; then normalise, rotate and store passes p0 .. p0 + kNB - 1 of the current
  // row. Passes past the last head load nothing and store nothing.
  auto per_head_batch = [&](int p0, V (&v)[kNB][kCPL]) {
    const float inv_n = 1.0f / static_cast<float>(D);
    float mu[kNB], rinv[kNB];
#pragma unroll
    for (int p = 0; p < kNB; ++p) mu[p] = 0.0f, rinv[p] = 1.0f;
    if constexpr (norm == static_cast<int>(NormKind::kRmsPerHead)) {
      float s2[kNB];
#pragma unroll
      for (int p = 0; p < kNB; ++p) {
        float s1 = 0.0f;
        s2[p] = 0.0f;
        lane_sums(v[p], 0.0f, s1, s2[p]);
      }
      group_sums(s2, G, base);
#pragma unroll
      for (int p = 0; p < kNB; ++p) rinv[p] = rsqrtf(s2[p] * inv_n + eps);
    } else if constexpr (norm == static_cast<int>(NormKind::kRmsAcrossHeads)) {
      // The pipelined walk's items are whole rows here (the launcher sees to kNB >=
      // passes): one sum over the warp.
      float s1 = 0.0f, s2[1] = {0.0f};
#pragma unroll
      for (int p = 0; p < kNB; ++p) lane_sums(v[p], 0.0f, s1, s2[0]);
      warp_sums(s2);
      const float r = rsqrtf(s2[0] / (static_cast<float>(heads) * static_cast<float>(D)) + eps);
#pragma unroll
      for (int p = 0; p < kNB; ++p) rinv[p] = r;
    } else if constexpr (norm == static_cast<int>(NormKind::kLayerPerHead) && kOnePassLayerNorm) {
      // One reduction of both sums, shifted by the head's first value c (a shuffle from the
      // group's first lane): var = E[(x-c)^2] - E[x-c]^2, one chain of shuffle rounds where
      // the two-pass form below waits on two (see kOnePassLayerNorm for where). Its
      // cancellation costs a relative variance error of about eps_f32 * (1 + ((mu - c) /
      // sigma)^2), and no value of a head lies further than sqrt(D - 1) sigma from its mean
      // (Samuelson's inequality): at most ~D * 6e-8 = 8e-6 at head_dim 128, 1/30 of an fp16
      // result's half-ulp (2^-12) and less of bf16's. fp32 results keep the two-pass form:
      // there the same error reached the tests' fp32 tolerance (below).
      float s[2 * kNB];
#pragma unroll
      for (int p = 0; p < kNB; ++p) {
        const float c = __shfl_sync(0xffffffffu, to_float(reinterpret_cast<const T*>(&v[p][0].raw)[0]), base);
        mu[p] = c;
        s[p] = s[kNB + p] = 0.0f;
        lane_sums(v[p], c, s[p], s[kNB + p]);
      }
      group_sums(s, G, base);
#pragma unroll
      for (int p = 0; p < kNB; ++p) {
        const float m1 = s[p] * inv_n;
        mu[p] += m1;
        rinv[p] = rsqrtf(fmaxf(s[kNB + p] * inv_n - m1 * m1, 0.0f) + eps);
      }
    } else if constexpr (norm == static_cast<int>(NormKind::kLayerPerHead)) {
      // Mean, then variance over the values still in registers (two passes, two
      // reductions of kNB chains each: as many shuffles as one reduction of both sums).
      // The one-pass E[(x-c)^2] - E[x-c]^2, shifted by one of the head's values, lost up
      // to ~2e-5 of the variance at fp32 to cancellation when c sat far from the mean
      // (CudaKernelsTest.NormRopeVectorKernelPipelinedWalk, fp32 pipe 8: 4.50e-5 against
      // a tolerance of 4.38e-5); sum((x - mu)^2) has no cancellation.
      float s1[kNB];
#pragma unroll
      for (int p = 0; p < kNB; ++p) {
        s1[p] = 0.0f;
        lane_sums1(v[p], s1[p]);
      }
      group_sums(s1, G, base);
      float s2[kNB];
#pragma unroll
      for (int p = 0; p < kNB; ++p) {
        mu[p] = s1[p] * inv_n;
        float d1 = 0.0f;
        s2[p] = 0.0f;
        lane_sums(v[p], mu[p], d1, s2[p]);
      }
      group_sums(s2, G, base);
#pragma unroll
      for (int p = 0; p < kNB; ++p) rinv[p] = rsqrtf(s2[p] * inv_n + eps);
    }
#pragma unroll
    for (int p = 0; p < kNB; ++p) finish(p0 + p, v[p], mu[p], rinv[p]);
  };

  if constexpr (kWalk == kBlockRows) {
    // kNB: passes per warp, the warp's share of the row (warp w: passes w*kNB ..
    // w*kNB + kNB - 1; the launcher sees to 4 * kNB >= passes). Rows walked by whole
    // blocks: the loop and the barrier are uniform across the block.
    static_assert(norm == static_cast<int>(NormKind::kRmsAcrossHeads), "the block walk is across-heads RMS's");
    __shared__ float red[2][kRowWarps];  // per row parity: a barrier a row keeps the two apart
    const int wi = threadIdx.x >> 5;
    const int p_first = wi * kNB;
    const float inv_n = 1.0f / (static_cast<float>(heads) * static_cast<float>(D));
    V a[kNB][kCPL], b[kNB][kCPL];
    auto load_item = [&](int64_t rr, V (&v)[kNB][kCPL]) {
      if (rr >= rows) return;
      const T* xr = data + rr * pl.row_pitch;
#pragma unroll
      for (int p = 0; p < kNB; ++p) load_row(xr, p_first + p, v[p]);  // past the last head: zeros
    };
    auto do_row = [&](int64_t rr, V (&v)[kNB][kCPL], int parity) {
      begin_row(rr);
      float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int p = 0; p < kNB; ++p) lane_sums(v[p], 0.0f, s1, s2);
      const float rinv = rsqrtf(block_sum(s2, red[parity]) * inv_n + eps);
#pragma unroll
      for (int p = 0; p < kNB; ++p) finish(p_first + p, v[p], 0.0f, rinv);
    };
    walk_two_buffers(block, grid, rows, a, b, load_item, do_row);
  } else if constexpr (kWalk == kStaged) {
    // Two row buffers per warp in shared memory; lane l copies and later reads back only
    // its own chunks (the same lane/chunk map as the register walks), so the copies need
    // no barrier, only the lane's own cp.async.wait_group.
    extern __shared__ uint4 stage_mem[];
    const int row_chunks = heads * chunks;
    uint4* stage0 = stage_mem + static_cast<int64_t>(threadIdx.x >> 5) * 2 * row_chunks;
    auto issue = [&](int64_t rr, uint4* st) {
      if (rr < rows && lane_used) {
        const T* xr = data + rr * pl.row_pitch;
        for (int p = 0; p < passes; ++p) {
          const int h = head_of(p);
          if (h >= heads) break;
#pragma unroll
          for (int j = 0; j < kCPL; ++j) {
            if (!has[j]) continue;
            const int c = cl + G * j;
            cp_async16(st + h * chunks + c, xr + static_cast<int64_t>(h) * D + c * kVE);
          }
        }
      }
      cp_async_commit();  // an empty group past the last row keeps the count in step
    };
    auto read = [&](const uint4* st, int p, V (&v)[kCPL]) {
      const int h = head_of(p);
#pragma unroll
      for (int j = 0; j < kCPL; ++j) {
        v[j].raw = make_uint4(0, 0, 0, 0);
        if (h < heads && has[j]) v[j].raw = st[h * chunks + cl + G * j];
      }
    };
    int cur = 0;
    issue(row, stage0);
    for (; row < rows; row += row_step, cur ^= 1) {
      uint4* st = stage0 + cur * row_chunks;
      issue(row + row_step, stage0 + (cur ^ 1) * row_chunks);
      begin_row(row);  // the RoPE angles while the copies land
      cp_async_wait<1>();
      if constexpr (norm == static_cast<int>(NormKind::kRmsAcrossHeads)) {
        const float inv_n = 1.0f / (static_cast<float>(heads) * static_cast<float>(D));
        float s1 = 0.0f, s2[1] = {0.0f};
        for (int p0 = 0; p0 < passes; p0 += kNB) {
          V v[kNB][kCPL];
#pragma unroll
          for (int p = 0; p < kNB; ++p) read(st, p0 + p, v[p]);
#pragma unroll
          for (int p = 0; p < kNB; ++p) lane_sums(v[p], 0.0f, s1, s2[0]);
        }
        warp_sums(s2);
        const float rinv = rsqrtf(s2[0] * inv_n + eps);
        for (int p0 = 0; p0 < passes; p0 += kNB) {
          V v[kNB][kCPL];
#pragma unroll
          for (int p = 0; p < kNB; ++p) read(st, p0 + p, v[p]);
#pragma unroll
          for (int p = 0; p < kNB; ++p) finish(p0 + p, v[p], 0.0f, rinv);
        }
      } else {
        for (int p0 = 0; p0 < passes; p0 += kNB) {
          V v[kNB][kCPL];
#pragma unroll
          for (int p = 0; p < kNB; ++p) read(st, p0 + p, v[p]);
          per_head_batch(p0, v);
        }
      }
    }
    cp_async_wait<0>();
  } else if constexpr (kWalk == kPipelined) {
    // Software-pipelined walk over the warp's (row, first pass) items: the next item's
    // loads are issued before the current one is reduced, rotated and stored, so a warp
    // keeps a batch in flight while it computes (without it, each warp alternates between
    // waiting for its loads and computing, and at 16-bit types, where a row is one or two
    // batches, the kernel stays well short of the copy bound). Two register buffers,
    // swapped by unrolling the walk by two.
    V a[kNB][kCPL], b[kNB][kCPL];
    int64_t r = row;
    int p0 = 0;
    auto next = [&](int64_t& rr, int& pp) {
      pp += kNB;
      if (pp >= passes) pp = 0, rr += row_step;
    };
    auto load_item = [&](int64_t rr, int pp, V (&v)[kNB][kCPL]) {
      if (rr >= rows) return;
      const T* xr = data + rr * pl.row_pitch;
#pragma unroll
      for (int p = 0; p < kNB; ++p) load_row(xr, pp + p, v[p]);
    };
    load_item(r, p0, a);
    while (r < rows) {
      int64_t r1 = r;
      int p1 = p0;
      next(r1, p1);
      load_item(r1, p1, b);
      if (p0 == 0) begin_row(r);
      per_head_batch(p0, a);
      r = r1, p0 = p1;
      if (r >= rows) break;
      next(r1, p1);
      load_item(r1, p1, a);
      if (p0 == 0) begin_row(r);
      per_head_batch(p0, b);
      r = r1, p0 = p1;
    }
  } else {
  for (; row < rows; row += row_step) {  // whole warps: the bound is uniform across a warp
  begin_row(row);
  if constexpr (norm == static_cast<int>(NormKind::kRmsAcrossHeads)) {
    const float inv_n = 1.0f / (static_cast<float>(heads) * static_cast<float>(D));
    if (passes <= kNB) {
      V v[kNB][kCPL];
#pragma unroll
      for (int p = 0; p < kNB; ++p) load(p, v[p]);
      float s1 = 0.0f, s2[1] = {0.0f};
#pragma unroll
      for (int p = 0; p < kNB; ++p) lane_sums(v[p], 0.0f, s1, s2[0]);
      warp_sums(s2);
      const float rinv = rsqrtf(s2[0] * inv_n + eps);
#pragma unroll
      for (int p = 0; p < kNB; ++p) finish(p, v[p], 0.0f, rinv);
    } else {
      float s1 = 0.0f, s2[1] = {0.0f};
      for (int p0 = 0; p0 < passes; p0 += kNB) {
        V v[kNB][kCPL];
#pragma unroll
        for (int p = 0; p < kNB; ++p) load(p0 + p, v[p]);
#pragma unroll
        for (int p = 0; p < kNB; ++p) lane_sums(v[p], 0.0f, s1, s2[0]);
      }
      warp_sums(s2);
      const float rinv = rsqrtf(s2[0] * inv_n + eps);
      for (int p0 = 0; p0 < passes; p0 += kNB) {
        V v[kNB][kCPL];
#pragma unroll
        for (int p = 0; p < kNB; ++p) load(p0 + p, v[p]);
#pragma unroll
        for (int p = 0; p < kNB; ++p) finish(p0 + p, v[p], 0.0f, rinv);
      }
    }
  } else {
  for (int p0 = 0; p0 < passes; p0 += kNB) {
    V v[kNB][kCPL];
#pragma unroll
    for (int p = 0; p < kNB; ++p) load(p0 + p, v[p]);
    per_head_batch(p0, v);
  }
  }
  }
  }
}

// --- the flat walk (kFlat): a block a row, every thread's chunks across head boundaries.
//
// Thread t of the block's 128 owns chunks t, t + 128, ..., t + 128 (kNB - 1) of the row
// (those before its end): every lane carries data, whatever a head's chunk count. A
// thread owns the same chunks of every row, so their heads and places within the head
// are worked out once. Per-head sums through shared memory: each chunk's partial, a
// barrier, each head's sum by one thread over the head's partials in a fixed order (no
// atomics: the same result every run and on every walk of the same row), a barrier, read
// back by the chunks' threads; LayerNorm does this twice (the mean, then the sum of
// squares about it: the two-pass variance, as per_head_batch explains). Across-heads RMS:
// warp sums, then the block's four (one barrier, as kBlockRows). The row's RoPE cos/sin
// are tabulated in shared memory once a row (D/2 sincosf a row, by D/2 threads) and read
// by every chunk; the per-head norms' weights are copied there once. The next row loads
// into registers while this one is reduced and stored (walk_two_buffers): rows of at most
// 128 kNB chunks.

// The flat walk's dynamic shared memory, in floats (every part 16-byte aligned): the
// per-head norms' weights (gamma; beta for LayerNorm), the RoPE table (the row's D/2 cos,
// then their sin; two rows' worth, by row parity), the per-head norms' chunk partials (a
// row's chunks) and head sums.
struct FlatSmem {
  int g, b, tab, part, hs, floats;
};
__host__ __device__ inline int round_up4(int n) { return (n + 3) & ~3; }
// 16-bit LayerNorm takes its statistics in one pass on the flat walk (flat_rows).
__host__ __device__ constexpr bool flat_one_pass(int norm, int elem_bytes) {
  return norm == static_cast<int>(NormKind::kLayerPerHead) && elem_bytes == 2;
}
__host__ __device__ inline FlatSmem flat_smem(int D, int heads, int row_chunks, int norm, int elem_bytes) {
  const bool layer = norm == static_cast<int>(NormKind::kLayerPerHead);
  const bool per_head = layer || norm == static_cast<int>(NormKind::kRmsPerHead);
  const int sums = flat_one_pass(norm, elem_bytes) ? 3 : 1;  // values a chunk partial and a head sum carry
  FlatSmem m{};
  m.g = 0;
  m.b = m.g + (per_head ? round_up4(D) : 0);
  m.tab = m.b + (layer ? round_up4(D) : 0);
  m.part = m.tab + 2 * round_up4(D);
  m.hs = m.part + (per_head ? sums * round_up4(row_chunks) : 0);
  m.floats = m.hs + (per_head ? sums * round_up4(heads) : 0);
  return m;
}

// n floats from 16-byte (n % 4 == 0) or 8-byte aligned shared memory.
template <int kN>
__device__ __forceinline__ void load_shared_f32(const float* src, float (&dst)[kN]) {
  if constexpr (kN % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kN; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(src + i);
      dst[i] = q.x, dst[i + 1] = q.y, dst[i + 2] = q.z, dst[i + 3] = q.w;
    }
  } else {
    static_assert(kN % 2 == 0, "pairs of floats");
#pragma unroll
    for (int i = 0; i < kN; i += 2) {
      const float2 q = *reinterpret_cast<const float2*>(src + i);
      dst[i] = q.x, dst[i + 1] = q.y;
    }
  }
}

template <typename T, int kNorm, int kNB>
__device__ __forceinline__ void flat_rows(const BlockView<T>& bv, int64_t rows, int heads, int rope, float eps,
                                          float theta) {
  using V = Vec<T>;
  constexpr int kVE = V::kVE, kPairs = kVE / 2, kNT = kRowWarps * 32;
  constexpr bool across = kNorm == static_cast<int>(NormKind::kRmsAcrossHeads);
  constexpr bool layer = kNorm == static_cast<int>(NormKind::kLayerPerHead);
  constexpr bool per_head = layer || kNorm == static_cast<int>(NormKind::kRmsPerHead);
  extern __shared__ uint4 flat_mem[];
  float* const sm = reinterpret_cast<float*>(flat_mem);
  __shared__ float red[2][kRowWarps];  // across heads: the warps' sums, per row parity
  T* const data = bv.data;
  const RowPlace& pl = bv.pl;
  const float* __restrict__ gamma = bv.gamma;
  const int t = threadIdx.x;
  const int D = pl.head_dim, half = D / 2, cph = D / kVE, row_chunks = heads * cph;
  const FlatSmem lay = flat_smem(D, heads, row_chunks, kNorm, sizeof(T));
  if constexpr (per_head) {
    for (int i = t; i < D; i += kNT) {
      sm[lay.g + i] = gamma[i];
      if constexpr (layer) sm[lay.b + i] = bv.beta[i];
    }
  }
  // The RoPE frequencies this thread tabulates each row: pairs t and t + 128 (head_dim <=
  // 512).
  float th[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int i = t + kNT * k;
    th[k] = rope && i < half ? powf(theta, -(2.0f * static_cast<float>(i)) / static_cast<float>(D)) : 0.0f;
  }
  // This thread's chunks: their head (heads or more: past the row's end) and their chunk
  // within it.
  int hd[kNB], wc[kNB];
#pragma unroll
  for (int p = 0; p < kNB; ++p) {
    const int c = t + kNT * p;
    hd[p] = c / cph;
    wc[p] = c - hd[p] * cph;
  }
  auto has = [&](int p) { return hd[p] < heads; };
  __syncthreads();  // the weights
  const float inv_d = 1.0f / static_cast<float>(D);
  const float inv_n = 1.0f / (static_cast<float>(heads) * static_cast<float>(D));

  auto load_item = [&](int64_t rr, V (&v)[kNB]) {
    if (rr >= rows) return;
    const uint4* xr = reinterpret_cast<const uint4*>(data + rr * pl.row_pitch);
#pragma unroll
    for (int p = 0; p < kNB; ++p) {
      v[p].raw = make_uint4(0, 0, 0, 0);
      if (has(p)) v[p].raw = __ldg(xr + t + kNT * p);
    }
  };
  // s[p] (chunk p's partial) becomes the sum over chunk p's head. Each head's thread
  // starts at a different partial (h mod cph) so that the head threads of a warp read
  // different banks where cph is a multiple of 32's factors (head_dim 64, 128).
  auto head_sums = [&](float (&s)[kNB]) {
    float* const part = sm + lay.part;
    float* const hs = sm + lay.hs;
#pragma unroll
    for (int p = 0; p < kNB; ++p)
      if (has(p)) part[t + kNT * p] = s[p];
    __syncthreads();
    for (int h = t; h < heads; h += kNT) {
      const float* q = part + h * cph;
      int k = h % cph;
      float a = 0.0f;
      for (int i = 0; i < cph; ++i) {
        a += q[k];
        k = k + 1 == cph ? 0 : k + 1;
      }
      hs[h] = a;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kNB; ++p) s[p] = has(p) ? hs[hd[p]] : 0.0f;
  };
  // 16-bit LayerNorm's statistics in one round (flat_one_pass): each chunk's sums shifted by
  // its own first value c_p, S1 = sum(x - c_p) and S2 = sum(x - c_p)^2, go to shared memory
  // with c_p; each head's thread moves them to one shift, the head's first value c (its chunk
  // 0's c_p): sum(x - c) = S1 + n d, sum(x - c)^2 = S2 + d (2 S1 + n d), d = c_p - c, n =
  // kVE; then mean = c + sum(x - c) / D, variance = sum(x - c)^2 / D - (sum(x - c) / D)^2.
  // One barrier pair a row where the two-pass form takes two; its cancellation error is
  // the register walks' one-pass form's (per_head_batch): a relative variance error of about
  // D x 6e-8 at most (Samuelson's inequality), far below a 16-bit half-ulp.
  auto head_stats = [&](const V (&v)[kNB], float (&mu)[kNB], float (&rinv)[kNB]) {
    float* const part = sm + lay.part;  // [S1 | S2 | c] of the row's chunks
    float* const hs = sm + lay.hs;      // [sum(x - c) | sum(x - c)^2 | c] of its heads
    const int pc = round_up4(row_chunks), ph = round_up4(heads);
#pragma unroll
    for (int p = 0; p < kNB; ++p) {
      if (!has(p)) continue;
      const float c = to_float(reinterpret_cast<const T*>(&v[p].raw)[0]);
      float s1 = 0.0f, s2 = 0.0f;
      chunk_sums(v[p], c, s1, s2);
      const int i = t + kNT * p;
      part[i] = s1, part[pc + i] = s2, part[2 * pc + i] = c;
    }
    __syncthreads();
    const float n = static_cast<float>(kVE);
    for (int h = t; h < heads; h += kNT) {
      const int q = h * cph;
      const float c = part[2 * pc + q];
      int k = h % cph;  // as head_sums: the head threads of a warp start on different banks
      float a1 = 0.0f, a2 = 0.0f;
      for (int i = 0; i < cph; ++i) {
        const float s1 = part[q + k], d = part[2 * pc + q + k] - c;
        a1 += s1 + n * d;
        a2 += part[pc + q + k] + d * (2.0f * s1 + n * d);
        k = k + 1 == cph ? 0 : k + 1;
      }
      hs[h] = a1, hs[ph + h] = a2, hs[2 * ph + h] = c;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kNB; ++p) {
      if (!has(p)) continue;
      const float m1 = hs[hd[p]] * inv_d;
      mu[p] = hs[2 * ph + hd[p]] + m1;
      rinv[p] = rsqrtf(fmaxf(hs[ph + hd[p]] * inv_d - m1 * m1, 0.0f) + eps);
    }
  };
  auto do_row = [&](int64_t rr, V (&v)[kNB], int parity) {
    T* const x = data + rr * pl.row_pitch;
    T* const out_row = out_row_of(bv.out, pl, rr);
    float* const tab = sm + lay.tab + parity * D;  // this row's cos (pairs 0 .. half - 1), then sin
    if (rope) {
      const float pos = static_cast<float>(bv.pos_offset + rr % pl.tokens_per_batch);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int i = t + kNT * k;
        if (i < half) sincosf(pos * th[k], &tab[half + i], &tab[i]);
      }
    }
    float mu[kNB], rinv[kNB];
#pragma unroll
    for (int p = 0; p < kNB; ++p) mu[p] = 0.0f, rinv[p] = 1.0f;
    if constexpr (across) {
      float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int p = 0; p < kNB; ++p)
        if (has(p)) chunk_sums(v[p], 0.0f, s1, s2);
      const float r = rsqrtf(block_sum(s2, red[parity]) * inv_n + eps);
#pragma unroll
      for (int p = 0; p < kNB; ++p) rinv[p] = r;
    } else if constexpr (per_head && flat_one_pass(kNorm, sizeof(T))) {
      head_stats(v, mu, rinv);
    } else if constexpr (per_head) {
      float s[kNB];
      if constexpr (layer) {
#pragma unroll
        for (int p = 0; p < kNB; ++p) {
          s[p] = 0.0f;
          if (has(p)) chunk_sum1(v[p], s[p]);
        }
        head_sums(s);
#pragma unroll
        for (int p = 0; p < kNB; ++p) mu[p] = s[p] * inv_d;
      }
#pragma unroll
      for (int p = 0; p < kNB; ++p) {
        float d1 = 0.0f;
        s[p] = 0.0f;
        if (has(p)) chunk_sums(v[p], mu[p], d1, s[p]);
      }
      head_sums(s);
#pragma unroll
      for (int p = 0; p < kNB; ++p) rinv[p] = rsqrtf(s[p] * inv_d + eps);
    } else {
      __syncthreads();  // the RoPE table (no norm: the row's only barrier)
    }
#pragma unroll
    for (int p = 0; p < kNB; ++p) {
      if (!has(p)) continue;
      const int e0 = wc[p] * kVE;
      float g[kVE] = {}, b[kVE] = {}, cs[kPairs] = {}, sn[kPairs] = {};
      if constexpr (across) load_f32x(gamma + static_cast<int64_t>(t + kNT * p) * kVE, g, kVE);
      if constexpr (per_head) load_shared_f32(sm + lay.g + e0, g);
      if constexpr (layer) load_shared_f32(sm + lay.b + e0, b);
      if (rope) {
        load_shared_f32(tab + wc[p] * kPairs, cs);
        load_shared_f32(tab + half + wc[p] * kPairs, sn);
      }
      finish_chunk<T, kNorm>(v[p], g, b, mu[p], rinv[p], rope, cs, sn);
      *reinterpret_cast<uint4*>(head_dst(x, out_row, pl, hd[p]) + e0) = v[p].raw;
    }
  };
  V a[kNB], b[kNB];
  walk_two_buffers(bv.block, bv.grid, rows, a, b, load_item, do_row);
}

// --- the lane-rows walk (kLaneRows): a lane a head.
//
// A view's head rows in token order (token r's heads 0 .. H - 1, then token r + 1's) are cut
// into tiles of 128 (tokens straddle tiles: every head row is normalised alone). The block
// copies a tile into shared memory with cp.async, its 16-byte chunks in order (coalesced, as
// the streaming kernel reads), the next tile in flight while this one is computed. Thread t
// then takes head row t of the tile whole: the head's mean and variance summed in the thread
// over its kCPH chunks (the two-pass form, each pass reading the row from shared memory: no
// cancellation, no shuffles), normalised, rotated and written back in place; then the block
// stores the tile's chunks in order (coalesced). Where the lane-group walks give a head G
// lanes (head_dim 72 at 16-bit types: 9, leaving 5 of 32 lanes idle, and a 5-round shuffle
// tree a statistic), here every thread carries a head and nothing is exchanged. Across-heads
// RMS needs a token's heads together and is not served. Shared-memory reads of a head row's
// chunk e by 8 threads at once (a 16-byte access's phase) fall in 8 different 16-byte bank
// groups: a head row of an odd chunk count strides them by itself; one of a multiple of 8
// chunks is swizzled (chunk e of row j at slot e ^ (j & 7)). Three barriers a tile.
constexpr int kLaneTile = kRowWarps * 32;  // head rows a tile: one a thread

// The lane-rows walk's dynamic shared memory, in bytes (every part 16-byte aligned): the two
// tiles; the per-head norms' weights (gamma, beta); the RoPE frequencies (D/2) and the
// tile's table (cos, then sin, of each token it spans); the tokens' source and target rows.
struct LaneSmem {
  int tile, g, b, th, tab, rows, bytes, tok_span;
};
__host__ __device__ inline LaneSmem lane_smem(int D, int heads, int elem_bytes, int tiles = 2) {
  LaneSmem m{};
  m.tok_span = (kLaneTile - 1 + heads - 1) / heads + 1;  // tokens 128 consecutive head rows can touch
  m.tile = kLaneTile * D * elem_bytes;
  m.g = tiles * m.tile;
  m.b = m.g + 4 * round_up4(D);
  m.th = m.b + 4 * round_up4(D);
  m.tab = m.th + 4 * round_up4(D / 2);
  m.rows = m.tab + 4 * m.tok_span * round_up4(D);
  m.bytes = m.rows + 2 * static_cast<int>(sizeof(void*)) * m.tok_span;
  return m;
}

template <typename T, int kNorm, int kCPH, bool kSingle>
__device__ __forceinline__ void lane_rows(const BlockView<T>& bv, int64_t rows, int heads, int rope, float eps,
                                          float theta) {
  using V = Vec<T>;
  constexpr int kVE = V::kVE, kPairs = kVE / 2, kNT = kLaneTile, D = kCPH * kVE, half = D / 2;
  constexpr bool layer = kNorm == static_cast<int>(NormKind::kLayerPerHead);
  constexpr bool per_head = layer || kNorm == static_cast<int>(NormKind::kRmsPerHead);
  static_assert(kNorm != static_cast<int>(NormKind::kRmsAcrossHeads), "the lane-rows walk is per head");
  extern __shared__ uint4 lane_mem[];
  char* const smb = reinterpret_cast<char*>(lane_mem);
  const LaneSmem lay = lane_smem(D, heads, sizeof(T), kSingle ? 1 : 2);
  float* const sg = reinterpret_cast<float*>(smb + lay.g);
  float* const sb = reinterpret_cast<float*>(smb + lay.b);
  float* const sth = reinterpret_cast<float*>(smb + lay.th);
  float* const tab = reinterpret_cast<float*>(smb + lay.tab);  // token k's cos at k D, its sin at k D + D/2
  T** const trow = reinterpret_cast<T**>(smb + lay.rows);       // token k's row at 2k, its target row at 2k + 1
  const RowPlace& pl = bv.pl;
  const int t = threadIdx.x;
  for (int i = t; i < D; i += kNT) {
    if constexpr (per_head) sg[i] = bv.gamma[i];
    if constexpr (layer) sb[i] = bv.beta[i];
  }
  for (int i = t; i < half; i += kNT) sth[i] = powf(theta, -(2.0f * static_cast<float>(i)) / static_cast<float>(D));
  // hl / heads for hl < heads + 128 (a tile's heads counted from its first token): the float
  // quotient lies at least 0.5 / heads from an integer, far beyond its rounding error.
  const float inv_heads = 1.0f / static_cast<float>(heads);
  auto token_of = [&](int hl) { return __float2int_rz((static_cast<float>(hl) + 0.5f) * inv_heads); };
  auto slot = [](int j, int e) { return kCPH % 8 == 0 ? j * kCPH + (e ^ (j & 7)) : j * kCPH + e; };
  const int64_t total = rows * heads;
  const int64_t tiles = (total + kNT - 1) / kNT;
  struct Tile {
    int64_t tok0;
    int h0, n;  // the first head row's head; head rows in the tile
  };
  auto tile_of = [&](int64_t k) {
    const int64_t j0 = k * kNT, tok0 = j0 / heads;
    return Tile{tok0, static_cast<int>(j0 - tok0 * heads), static_cast<int>(total - j0 < kNT ? total - j0 : kNT)};
  };
  auto copy_in = [&](int64_t k, int buf) {
    if (k >= tiles) return;
    const Tile tl = tile_of(k);
    char* const tile = smb + buf * lay.tile;
    for (int q = t; q < tl.n * kCPH; q += kNT) {
      const int jl = q / kCPH, e = q - jl * kCPH, hl = tl.h0 + jl, tk = token_of(hl), h = hl - tk * heads;
      cp_async16(tile + 16 * slot(jl, e), bv.data + (tl.tok0 + tk) * pl.row_pitch + h * D + e * kVE);
    }
  };
  // The tile's tokens: their rows and (RoPE) their cos and sin.
  auto prepare = [&](const Tile& tl) {
    const int ntok = token_of(tl.h0 + tl.n - 1) + 1;
    for (int i = t; i < ntok; i += kNT) {
      trow[2 * i] = bv.data + (tl.tok0 + i) * pl.row_pitch;
      trow[2 * i + 1] = out_row_of(bv.out, pl, tl.tok0 + i);
    }
    if (!rope) return;
    const int64_t p0 = tl.tok0 % pl.tokens_per_batch;
    for (int i = t; i < ntok * half; i += kNT) {
      const int tk = i / half, pr = i - tk * half;
      int64_t pos = p0 + tk;
      if (pos >= pl.tokens_per_batch) pos %= pl.tokens_per_batch;
      sincosf(static_cast<float>(bv.pos_offset + pos) * sth[pr], &tab[tk * D + half + pr], &tab[tk * D + pr]);
    }
  };
  // Thread t's head row: statistics, normalise, rotate, back in place. The chunks are read
  // from shared memory for each pass (two or three; two for kSingle's LayerNorm), not held in
  // registers across them: ptxas keeps a pass's reads and its arithmetic together within the
  // register cap (lane_min_blocks).
  auto compute = [&](const Tile& tl, int buf) {
    if (t >= tl.n) return;
    char* const tile = smb + buf * lay.tile;
    auto chunk = [&](int e) {
      V v;
      v.raw = *reinterpret_cast<const uint4*>(tile + 16 * slot(t, e));
      return v;
    };
    float mu = 0.0f, rinv = 1.0f;
    if constexpr (layer && kSingle) {
      constexpr float inv_d = 1.0f / static_cast<float>(D);
      float f0[kVE];
      chunk(0).to_floats(f0);
      float d1 = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int e = 0; e < kCPH; ++e) chunk_sums(chunk(e), f0[0], d1, s2);
      const float dm = d1 * inv_d;
      mu = f0[0] + dm;
      rinv = rsqrtf(fmaxf(s2 * inv_d - dm * dm, 0.0f) + eps);
    } else if constexpr (per_head) {
      constexpr float inv_d = 1.0f / static_cast<float>(D);
      if constexpr (layer) {
        float s1 = 0.0f;
#pragma unroll
        for (int e = 0; e < kCPH; ++e) chunk_sum1(chunk(e), s1);
        mu = s1 * inv_d;
      }
      float d1 = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int e = 0; e < kCPH; ++e) chunk_sums(chunk(e), mu, d1, s2);
      rinv = rsqrtf(s2 * inv_d + eps);
    }
    const float* const cs_row = tab + token_of(tl.h0 + t) * D;
    // The single-tile walk unrolls by 3: fully unrolled, ptxas hoists the weights' and table's
    // reads and spills at 64 registers (104-132 bytes at 9 chunks).
    constexpr int kUnroll = kSingle ? 3 : kCPH;
#pragma unroll kUnroll
    for (int e = 0; e < kCPH; ++e) {
      V v = chunk(e);
      float g[kVE] = {}, b[kVE] = {}, cs[kPairs] = {}, sn[kPairs] = {};
      if constexpr (per_head) load_shared_f32(sg + e * kVE, g);
      if constexpr (layer) load_shared_f32(sb + e * kVE, b);
      if (rope) {
        load_shared_f32(cs_row + e * kPairs, cs);
        load_shared_f32(cs_row + half + e * kPairs, sn);
      }
      finish_chunk<T, kNorm>(v, g, b, mu, rinv, rope, cs, sn);
      *reinterpret_cast<uint4*>(tile + 16 * slot(t, e)) = v.raw;
    }
  };
  auto copy_out = [&](const Tile& tl, int buf) {
    const char* const tile = smb + buf * lay.tile;
    for (int q = t; q < tl.n * kCPH; q += kNT) {
      const int jl = q / kCPH, e = q - jl * kCPH, hl = tl.h0 + jl, tk = token_of(hl), h = hl - tk * heads;
      *reinterpret_cast<uint4*>(head_dst(trow[2 * tk], trow[2 * tk + 1], pl, h) + e * kVE) =
          *reinterpret_cast<const uint4*>(tile + 16 * slot(jl, e));
    }
  };
  __syncthreads();  // the weights and frequencies
  // Double-buffered: the next tile's copies in flight while this one is computed. Single
  // (kSingle): a tile's copies in flight only while its tokens are prepared.
  int buf = 0;
  if constexpr (!kSingle) {
    copy_in(bv.block, buf);
    cp_async_commit();
  }
  for (int64_t k = bv.block; k < tiles; k += bv.grid) {  // uniform across the block
    if constexpr (kSingle) copy_in(k, buf);
    else copy_in(k + bv.grid, buf ^ 1);  // the other buffer was stored from before the last barrier
    cp_async_commit();
    const Tile tl = tile_of(k);
    prepare(tl);
    if constexpr (kSingle) cp_async_wait<0>();
    else cp_async_wait<1>();  // this tile's copies (the next tile's may still be in flight)
    __syncthreads();
    compute(tl, buf);
    __syncthreads();
    copy_out(tl, buf);
    __syncthreads();  // the tile's buffer, rows and table free again
    if constexpr (!kSingle) buf ^= 1;
  }
  cp_async_wait<0>();
}

// Blocks a multiprocessor the lane-rows walk asks ptxas to fit, what shared memory allows anyway
// (a tile of 9 chunks a head: 39 KB a block at 16-bit, 5 blocks; 16 or 18: 65-74 KB, 3 blocks).
// Held so (nvcc -Xptxas -v, sm_90): 16-bit 62-96 registers at 8 or 9 chunks, 80-167 at 16; fp32 56-116;
// no spills. (A first draft that held a head row in registers between the passes took 128 and
// 254 at 16-bit LayerNorm unbounded, and spilled 88-264 bytes at bf16 under the bound.)
// The single-tile walk (kLaneSingle): one 18 KB tile a block, 8 blocks (64 registers). ptxas
// (sm_90): 47-62 registers, no spills, its finishing loop unrolled by 3; unrolled whole it
// spilled 104-132 bytes at 16-bit RMS and LayerNorm of 9 chunks. At 48 registers, shared memory
// (about 21 KB a block) and registers both allow 10 blocks.
constexpr int lane_min_blocks(int cph, bool single) { return single ? 8 : cph <= 9 ? 5 : 3; }

template <typename T, int kNorm, int kCPH, bool kSingle>
__global__ void __launch_bounds__(kRowWarps * 32, lane_min_blocks(kCPH, kSingle))
    norm_rope_lane_kernel(const RowSets<T> sets, int64_t rows, int heads, int /*G*/, int rope, float eps, float theta) {
  lane_rows<T, kNorm, kCPH, kSingle>(block_view(sets), rows, heads, rope, eps, theta);
}

// Blocks a multiprocessor the flat walk asks ptxas to fit (a register cap of 65536 / (128
// blocks)): left to itself, ptxas hoists every chunk's table and weight reads ahead of the
// stores (kNB 6: 114-161 registers a thread, kNB 12: 164-218). 8 blocks of 3 chunks a
// thread (64 registers) or 4 of 6 (128): a row of 6 or 12 KB loading per block, 48 KB a
// multiprocessor either way.
constexpr int flat_min_blocks(int nb) { return nb <= 3 ? 8 : nb <= 6 ? 4 : 2; }

template <typename T, int kNorm, int kNB>
__global__ void __launch_bounds__(kRowWarps * 32, flat_min_blocks(kNB))
    norm_rope_flat_kernel(const RowSets<T> sets, int64_t rows, int heads, int /*G*/, int rope, float eps, float theta) {
  flat_rows<T, kNorm, kNB>(block_view(sets), rows, heads, rope, eps, theta);
}

template <typename T, int kNorm, int kCPL, int kNB, int kWalk>
__global__ void __launch_bounds__(kRowWarps * 32) norm_rope_rows_kernel(const RowSets<T> sets, int64_t rows, int heads,
                                                                         int G, int rope, float eps, float theta) {
  norm_rope_rows<T, kNorm, kCPL, kNB, kWalk>(sets, rows, heads, G, rope, eps, theta);
}
// The same walk asked to fit 5 blocks a multiprocessor (at most 96 registers a thread): fp16
// LayerNorm's pipelined walk of 4 passes, its pick on GPUs of the H100's bandwidth per SM.
// Left to itself ptxas gave it 104 registers (4 blocks), bf16's 96 (5); on one H100 (Q and K
// in one launch) fp16 reached 82-84% of the copy bound (docs/measured/2026-12-05-h100-0ccee14),
// held to 5 blocks 85-87% (docs/measured/2026-12-05-h100-layernorm, 525f9a3 and 93ad383). bf16
// is not held: there the bound made ptxas spill (40 bytes) at the same 96 registers and cost
// 0.5-2 points (525f9a3). (A bound of one block on the other kernels is not the same as
// none: ptxas then takes more registers, fp32 plain 8 96 -> 117.)
template <typename T, int kNorm, int kCPL, int kNB, int kWalk>
__global__ void __launch_bounds__(kRowWarps * 32, 5) norm_rope_rows_5_kernel(const RowSets<T> sets, int64_t rows,
                                                                              int heads, int G, int rope, float eps,
                                                                              float theta) {
  norm_rope_rows<T, kNorm, kCPL, kNB, kWalk>(sets, rows, heads, G, rope, eps, theta);
}

// The kernel of a walk: the flat and lane-rows walks' own (kCPL: the lane-rows walk's chunks a
// head), the others' shared one (held to 5 blocks a multiprocessor for fp16 LayerNorm's
// pipelined walk of 4).
template <typename T, int kNorm, int kCPL, int kNB, int kWalk>
constexpr auto rows_kernel() {
  if constexpr (kWalk == kFlat) return norm_rope_flat_kernel<T, kNorm, kNB>;
  else if constexpr (lane_walk(kWalk)) return norm_rope_lane_kernel<T, kNorm, kCPL, kWalk == kLaneSingle>;
  else if constexpr (kWalk == kPipelined && kNB == 4 && std::is_same_v<T, __half> &&
                     kNorm == static_cast<int>(NormKind::kLayerPerHead))
    return norm_rope_rows_5_kernel<T, kNorm, kCPL, kNB, kWalk>;
  else return norm_rope_rows_kernel<T, kNorm, kCPL, kNB, kWalk>;
}

thread_local NormRopeLaunchInfo last_launch;

template <typename T, bool kPaired, int kPPL>
void norm_rope_launch(cudaStream_t s, T* data, T* out, const RowPlace& pl, const QkView& x, const NormRopeParams& p,
                      size_t shmem) {
  static int per_sm = -1, regs = 0;
  if (per_sm < 0) {
    UIPC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_rope_kernel<T, kPaired, kPPL>,
                                                                   kNormThreads, shmem));
    cudaFuncAttributes fa{};
    UIPC_CUDA_CHECK(cudaFuncGetAttributes(&fa, norm_rope_kernel<T, kPaired, kPPL>));
    regs = fa.numRegs;
  }
  last_launch = {"general", static_cast<int>(x.batch * x.tokens_per_batch), kNormThreads, per_sm, regs, shmem};
  norm_rope_kernel<T, kPaired, kPPL><<<static_cast<unsigned>(x.batch * x.tokens_per_batch), kNormThreads, shmem, s>>>(
      data, out, pl, x.pos_offset, x.heads, static_cast<int>(p.norm), static_cast<int>(p.rope), p.eps, p.rope_theta,
      p.gamma, p.beta);
}

template <typename T, int kNorm, int kCPL, int kNB, int kWalk = kPlain>
void norm_rope_rows_launch(cudaStream_t s, const RowSets<T>& sets, const QkView& x, const NormRopeParams& p, int G,
                           const char* name) {
  const int64_t rows = x.batch * x.tokens_per_batch;
  auto* kernel = rows_kernel<T, kNorm, kCPL, kNB, kWalk>();
  // The staged walk's two row buffers per warp; the flat walk's tables and sums; the
  // lane-rows walk's two tiles and tables.
  const int row_chunks = x.heads * (x.head_dim / Vec<T>::kVE);
  const int lane_tiles = kWalk == kLaneSingle ? 1 : 2;
  const size_t smem = kWalk == kStaged ? size_t(2) * kRowWarps * x.heads * x.head_dim * sizeof(T)
                      : kWalk == kFlat ? sizeof(float) * flat_smem(x.head_dim, x.heads, row_chunks, kNorm, sizeof(T)).floats
                      : lane_walk(kWalk) ? static_cast<size_t>(lane_smem(x.head_dim, x.heads, sizeof(T), lane_tiles).bytes)
                                           : 0;
  // As many blocks as stay resident at once (asked once per kernel and shared-memory
  // size), at most one warp per row.
  static int resident = 0, per_sm = 0, regs = 0;
  static size_t resident_smem = 0;
  if (resident == 0 || smem != resident_smem) {
    int dev = 0, sms = 0;
    UIPC_CUDA_CHECK(cudaGetDevice(&dev));
    UIPC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (smem > 48 * 1024)
      UIPC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    UIPC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kRowWarps * 32, smem));
    UIPC_CHECK(per_sm > 0, std::string("norm_rope: the ") + name + " walk's " + std::to_string(smem) +
                               " bytes of shared memory do not fit");
    cudaFuncAttributes fa{};
    UIPC_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    regs = fa.numRegs;
    resident = std::max(1, sms * per_sm);
    resident_smem = smem;
  }
  // Two views: half the resident grid each (at least a block each). The block and flat
  // walks take a block a row, the lane-rows walk a block a tile of 128 head rows, the others
  // a warp a row.
  const bool block_a_row = kWalk == kBlockRows || kWalk == kFlat;
  const int64_t want = sets.n * (lane_walk(kWalk) ? (rows * x.heads + kLaneTile - 1) / kLaneTile
                                 : block_a_row      ? rows
                                                    : (rows + kRowWarps - 1) / kRowWarps);
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(sets.n, std::min<int64_t>(want, resident)));
  kernel<<<blocks, kRowWarps * 32, smem, s>>>(sets, rows, x.heads, G, static_cast<int>(p.rope), p.eps, p.rope_theta);
  // Bytes in flight per warp: the staged walk's next row; a register walk's batch of
  // passes (two batches for the pipelined walk, one computed while the other loads).
  const int hpw = 32 / G, passes = (x.heads + hpw - 1) / hpw;
  const size_t row_bytes = static_cast<size_t>(x.heads) * x.head_dim * sizeof(T);
  const size_t batch_bytes = static_cast<size_t>(std::min(passes, kNB)) * hpw * G * kCPL * 16;
  // (The block walk: a warp's share of a row, kNB passes; the flat walk: a quarter of a
  // row.)
  const size_t flat_bytes = std::min(row_bytes, static_cast<size_t>(kNB) * kRowWarps * 32 * 16) / kRowWarps;
  // (The lane-rows walk: a warp's share of the next tile.)
  const size_t lane_bytes = static_cast<size_t>(kLaneTile) * x.head_dim * sizeof(T) / kRowWarps;
  last_launch = {std::string(name) + (sets.n == 2 ? ", Q+K one launch" : ""), static_cast<int>(blocks), kRowWarps * 32,
                 per_sm, regs, smem,
                 lane_walk(kWalk) ? lane_bytes
                                    : std::min(row_bytes, kWalk == kStaged ? row_bytes
                                                          : kWalk == kFlat ? flat_bytes
                                                                           : batch_bytes)};
}

// Whether the staged walk's buffers (two rows per warp) fit a block's shared memory.
template <typename T>
bool staged_fits(const QkView& x) {
  return size_t(2) * kRowWarps * x.heads * x.head_dim * sizeof(T) <= size_t(200) * 1024;
}

// Where the layer takes the flat walk: where bench_kernels measured it ahead of every other
// walk, in one launch and in two (one H200, 2026-12-02, code b3f835d,
// docs/measured/2026-12-02-h200-flat; % of the copy bound, one launch, pick before -> flat):
// lane groups that are not a power of two (head_dim 72), every kind but LayerNorm at 16-bit
// types (RMS 72-75 -> 77-79, across heads 69-73 -> 83-85, RoPE only 82-85 -> 84-86, fp32 RMS
// 80-81 -> 84-85, fp32 LayerNorm 58-59 -> 77-79; 16-bit LayerNorm 55-57 either way); RoPE
// only and across-heads RMS at 16-bit types for head_dim 64 and 128 too (87-89 -> 88-90,
// 84-85 -> 84-88). Not per-head RMS or 16-bit LayerNorm at head_dim 64/128 (81-83 and
// 59-61 flat against 86-88 and 72-76), nor fp32 there (within a point, or behind). 16-bit
// LayerNorm's flat walk has taken its statistics in one round since (flat_rows' head_stats:
// one barrier pair a row, not two): on one H100, Q and K in one launch, that took the flat walk
// from 74.4-81.5% to 78.3-85.8% (0ccee14 -> 520fd4b, docs/measured/2026-12-05-h100-520fd4b),
// still behind or beside the pick. There, fused / separate: head_dim 72
// flat 78.5 / 78.3 (bf16) and 78.9 / 79.0 (fp16) against plain 8's 77.8 / 78.1 and 80.9 / 81.1;
// head_dim 64/128 flat 84.3-85.8 against pipelined 4's 85.1-88.1. Ahead nowhere beyond
// spread: not picked. bench_kernels' "(vector, flat)" rows keep measuring it beside the pick.
template <typename T, int kNorm>
bool flat_is_pick(bool pow2_groups) {
  constexpr bool b16 = sizeof(T) == 2;
  switch (static_cast<NormKind>(kNorm)) {
    case NormKind::kNone: return b16 || !pow2_groups;
    case NormKind::kRmsPerHead: return !pow2_groups;
    case NormKind::kRmsAcrossHeads: return b16 || !pow2_groups;
    case NormKind::kLayerPerHead: return !b16 && !pow2_groups;
  }
  return false;
}

// Whether the lane-rows walk serves heads of head_dim elements of elem_bytes each: 8, 9 or 16
// chunks of 16 bytes at 16-bit types (head_dim 64, 72, 128), 16 or 18 at fp32 (64, 72): the
// kernels instantiated; and whether its tables for `heads` heads fit shared memory. What the
// launcher's pick asks before taking it, what a forced walk is refused without, and (through
// norm_rope_lane_rows_serve) where bench_kernels runs it.
bool lane_rows_serve(int elem_bytes, int head_dim, int heads) {
  if (head_dim * elem_bytes % 16 != 0) return false;
  const int chunks = head_dim * elem_bytes / 16;
  const bool served = elem_bytes == 2 ? chunks == 8 || chunks == 9 || chunks == 16 : chunks == 16 || chunks == 18;
  return served && lane_smem(head_dim, heads, elem_bytes).bytes <= 160 * 1024;
}
// Whether its single-tile variant (pipe kNormRopeLaneSinglePipe) serves: per-head norms and RoPE at
// 16-bit types on heads of 8 or 9 chunks (head_dim 64, 72) only.
bool lane_single_serve(NormKind norm, int elem_bytes, int head_dim, int heads) {
  return norm != NormKind::kRmsAcrossHeads && elem_bytes == 2 && (head_dim == 64 || head_dim == 72) &&
         lane_rows_serve(elem_bytes, head_dim, heads);
}

// Where the layer takes the lane-rows walk: 16-bit LayerNorm on lane groups that are not a
// power of two (head_dim 72: the lane-group walks leave 5 of 32 lanes idle and reduce both
// statistics over 9 lanes in 5 shuffle rounds each). bench_kernels measured it beside the
// pick before, plain 8, on three H100s (847e34c, docs/measured/2026-12-06-h100-847e34c; Q and K
// in one launch, % of the copy bound, plain 8 -> lane rows, fused / separate): bf16 77.7-77.9 ->
// 78.0-82.8 / 78.1-78.5 -> 81.4-82.7 (ahead in 6 of 6), fp16 80.6-81.0 -> 78.6-81.7 / 81.1-81.7 ->
// 82.2-82.8 (fused within its spread either way). Not yet on an H200, where plain 8 reached
// 59.4-62.8% (d658c00); there the staged walk, which like this one keeps a tile in flight through
// shared memory, led the register walks at head_dim 64 and 128. Elsewhere it is behind the pick
// in 125 of 132 cell-runs (16-bit types by 0.1-6.8 points; its seven leads, fp32 and 0.2-2.2
// points, within the runs' spread; rows "(vector, lane rows, Q+K one launch)"). The flat walk over
// two rows a step (16-bit rows at 6 chunks a thread and 4 blocks, as fp32's) was tried in its place
// and lost 15-19 points (61.9-62.8% against 77.7-81.5, one H100, 71aff20, reverted;
// docs/measured/2026-12-06-h100-71aff20 also has Nsight Compute's counters for this walk). This
// walk with each head row stored from the thread's registers straight to its target (16-byte
// stores at the head row's 144-byte stride in place of the tile's coalesced store: one barrier
// and the tile's write-back fewer; "lane direct", 2ca3fea, reverted) lost half its rate: 37.4-42.4%
// at head_dim 72 against 77.4-88.0 (every per-head kind, both 16-bit types and layouts), 43-55% at
// 64 (one H100, two runs; docs/measured/2026-12-07-h100-2ca3fea).
// Where its single-tile variant serves (head_dim 72 at 16-bit types: every cell this pick takes),
// the layer takes that one: one H100, two runs of 716e41a's kernels (docs/measured/
// 2026-12-07-h100-716e41a), % of the copy bound, lane rows -> lane rows 1t, fused / separate: bf16
// 79.1-79.6 -> 82.6-82.8 / 81.2-81.4 -> 86.0-86.8, fp16 80.0-80.4 -> 83.6-83.7 / 82.0 -> 85.9-87.1
// (ahead in 8 of 8 cell-runs, by 3.2-5.6 points). It led lane rows in every other 16-bit cell too
// (RoPE only and RMS at 64 and 72, LayerNorm at 64: 48 of 48 cell-runs), where it is behind the
// pick or at most 1.6 points ahead of it, within the runs' spread: the pick stays. Not yet on an
// H200. Three changes to the single-tile walk were measured beside it on one H100 and withdrawn
// (docs/measured/2026-12-07-h100-b460a49-lane-trials, each kept as a patch): LayerNorm's statistics
// in four partial sums (within the runs' spread); the next tile brought into L2 with
// cp.async.bulk.prefetch.L2 while this one is computed (17-23 points lost in every cell); the
// copies' chunk index stepped instead of divided (53 registers against 48, no gain). Nsight Compute
// there: this walk's LayerNorm issues 1978 thread instructions a head row against RMS's 1579, with
// 61-62% of issue slots busy.
template <typename T, int kNorm>
bool lane_rows_is_pick(bool pow2_groups) {
  return kNorm == static_cast<int>(NormKind::kLayerPerHead) && sizeof(T) == 2 && !pow2_groups;
}

// batch: passes loaded at once (8 or 12; 0 picks by the head count). pipe: the
// software-pipelined walk (two batches of `pipe` passes, the next in flight while the
// current is computed) for per-head norms and RoPE only: 4, 6 or 8; 0 off; -1 picks.
// staged: the shared-memory staged walk with batches of 4 or 8 passes; 0 off; -1 picks.
// pipe kNormRopeFlatPipe: the flat walk (also the pick where flat_is_pick says); pipe
// kNormRopeLaneRowsPipe: the lane-rows walk (also the pick where lane_rows_is_pick says).
template <typename T, int kNorm>
void norm_rope_rows_pick(cudaStream_t s, const RowSets<T>& sets, const QkView& x, const NormRopeParams& p, int chunks,
                         int batch, int pipe, int staged) {
  const int G = chunks <= 32 ? chunks : 32;  // lanes per head
  const bool pow2_groups = (G & (G - 1)) == 0;
  const int row_chunks = x.heads * chunks, per_thread = (row_chunks + kRowWarps * 32 - 1) / (kRowWarps * 32);
  if (pipe < 0 && batch == 0 && staged < 0 && per_thread <= 12 && flat_is_pick<T, kNorm>(pow2_groups))
    pipe = kNormRopeFlatPipe;
  if (pipe < 0 && batch == 0 && staged < 0 && lane_rows_is_pick<T, kNorm>(pow2_groups) &&
      lane_rows_serve(sizeof(T), x.head_dim, x.heads))
    pipe = lane_single_serve(static_cast<NormKind>(kNorm), sizeof(T), x.head_dim, x.heads) ? kNormRopeLaneSinglePipe
                                                                                           : kNormRopeLaneRowsPipe;
  if (pipe == kNormRopeLaneRowsPipe) {
    if constexpr (kNorm == static_cast<int>(NormKind::kRmsAcrossHeads)) {
      UIPC_CHECK(false, "norm_rope: the lane-rows walk normalises each head alone: per-head norms and RoPE only, not "
                "across-heads RMS");
    } else {
      UIPC_CHECK(lane_rows_serve(sizeof(T), x.head_dim, x.heads),
                 "norm_rope: the lane-rows walk takes heads of 8, 9 or 16 chunks at 16-bit types and 16 or 18 at "
                 "fp32 (head_dim 64, 72, 128; 64, 72) whose tables fit 160 KB of shared memory, not " +
                     std::to_string(x.heads) + " heads of " + std::to_string(chunks) + " chunks (head_dim " +
                     std::to_string(x.head_dim) + ")");
      if constexpr (sizeof(T) == 2) {
        if (chunks == 8) norm_rope_rows_launch<T, kNorm, 8, 1, kLaneRows>(s, sets, x, p, G, "lane rows");
        else if (chunks == 9) norm_rope_rows_launch<T, kNorm, 9, 1, kLaneRows>(s, sets, x, p, G, "lane rows");
        else norm_rope_rows_launch<T, kNorm, 16, 1, kLaneRows>(s, sets, x, p, G, "lane rows");
      } else {
        if (chunks == 16) norm_rope_rows_launch<T, kNorm, 16, 1, kLaneRows>(s, sets, x, p, G, "lane rows");
        else norm_rope_rows_launch<T, kNorm, 18, 1, kLaneRows>(s, sets, x, p, G, "lane rows");
      }
    }
    return;
  }
  if (pipe == kNormRopeLaneSinglePipe) {
    UIPC_CHECK(lane_single_serve(static_cast<NormKind>(kNorm), sizeof(T), x.head_dim, x.heads),
               "norm_rope: the lane-rows 1t walk takes per-head norms and RoPE at 16-bit types on heads of 8 or 9 "
               "chunks (head_dim 64, 72), not " + std::to_string(x.heads) + " heads of " + std::to_string(chunks) +
                   " chunks (head_dim " + std::to_string(x.head_dim) + ", " + std::to_string(sizeof(T) * 8) +
                   "-bit, norm kind " + std::to_string(kNorm) + ")");
    if constexpr (sizeof(T) == 2 && kNorm != static_cast<int>(NormKind::kRmsAcrossHeads)) {
      if (chunks == 8) norm_rope_rows_launch<T, kNorm, 8, 1, kLaneSingle>(s, sets, x, p, G, "lane rows 1t");
      else norm_rope_rows_launch<T, kNorm, 9, 1, kLaneSingle>(s, sets, x, p, G, "lane rows 1t");
    }
    return;
  }
  if (pipe == kNormRopeFlatPipe) {
    // Chunks a thread: 3 for the benchmark's 16-bit rows (378-384 chunks), 6 for its fp32 rows.
    UIPC_CHECK(per_thread <= 12, "norm_rope: the flat walk takes rows of at most " +
                                     std::to_string(12 * kRowWarps * 32) + " 16-byte chunks, not " +
                                     std::to_string(row_chunks));
    if (per_thread <= 3) norm_rope_rows_launch<T, kNorm, 1, 3, kFlat>(s, sets, x, p, G, "flat 3");
    else if (per_thread <= 6) norm_rope_rows_launch<T, kNorm, 1, 6, kFlat>(s, sets, x, p, G, "flat 6");
    else norm_rope_rows_launch<T, kNorm, 1, 12, kFlat>(s, sets, x, p, G, "flat 12");
    return;
  }
  const int passes = (x.heads + 32 / G - 1) / (32 / G);
  constexpr bool across = kNorm == static_cast<int>(NormKind::kRmsAcrossHeads);
  const bool forced = batch != 0 || pipe >= 0;  // a register walk asked for by name
  // The layer's pick, as bench_kernels measured every walk on the H200 (2026-12-01, at
  // 0fb166f, % of the copy bound): the staged walk only for LayerNorm at 16-bit types
  // and power-of-two lane groups (75-78% against 71-73% pipelined); elsewhere it lost
  // (across heads 63-67% against 72% in registers, fp32 55-70% against 85-88%). And only
  // on a GPU with the H200's memory bandwidth per SM: on the H100 the pipelined walk leads
  // (kernels/norm_rope_walk.hpp).
  if (staged < 0) {
    const bool layer16 = kNorm == static_cast<int>(NormKind::kLayerPerHead) && sizeof(T) == 2 && pow2_groups;
    const MemoryBandwidth m = layer16 && !forced ? memory_bandwidth() : MemoryBandwidth{};
    staged = !forced && layer16 && staged_fits<T>(x) && staged_walk_pays(m.peak_gbs, m.sms) ? kAutoStagedBatch : 0;
  }
  if (staged > 0) {
    UIPC_CHECK(staged_fits<T>(x), "norm_rope: a row of " + std::to_string(x.heads * x.head_dim * sizeof(T)) +
                                      " bytes is too long for the staged walk");
    if (chunks > 32) {
      norm_rope_rows_launch<T, kNorm, 2, 4, kStaged>(s, sets, x, p, G, "staged 4 (2 chunks/lane)");
    } else if (staged == 8) {
      norm_rope_rows_launch<T, kNorm, 1, 8, kStaged>(s, sets, x, p, G, "staged 8");
    } else {
      norm_rope_rows_launch<T, kNorm, 1, 4, kStaged>(s, sets, x, p, G, "staged 4");
    }
    return;
  }
  if constexpr (across) {
    // Across heads, the block walk (pipe 16): a block a row, each warp a quarter of it, the
    // next row loading while this one is reduced and stored. The layer's pick where a row
    // is at most 48 passes (every shape of the benchmark), in place of the plain walk of
    // 12 passes (71-73% of the copy bound at 16-bit types, 68-70% fp32 D64/D128 and 44-46%
    // fp32 D72, at e8c2632): that walk loads a whole row per warp and then waits on it with
    // nothing in flight (119 registers, 16 warps a multiprocessor), while the per-head
    // norms' pipelined walk, which keeps a batch loading while it computes, reached 79-81%.
    // Registers (nvcc -Xptxas -v, sm_90): 3 passes a warp 69-71 (7 blocks, 28 warps a
    // multiprocessor), 4: 80 (24 warps), 6: 106-110 (16), 12: 164-168 (12; fp32 D72 only).
    // Measured on one H200 (2026-12-02, docs/measured/2026-12-02-h200-kern22): 78-80% at
    // 16-bit types, 83-85% fp32 D64/D128, 65-67% fp32 D72, against 68-73% for the plain
    // walk; the layer's pick where the flat walk is not (fp32 at head_dim 64 and 128) and a
    // row fits (test_cuda_kernels, NormRopeAcrossHeadsBlockRows, checks the pick).
    const bool block_fits = chunks <= 32 && passes <= 4 * 12;
    if (pipe == 16 || (pipe < 0 && batch == 0 && block_fits)) {
      UIPC_CHECK(block_fits, "norm_rope: the across-heads block walk takes rows of at most 48 passes of one chunk a "
                             "lane, not " + std::to_string(passes) + " of " + std::to_string(chunks) + " chunks a head");
      const int per_warp = (passes + kRowWarps - 1) / kRowWarps;
      if (per_warp <= 3) norm_rope_rows_launch<T, kNorm, 1, 3, kBlockRows>(s, sets, x, p, G, "block rows 3");
      else if (per_warp <= 4) norm_rope_rows_launch<T, kNorm, 1, 4, kBlockRows>(s, sets, x, p, G, "block rows 4");
      else if (per_warp <= 6) norm_rope_rows_launch<T, kNorm, 1, 6, kBlockRows>(s, sets, x, p, G, "block rows 6");
      else norm_rope_rows_launch<T, kNorm, 1, 12, kBlockRows>(s, sets, x, p, G, "block rows 12");
      return;
    }
  }
  if (pipe < 0) {
    // As bench_kernels measured on the H200 (rows "(vector, pipelined N)" against
    // "(vector, 8 passes)"/"(12 passes)", 2026-12-01): 16-bit types gain from the
    // pipelined walk with batches of 4 (LayerNorm 58 -> 70-72% of the copy bound at
    // head_dim 128, RMS 77 -> 79-81%), except per-head RMS on lane groups that are not a
    // power of two (head_dim 72: 67% plain with 8 passes, 59-65% pipelined); fp32 rows
    // are twice the bytes for the same work and gain nothing (84-88% either way).
    // Same runs (0fb166f, e8c2632): fp32 with lane groups that are not a power of two
    // (head_dim 72: 18 lanes a head) gains from the pipelined walk with batches of 6 (RMS
    // 70 -> 73-74%, LayerNorm 55 -> 60%). Across heads stays on the plain walk (12
    // passes: 72-73% at 16-bit types): rows pipelined whole (pipe 12) measured 61-63%,
    // their two rows of registers (156 a thread) leaving 3 blocks a multiprocessor.
    // LayerNorm on such groups too (head_dim 72 at 16-bit types, 2026-12-02:
    // 52-54% plain with 8 passes against 46-49% pipelined; docs/measured/2026-12-02-h200-normqk).
    const bool odd_groups = (kNorm == static_cast<int>(NormKind::kRmsPerHead) ||
                             kNorm == static_cast<int>(NormKind::kLayerPerHead)) && !pow2_groups;
    if (batch != 0 || across) pipe = 0;
    else if (sizeof(T) == 2) pipe = odd_groups ? 0 : 4;
    else pipe = !pow2_groups && kNorm != static_cast<int>(NormKind::kNone) ? 6 : 0;
  }
  if (chunks > 32) {
    norm_rope_rows_launch<T, kNorm, 2, 4>(s, sets, x, p, G, "plain 4 (2 chunks/lane)");
    return;
  }
  if constexpr (!across) {
    switch (pipe) {
      case 4: norm_rope_rows_launch<T, kNorm, 1, 4, kPipelined>(s, sets, x, p, G, "pipelined 4"); return;
      case 6: norm_rope_rows_launch<T, kNorm, 1, 6, kPipelined>(s, sets, x, p, G, "pipelined 6"); return;
      case 8: norm_rope_rows_launch<T, kNorm, 1, 8, kPipelined>(s, sets, x, p, G, "pipelined 8"); return;
      default: break;
    }
  } else if (pipe == 12) {
    // Across heads, pipelined by whole rows: the next row loads while this one is
    // reduced and stored (two rows in registers: only where a row is at most 12 passes).
    UIPC_CHECK(passes <= 12, "norm_rope: the across-heads pipelined walk takes rows of at most 12 passes, not " +
                                 std::to_string(passes));
    norm_rope_rows_launch<T, kNorm, 1, 12, kPipelined>(s, sets, x, p, G, "pipelined rows (12)");
    return;
  }
  if (batch == 12 ||
             (batch == 0 && passes > 8 && (G & (G - 1)) == 0 && kNorm != static_cast<int>(NormKind::kLayerPerHead))) {
    // 12 passes in flight measured faster than 8 for power-of-two lane groups (head_dim
    // 64, 128: bench_kernels), slower for head_dim 72's groups of 9 lanes; LayerNorm's two
    // sums per head need twice the registers, which 12 passes would take from occupancy.
    norm_rope_rows_launch<T, kNorm, 1, 12>(s, sets, x, p, G, "plain 12");
  } else {
    norm_rope_rows_launch<T, kNorm, 1, 8>(s, sets, x, p, G, "plain 8");
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Which kernel serves a view: the vector kernel where its 16-byte accesses are legal.
template <typename T>
bool vector_kernel_fits(const QkView& x) {
  constexpr int kVE = 16 / sizeof(T);
  const HeadSliceOut& o = x.out;
  return x.head_dim % kVE == 0 && x.head_dim / kVE <= 64 && x.row_pitch % kVE == 0 && aligned16(x.data) &&
         (o.data == nullptr || (aligned16(o.data) && o.row_pitch % kVE == 0 && o.batch_pitch % kVE == 0));
}

template <typename T>
RowSet<T> row_set_of(const QkView& x, const NormRopeParams& p) {
  const RowPlace pl{x.row_pitch,    x.tokens_per_batch, x.head_dim, x.out.head_begin, x.out.head_count,
                    x.out.row_pitch, x.out.batch_pitch};
  return {static_cast<T*>(x.data), static_cast<T*>(x.out.data), pl, x.pos_offset, p.gamma, p.beta};
}

// The vector kernel over one view, or over two of one shape and kind (Q and K) in one
// launch (k != nullptr).
template <typename T>
void norm_rope_vector(cudaStream_t s, const QkView& x, const NormRopeParams& p, const QkView* k,
                      const NormRopeParams* pk, int batch, int pipe, int staged) {
  RowSets<T> sets{row_set_of<T>(x, p), row_set_of<T>(x, p), 1};
  if (k != nullptr) {
    sets.s1 = row_set_of<T>(*k, *pk);
    sets.n = 2;
  }
  constexpr int kVE = 16 / sizeof(T);
  const int chunks = x.head_dim / kVE;
  switch (p.norm) {
    case NormKind::kNone: norm_rope_rows_pick<T, 0>(s, sets, x, p, chunks, batch, pipe, staged); break;
    case NormKind::kRmsPerHead: norm_rope_rows_pick<T, 1>(s, sets, x, p, chunks, batch, pipe, staged); break;
    case NormKind::kRmsAcrossHeads: norm_rope_rows_pick<T, 2>(s, sets, x, p, chunks, batch, pipe, staged); break;
    case NormKind::kLayerPerHead: norm_rope_rows_pick<T, 3>(s, sets, x, p, chunks, batch, pipe, staged); break;
  }
  UIPC_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void norm_rope_typed(cudaStream_t s, const QkView& x, const NormRopeParams& p, NormRopeKernel which, int batch,
                     int pipe, int staged) {
  const int64_t rows = x.batch * x.tokens_per_batch;
  if (rows == 0 || x.heads == 0) return;
  auto* data = static_cast<T*>(x.data);
  auto* out = static_cast<T*>(x.out.data);
  const RowPlace pl{x.row_pitch,    x.tokens_per_batch, x.head_dim, x.out.head_begin, x.out.head_count,
                    x.out.row_pitch, x.out.batch_pitch};
  const int D = x.head_dim;
  if (which != NormRopeKernel::kGeneral && vector_kernel_fits<T>(x)) {
    norm_rope_vector<T>(s, x, p, nullptr, nullptr, batch, pipe, staged);
    return;
  }
  UIPC_CHECK(which != NormRopeKernel::kVector, "the vector norm+RoPE kernel cannot serve this view (head_dim " +
                                                   std::to_string(D) + ", alignment or pitch)");
  const bool paired = x.head_dim % 2 == 0 && x.row_pitch % 2 == 0 &&
                      reinterpret_cast<uintptr_t>(x.data) % (2 * sizeof(T)) == 0 &&
                      (out == nullptr || (reinterpret_cast<uintptr_t>(out) % (2 * sizeof(T)) == 0 &&
                                          x.out.row_pitch % 2 == 0 && x.out.batch_pitch % 2 == 0));
  const size_t shmem = (2 * (x.head_dim / 2) + 32) * sizeof(float);
  if (paired) {
    if (D <= 64) norm_rope_launch<T, true, 1>(s, data, out, pl, x, p, shmem);
    else if (D <= 128) norm_rope_launch<T, true, 2>(s, data, out, pl, x, p, shmem);
    else if (D <= 256) norm_rope_launch<T, true, 4>(s, data, out, pl, x, p, shmem);
    else norm_rope_launch<T, true, 8>(s, data, out, pl, x, p, shmem);
  } else {
    if (D <= 64) norm_rope_launch<T, false, 1>(s, data, out, pl, x, p, shmem);
    else if (D <= 128) norm_rope_launch<T, false, 2>(s, data, out, pl, x, p, shmem);
    else if (D <= 256) norm_rope_launch<T, false, 4>(s, data, out, pl, x, p, shmem);
    else norm_rope_launch<T, false, 8>(s, data, out, pl, x, p, shmem);
  }
  UIPC_CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------ reference attention

constexpr int kAttnRows = 8;   // query rows (warps) per block
constexpr int kAttnKeys = 32;  // keys per shared-memory tile: one per lane

// One warp per query row; the block's warps share K/V tiles of 32 keys, converted to
// fp32 in shared memory (rows padded by one float so that lane j reading key j's
// column d hits distinct banks). Lane j scores key j; the softmax is online (running
// max and sum, rescaled per tile); lane l accumulates output columns l, l+32, ...
template <typename T, int kMaxD>
__global__ void __launch_bounds__(kAttnRows * 32) attention_ref_kernel(const T* __restrict__ q,
                                                                        const T* __restrict__ k,
                                                                        const T* __restrict__ v, T* __restrict__ o,
                                                                        int64_t S, int H, int D, float scale) {
  constexpr int kCols = kMaxD / 32;
  extern __shared__ float shared[];
  const int pitch = D + 1;
  float* ks = shared;
  float* vs = ks + kAttnKeys * pitch;
  float* qs = vs + kAttnKeys * pitch;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kAttnRows + warp;
  const int64_t ld = static_cast<int64_t>(H) * D;
  const int64_t base = b * S * ld + h * D;  // element (b, 0, h, 0)
  const bool active = row < S;
  float* qw = qs + warp * D;
  for (int d = lane; d < D; d += 32) qw[d] = active ? to_float(q[base + row * ld + d]) : 0.0f;

  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t kt = 0; kt < S; kt += kAttnKeys) {
    __syncthreads();
    for (int idx = tid; idx < kAttnKeys * D; idx += blockDim.x) {
      const int j = idx / D, d = idx - j * D;
      const int64_t key = kt + j;
      const bool in = key < S;
      ks[j * pitch + d] = in ? to_float(k[base + key * ld + d]) : 0.0f;
      vs[j * pitch + d] = in ? to_float(v[base + key * ld + d]) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    float dot = 0.0f;
    for (int d = 0; d < D; ++d) dot += qw[d] * ks[lane * pitch + d];
    const float sc = (kt + lane < S) ? dot * scale : -INFINITY;
    const float m_new = fmaxf(m, warp_max(sc));
    const float p = expf(sc - m_new);
    const float corr = expf(m - m_new);
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] *= corr;
#pragma unroll 8
    for (int j = 0; j < kAttnKeys; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int d = lane + 32 * c;
        if (d < D) acc[c] += pj * vs[j * pitch + d];
      }
    }
    m = m_new;
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int d = lane + 32 * c;
    if (d < D) o[base + row * ld + d] = from_float<T>(acc[c] / l);
  }
}

template <typename T, int kMaxD>
void attention_launch(cudaStream_t s, const void* q, const void* k, const void* v, void* o, int64_t B, int64_t S,
                      int H, int D, float scale) {
  const size_t shmem = (2 * kAttnKeys * (D + 1) + kAttnRows * D) * sizeof(float);
  static bool attr_set = false;  // per instantiation; raising the limit is idempotent
  if (!attr_set) {
    UIPC_CUDA_CHECK(cudaFuncSetAttribute(attention_ref_kernel<T, kMaxD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(2 * kAttnKeys * (kMaxD + 1) + kAttnRows * kMaxD) *
                                             static_cast<int>(sizeof(float))));
    attr_set = true;
  }
  dim3 grid(static_cast<unsigned>((S + kAttnRows - 1) / kAttnRows), static_cast<unsigned>(H),
            static_cast<unsigned>(B));
  attention_ref_kernel<T, kMaxD><<<grid, kAttnRows * 32, shmem, s>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), S, H, D,
      scale);
  UIPC_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void attention_typed(cudaStream_t s, const void* q, const void* k, const void* v, void* o, int64_t B, int64_t S,
                     int H, int D, float scale) {
  if (D <= 64) {
    attention_launch<T, 64>(s, q, k, v, o, B, S, H, D, scale);
  } else if (D <= 128) {
    attention_launch<T, 128>(s, q, k, v, o, B, S, H, D, scale);
  } else {
    attention_launch<T, 256>(s, q, k, v, o, B, S, H, D, scale);
  }
}

// ------------------------------------------------------------------ conversion

template <typename T>
__global__ void convert_kernel(const float* __restrict__ in, T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(in[i]);
  }
}

template <typename T>
__global__ void convert_2d_kernel(const float* __restrict__ in, int64_t ld_in, T* __restrict__ out, int64_t ld_out,
                                  int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    out[r * ld_out + c] = from_float<T>(in[r * ld_in + c]);
  }
}

}  // namespace

NormRopeLaunchInfo last_norm_rope_launch() { return last_launch; }

bool norm_rope_lane_rows_serve(DType dtype, int head_dim, int heads) {
  return lane_rows_serve(static_cast<int>(dtype_size(dtype)), head_dim, heads);
}
bool norm_rope_lane_single_serve(NormKind norm, DType dtype, int head_dim, int heads) {
  return lane_single_serve(norm, static_cast<int>(dtype_size(dtype)), head_dim, heads);
}

MemoryBandwidth memory_bandwidth() {
  static std::mutex mu;
  static MemoryBandwidth cached[64];
  static bool asked[64] = {};
  int dev = 0;
  UIPC_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return {};
  std::lock_guard<std::mutex> lock(mu);
  if (!asked[dev]) {
    int khz = 0, bits = 0, sms = 0;
    UIPC_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev));
    UIPC_CUDA_CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    UIPC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cached[dev] = {peak_memory_gbs(khz, bits), sms};
    asked[dev] = true;
  }
  return cached[dev];
}

namespace {
// The arguments' checks; false when there is nothing to do (neither norm nor RoPE).
bool norm_rope_args_ok(const QkView& x, const NormRopeParams& p, int batch, int pipe, int staged) {
  UIPC_CHECK(batch == 0 || batch == 8 || batch == 12, "norm_rope: batch must be 0, 8 or 12");
  const bool lane = pipe == kNormRopeLaneRowsPipe || pipe == kNormRopeLaneSinglePipe;
  UIPC_CHECK(pipe == -1 || pipe == 0 || pipe == 4 || pipe == 6 || pipe == 8 || pipe == 12 || pipe == 16 ||
                 pipe == kNormRopeFlatPipe || lane,
             "norm_rope: pipe must be -1, 0, 4, 6, 8, 12, 16 (12, 16: across-heads RMS only), " +
                 std::to_string(kNormRopeFlatPipe) + " (the flat walk), " + std::to_string(kNormRopeLaneRowsPipe) +
                 " (the lane-rows walk) or " + std::to_string(kNormRopeLaneSinglePipe) + " (its single-tile variant)");
  UIPC_CHECK((pipe != kNormRopeFlatPipe && !lane) || batch == 0,
             "norm_rope: the flat and lane-rows walks exclude batch");
  UIPC_CHECK((pipe != 12 && pipe != 16) || p.norm == NormKind::kRmsAcrossHeads,
             "norm_rope: pipe 12 and 16 are across-heads walks");
  UIPC_CHECK(staged == -1 || staged == 0 || staged == 4 || staged == 8, "norm_rope: staged must be -1, 0, 4 or 8");
  UIPC_CHECK(staged <= 0 || (batch == 0 && pipe <= 0), "norm_rope: the staged walk excludes batch and pipe");
  UIPC_CHECK(x.head_dim > 0 && x.head_dim <= 2 * 32 * kMaxPairsPerLane,
             "CUDA norm_rope supports head_dim 1.." + std::to_string(2 * 32 * kMaxPairsPerLane) + ", not " +
                 std::to_string(x.head_dim));
  UIPC_CHECK(p.rope == RopeKind::kNone || x.head_dim % 2 == 0, "RoPE needs an even head_dim");
  UIPC_CHECK(p.norm == NormKind::kNone || p.gamma != nullptr, "norm without gamma");
  UIPC_CHECK(p.norm != NormKind::kLayerPerHead || p.beta != nullptr, "LayerNorm without beta");
  const HeadSliceOut& o = x.out;
  UIPC_CHECK(o.data == nullptr || (o.head_begin >= 0 && o.head_count >= 0 && o.head_begin + o.head_count <= x.heads),
             "norm_rope: output head slice outside the view's heads");
  if (p.norm == NormKind::kNone && p.rope == RopeKind::kNone) {
    UIPC_CHECK(o.data == nullptr || o.head_count == 0, "norm_rope with neither norm nor RoPE cannot move heads");
    return false;
  }
  return true;
}

template <typename T>
bool qk_one_launch(const QkView& q, const NormRopeParams& pq, const QkView& k, const NormRopeParams& pk) {
  return q.batch == k.batch && q.tokens_per_batch == k.tokens_per_batch && q.heads == k.heads &&
         q.head_dim == k.head_dim && pq.norm == pk.norm && pq.rope == pk.rope && pq.eps == pk.eps &&
         pq.rope_theta == pk.rope_theta && vector_kernel_fits<T>(q) && vector_kernel_fits<T>(k) &&
         q.batch * q.tokens_per_batch > 0 && q.heads > 0;
}

template <typename T>
void norm_rope_qk_typed(cudaStream_t s, const QkView& q, const NormRopeParams& pq, const QkView& k,
                        const NormRopeParams& pk, DType dtype, NormRopeKernel which, int batch, int pipe, int staged) {
  if (which != NormRopeKernel::kGeneral && qk_one_launch<T>(q, pq, k, pk)) {
    norm_rope_vector<T>(s, q, pq, &k, &pk, batch, pipe, staged);
    return;
  }
  launch_norm_rope(s, q, dtype, pq, which, batch, pipe, staged);
  launch_norm_rope(s, k, dtype, pk, which, batch, pipe, staged);
}
}  // namespace

void launch_norm_rope(cudaStream_t s, const QkView& x, DType dtype, const NormRopeParams& p, NormRopeKernel which,
                      int batch, int pipe, int staged) {
  if (!norm_rope_args_ok(x, p, batch, pipe, staged)) return;
  switch (dtype) {
    case DType::kBF16: norm_rope_typed<__nv_bfloat16>(s, x, p, which, batch, pipe, staged); break;
    case DType::kFP16: norm_rope_typed<__half>(s, x, p, which, batch, pipe, staged); break;
    default: norm_rope_typed<float>(s, x, p, which, batch, pipe, staged); break;
  }
}

void launch_norm_rope_qk(cudaStream_t s, const QkView& q, const NormRopeParams& pq, const QkView& k,
                         const NormRopeParams& pk, DType dtype, NormRopeKernel which, int batch, int pipe, int staged) {
  const bool do_q = norm_rope_args_ok(q, pq, batch, pipe, staged), do_k = norm_rope_args_ok(k, pk, batch, pipe, staged);
  if (!do_q || !do_k) {  // one of them has nothing to do: the other on its own
    if (do_q) launch_norm_rope(s, q, dtype, pq, which, batch, pipe, staged);
    if (do_k) launch_norm_rope(s, k, dtype, pk, which, batch, pipe, staged);
    return;
  }
  switch (dtype) {
    case DType::kBF16: norm_rope_qk_typed<__nv_bfloat16>(s, q, pq, k, pk, dtype, which, batch, pipe, staged); break;
    case DType::kFP16: norm_rope_qk_typed<__half>(s, q, pq, k, pk, dtype, which, batch, pipe, staged); break;
    default: norm_rope_qk_typed<float>(s, q, pq, k, pk, dtype, which, batch, pipe, staged); break;
  }
}

void launch_attention_reference(cudaStream_t s, const void* q, const void* k, const void* v, void* o, int64_t batch,
                                int64_t seq, int heads, int head_dim, DType dtype, float scale) {
  UIPC_CHECK(head_dim > 0 && head_dim <= 256, "reference attention supports head_dim 1..256, not " +
                                                  std::to_string(head_dim));
  UIPC_CHECK(heads <= 65535 && batch <= 65535, "reference attention: too many heads or batches for the grid");
  if (batch == 0 || seq == 0 || heads == 0) return;
  switch (dtype) {
    case DType::kBF16: attention_typed<__nv_bfloat16>(s, q, k, v, o, batch, seq, heads, head_dim, scale); break;
    case DType::kFP16: attention_typed<__half>(s, q, k, v, o, batch, seq, heads, head_dim, scale); break;
    default: attention_typed<float>(s, q, k, v, o, batch, seq, heads, head_dim, scale); break;
  }
}

void launch_convert_from_f32(cudaStream_t s, const float* in, void* out, int64_t n, DType dtype) {
  if (n == 0) return;
  const int threads = 256;
  const int64_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 65536 ? want : 65536);
  switch (dtype) {
    case DType::kBF16: convert_kernel<<<blocks, threads, 0, s>>>(in, static_cast<__nv_bfloat16*>(out), n); break;
    case DType::kFP16: convert_kernel<<<blocks, threads, 0, s>>>(in, static_cast<__half*>(out), n); break;
    default: convert_kernel<<<blocks, threads, 0, s>>>(in, static_cast<float*>(out), n); break;
  }
  UIPC_CUDA_CHECK(cudaGetLastError());
}

void launch_convert_from_f32_2d(cudaStream_t s, const float* in, int64_t ld_in, void* out, int64_t ld_out, int64_t rows,
                                int64_t cols, DType dtype) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const int threads = 256;
  const int64_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 65536 ? want : 65536);
  switch (dtype) {
    case DType::kBF16:
      convert_2d_kernel<<<blocks, threads, 0, s>>>(in, ld_in, static_cast<__nv_bfloat16*>(out), ld_out, rows, cols);
      break;
    case DType::kFP16:
      convert_2d_kernel<<<blocks, threads, 0, s>>>(in, ld_in, static_cast<__half*>(out), ld_out, rows, cols);
      break;
    default: convert_2d_kernel<<<blocks, threads, 0, s>>>(in, ld_in, static_cast<float*>(out), ld_out, rows, cols); break;
  }
  UIPC_CUDA_CHECK(cudaGetLastError());
}

namespace {
template <typename T>
__global__ void row_change_kernel(const T* now, const T* last, int64_t rows, int64_t row_elems, double* out) {
  __shared__ double sd[256], sl[256];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double d2 = 0, l2 = 0;
    for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
      const double a = to_float(now[r * row_elems + e]), b = to_float(last[r * row_elems + e]);
      d2 += (a - b) * (a - b);
      l2 += b * b;
    }
    sd[threadIdx.x] = d2;
    sl[threadIdx.x] = l2;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) {
        sd[threadIdx.x] += sd[threadIdx.x + w];
        sl[threadIdx.x] += sl[threadIdx.x + w];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      out[2 * r] = sd[0];
      out[2 * r + 1] = sl[0];
    }
    __syncthreads();  // the shared sums are rewritten for the next row
  }
}
}  // namespace

void launch_row_change(cudaStream_t s, const void* now, const void* last, DType dtype, int64_t rows, int64_t row_elems,
                       double* out) {
  UIPC_CHECK(rows >= 0 && row_elems >= 0, "row_change: negative size");
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  switch (dtype) {
    case DType::kBF16:
      row_change_kernel<<<blocks, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(now),
                                               static_cast<const __nv_bfloat16*>(last), rows, row_elems, out);
      break;
    case DType::kFP16:
      row_change_kernel<<<blocks, 256, 0, s>>>(static_cast<const __half*>(now), static_cast<const __half*>(last), rows,
                                               row_elems, out);
      break;
    default:
      row_change_kernel<<<blocks, 256, 0, s>>>(static_cast<const float*>(now), static_cast<const float*>(last), rows,
                                               row_elems, out);
      break;
  }
  UIPC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace uipc
