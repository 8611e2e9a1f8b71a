// The CUDA LayerKernels (kernels/cuda_kernels.*) against float64 references written
// from docs/math.md, on fresh random inputs each run (the seed is printed). Outputs
// are poisoned with 0xFF bytes (NaN in every dtype) before the kernel runs, and memory
// the kernel must not touch (padding, the other parts of a fused QKV row) is checked
// bit for bit. Tolerances: the fp32 evaluation error of the formula plus one rounding
// to the output dtype (and, for cuDNN, the rounding of the probabilities to the I/O
// dtype before P*V): far below any indexing, scaling or normalisation mistake.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "comm/device/cuda_device.hpp"
#include "kernels/cuda_internal.hpp"
#include "kernels/cuda_kernels.hpp"
#include "kernels/norm_rope_walk.hpp"

namespace uipc {
namespace {

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff

double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16: return 1.0 / 256.0;
    case DType::kFP16: return 1.0 / 2048.0;
    default: return 0.0;
  }
}
double abs_floor(DType t) { return t == DType::kFP16 ? std::ldexp(1.0, -24) : 0.0; }

const DType kAllTypes[] = {DType::kBF16, DType::kFP16, DType::kFP32};

int local_ordinal(int count) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r % count;
}

// A host image of a device tensor of dtype t, values kept as the stored (rounded) floats.
struct HostTensor {
  DType t;
  std::vector<unsigned char> bytes;
  HostTensor(DType type, size_t n) : t(type), bytes(n * dtype_size(type), 0xFF) {}
  size_t size() const { return bytes.size() / dtype_size(t); }
  float get(size_t i) const { return load_as_float(t, bytes.data(), i); }
  void set(size_t i, float v) { store_from_float(t, bytes.data(), i, v); }
};

class CudaKernelsTest : public ::testing::Test {
 public:  // attention_case() below uses the helpers
  void SetUp() override {
    std::string why;
    const int n = cuda_usable_device_count(&why);
    if (n == 0) GTEST_SKIP() << "no usable CUDA device: " << why;
    dev_ = make_cuda_device(local_ordinal(n));
    stream_ = dev_->create_stream(StreamPriority::kNormal);
    // ULYSSES_TEST_SEED replays a printed seed (one test at a time: --gtest_filter).
    const char* replay = std::getenv("ULYSSES_TEST_SEED");
    seed_ = replay != nullptr ? static_cast<unsigned>(std::strtoul(replay, nullptr, 10)) : std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
    std::printf("[ seed %u%s on %s ]\n", seed_, replay != nullptr ? " (ULYSSES_TEST_SEED)" : "", dev_->name().c_str());
  }

  DeviceBuffer upload(const HostTensor& h) {
    auto b = dev_->alloc(h.bytes.size());
    dev_->copy_to_device(b.get(), h.bytes.data(), h.bytes.size());
    return b;
  }
  void download(HostTensor& h, const DeviceBuffer& b) { dev_->copy_to_host(h.bytes.data(), b.get(), h.bytes.size()); }
  DeviceBuffer upload_f32(const std::vector<float>& v) {
    auto b = dev_->alloc(v.size() * 4);
    dev_->copy_to_device(b.get(), v.data(), v.size() * 4);
    return b;
  }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  void fill(HostTensor& h, float lo, float hi) {
    for (size_t i = 0; i < h.size(); ++i) h.set(i, uniform(lo, hi));
  }

  std::unique_ptr<Device> dev_;
  std::unique_ptr<Stream> stream_;
  unsigned seed_ = 0;
  std::mt19937 rng_;
};

// ---------------------------------------------------------------- GEMM

