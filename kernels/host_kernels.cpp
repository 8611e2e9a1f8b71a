// The host implementation of LayerKernels: the layer's math (docs/math.md) as Kokkos
// parallel_for loops over DefaultHostExecutionSpace, each kernel one task on a host
// stream, so simulation mode runs the same pipeline as the GPU build on the CPU.
//
// Rules every kernel here follows, and why:
// - Only parallel_for with Range/MDRange policies. Kokkos' Serial parallel_reduce and
//   team policies share one global scratch area, and these kernels run concurrently on
//   several stream worker threads; a reduction is a sequential loop inside one
//   iteration instead, which also pins the summation order that docs/math.md fixes.
// - Iterations write disjoint outputs and allocate their own temporaries, so a site's
//   OpenMP (or Threads) Kokkos runs the same code without data races.
// - Tasks capture pointers and sizes by value: they run later, on the stream's worker.
// - Converting a bf16/fp16 input to fp32 is exact, so kernels convert an operand once
//   into an fp32 scratch copy (sometimes transposed) and then run the fp32 math; the
//   values and the order of every fp32 operation are those of docs/math.md.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/device/host_device.hpp"
#include "kernels/kernels.hpp"
#include "kernels/view_reach.hpp"

namespace uipc {
namespace {

using HostExec = Kokkos::DefaultHostExecutionSpace;
using Range = Kokkos::RangePolicy<HostExec, Kokkos::IndexType<int64_t>>;

// n elements of `src` (type t) from element `offset` on, converted to fp32 (exact).
// The type is dispatched once per row, not once per element.
inline void load_row(DType t, const void* src, int64_t offset, int64_t n, float* dst) {
  switch (t) {
    case DType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(p[i]);
      break;
    }
    case DType::kFP16: {
      const uint16_t* p = static_cast<const uint16_t*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(p[i]);
      break;
    }
    default: {
      const float* p = static_cast<const float*>(src) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
      break;
    }
  }
}

// n fp32 values stored (rounded to t) as elements offset.. of dst.
inline void store_row(DType t, void* dst, int64_t offset, int64_t n, const float* src) {
  for (int64_t i = 0; i < n; ++i) store_from_float(t, dst, static_cast<size_t>(offset + i), src[i]);
}

// Host parallel_for is synchronous for Serial and OpenMP, but Kokkos only promises
// completion after a fence; scratch owned by the task must outlive the loop.
inline void fence() { HostExec().fence(); }

std::string dims(int64_t a, int64_t b, int64_t c) {
  return std::to_string(a) + " x " + std::to_string(b) + " x " + std::to_string(c);
}

// The fp32 inner loops below are written as fixed-size blocks of independent
// accumulators, each summing its own products in the order docs/math.md fixes. The
// compiler keeps such a block in vector registers (GCC's -O2 vectorises only loops of
// constant trip count, and `#pragma GCC unroll`, which Clang also reads, lets it
// promote the block to registers); the blocking never reorders a sum.

// out[c] = sum_{r < R} a[r] * x[r*ld + c] for c < n, r increasing: the scores of one
// query row against K^T, and one output row against V. kC columns at a time.
template <int64_t kC>
inline int64_t vecmat_block(const float* __restrict a, int64_t R, const float* __restrict x, int64_t ld,
                            int64_t c0, int64_t n, float* __restrict out) {
  for (; c0 + kC <= n; c0 += kC) {
    float acc[kC] = {};
    for (int64_t r = 0; r < R; ++r) {
      const float ar = a[r];
      const float* __restrict xr = x + r * ld + c0;
#pragma GCC unroll 32
      for (int64_t t = 0; t < kC; ++t) acc[t] += ar * xr[t];
    }
    for (int64_t t = 0; t < kC; ++t) out[c0 + t] = acc[t];
  }
  return c0;
}

inline void vecmat(const float* a, int64_t R, const float* x, int64_t ld, int64_t n, float* out) {
  int64_t c0 = vecmat_block<32>(a, R, x, ld, 0, n, out);  // 8 SSE / 4 AVX registers
  c0 = vecmat_block<8>(a, R, x, ld, c0, n, out);
  vecmat_block<1>(a, R, x, ld, c0, n, out);
}

// The gemm micro-kernel: a kMR x kNR tile of out, over all K. `a` is kMR rows packed
// k-major (a[k*kMR + r]), `w` one kNR-column panel packed k-major (w[k*kNR + j]).
constexpr int64_t kMR = 4;
constexpr int64_t kNR = 8;
// Rows per gemm iteration: each w panel, once in cache, serves this many rows.
constexpr int64_t kGemmRows = 4 * kMR;

inline void gemm_tile(const float* __restrict a, const float* __restrict w, int64_t K, float* __restrict tile) {
  float acc[kMR][kNR] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float* __restrict wk = w + k * kNR;
    const float* __restrict ak = a + k * kMR;
#pragma GCC unroll 4
    for (int64_t r = 0; r < kMR; ++r) {
      const float ar = ak[r];
      for (int64_t j = 0; j < kNR; ++j) acc[r][j] += ar * wk[j];
    }
  }
  for (int64_t r = 0; r < kMR; ++r)
    for (int64_t j = 0; j < kNR; ++j) tile[r * kNR + j] = acc[r][j];
}