TEST_F(CudaKernelsTest, GemmStridedAllTypes) {
  auto k = make_cuda_kernels();
  // Strided in, fused-style out, and w a block of columns of a wider weight (ldw > N).
  const int64_t M = 77, N = 96, K = 130, lda = K + 8, ldo = 3 * N, ldw = 2 * N + 8;
  for (DType dt : kAllTypes) {
    for (DType ot : {dt, DType::kFP32, DType::kBF16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " -> " + dtype_name(ot));
      HostTensor a(dt, M * lda), w(dt, K * ldw), out(ot, M * ldo);
      fill(a, -1, 1);
      fill(w, -1, 1);
      auto da = upload(a), dw = upload(w), dout = upload(out);  // out: all 0xFF
      ASSERT_NO_THROW(k->gemm(*stream_, da.get(), lda, dw.get(), ldw, dout.get(), ldo, M, N, K, dt, ot));
      stream_->synchronize();
      HostTensor got(ot, M * ldo);
      download(got, dout);
      const double u = unit_roundoff(ot);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < ldo; ++n) {
          const size_t idx = m * ldo + n;
          if (n >= N) {  // untouched
            ASSERT_EQ(0, std::memcmp(&got.bytes[idx * dtype_size(ot)], &out.bytes[idx * dtype_size(ot)],
                                     dtype_size(ot)))
                << "gemm wrote outside its rows at m=" << m << " n=" << n;
            continue;
          }
          double ref = 0, mag = 0;
          for (int64_t kk = 0; kk < K; ++kk) {
            const double p = static_cast<double>(a.get(m * lda + kk)) * w.get(kk * ldw + n);
            ref += p;
            mag += std::fabs(p);
          }
          const double acc = 2.0 * K * kU32 * mag;
          const double tol = acc + u * (std::fabs(ref) + acc) + abs_floor(ot);
          const double g = got.get(idx);
          ASSERT_TRUE(std::isfinite(g)) << "m=" << m << " n=" << n;
          ASSERT_LE(std::fabs(g - ref), tol) << "m=" << m << " n=" << n << " ref=" << ref;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- norm + RoPE

// float64 reference of docs/math.md 2-3 for one row of `heads` x D (values in fp32
// storage order), angle computed in fp32 as the spec says.
void norm_rope_ref(std::vector<double>& x, int heads, int D, int64_t pos, NormKind norm, bool rope, float eps,
                   float theta, const std::vector<float>& gamma, const std::vector<float>& beta) {
  auto rms = [&](double* v, int n, const float* g) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += v[i] * v[i];
    const double d = std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i) v[i] = v[i] / d * g[i];
  };
  if (norm == NormKind::kRmsAcrossHeads) rms(x.data(), heads * D, gamma.data());
  for (int h = 0; h < heads; ++h) {
    double* v = x.data() + h * D;
    if (norm == NormKind::kRmsPerHead) rms(v, D, gamma.data());
    if (norm == NormKind::kLayerPerHead) {
      double mu = 0, var = 0;
      for (int i = 0; i < D; ++i) mu += v[i];
      mu /= D;
      for (int i = 0; i < D; ++i) var += (v[i] - mu) * (v[i] - mu);
      var /= D;
      const double d = std::sqrt(var + eps);
      for (int i = 0; i < D; ++i) v[i] = (v[i] - mu) / d * gamma[i] + beta[i];
    }
    if (rope) {
      for (int i = 0; i < D / 2; ++i) {
        const float th = std::pow(theta, -(2.0f * static_cast<float>(i)) / static_cast<float>(D));
        const double a = static_cast<double>(static_cast<float>(pos) * th);
        const double c = std::cos(a), s = std::sin(a);
        const double x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    }
  }
}

// One norm+RoPE check: a view (the K part of a fused QKV row, pitch 3*H*D, or a separate
// contiguous tensor), optionally with heads [hb, hb+hn) going to a final-layout target
// (B, 3*S, hn, D) at tokens [S, 2S), on the kernel `which`, against the float64 reference;
// every byte the kernel must not write is checked unchanged. With `qk`, Q and K in one
// launch (launch_norm_rope_qk): Q the first part of the fused row (or a separate tensor,
// K's rows after Q's), its own weights and positions, its moved heads at tokens [0, S) of
// the same target; both views against the reference.
struct NormRopeCheck {
  DType dt;
  int D, H;
  NormKind norm;
  bool rope;
  bool fused;
  bool slice_out;
  NormRopeKernel which;
  int pipe = -1;    // the vector kernel's pipelined walk: 4, 6, 8, 0 off, -1 as the layer picks
  int64_t S = 37;   // tokens per batch
  int64_t B = 2;    // batches: thousands of rows (B x S) make every warp walk several rows
  int staged = -1;  // the vector kernel's staged walk: 4, 8, 0 off, -1 as the layer picks
  // Every head: its first value 2, the others within +-0.01 (a head with one outlier:
  // the mean far from the first value, a small variance).
  bool outlier = false;
  bool qk = false;  // Q and K in one launch
};

void run_norm_rope_check(CudaKernelsTest& t, const NormRopeCheck& c) {
  SCOPED_TRACE(std::string(dtype_name(c.dt)) + " D=" + std::to_string(c.D) + " H=" + std::to_string(c.H) +
               " norm=" + std::to_string(static_cast<int>(c.norm)) + " rope=" + std::to_string(c.rope) +
               (c.fused ? " fused" : " separate") + (c.slice_out ? " +slice" : "") + " kernel=" +
               (c.which == NormRopeKernel::kVector ? "vector" : c.which == NormRopeKernel::kGeneral ? "general" : "auto") +
               " pipe=" + std::to_string(c.pipe) + " staged=" + std::to_string(c.staged) + " B=" + std::to_string(c.B) +
               " S=" + std::to_string(c.S) + (c.qk ? " Q+K" : ""));
  const int64_t B = c.B, S = c.S, pos0 = 100, rows = B * S;
  const int H = c.H, D = c.D, nv = c.qk ? 2 : 1;
  const int64_t width = static_cast<int64_t>(H) * D, pitch = c.fused ? 3 * width : width;
  // View j's first element (one view: K's place) and, for a moved head, its target token slot.
  auto slot = [&](int j) { return c.qk ? j : 1; };
  auto at = [&](int j, int64_t m, int64_t ve) -> size_t {
    return c.fused ? m * pitch + slot(j) * width + ve : (j * rows + m) * width + ve;
  };
  const int hb = c.slice_out ? H / 3 : 0, hn = c.slice_out ? std::max(1, H / 3) : 0;
  const int64_t seq = 3 * S;
  HostTensor qkv(c.dt, c.fused ? rows * pitch : nv * rows * width);
  t.fill(qkv, -2, 2);
  if (c.outlier)
    for (int j = 0; j < nv; ++j)
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t e = 0; e < width; ++e) qkv.set(at(j, m, e), e % D == 0 ? 2.0f : 0.005f * qkv.get(at(j, m, e)));
  HostTensor target(c.dt, c.slice_out ? B * seq * hn * D : 1);  // all 0xFF: NaN
  const int gn = c.norm == NormKind::kRmsAcrossHeads ? H * D : D;
  std::vector<std::vector<float>> gamma(nv, std::vector<float>(gn)), beta(nv, std::vector<float>(D));
  for (int j = 0; j < nv; ++j) {
    for (auto& g : gamma[j]) g = 1.0f + 0.25f * t.uniform(-1, 1);
    for (auto& b : beta[j]) b = 0.25f * t.uniform(-1, 1);
  }
  auto dq = t.upload(qkv), dt_ = t.upload(target);
  std::vector<DeviceBuffer> dg, db;
  const size_t es = dtype_size(c.dt);
  QkView views[2];
  NormRopeParams ps[2];
  for (int j = 0; j < nv; ++j) {
    dg.push_back(t.upload_f32(gamma[j]));
    db.push_back(t.upload_f32(beta[j]));
    QkView& view = views[j];
    view.data = static_cast<char*>(dq.get()) + at(j, 0, 0) * es;
    view.row_pitch = pitch;
    view.batch = B;
    view.tokens_per_batch = S;
    view.pos_offset = pos0 + 7 * j;
    view.heads = H;
    view.head_dim = D;
    if (c.slice_out)
      view.out = HeadSliceOut{static_cast<char*>(dt_.get()) + slot(j) * S * hn * D * es, hb, hn,
                              hn * static_cast<int64_t>(D), seq * hn * D};
    NormRopeParams& p = ps[j];
    p.norm = c.norm;
    p.rope = c.rope ? RopeKind::k1D : RopeKind::kNone;
    p.eps = 1e-6f;
    p.rope_theta = 10000.0f;
    p.gamma = dg.back().as<float>();
    p.beta = db.back().as<float>();
  }
  const auto cs = static_cast<cudaStream_t>(t.stream_->native());
  if (c.qk)
    launch_norm_rope_qk(cs, views[0], ps[0], views[1], ps[1], c.dt, c.which, 0, c.pipe, c.staged);
  else
    launch_norm_rope(cs, views[0], c.dt, ps[0], c.which, 0, c.pipe, c.staged);
  t.stream_->synchronize();
  HostTensor got(c.dt, qkv.size()), got_target(c.dt, target.size());
  t.download(got, dq);
  t.download(got_target, dt_);
  const double u = unit_roundoff(c.dt);
  auto same = [&](const HostTensor& a, const HostTensor& b, size_t i) {
    return std::memcmp(&a.bytes[i * es], &b.bytes[i * es], es) == 0;
  };
  std::vector<char> in_view(qkv.size(), 0), in_target(target.size(), 0);
  for (int j = 0; j < nv; ++j) {
    for (int64_t m = 0; m < rows; ++m) {
      const int64_t b = m / S, tok = m % S;
      std::vector<double> row(width);
      for (int64_t e = 0; e < width; ++e) row[e] = qkv.get(at(j, m, e));
      norm_rope_ref(row, H, D, views[j].pos_offset + tok, c.norm, c.rope, ps[j].eps, ps[j].rope_theta, gamma[j],
                    beta[j]);
      for (int64_t ve = 0; ve < width; ++ve) {
        const size_t idx = at(j, m, ve);
        in_view[idx] = 1;
        const int h = static_cast<int>(ve / D);
        const bool moved = h >= hb && h < hb + hn;
        const size_t tidx = moved ? ((b * seq + slot(j) * S + tok) * hn + (h - hb)) * D + ve % D : 0;
        if (moved) {  // the moved heads' source: untouched
          in_target[tidx] = 1;
          ASSERT_TRUE(same(got, qkv, idx)) << "norm_rope wrote a moved head in place: view " << j << " row " << m
                                           << " element " << ve;
        }
        const double ref = row[ve];
        // fp32 sums and sqrt, and sincos at |angle| < 200. An error in the angle turns the
        // whole pair, so it scales with the pair's length (which the rotation keeps), not
        // with the element: the device's powf may give a frequency an ulp off the
        // reference's, which moves an angle near 123 by 1.5e-5 rad, and an element near
        // zero whose pair is 2.7 long then errs by 4.1e-5 (seeds 980215271 and 905236941
        // failed so against 4e-5 (1 + |element|), both at position 142 of the second pair:
        // docs/measured/2026-12-07-h100-f0e2405-ln-finish).
        const double pair = c.rope ? std::hypot(row[ve - ve % 2], row[ve - ve % 2 + 1]) : std::fabs(ref);
        const double fp32 = 4e-5 * (1.0 + pair);
        const double tol = fp32 + u * (std::fabs(ref) + fp32) + abs_floor(c.dt);
        const double g = moved ? got_target.get(tidx) : got.get(idx);
        ASSERT_TRUE(std::isfinite(g)) << "view " << j << " row " << m << " element " << ve
                                      << (moved ? " (in the target)" : "");
        ASSERT_LE(std::fabs(g - ref), tol) << "view " << j << " row " << m << " element " << ve
                                           << (moved ? " (in the target)" : "") << "; reference " << ref
                                           << (c.rope ? ", its rotated pair's length " + std::to_string(pair) : "");
      }
    }
  }
  // Everything else (other parts of the rows, the target's other tokens): untouched.
  for (size_t i = 0; i < in_view.size(); ++i) {
    if (in_view[i]) continue;
    ASSERT_TRUE(same(got, qkv, i)) << "norm_rope wrote outside its views at element " << i;
  }
  for (size_t i = 0; i < in_target.size() && c.slice_out; ++i) {
    if (in_target[i]) continue;
    ASSERT_TRUE(same(got_target, target, i)) << "target element " << i << " written";
  }
}

const NormKind kNormKinds[] = {NormKind::kNone, NormKind::kRmsPerHead, NormKind::kRmsAcrossHeads,
                               NormKind::kLayerPerHead};

TEST_F(CudaKernelsTest, NormRopeAllKindsBothKernels) {
  for (NormRopeKernel which : {NormRopeKernel::kVector, NormRopeKernel::kGeneral}) {
    for (int D : {64, 72, 128}) {
      for (DType dt : kAllTypes) {
        for (NormKind nk : kNormKinds) {
          for (bool rope : {true, false}) {
            if (nk == NormKind::kNone && !rope) continue;
            for (bool fused : {true, false})
              run_norm_rope_check(*this, {dt, D, 5, nk, rope, fused, !fused, which});
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// Head counts that take the vector kernel's other paths: 24 heads (12 passes at
// D=128 bf16, past one batch of 8), 40 heads across-heads (whole row in registers for
// 16-bit types, two passes over the row for fp32), head_dim 256 and 512 (two chunks
// per lane), with and without a head slice out.
TEST_F(CudaKernelsTest, NormRopeVectorKernelPaths) {
  for (DType dt : kAllTypes) {
    for (NormKind nk : kNormKinds) {
      run_norm_rope_check(*this, {dt, 128, 24, nk, true, true, true, NormRopeKernel::kVector});
      run_norm_rope_check(*this, {dt, 128, 40, nk, true, false, false, NormRopeKernel::kVector});
      run_norm_rope_check(*this, {dt, 256, 6, nk, true, true, false, NormRopeKernel::kVector});
      if (dt != DType::kFP32) run_norm_rope_check(*this, {dt, 512, 3, nk, true, false, true, NormRopeKernel::kVector});
      if (HasFatalFailure()) return;
    }
  }
}

// The pipelined walk (the next batch of passes loading while the current one is
// computed, two register buffers in turn): with 5000 rows (100 batches of 50 tokens:
// positions stay small, so fp32 angles keep the tolerance's precision) every resident warp walks
// several rows, so batches cross rows, buffers alternate and the walk ends on either
// buffer; 24 heads at head_dim 128 give rows of two batches (16-bit, batches of 8: the
// second half past the last head) to six (fp32, batches of 4); head_dim 72 and 64 rows
// of one.
// Each against the float64 reference, the moved heads' target and untouched bytes too.
TEST_F(CudaKernelsTest, NormRopeVectorKernelPipelinedWalk) {
  const NormKind per_head[] = {NormKind::kNone, NormKind::kRmsPerHead, NormKind::kLayerPerHead};
  for (DType dt : kAllTypes) {
    for (NormKind nk : per_head) {
      for (int pipe : {0, 4, 6, 8}) {  // 0: the plain walk, on as many rows
        if (dt != DType::kBF16 && (pipe == 0 || pipe == 6)) continue;
        run_norm_rope_check(*this, {dt, 128, 24, nk, true, true, true, NormRopeKernel::kVector, pipe, 50, 100});
      }
      run_norm_rope_check(*this, {dt, 72, 5, nk, true, true, false, NormRopeKernel::kVector, 6, 50, 100});
      run_norm_rope_check(*this, {dt, 64, 7, nk, true, false, true, NormRopeKernel::kVector, 4, 50, 100});
      if (HasFatalFailure()) return;
    }
  }
}

// LayerNorm of heads with one outlier (first value 2, the rest within +-0.01) on every
// walk, both kernels, against the float64 reference: where the one-pass form shifted by
// the head's first value, E[(x-c)^2] - E[x-c]^2, cancels most (two numbers near 4 for a
// variance near 4/D: a factor of about D, the most Samuelson's inequality allows). fp32
// takes the two-pass form, which sums (x - mean)^2 after the mean and cancels nothing (the
// one-pass form was once blamed for NormRopeVectorKernelPipelinedWalk's fp32 failure, 4.50e-5
// against 4.38e-5; rebuilt on the CPU, that failure was a rotated pair's error: see
// run_norm_rope_check's tolerance); 16-bit types take the one-pass form on the plain (pipe 0), staged
// and flat walks (the flat walk's with a shift per chunk, moved to the head's first value),
// the two-pass form on the pipelined ones.
TEST_F(CudaKernelsTest, NormRopeLayerNormVarianceWithAnOutlier) {
  for (DType dt : kAllTypes) {
    for (int D : {64, 72, 128}) {
      const int H = D == 72 ? 5 : 24;
      for (int pipe : {0, 4, 8}) {
        NormRopeCheck c{dt, D, H, NormKind::kLayerPerHead, true, true, false, NormRopeKernel::kVector, pipe, 50, 20, 0};
        c.outlier = true;
        run_norm_rope_check(*this, c);
      }
      NormRopeCheck st{dt, D, H, NormKind::kLayerPerHead, true, false, true, NormRopeKernel::kVector, -1, 50, 20, 4};
      st.outlier = true;
      run_norm_rope_check(*this, st);
      NormRopeCheck g{dt, D, H, NormKind::kLayerPerHead, false, true, false, NormRopeKernel::kGeneral, -1, 37, 2};
      g.outlier = true;
      run_norm_rope_check(*this, g);
      NormRopeCheck fl{dt, D, H, NormKind::kLayerPerHead, true, true, true, NormRopeKernel::kVector,
                       kNormRopeFlatPipe, 50, 20, 0};
      fl.outlier = fl.qk = true;
      run_norm_rope_check(*this, fl);
      if (HasFatalFailure()) return;
    }
  }
}

// The across-heads walk pipelined by whole rows (pipe 12: the next row in registers while
// this one is reduced and stored), at rows of 12 passes (16-bit D64 x 48 and D128 x 24
// heads, fp32 D128 x 12) and fewer (5 heads), on one row, 74 rows and 5000 (every warp
// walks several rows, the two buffers alternate and the walk ends on either), fused and
// separate, with a head slice out, beside the plain walk on the same rows; a row of more
// than 12 passes is refused.
TEST_F(CudaKernelsTest, NormRopeAcrossHeadsPipelinedRows) {
  for (DType dt : kAllTypes) {
    const int d_big = dt == DType::kFP32 ? 128 : 64, h_big = dt == DType::kFP32 ? 12 : 48;
    for (int64_t S : {1, 37, 50}) {
      const int64_t B = S == 50 ? 100 : S == 37 ? 2 : 1;
      run_norm_rope_check(*this, {dt, d_big, h_big, NormKind::kRmsAcrossHeads, true, S != 37, S == 37,
                                  NormRopeKernel::kVector, 12, S, B, 0});
      run_norm_rope_check(*this, {dt, 128, dt == DType::kFP32 ? 12 : 24, NormKind::kRmsAcrossHeads, S != 1, true,
                                  S == 50, NormRopeKernel::kVector, 12, S, B, 0});
      run_norm_rope_check(*this, {dt, 128, 5, NormKind::kRmsAcrossHeads, true, false, true, NormRopeKernel::kVector,
                                  12, S, B, 0});
      // The plain walk the layer picks for these rows (the whole row in registers, no
      // pipelining), on the same rows.
      run_norm_rope_check(*this, {dt, d_big, h_big, NormKind::kRmsAcrossHeads, true, S == 37, S != 37,
                                  NormRopeKernel::kVector, 0, S, B, 0});
      if (HasFatalFailure()) return;
    }
  }
  auto buf = dev_->alloc(static_cast<size_t>(4) * 13 * 128 * 4);
  QkView v{buf.get(), 13 * 128, 1, 4, 0, 13, 128, {}};  // fp32 D128: a head a pass, 13 passes
  NormRopeParams p;
  p.norm = NormKind::kRmsAcrossHeads;
  auto gamma = dev_->alloc(13 * 128 * 4);
  p.gamma = gamma.as<float>();
  EXPECT_THROW(launch_norm_rope(static_cast<cudaStream_t>(stream_->native()), v, DType::kFP32, p,
                                NormRopeKernel::kVector, 0, 12, 0),
               Error);
}

// Q and K in one launch of the vector kernel (launch_norm_rope_qk: the grid's halves walk
// one view each): byte for byte what two launch_norm_rope calls write, for every norm
// kind, head_dim 64, 72 and 128, every dtype, fused views (Q and K of one QKV buffer)
// and separate ones (K's heads 1..2 moved to a target), different weights for Q and K,
// on the launcher's pick, the plain walk, the pipelined walk (rows pipelined whole for
// across-heads RMS), the staged walk and the flat walk, at 74 rows and 5000 (every warp
// walks several rows). The two-launch path is checked against the float64 reference above.
TEST_F(CudaKernelsTest, NormRopeQkOneLaunchMatchesTwoLaunches) {
  struct Walk {
    int pipe, staged;
  };
  const Walk walks[] = {{-1, -1}, {0, 0}, {4, 0}, {0, 4}, {kNormRopeFlatPipe, 0}};
  const int H = 7;
  for (DType dt : kAllTypes) {
    const size_t es = dtype_size(dt);
    for (int D : {64, 72, 128}) {
      for (bool fused : {true, false}) {
        for (int64_t S : {37, 50}) {
          // 74 rows, and 3000 (more rows than the resident warps of a grid half: warps
          // walk several rows, the pipelined walk's buffers alternate).
          const int64_t B = S == 50 ? 60 : 2, rows = B * S;
          const int64_t width = static_cast<int64_t>(H) * D, pitch = fused ? 3 * width : width;
          const int64_t n = fused ? rows * pitch : 2 * rows * width;
          HostTensor x(dt, n);  // filled once per shape: the host's random numbers are the slow part
          fill(x, -2, 2);
          const int hb = 1, hn = 2;  // K's heads moved to the target (separate views)
          HostTensor target(dt, fused ? 1 : rows * hn * D);
          for (NormKind nk : kNormKinds) {
            for (const Walk& w : walks) {
              int pipe = w.pipe;
              if (pipe == 4 && nk == NormKind::kRmsAcrossHeads) pipe = 12;  // rows pipelined whole
              SCOPED_TRACE(std::string(dtype_name(dt)) + " D=" + std::to_string(D) + " norm=" +
                           std::to_string(static_cast<int>(nk)) + (fused ? " fused" : " separate") + " pipe=" +
                           std::to_string(pipe) + " staged=" + std::to_string(w.staged) + " rows=" +
                           std::to_string(rows));
              const int gn = nk == NormKind::kRmsAcrossHeads ? H * D : D;
              std::vector<float> gq(gn), gk(gn), bq(D), bk(D);
              for (auto* v : {&gq, &gk})
                for (auto& g : *v) g = 1.0f + 0.25f * uniform(-1, 1);
              for (auto* v : {&bq, &bk})
                for (auto& b : *v) b = 0.25f * uniform(-1, 1);
              auto dgq = upload_f32(gq), dgk = upload_f32(gk), dbq = upload_f32(bq), dbk = upload_f32(bk);
              DeviceBuffer bufs[2] = {upload(x), upload(x)}, tgts[2] = {upload(target), upload(target)};
              auto views = [&](int i, QkView& q, QkView& k) {
                char* base = static_cast<char*>(bufs[i].get());
                for (int j = 0; j < 2; ++j) {
                  QkView& v = j == 0 ? q : k;
                  v = QkView{};
                  v.data = base + (fused ? j * width : j * rows * width) * static_cast<int64_t>(es);
                  v.row_pitch = pitch;
                  v.batch = B;
                  v.tokens_per_batch = S;
                  v.pos_offset = 100 + 7 * j;  // Q and K at different positions: each its own
                  v.heads = H;
                  v.head_dim = D;
                }
                if (!fused) k.out = HeadSliceOut{tgts[i].get(), hb, hn, hn * static_cast<int64_t>(D), S * hn * D};
              };
              NormRopeParams pq, pk;
              for (NormRopeParams* p : {&pq, &pk}) {
                p->norm = nk;
                p->rope = RopeKind::k1D;
                p->eps = 1e-6f;
                p->rope_theta = 10000.0f;
              }
              pq.gamma = dgq.as<float>(), pq.beta = dbq.as<float>();
              pk.gamma = dgk.as<float>(), pk.beta = dbk.as<float>();
              auto cs = static_cast<cudaStream_t>(stream_->native());
              const NormRopeKernel kv = NormRopeKernel::kVector;
              QkView q, k;
              views(0, q, k);
              launch_norm_rope(cs, q, dt, pq, kv, 0, pipe, w.staged);
              launch_norm_rope(cs, k, dt, pk, kv, 0, pipe, w.staged);
              views(1, q, k);
              launch_norm_rope_qk(cs, q, pq, k, pk, dt, kv, 0, pipe, w.staged);
              EXPECT_NE(last_norm_rope_launch().kernel.find("Q+K one launch"), std::string::npos)
                  << last_norm_rope_launch().kernel;
              stream_->synchronize();
              HostTensor got[2] = {HostTensor(dt, n), HostTensor(dt, n)};
              HostTensor got_t[2] = {HostTensor(dt, target.size()), HostTensor(dt, target.size())};
              for (int i = 0; i < 2; ++i) {
                download(got[i], bufs[i]);
                download(got_t[i], tgts[i]);
              }
              ASSERT_TRUE(got[0].bytes == got[1].bytes) << "the views differ";
              ASSERT_TRUE(got_t[0].bytes == got_t[1].bytes) << "the targets differ";
              ASSERT_FALSE(got[0].bytes == x.bytes) << "nothing was written";
            }
          }
        }
      }
    }
  }
}

// The across-heads block walk (pipe 16: a block a row, each warp a quarter of the passes,
// the sum of squares through shared memory, the next row loading while this one is
// stored): the benchmark's shapes (rows of 12 to 42 passes: 3, 4, 6 and 12 passes a warp),
// every dtype, fused and separate, with and without a head slice out, without RoPE too,
// at one row (most blocks idle), 74 rows and 3000 (every block walks several rows, the
// buffers and the shared sums' halves alternate); the layer's pick takes it; a row of more
// than 48 passes is refused by name (and the pick falls back to a register walk).
TEST_F(CudaKernelsTest, NormRopeAcrossHeadsBlockRows) {
  struct Shape {
    int D, H;
  };
  const Shape shapes[] = {{64, 48}, {72, 42}, {128, 24}, {128, 5}};
  struct Rows {
    int64_t S, B;
  };
  const Rows sizes[] = {{1, 1}, {37, 2}, {50, 60}};
  for (DType dt : kAllTypes) {
    for (const Shape& sh : shapes) {
      for (const Rows& r : sizes) {
        const bool fused = (sh.D + r.S) % 2 == 0;
        run_norm_rope_check(*this, {dt, sh.D, sh.H, NormKind::kRmsAcrossHeads, r.S != 1, fused, !fused,
                                    NormRopeKernel::kVector, 16, r.S, r.B, 0});
        if (HasFatalFailure()) return;
      }
      run_norm_rope_check(*this, {dt, sh.D, sh.H, NormKind::kRmsAcrossHeads, true, true, false,
                                  NormRopeKernel::kVector, -1, 37, 2, -1});
      if (HasFatalFailure()) return;
      // The pick: the flat walk at 16-bit types and at head_dim 72, else the block walk.
      const bool flat = dtype_size(dt) == 2 || sh.D == 72;
      EXPECT_NE(last_norm_rope_launch().kernel.find(flat ? "flat" : "block rows"), std::string::npos)
          << "the layer's pick: " << last_norm_rope_launch().kernel;
    }
  }
  auto buf = dev_->alloc(static_cast<size_t>(4) * 49 * 128 * 4);
  QkView v{buf.get(), 49 * 128, 1, 4, 0, 49, 128, {}};  // fp32 D128: a head a pass, 49 passes
  NormRopeParams p;
  p.norm = NormKind::kRmsAcrossHeads;
  auto gamma = dev_->alloc(49 * 128 * 4);
  p.gamma = gamma.as<float>();
  EXPECT_THROW(launch_norm_rope(static_cast<cudaStream_t>(stream_->native()), v, DType::kFP32, p,
                                NormRopeKernel::kVector, 0, 16, 0),
               Error);
  run_norm_rope_check(*this, {DType::kFP32, 128, 49, NormKind::kRmsAcrossHeads, true, false, false,
                              NormRopeKernel::kVector, -1, 37, 2, 0});
  EXPECT_EQ(last_norm_rope_launch().kernel.find("block rows"), std::string::npos) << last_norm_rope_launch().kernel;
}

// The cases a walk forced by `pipe` (the flat and lane-rows walks) is checked on, for one dtype
// and norm kind, each through run_norm_rope_check and then the launch's name (it names the
// walk, and "Q+K one launch" exactly where asked): head_dim 72 at the benchmark's 42 heads on
// one row, 74 rows (separate views) and 3000 (fused, every block walks several rows or tiles);
// 5 heads with a head slice out; one view alone; 64 x 48; `big_heads`: 128 x 24 (fused) and
// 128 x 40 (separate); the norms without RoPE at 72 x 42. Stops at the first fatal failure.
void check_walk_cases(CudaKernelsTest& t, DType dt, NormKind nk, int pipe, const std::string& walk,
                      bool big_heads) {
  auto check = [&](const NormRopeCheck& c) {
    run_norm_rope_check(t, c);
    if (t.HasFatalFailure()) return false;
    const std::string k = last_norm_rope_launch().kernel;
    EXPECT_NE(k.find(walk), std::string::npos) << k;
    EXPECT_EQ(k.find("Q+K one launch") != std::string::npos, c.qk) << k;
    return true;
  };
  NormRopeCheck c{dt, 72, 42, nk, true, true, true, NormRopeKernel::kVector, pipe, 1, 1, 0};
  c.qk = true;
  if (!check(c)) return;  // one row
  c.S = 37, c.B = 2, c.fused = false;
  if (!check(c)) return;
  c.S = 50, c.B = 60, c.fused = true, c.slice_out = false;
  if (!check(c)) return;  // 3000 rows a view
  c.S = 37, c.B = 2, c.slice_out = true;
  c.H = 5;
  if (!check(c)) return;
  c.H = 42, c.qk = false, c.fused = false;
  if (!check(c)) return;  // one view alone
  c.qk = true;
  c.D = 64, c.H = 48;
  if (!check(c)) return;
  if (big_heads) {
    c.D = 128, c.H = 24, c.fused = true;
    if (!check(c)) return;
    c.H = 40, c.fused = false;
    if (!check(c)) return;
  }
  if (nk != NormKind::kNone) {
    c.D = 72, c.H = 42, c.rope = false;
    check(c);
  }
}

// The flat walk (pipe kNormRopeFlatPipe: a block a row, each thread's 16-byte chunks taken
// across head boundaries, per-head sums through shared memory, the row's RoPE table in
// shared memory, the next row loading while this one is stored): every norm kind, every
// dtype, Q and K in one launch (and one view alone), fused and separate views, heads moved
// to a target; head_dim 72 at the benchmark's 42 heads (heads of 9 or 18 chunks straddling
// warps: rows of 378 or 756 chunks, 3 or 6 a thread) on one row (most blocks idle), 74 rows
// and 3000 (every block walks several rows: buffers and row parities alternate); head_dim
// 72 with 5 heads (a row shorter than a block), 64 x 48 and 128 x 24 (the benchmark's
// other shapes), 128 x 40 (fp32: 12 chunks a thread); the norms without RoPE. Each view
// against the float64 reference, the moved heads' target and untouched bytes too. A row
// of more than 1536 chunks is refused by name.
TEST_F(CudaKernelsTest, NormRopeFlatWalk) {
  const NormRopeKernel kv = NormRopeKernel::kVector;
  const int flat = kNormRopeFlatPipe;
  for (DType dt : kAllTypes) {
    for (NormKind nk : kNormKinds) {
      check_walk_cases(*this, dt, nk, flat, "flat", true);
      if (HasFatalFailure()) return;
    }
  }
  // The layer's pick (pipe -1) takes the flat walk where bench_kernels measured it ahead:
  // head_dim 72 for every kind but 16-bit LayerNorm, RoPE only and across-heads RMS at
  // 16-bit types for every head_dim; elsewhere another walk.
  for (DType dt : kAllTypes) {
    for (NormKind nk : kNormKinds) {
      for (int D : {72, 128}) {
        NormRopeCheck c{dt, D, 3072 / D, nk, true, true, false, kv, -1, 37, 2, -1};
        c.qk = true;
        run_norm_rope_check(*this, c);
        if (HasFatalFailure()) return;
        const bool b16 = dtype_size(dt) == 2;
        const bool want = nk == NormKind::kNone || nk == NormKind::kRmsAcrossHeads ? b16 || D == 72
                          : nk == NormKind::kRmsPerHead                          ? D == 72
                                                                                 : !b16 && D == 72;
        const std::string k = last_norm_rope_launch().kernel;
        EXPECT_EQ(k.find("flat") != std::string::npos, want)
            << dtype_name(dt) << " norm " << static_cast<int>(nk) << " D" << D << ": " << k;
      }
    }
  }
  auto buf = dev_->alloc(static_cast<size_t>(4) * 49 * 128 * 4);
  QkView v{buf.get(), 49 * 128, 1, 4, 0, 49, 128, {}};  // fp32 D128: 49 x 32 = 1568 chunks
  NormRopeParams p;
  p.rope = RopeKind::k1D;
  try {
    launch_norm_rope(static_cast<cudaStream_t>(stream_->native()), v, DType::kFP32, p, kv, 0, flat, 0);
    ADD_FAILURE() << "the flat walk took a row of 1568 chunks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the flat walk takes rows of at most 1536"), std::string::npos) << e.what();
  }
}

// Launching `walk` (forced through `pipe`) on 8 heads of D elements of dt with norm nk is refused,
// by the walk's name.
void expect_walk_refused(CudaKernelsTest& t, int pipe, const std::string& walk, DType dt, int D, NormKind nk,
                         const std::string& what) {
  auto buf = t.dev_->alloc(static_cast<size_t>(4) * 8 * D * 4);
  auto gamma = t.dev_->alloc(static_cast<size_t>(8) * D * 4);
  QkView v{buf.get(), 8 * D, 1, 4, 0, 8, D, {}};
  NormRopeParams p;
  p.norm = nk;
  p.rope = RopeKind::k1D;
  p.gamma = gamma.as<float>();
  p.beta = gamma.as<float>();
  try {
    launch_norm_rope(static_cast<cudaStream_t>(t.stream_->native()), v, dt, p, NormRopeKernel::kVector, 0, pipe, 0);
    ADD_FAILURE() << "the " << walk << " walk took " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the " + walk + " walk"), std::string::npos) << e.what();
  }
}

// The lane-rows walk (pipe kNormRopeLaneRowsPipe: tiles of 128 head rows copied into shared
// memory, each thread normalising one head row whole, the next tile loading while this one is
// stored): RoPE only, per-head RMS and LayerNorm, every dtype, on check_walk_cases' shapes
// (tiles straddle tokens: 128 head rows are 3 and a bit of 42 heads, 26 tokens of 5; one row
// is a partial tile and leaves most blocks without one; 3000 rows make every block walk
// several tiles, its buffers alternating); heads of 16 chunks (head_dim 128 at 16-bit types,
// 64 at fp32) and 8 (64 at 16-bit types: the swizzled tile), of 9 and 18 (72); LayerNorm with
// an outlier (the mean far from the first value). Each view against the float64 reference,
// the moved heads' target and untouched bytes too. The layer's pick takes it (its single-tile
// variant, below) for 16-bit LayerNorm at head_dim 72 and nowhere else. Across-heads RMS and heads of other chunk counts
// are refused by name.
TEST_F(CudaKernelsTest, NormRopeLaneRowsWalk) {
  const NormRopeKernel kv = NormRopeKernel::kVector;
  const int lane = kNormRopeLaneRowsPipe;
  for (DType dt : kAllTypes) {
    const bool b16 = dtype_size(dt) == 2;
    for (NormKind nk : {NormKind::kNone, NormKind::kRmsPerHead, NormKind::kLayerPerHead}) {
      check_walk_cases(*this, dt, nk, lane, "lane rows", b16);
      if (HasFatalFailure()) return;
      if (nk == NormKind::kLayerPerHead) {
        NormRopeCheck o{dt, b16 ? 128 : 64, 24, nk, true, true, true, kv, lane, 50, 20, 0};
        o.outlier = o.qk = true;
        run_norm_rope_check(*this, o);
        if (HasFatalFailure()) return;
      }
    }
  }
  auto expect_refused = [&](DType dt, int D, NormKind nk, const std::string& what) {
    expect_walk_refused(*this, lane, "lane-rows", dt, D, nk, what);
  };
  // The layer's pick (pipe -1) takes the lane-rows walk, one tile a block, for 16-bit LayerNorm at
  // head_dim 72 (lane groups of 9) and nowhere else: not fp32 LayerNorm there (flat), not RMS there (flat),
  // not 16-bit LayerNorm at head_dim 64 or 128 (the staged or pipelined walk, by the GPU).
  for (DType dt : kAllTypes) {
    for (NormKind nk : {NormKind::kRmsPerHead, NormKind::kLayerPerHead}) {
      for (int D : {64, 72, 128}) {
        NormRopeCheck c{dt, D, 3072 / D, nk, true, true, false, kv, -1, 37, 2, -1};
        c.qk = D != 128;
        run_norm_rope_check(*this, c);
        if (HasFatalFailure()) return;
        const bool want = nk == NormKind::kLayerPerHead && dtype_size(dt) == 2 && D == 72;
        const std::string k = last_norm_rope_launch().kernel;
        EXPECT_EQ(k.find("lane rows 1t") != std::string::npos, want)  // its single-tile variant
            << dtype_name(dt) << " norm " << static_cast<int>(nk) << " D" << D << ": " << k;
        EXPECT_EQ(k.find("lane rows") != std::string::npos, want)
            << dtype_name(dt) << " norm " << static_cast<int>(nk) << " D" << D << ": " << k;
      }
    }
  }
  expect_refused(DType::kBF16, 128, NormKind::kRmsAcrossHeads, "across-heads RMS");
  expect_refused(DType::kFP32, 128, NormKind::kRmsPerHead, "fp32 heads of 32 chunks");
  expect_refused(DType::kBF16, 96, NormKind::kRmsPerHead, "bf16 heads of 12 chunks");
}

// The lane-rows walk with one tile a block at 8 blocks ("lane rows 1t", pipe
// kNormRopeLaneSinglePipe; 16-bit LayerNorm's statistics in one pass, shifted by the head's first
// value): RoPE only, RMS and LayerNorm, bf16 and fp16, on check_walk_cases' shapes without the big
// heads (head_dim 72 and 64: 9 and 8 chunks), and LayerNorm with an outlier (the first value far
// from the mean, the others within +-0.01: the shift's worst case), each view against the float64
// reference, moved heads and untouched bytes too. Across-heads RMS, fp32 and heads of 16 chunks are
// refused by name.
TEST_F(CudaKernelsTest, NormRopeLaneRowsSingle) {
  const int pipe = kNormRopeLaneSinglePipe;
  for (DType dt : {DType::kBF16, DType::kFP16}) {
    for (NormKind nk : {NormKind::kNone, NormKind::kRmsPerHead, NormKind::kLayerPerHead}) {
      check_walk_cases(*this, dt, nk, pipe, "lane rows 1t", false);
      if (HasFatalFailure()) return;
    }
    for (int D : {72, 64}) {
      NormRopeCheck o{dt, D, 3024 / D, NormKind::kLayerPerHead, true, true, true, NormRopeKernel::kVector, pipe, 50,
                      20, 0};
      o.outlier = o.qk = true;
      run_norm_rope_check(*this, o);
      if (HasFatalFailure()) return;
    }
  }
  expect_walk_refused(*this, pipe, "lane-rows 1t", DType::kBF16, 72, NormKind::kRmsAcrossHeads, "across-heads RMS");
  expect_walk_refused(*this, pipe, "lane-rows 1t", DType::kFP32, 72, NormKind::kLayerPerHead, "fp32");
  expect_walk_refused(*this, pipe, "lane-rows 1t", DType::kBF16, 128, NormKind::kLayerPerHead,
                      "bf16 heads of 16 chunks");
}

// The shared-memory staged walk (whole rows copied in with cp.async, two buffers per
// warp in turn), batches of 4 and 8 passes, every norm kind, head_dim 64, 72 and 128 at
// the benchmark's head counts (rows of 12 to 42 passes), every dtype, fused and separate
// views with and without a head slice out; at one row (fewer rows than warps: most warps
// copy nothing, and the empty copy groups must not stall the walk), 37 x 2 rows and
// 100 x 50 rows (every resident warp walks several rows, buffers alternate). Each
// against the float64 reference, the moved heads' target and untouched bytes too.
TEST_F(CudaKernelsTest, NormRopeVectorKernelStagedWalk) {
  struct Shape {
    int D, H;
  };
  const Shape shapes[] = {{64, 48}, {72, 42}, {128, 24}};
  struct Rows {
    int64_t S, B;
  };
  const Rows sizes[] = {{1, 1}, {37, 2}, {50, 100}};
  for (DType dt : kAllTypes) {
    for (NormKind nk : kNormKinds) {
      for (const Shape& sh : shapes) {
        for (int staged : {4, 8}) {
          for (const Rows& r : sizes) {
            const bool fused = (sh.D + staged + r.S) % 2 == 0;  // both layouts over the cases, cheaply
            run_norm_rope_check(*this, {dt, sh.D, sh.H, nk, true, fused, !fused, NormRopeKernel::kVector, -1, r.S,
                                        r.B, staged});
            if (HasFatalFailure()) return;
          }
        }
      }
      // RMS/LayerNorm without RoPE through the staged walk too.
      if (nk != NormKind::kNone)
        run_norm_rope_check(*this, {dt, 128, 24, nk, false, true, true, NormRopeKernel::kVector, -1, 37, 2, 4});
      if (HasFatalFailure()) return;
    }
  }
}

// 16-bit LayerNorm's pick, Q and K apart and in one launch, follows this GPU's peak memory
// bandwidth per SM (kernels/norm_rope_walk.hpp): the staged walk above it, pipelined 4 below;
// the result checked against the reference either way.
TEST_F(CudaKernelsTest, NormRopeLayerNorm16BitPickFollowsTheGpusBandwidth) {
  const MemoryBandwidth m = memory_bandwidth();
  const bool staged = staged_walk_pays(m.peak_gbs, m.sms);
  std::printf("peak memory bandwidth %.0f GB/s over %d SMs (%.1f GB/s an SM): 16-bit LayerNorm takes %s\n", m.peak_gbs,
              m.sms, m.peak_gbs / std::max(1, m.sms), staged ? "the staged walk" : "pipelined 4");
  // The attributes were read and are a GPU's (every one this runs on has more than 100 GB/s
  // and less than 100 TB/s), so the pick went by them and not by the unread default.
  EXPECT_GT(m.peak_gbs, 100.0);
  EXPECT_LT(m.peak_gbs, 1e5);
  EXPECT_GT(m.sms, 0);
  for (DType dt : {DType::kBF16, DType::kFP16})
    for (int D : {64, 128})
      for (bool qk : {false, true}) {
        NormRopeCheck c{dt, D, 3072 / D, NormKind::kLayerPerHead, true, true, false, NormRopeKernel::kVector};
        c.qk = qk;
        run_norm_rope_check(*this, c);
        if (HasFatalFailure()) return;
        const std::string k = last_norm_rope_launch().kernel;
        EXPECT_NE(k.find(staged ? "staged 4" : "pipelined 4"), std::string::npos) << dtype_name(dt) << " D" << D << ": " << k;
      }
}

// A row too long for the staged walk's shared memory (56 heads x 128 fp32: 28 KB, two
// per warp, four warps a block): the launcher's pick falls back to a register walk (and
// is right), and asking for the staged walk by name is refused with a clear error.
TEST_F(CudaKernelsTest, NormRopeStagedWalkTooLongRowFallsBack) {
  run_norm_rope_check(*this, {DType::kFP32, 128, 56, NormKind::kRmsAcrossHeads, true, false, false,
                              NormRopeKernel::kVector, -1, 37, 2, -1});
  EXPECT_NE(last_norm_rope_launch().kernel.find("plain"), std::string::npos) << last_norm_rope_launch().kernel;
  auto buf = dev_->alloc(static_cast<size_t>(4) * 56 * 128 * 4);
  QkView v{buf.get(), 56 * 128, 1, 4, 0, 56, 128, {}};
  NormRopeParams p;
  p.rope = RopeKind::k1D;
  try {
    launch_norm_rope(static_cast<cudaStream_t>(stream_->native()), v, DType::kFP32, p, NormRopeKernel::kVector, 0,
                     -1, 4);
    ADD_FAILURE() << "the staged walk took a 28 KB row";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too long for the staged walk"), std::string::npos) << e.what();
  }
}

// At positions past 10^5 (HunyuanVideo's), where sincosf takes its slow argument
// reduction, the two kernels compute the same angles with the same functions: they
// agree to a rounding of the dtype (their fp32 sums run in different orders).
TEST_F(CudaKernelsTest, NormRopeKernelsAgreeAtLargePositions) {
  const int64_t S = 64, pos0 = 119056 - 64;
  const int H = 24, D = 128;
  for (DType dt : kAllTypes) {
    for (NormKind nk : kNormKinds) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " norm=" + std::to_string(static_cast<int>(nk)));
      const int64_t pitch = 3 * H * D;
      HostTensor qkv(dt, S * pitch);
      fill(qkv, -2, 2);
      std::vector<float> gamma(nk == NormKind::kRmsAcrossHeads ? H * D : D), beta(D);
      for (auto& g : gamma) g = 1.0f + 0.25f * uniform(-1, 1);
      for (auto& b : beta) b = 0.25f * uniform(-1, 1);
      auto dg = upload_f32(gamma), db = upload_f32(beta);
      HostTensor out[2] = {HostTensor(dt, S * pitch), HostTensor(dt, S * pitch)};
      int i = 0;
      for (NormRopeKernel which : {NormRopeKernel::kVector, NormRopeKernel::kGeneral}) {
        auto dq = upload(qkv);
        QkView v;
        v.data = dq.get();
        v.row_pitch = pitch;
        v.batch = 1;
        v.tokens_per_batch = S;
        v.pos_offset = pos0;
        v.heads = H;
        v.head_dim = D;
        NormRopeParams p;
        p.norm = nk;
        p.rope = RopeKind::k1D;
        p.gamma = dg.as<float>();
        p.beta = db.as<float>();
        launch_norm_rope(static_cast<cudaStream_t>(stream_->native()), v, dt, p, which);
        stream_->synchronize();
        download(out[i++], dq);
      }
      const double u = std::max(unit_roundoff(dt), kU32);
      for (int64_t m = 0; m < S; ++m)
        for (int64_t e = 0; e < H * D; ++e) {
          const double a = out[0].get(m * pitch + e), b = out[1].get(m * pitch + e);
          ASSERT_TRUE(std::isfinite(a) && std::isfinite(b)) << "row " << m << " element " << e;
          // fp32 sums in another order move a value by ~1e-7 of the row's scale, which can
          // flip its final rounding: one unit of the dtype, plus an fp32 absolute floor.
          ASSERT_LE(std::fabs(a - b), 2 * u * std::fabs(b) + 2e-5 + abs_floor(dt)) << "row " << m << " element " << e;
        }
    }
  }
}

// ---------------------------------------------------------------- attention

void attention_ref(const HostTensor& q, const HostTensor& k, const HostTensor& v, std::vector<double>& o,
                   std::vector<double>& vmax, int64_t B, int64_t S, int H, int D, double scale) {
  o.assign(B * S * H * D, 0.0);
  vmax.assign(B * S * H, 0.0);
  std::vector<double> s(S);
  for (int64_t b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      auto at = [&](int64_t t, int d) { return ((b * S + t) * H + h) * D + d; };
      for (int64_t i = 0; i < S; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(q.get(at(i, d))) * k.get(at(j, d));
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - mx));
        double vm = 0;
        for (int64_t j = 0; j < S; ++j) {
          const double p = s[j] / sum;
          for (int d = 0; d < D; ++d) {
            o[at(i, d)] += p * v.get(at(j, d));
            vm = std::max(vm, std::fabs(static_cast<double>(v.get(at(j, d)))));
          }
        }
        vmax[(b * S + i) * H + h] = vm;
      }
    }
  }
}

void attention_case(CudaKernelsTest& t, const char* path, DType dt, int64_t B, int64_t S, int H, int D);

TEST_F(CudaKernelsTest, AttentionReferenceKernel) {
  for (DType dt : kAllTypes) attention_case(*this, "reference", dt, 2, 300, 3, 64);
  attention_case(*this, "reference", DType::kBF16, 1, 129, 2, 72);
  attention_case(*this, "reference", DType::kFP16, 1, 100, 2, 128);
}

TEST_F(CudaKernelsTest, AttentionCudnn) {
  if (!cuda_cudnn_sdpa_built()) GTEST_SKIP() << "cuDNN SDPA not built (no cudnn-frontend headers at configure time)";
  attention_case(*this, "cudnn", DType::kBF16, 2, 300, 3, 64);
  attention_case(*this, "cudnn", DType::kFP16, 2, 300, 3, 64);
  attention_case(*this, "cudnn", DType::kBF16, 1, 257, 2, 128);
  attention_case(*this, "cudnn", DType::kBF16, 1, 200, 2, 72);
  // fp32: cuDNN refuses it, the reference kernel serves it.
  attention_case(*this, "cudnn", DType::kFP32, 1, 100, 2, 64);
}

// Runs one attention through the kernels made with ULYSSES_ATTENTION=path and checks it.
void attention_case(CudaKernelsTest& t, const char* path, DType dt, int64_t B, int64_t S, int H, int D) {
  SCOPED_TRACE(std::string(path) + " " + dtype_name(dt) + " B" + std::to_string(B) + " S" + std::to_string(S) + " H" +
               std::to_string(H) + " D" + std::to_string(D));
  setenv("ULYSSES_ATTENTION", path, 1);
  auto k = make_cuda_kernels();
  unsetenv("ULYSSES_ATTENTION");
  const size_t n = B * S * H * D;
  HostTensor q(dt, n), kk(dt, n), v(dt, n), o(dt, n);
  t.fill(q, -2, 2);
  t.fill(kk, -2, 2);
  t.fill(v, -1, 1);
  auto dq = t.upload(q), dk = t.upload(kk), dv = t.upload(v), dout = t.upload(o);  // o: 0xFF
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  k->attention(*t.stream_, dq.get(), dk.get(), dv.get(), dout.get(), B, S, H, D, dt, scale);
  t.stream_->synchronize();
  const std::string used = cuda_attention_path(*k);
  std::printf("[ attention %s %s S%lld D%d: %s ]\n", path, dtype_name(dt), static_cast<long long>(S), D, used.c_str());
  const bool cudnn_used = used == "cudnn";
  if (std::string(path) == "cudnn" && dt != DType::kFP32) {
    EXPECT_EQ(used, "cudnn");
  }
  if (std::string(path) == "reference") {
    EXPECT_EQ(used, "reference");
  }
  HostTensor got(dt, n);
  t.download(got, dout);
  std::vector<double> ref, vmax;
  attention_ref(q, kk, v, ref, vmax, B, S, H, D, scale);
  const double u = unit_roundoff(dt);
  // fp32: softmax and sums over S keys; cuDNN also rounds P to the I/O dtype before P*V.
  const double fp32 = 64.0 * kU32 * std::log2(static_cast<double>(S) + 1) * 4;
  for (size_t i = 0; i < n; ++i) {
    const double vm = vmax[i / D];
    const double work = fp32 * vm + (cudnn_used ? 2.0 * u * vm : 0.0);
    const double tol = work + u * (std::fabs(ref[i]) + work) + abs_floor(dt);
    const double g = got.get(i);
    ASSERT_TRUE(std::isfinite(g)) << "element " << i;
    ASSERT_LE(std::fabs(g - ref[i]), tol) << "element " << i << " ref " << ref[i];
  }
}