class HostKernels final : public LayerKernels {
 public:
  void gemm(Stream& s, const void* in, int64_t lda, const void* w, int64_t ldw, void* out, int64_t ldo, int64_t M,
            int64_t N, int64_t K, DType dtype, DType out_dtype) override {
    UIPC_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm sizes M x N x K = " + dims(M, N, K));
    UIPC_CHECK(lda >= K && ldo >= N && ldw >= N, "gemm leading dimensions lda=" + std::to_string(lda) +
                                                     " ldw=" + std::to_string(ldw) + " ldo=" + std::to_string(ldo) +
                                                     " for M x N x K = " + dims(M, N, K));
    if (M == 0 || N == 0) return;
    UIPC_CHECK(out != nullptr && (K == 0 || (in != nullptr && w != nullptr)), "gemm null pointer");
    check_gemm_reach(in, lda, w, ldw, out, ldo, M, N, K, dtype, out_dtype);
    host_stream(s).enqueue_kernel("gemm", [=]() {
      // w in fp32 (exact), repacked into kNR-column panels, zero-padded past N:
      // O(K*N) once per call, against the O(M*N*K) product.
      const int64_t panels = (N + kNR - 1) / kNR;
      std::vector<float> w_pack(static_cast<size_t>(panels * K * kNR));
      float* wp = w_pack.data();
      Kokkos::parallel_for("uipc::gemm_pack_w", Range(0, K), [=](int64_t k) {
        std::vector<float> row(static_cast<size_t>(panels * kNR), 0.0f);
        load_row(dtype, w, k * ldw, N, row.data());
        for (int64_t p = 0; p < panels; ++p)
          for (int64_t j = 0; j < kNR; ++j) wp[(p * K + k) * kNR + j] = row[static_cast<size_t>(p * kNR + j)];
      });
      fence();
      const int64_t blocks = (M + kGemmRows - 1) / kGemmRows;
      Kokkos::parallel_for("uipc::gemm", Range(0, blocks), [=](int64_t blk) {
        const int64_t m0 = blk * kGemmRows;
        const int64_t rows = std::min(kGemmRows, M - m0);
        const int64_t subs = (rows + kMR - 1) / kMR;
        // The block's rows in fp32, packed per kMR-row group, zero rows past M.
        std::vector<float> a_pack(static_cast<size_t>(subs * K * kMR), 0.0f);
        std::vector<float> row(static_cast<size_t>(K));
        for (int64_t r = 0; r < rows && K > 0; ++r) {  // K == 0: in may be null, out is 0
          load_row(dtype, in, (m0 + r) * lda, K, row.data());
          float* dst = a_pack.data() + (r / kMR) * K * kMR + r % kMR;
          for (int64_t k = 0; k < K; ++k) dst[k * kMR] = row[static_cast<size_t>(k)];
        }
        float tile[kMR * kNR];
        for (int64_t p = 0; p < panels; ++p) {
          const int64_t n0 = p * kNR, nn = std::min(kNR, N - n0);
          for (int64_t sb = 0; sb < subs; ++sb) {
            gemm_tile(a_pack.data() + sb * K * kMR, wp + p * K * kNR, K, tile);
            const int64_t r0 = sb * kMR, rn = std::min(kMR, rows - r0);
            for (int64_t r = 0; r < rn; ++r) store_row(out_dtype, out, (m0 + r0 + r) * ldo + n0, nn, tile + r * kNR);
          }
        }
      });
      fence();
    });
  }