// ---------------------------------------------------------------- conversion

TEST_F(CudaKernelsTest, ConvertFromF32BitExact) {
  auto k = make_cuda_kernels();
  const int64_t n = 4099;
  std::vector<float> in(n);
  for (auto& x : in) x = std::ldexp(uniform(-1, 1), static_cast<int>(uniform(-30, 30)));
  in[0] = 0.0f;
  in[1] = -0.0f;
  in[2] = INFINITY;
  in[3] = -INFINITY;
  in[4] = 1e30f;     // beyond fp16: inf
  in[5] = 1e-30f;    // below fp16 subnormals: 0
  in[6] = 3.0e-6f;   // fp16 subnormal
  in[7] = 1.00390625f;  // a bf16 tie: rounds to even
  auto din = upload_f32(in);
  for (DType dt : kAllTypes) {
    SCOPED_TRACE(dtype_name(dt));
    HostTensor out(dt, n);
    auto dout = upload(out);
    k->convert_from_f32(*stream_, din.as<float>(), dout.get(), n, dt);
    stream_->synchronize();
    HostTensor got(dt, n), want(dt, n);
    download(got, dout);
    for (int64_t i = 0; i < n; ++i) want.set(i, in[i]);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(0, std::memcmp(&got.bytes[i * dtype_size(dt)], &want.bytes[i * dtype_size(dt)], dtype_size(dt)))
          << "element " << i << " value " << in[i];
    }
  }
}