  void norm_rope(Stream& s, const QkView& x, DType dtype, const NormRopeParams& p) override {
    const int64_t heads = x.heads, hd = x.head_dim, width = heads * hd;
    UIPC_CHECK(x.batch >= 0 && x.tokens_per_batch >= 0 && heads >= 0 && hd >= 0,
               "norm_rope view " + dims(x.batch, x.tokens_per_batch, width));
    UIPC_CHECK(x.row_pitch >= width, "norm_rope row_pitch " + std::to_string(x.row_pitch) +
                                         " below heads*head_dim " + std::to_string(width));
    UIPC_CHECK(x.pos_offset >= 0, "norm_rope pos_offset " + std::to_string(x.pos_offset));
    const NormKind norm = p.norm;
    const bool rope = p.rope == RopeKind::k1D;
    UIPC_CHECK(norm == NormKind::kNone || norm == NormKind::kRmsPerHead || norm == NormKind::kRmsAcrossHeads ||
                   norm == NormKind::kLayerPerHead,
               "norm_rope: unknown NormKind " + std::to_string(static_cast<int>(norm)));
    UIPC_CHECK(p.rope == RopeKind::kNone || rope, "norm_rope: unknown RopeKind " + std::to_string(static_cast<int>(p.rope)));
    UIPC_CHECK(!rope || hd % 2 == 0, "RoPE needs an even head_dim, not " + std::to_string(hd));
    UIPC_CHECK(norm == NormKind::kNone || p.gamma != nullptr, "norm_rope: norm without gamma");
    UIPC_CHECK(norm != NormKind::kLayerPerHead || p.beta != nullptr, "norm_rope: LayerNorm without beta");
    const int64_t rows = x.batch * x.tokens_per_batch;
    UIPC_CHECK(!(norm == NormKind::kNone && !rope) || x.out.data == nullptr || x.out.head_count == 0,
               "norm_rope with neither norm nor RoPE cannot move heads");
    if (rows == 0 || width == 0 || (norm == NormKind::kNone && !rope)) return;
    UIPC_CHECK(x.data != nullptr, "norm_rope: null data");

    void* data = x.data;
    const HeadSliceOut out = x.out;
    UIPC_CHECK(out.data == nullptr ||
                   (out.head_begin >= 0 && out.head_count >= 0 &&
                    static_cast<int64_t>(out.head_begin) + out.head_count <= heads),
               "norm_rope: output head slice outside the view's heads");
    const int64_t pitch = x.row_pitch, tpb = x.tokens_per_batch, pos0 = x.pos_offset;
    const float eps = p.eps, rope_theta = p.rope_theta;
    const float* gamma = p.gamma;
    const float* beta = p.beta;
    check_norm_rope_reach(x, dtype, p);
    host_stream(s).enqueue_kernel("norm_rope", [=]() {
      // cos/sin of every (token, pair), once per call rather than once per row and head.
      const int64_t half = hd / 2;
      std::vector<float> cos_tab, sin_tab;
      if (rope && half > 0) {
        std::vector<float> theta(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i) {
          // -2i/D in fp32 is one correctly rounded quotient, however it is spelt.
          theta[static_cast<size_t>(i)] =
              powf(rope_theta, static_cast<float>(-2 * i) / static_cast<float>(hd));
        }
        cos_tab.resize(static_cast<size_t>(tpb * half));
        sin_tab.resize(static_cast<size_t>(tpb * half));
        float* ct = cos_tab.data();
        float* st = sin_tab.data();
        const float* th = theta.data();
        Kokkos::parallel_for("uipc::rope_table", Range(0, tpb), [=](int64_t t) {
          const float pos = static_cast<float>(pos0 + t);
          for (int64_t i = 0; i < half; ++i) {
            const float a = pos * th[i];
            ct[t * half + i] = cosf(a);
            st[t * half + i] = sinf(a);
          }
        });
        fence();
      }
      const float* ct = cos_tab.data();
      const float* st = sin_tab.data();
      Kokkos::parallel_for("uipc::norm_rope", Range(0, rows), [=](int64_t m) {
        std::vector<float> v(static_cast<size_t>(width));
        float* xv = v.data();
        load_row(dtype, data, m * pitch, width, xv);
        // Groups of n values normalised together: one per head, or the whole row.
        const int64_t group = norm == NormKind::kRmsAcrossHeads ? width : hd;
        const float n = static_cast<float>(group);
        if (norm == NormKind::kRmsPerHead || norm == NormKind::kRmsAcrossHeads) {
          for (int64_t g0 = 0; g0 < width; g0 += group) {
            float ss = 0.0f;
            for (int64_t i = 0; i < group; ++i) ss += xv[g0 + i] * xv[g0 + i];
            const float denom = sqrtf(ss / n + eps);
            // gamma is per element of the group: [head_dim] per head, [heads*head_dim] across.
            for (int64_t i = 0; i < group; ++i) xv[g0 + i] = xv[g0 + i] / denom * gamma[i];
          }
        } else if (norm == NormKind::kLayerPerHead) {
          for (int64_t g0 = 0; g0 < width; g0 += group) {
            float sum = 0.0f;
            for (int64_t i = 0; i < group; ++i) sum += xv[g0 + i];
            const float mu = sum / n;
            float sq = 0.0f;
            for (int64_t i = 0; i < group; ++i) {
              const float dlt = xv[g0 + i] - mu;
              sq += dlt * dlt;
            }
            const float denom = sqrtf(sq / n + eps);
            for (int64_t i = 0; i < group; ++i) xv[g0 + i] = (xv[g0 + i] - mu) / denom * gamma[i] + beta[i];
          }
        }
        if (rope) {
          const int64_t t = m % tpb;
          const float* c = ct + t * half;
          const float* sn = st + t * half;
          for (int64_t h = 0; h < heads; ++h) {
            float* hv = xv + h * hd;
            for (int64_t i = 0; i < half; ++i) {
              const float x0 = hv[2 * i], x1 = hv[2 * i + 1];
              hv[2 * i] = x0 * c[i] - x1 * sn[i];
              hv[2 * i + 1] = x0 * sn[i] + x1 * c[i];
            }
          }
        }
        // The one rounding to the dtype, after norm and RoPE; the heads of `out` go to
        // their final-layout target instead of back in place.
        if (out.data == nullptr) {
          store_row(dtype, data, m * pitch, width, xv);
        } else {
          const int64_t b = m / tpb, t = m % tpb;
          for (int64_t h = 0; h < heads; ++h) {
            const bool moved = h >= out.head_begin && h < out.head_begin + out.head_count;
            if (moved)
              store_row(dtype, out.data, b * out.batch_pitch + t * out.row_pitch + (h - out.head_begin) * hd, hd,
                        xv + h * hd);
            else
              store_row(dtype, data, m * pitch + h * hd, hd, xv + h * hd);
          }
        }
      });
      fence();
    });
  }

  void attention(Stream& s, const void* q, const void* k, const void* v, void* o, int64_t batch, int64_t seq,
                 int heads, int head_dim, DType dtype, float scale) override {
    UIPC_CHECK(batch >= 0 && seq >= 0 && heads >= 0 && head_dim >= 0,
               "attention sizes B x S x H = " + dims(batch, seq, heads) + ", D = " + std::to_string(head_dim));
    const int64_t B = batch, S = seq, H = heads, D = head_dim;
    if (B == 0 || S == 0 || H == 0 || D == 0) return;
    UIPC_CHECK(q != nullptr && k != nullptr && v != nullptr && o != nullptr, "attention null pointer");
    check_attention_reach(q, k, v, o, batch, seq, heads, head_dim, dtype);
    host_stream(s).enqueue_kernel("attention", [=]() {
      // K as fp32 (B, H, D, S) and V as fp32 (B, H, S, D): both products of a query row
      // are then vecmat()s over contiguous rows, keys (scores) or head_dim (output)
      // in the vector lanes, each sum still in its docs/math.md order.
      std::vector<float> kt_buf(static_cast<size_t>(B * H * D * S));
      std::vector<float> vf_buf(static_cast<size_t>(B * H * S * D));
      float* kt = kt_buf.data();
      float* vf = vf_buf.data();
      Kokkos::parallel_for("uipc::attention_kv_to_f32", Range(0, B * H), [=](int64_t bh) {
        const int64_t b = bh / H, h = bh % H;
        std::vector<float> row(static_cast<size_t>(D));
        for (int64_t j = 0; j < S; ++j) {
          const int64_t src = ((b * S + j) * H + h) * D;
          load_row(dtype, k, src, D, row.data());
          for (int64_t d = 0; d < D; ++d) kt[(bh * D + d) * S + j] = row[static_cast<size_t>(d)];
          load_row(dtype, v, src, D, vf + (bh * S + j) * D);
        }
      });
      fence();
      // Iterations ordered (b, h, i) so that consecutive ones share their K and V.
      Kokkos::parallel_for("uipc::attention", Range(0, B * H * S), [=](int64_t idx) {
        const int64_t bh = idx / S, i = idx % S;
        const int64_t b = bh / H, h = bh % H;
        std::vector<float> qrow(static_cast<size_t>(D)), sc(static_cast<size_t>(S)), acc(static_cast<size_t>(D));
        const int64_t qo = ((b * S + i) * H + h) * D;
        load_row(dtype, q, qo, D, qrow.data());
        // s_j = sum_d q[d] k[j, d], d increasing, for all j at once.
        float* scp = sc.data();
        vecmat(qrow.data(), D, kt + bh * D * S, S, S, scp);
        float mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          scp[j] *= scale;
          mx = std::max(mx, scp[j]);
        }
        float l = 0.0f;
        for (int64_t j = 0; j < S; ++j) {
          scp[j] = expf(scp[j] - mx);
          l += scp[j];
        }
        // acc[d] = sum_j p_j v[j, d], j increasing.
        float* ap = acc.data();
        vecmat(scp, S, vf + bh * S * D, D, D, ap);
        for (int64_t d = 0; d < D; ++d) ap[d] /= l;
        store_row(dtype, o, qo, D, ap);
      });
      fence();
    });
  }

  void convert_from_f32(Stream& s, const float* in, void* out, int64_t n, DType dtype) override {
    UIPC_CHECK(n >= 0, "convert_from_f32 count " + std::to_string(n));
    if (n == 0) return;
    UIPC_CHECK(in != nullptr && out != nullptr, "convert_from_f32 null pointer");
    check_convert_reach(in, out, n, dtype);
    host_stream(s).enqueue_kernel("convert_from_f32", [=]() {
      Kokkos::parallel_for("uipc::convert_from_f32", Range(0, n),
                           [=](int64_t i) { store_from_float(dtype, out, static_cast<size_t>(i), in[i]); });
      fence();
    });
  }

  void row_change(Stream& s, const void* now, const void* last, DType dtype, int64_t rows, int64_t row_elems,
                  double* out) override {
    UIPC_CHECK(rows >= 0 && row_elems >= 0, "row_change: negative size");
    if (rows == 0) return;
    UIPC_CHECK(now != nullptr && last != nullptr && out != nullptr, "row_change null pointer");
    check_row_change_reach(now, last, dtype, rows, row_elems, out);
    host_stream(s).enqueue_kernel("row_change", [=]() {
      Kokkos::parallel_for("uipc::row_change", Range(0, rows), [=](int64_t r) {
        double d2 = 0, l2 = 0;
        for (int64_t e = r * row_elems; e < (r + 1) * row_elems; ++e) {
          const double a = load_as_float(dtype, now, static_cast<size_t>(e));
          const double b = load_as_float(dtype, last, static_cast<size_t>(e));
          d2 += (a - b) * (a - b);
          l2 += b * b;
        }
        out[2 * r] = d2;
        out[2 * r + 1] = l2;
      });
      fence();
    });
  }
};

}  // namespace

std::unique_ptr<LayerKernels> make_host_kernels() { return std::make_unique<HostKernels>(); }

}  // namespace uipc