// ---------------------------------------------------------------- V-major's comparison

// Per row: sum (now - last)^2 and sum last^2, in fp64, against the float64 sums of the
// same stored values on the host (rows wider and narrower than a thread block).
TEST_F(CudaKernelsTest, RowChangeMatchesFloat64Sums) {
  auto k = make_cuda_kernels();
  for (DType dt : kAllTypes) {
    for (int64_t row_elems : {int64_t{3}, int64_t{128}, int64_t{3072}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " row " + std::to_string(row_elems));
      const int64_t rows = 37;
      HostTensor now(dt, static_cast<size_t>(rows * row_elems)), last(dt, static_cast<size_t>(rows * row_elems));
      fill(now, -1, 1);
      fill(last, -1, 1);
      for (int64_t e = 0; e < row_elems; ++e) now.set(static_cast<size_t>(5 * row_elems + e), last.get(5 * row_elems + e));
      auto dn = upload(now), dl = upload(last);
      auto dout = dev_->alloc(static_cast<size_t>(2 * rows) * sizeof(double));
      k->row_change(*stream_, dn.get(), dl.get(), dt, rows, row_elems, dout.as<double>());
      stream_->synchronize();
      std::vector<double> got(static_cast<size_t>(2 * rows));
      dev_->copy_to_host(got.data(), dout.get(), got.size() * sizeof(double));
      for (int64_t r = 0; r < rows; ++r) {
        double d2 = 0, l2 = 0;
        for (int64_t e = r * row_elems; e < (r + 1) * row_elems; ++e) {
          const double a = now.get(static_cast<size_t>(e)), b = last.get(static_cast<size_t>(e));
          d2 += (a - b) * (a - b);
          l2 += b * b;
        }
        EXPECT_NEAR(got[static_cast<size_t>(2 * r)], d2, 1e-12 * (1 + d2)) << "row " << r;
        EXPECT_NEAR(got[static_cast<size_t>(2 * r + 1)], l2, 1e-12 * (1 + l2)) << "row " << r;
      }
      EXPECT_EQ(got[10], 0.0) << "an unchanged row has no change";
    }
  }
}

}  // namespace
}  // namespace uipc
