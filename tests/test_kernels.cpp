// The host LayerKernels (kernels/host_kernels.cpp) against independent float64
// references written straight from docs/math.md, on fresh random inputs each run.
//
// Tolerances are forward error bounds of the fp32 algorithm that docs/math.md fixes,
// evaluated per element from the float64 reference (u = 2^-24, the fp32 unit
// roundoff), plus the one final rounding to the output dtype. They hold for any valid
// fp32 evaluation order of the same formula, and they are orders of magnitude below
// the error of any indexing, scaling, normalisation or double-rounding mistake.
// Outputs are poisoned with NaN bit patterns first, so an element the kernel does not
// write fails; padding that the kernel must not touch is checked bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "comm/device/host_device.hpp"
#include "kernels/kernels.hpp"
#include "kernels/norm_rope_walk.hpp"

using namespace uipc;

namespace {

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff, 2^-24

// Unit roundoff of storing into t (0 for fp32: the fp32 math already accounts for it).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16: return 1.0 / 256.0;   // 8 significant bits
    case DType::kFP16: return 1.0 / 2048.0;  // 11 significant bits
    default: return 0.0;
  }
}
// Absolute rounding error floor of t: half the fp16 subnormal spacing (2^-25); bf16
// and fp32 subnormals are far below anything these tests produce.
double abs_floor(DType t) { return t == DType::kFP16 ? std::ldexp(1.0, -25) : 0.0; }

const DType kAllTypes[] = {DType::kBF16, DType::kFP16, DType::kFP32};

// --- test-only streams ----------------------------------------------------------

// Runs each task at once, on the calling thread.
class ImmediateStream final : public HostStream {
 public:
  void enqueue(std::function<void()> task) override { task(); }
  void synchronize() override {}
  void* native() override { return nullptr; }
};

// Holds tasks until synchronize(), then runs them in order on a fresh thread: shows
// that kernels only enqueue, and that the tasks own what they capture.
class DeferredStream final : public HostStream {
 public:
  void enqueue(std::function<void()> task) override { tasks_.push_back(std::move(task)); }
  void synchronize() override {
    std::thread worker([this] {
      for (auto& t : tasks_) t();
    });
    worker.join();
    tasks_.clear();
  }
  void* native() override { return nullptr; }
  size_t pending() const { return tasks_.size(); }

 private:
  std::vector<std::function<void()>> tasks_;
};

// One worker thread serving an in-order queue, like the host device's streams: lets
// two streams run kernels concurrently.
class WorkerStream final : public HostStream {
 public:
  WorkerStream() : worker_([this] { run(); }) {}
  ~WorkerStream() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void enqueue(std::function<void()> task) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  void synchronize() override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return queue_.empty() && !busy_; });
  }
  void* native() override { return nullptr; }

 private:
  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      auto task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lk.unlock();
      task();
      lk.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;
};

// --- tensors --------------------------------------------------------------------

// A fresh seed per test, printed on failure so that a failing run can be replayed.
struct Rng {
  uint64_t seed;
  std::mt19937_64 gen;
  Rng() : seed((static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()), gen(seed) {}
  float uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  std::string trace() const { return "seed " + std::to_string(seed); }
};

// A host array of n elements of type t.
struct Tensor {
  DType t;
  size_t n;
  std::vector<unsigned char> bytes;
  Tensor(DType t_, size_t n_) : t(t_), n(n_), bytes(n_ * dtype_size(t_)) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double get(size_t i) const { return load_as_float(t, bytes.data(), i); }
  void set(size_t i, float v) { store_from_float(t, bytes.data(), i, v); }
  // Values uniform in [lo, hi), rounded to t (what the kernel sees and the reference uses).
  void fill_random(Rng& r, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) set(i, r.uni(lo, hi));
  }
  // A signalling-style NaN payload that no conversion produces, in every element.
  void poison() {
    for (size_t i = 0; i < n; ++i) {
      if (t == DType::kFP32) {
        const uint32_t nan = 0xffc0dead;
        std::memcpy(bytes.data() + 4 * i, &nan, 4);
      } else {
        const uint16_t nan = t == DType::kBF16 ? 0xffc3 : 0xfe03;
        std::memcpy(bytes.data() + 2 * i, &nan, 2);
      }
    }
  }
  bool same_bits(const Tensor& o, size_t i) const {
    const size_t es = dtype_size(t);
    return std::memcmp(bytes.data() + es * i, o.bytes.data() + es * i, es) == 0;
  }
};

// Collects mismatches and reports the first few, with the count, as one failure.
class Mismatches {
 public:
  void check(bool ok, const std::string& what) {
    if (ok) return;
    if (count_ < 8) msgs_ << "  " << what << "\n";
    ++count_;
  }
  void check_close(double got, double want, double tol, const std::string& where) {
    const bool ok = std::isfinite(got) && std::fabs(got - want) <= tol;
    if (ok) return;
    std::ostringstream m;
    m.precision(10);
    m << where << ": got " << got << " want " << want << " |diff| " << std::fabs(got - want) << " tol " << tol;
    check(false, m.str());
  }
  int64_t count() const { return count_; }
  std::string report() const { return std::to_string(count_) + " mismatches, first:\n" + msgs_.str(); }

 private:
  int64_t count_ = 0;
  std::ostringstream msgs_;
};

std::string dt(DType t) { return dtype_name(t); }

// --- gemm -------------------------------------------------------------------------

struct GemmCase {
  int64_t M, N, K, lda, ldo;
  int64_t ldw = 0;  // 0: N (a whole weight); more: a block of a wider weight's columns
};

void run_gemm_case(LayerKernels& k, Stream& s, Rng& rng, DType dtype, DType out_dtype, const GemmCase& c) {
  SCOPED_TRACE("gemm " + dt(dtype) + "->" + dt(out_dtype) + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
               " K=" + std::to_string(c.K) + " lda=" + std::to_string(c.lda) + " ldo=" + std::to_string(c.ldo) +
               " ldw=" + std::to_string(c.ldw));
  const int64_t ldw = c.ldw > 0 ? c.ldw : c.N;
  Tensor in(dtype, static_cast<size_t>(c.M * c.lda)), w(dtype, static_cast<size_t>(c.K * ldw));
  in.fill_random(rng, -1.0f, 1.0f);  // padding columns too: a kernel reading them is caught
  w.fill_random(rng, -1.0f, 1.0f);
  Tensor out(out_dtype, static_cast<size_t>(c.M * c.ldo));
  out.poison();
  const Tensor before = out;
  k.gemm(s, in.data(), c.lda, w.data(), ldw, out.data(), c.ldo, c.M, c.N, c.K, dtype, out_dtype);
  s.synchronize();

  // Bound: fp32 recursive summation of K products, |fl - exact| <= (K+1) u sum|a b|
  // (first-order gamma_{K+1}; +1 slack for the product roundings), then the store into
  // out_dtype adds at most u_out |value| (+ the fp16 subnormal floor).
  const double uo = unit_roundoff(out_dtype);
  Mismatches mm;
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < c.N; ++n) {
      double ref = 0, sabs = 0;
      for (int64_t kk = 0; kk < c.K; ++kk) {
        const double p = in.get(static_cast<size_t>(m * c.lda + kk)) * w.get(static_cast<size_t>(kk * ldw + n));
        ref += p;
        sabs += std::fabs(p);
      }
      const double d32 = static_cast<double>(c.K + 2) * kU32 * sabs;
      const double tol = d32 + uo * (std::fabs(ref) + d32) + abs_floor(out_dtype);
      mm.check_close(out.get(static_cast<size_t>(m * c.ldo + n)), ref, tol,
                     "out[" + std::to_string(m) + "," + std::to_string(n) + "]");
    }
    for (int64_t n = c.N; n < c.ldo; ++n) {
      mm.check(out.same_bits(before, static_cast<size_t>(m * c.ldo + n)),
               "padding out[" + std::to_string(m) + "," + std::to_string(n) + "] was written");
    }
  }
  EXPECT_EQ(mm.count(), 0) << mm.report();
}

TEST(HostKernels, GemmMatchesFloat64Reference) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  // Odd sizes, strided rows on both sides, M not a multiple of the 8-row block, N over
  // one 512-column pass, degenerate 1x1x1 and K = 0 (a zero output).
  const GemmCase cases[] = {
      {37, 45, 67, 70, 50}, {19, 600, 129, 136, 603}, {1, 1, 1, 1, 1},
      {8, 513, 3, 5, 520},  {64, 96, 300, 301, 97},   {5, 7, 0, 3, 9},
      {33, 40, 50, 50, 41, 120},  // a column block of a weight 120 wide (the split projections)
  };
  const std::pair<DType, DType> types[] = {{DType::kBF16, DType::kBF16},
                                           {DType::kFP16, DType::kFP16},
                                           {DType::kFP32, DType::kFP32},
                                           {DType::kBF16, DType::kFP32},   // the W_o partial: fp32 out
                                           {DType::kFP16, DType::kFP32}};
  for (const auto& t : types)
    for (const auto& c : cases) run_gemm_case(*k, s, rng, t.first, t.second, c);
}

// --- norm + RoPE --------------------------------------------------------------------

struct NormRopeCase {
  int64_t batch, tokens, pos_offset;
  int heads, head_dim;
};

// The float64 reference of docs/math.md sections 2 and 3 for one row (in place on x),
// with the per-element error bound `err` of the kernel's fp32 evaluation before the
// final rounding. The RoPE angle is the one docs/math.md defines (fp32
// float(p) * powf(theta, -2i/D)); its cos and sin are taken in float64.
void reference_row(std::vector<double>& x, std::vector<double>& err, int heads, int hd, int64_t pos,
                   const NormRopeParams& p) {
  const int64_t width = static_cast<int64_t>(heads) * hd;
  const int64_t group = p.norm == NormKind::kRmsAcrossHeads ? width : hd;
  std::fill(err.begin(), err.end(), 0.0);
  if (p.norm != NormKind::kNone) {
    const double n = static_cast<double>(group);
    for (int64_t g0 = 0; g0 < width; g0 += group) {
      if (p.norm == NormKind::kLayerPerHead) {
        double mu = 0, var = 0, maxabs = 0;
        for (int64_t i = 0; i < group; ++i) {
          mu += x[g0 + i];
          maxabs = std::max(maxabs, std::fabs(x[g0 + i]));
        }
        mu /= n;
        for (int64_t i = 0; i < group; ++i) var += (x[g0 + i] - mu) * (x[g0 + i] - mu);
        var /= n;
        const double sd = std::sqrt(var + p.eps);
        for (int64_t i = 0; i < group; ++i) {
          const double xh = (x[g0 + i] - mu) / sd;
          // fp32: the mean is off by <= n u max|x|, (x - mu) by u(|x| + |mu|), the sd
          // relatively by <= (n/2 + 2) u; all in units of 1/sd, times gamma, + u|beta|.
          err[g0 + i] = (2.0 * n + 16.0) * kU32 * (std::fabs(xh) + 1.0 + maxabs / sd) * std::fabs(p.gamma[i]) +
                        2.0 * kU32 * std::fabs(p.beta[i]);
          x[g0 + i] = xh * p.gamma[i] + p.beta[i];
        }
      } else {
        double ms = 0;
        for (int64_t i = 0; i < group; ++i) ms += x[g0 + i] * x[g0 + i];
        ms /= n;
        const double denom = std::sqrt(ms + p.eps);
        for (int64_t i = 0; i < group; ++i) {
          // fp32: the sum of n squares is relatively off by <= n u (all terms positive),
          // the sqrt halves that; + the mean, eps add, sqrt, divide, gamma roundings.
          x[g0 + i] = x[g0 + i] / denom * p.gamma[i];
          err[g0 + i] = (n + 8.0) * kU32 * std::fabs(x[g0 + i]);
        }
      }
    }
  }
  if (p.rope == RopeKind::k1D) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < hd / 2; ++i) {
        const float theta = powf(p.rope_theta, static_cast<float>(-2 * i) / static_cast<float>(hd));
        const double a = static_cast<double>(static_cast<float>(pos) * theta);
        const size_t e0 = static_cast<size_t>(h * hd + 2 * i), e1 = e0 + 1;
        const double x0 = x[e0], x1 = x[e1];
        x[e0] = x0 * std::cos(a) - x1 * std::sin(a);
        x[e1] = x0 * std::sin(a) + x1 * std::cos(a);
        // Both inputs' errors, cosf/sinf (<= 1 ulp each) and two products and a sum.
        const double e = err[e0] + err[e1] + 6.0 * kU32 * (std::fabs(x0) + std::fabs(x1));
        err[e0] = e;
        err[e1] = e;
      }
    }
  }
}

struct NormWeights {
  std::vector<float> gamma, beta;
};

NormWeights make_weights(Rng& rng, NormKind norm, int heads, int hd) {
  NormWeights w;
  const size_t ng = norm == NormKind::kRmsAcrossHeads ? static_cast<size_t>(heads) * hd : static_cast<size_t>(hd);
  for (size_t i = 0; i < ng; ++i) w.gamma.push_back(1.0f + 0.25f * rng.uni(-1.0f, 1.0f));
  for (int i = 0; i < hd; ++i) w.beta.push_back(0.25f * rng.uni(-1.0f, 1.0f));
  return w;
}

// Runs norm_rope on the K slot of a fused (rows, 3, heads, head_dim) buffer and checks
// the slot against the reference and the Q and V slots for being untouched.
void run_norm_rope_case(LayerKernels& k, Stream& s, Rng& rng, DType dtype, NormKind norm, RopeKind rope,
                        const NormRopeCase& c, float eps) {
  SCOPED_TRACE("norm_rope " + dt(dtype) + " norm=" + std::to_string(static_cast<int>(norm)) +
               " rope=" + std::to_string(static_cast<int>(rope)) + " B=" + std::to_string(c.batch) +
               " T=" + std::to_string(c.tokens) + " pos0=" + std::to_string(c.pos_offset) + " H=" +
               std::to_string(c.heads) + " D=" + std::to_string(c.head_dim) + " eps=" + std::to_string(eps));
  const int64_t width = static_cast<int64_t>(c.heads) * c.head_dim, pitch = 3 * width, rows = c.batch * c.tokens;
  Tensor buf(dtype, static_cast<size_t>(rows * pitch));
  // Offset by 0.3 so that LayerNorm's mean matters.
  buf.fill_random(rng, -0.7f, 1.3f);
  const Tensor before = buf;
  NormWeights wts = make_weights(rng, norm, c.heads, c.head_dim);
  NormRopeParams p;
  p.norm = norm;
  p.rope = rope;
  p.eps = eps;
  p.rope_theta = 10000.0f;
  p.gamma = wts.gamma.data();
  p.beta = wts.beta.data();
  QkView v;
  v.data = static_cast<unsigned char*>(buf.data()) + width * dtype_size(dtype);  // the K slot
  v.row_pitch = pitch;
  v.batch = c.batch;
  v.tokens_per_batch = c.tokens;
  v.pos_offset = c.pos_offset;
  v.heads = c.heads;
  v.head_dim = c.head_dim;
  k.norm_rope(s, v, dtype, p);
  s.synchronize();

  const double uo = unit_roundoff(dtype);
  Mismatches mm;
  std::vector<double> x(static_cast<size_t>(width)), err(static_cast<size_t>(width));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t e = 0; e < width; ++e) x[static_cast<size_t>(e)] = before.get(static_cast<size_t>(m * pitch + width + e));
    reference_row(x, err, c.heads, c.head_dim, c.pos_offset + m % c.tokens, p);
    for (int64_t e = 0; e < width; ++e) {
      const double d = err[static_cast<size_t>(e)], want = x[static_cast<size_t>(e)];
      const double tol = d + uo * (std::fabs(want) + d) + abs_floor(dtype);
      mm.check_close(buf.get(static_cast<size_t>(m * pitch + width + e)), want, tol,
                     "row " + std::to_string(m) + " col " + std::to_string(e));
    }
    for (int64_t e = 0; e < pitch; ++e) {
      if (e >= width && e < 2 * width) continue;
      mm.check(buf.same_bits(before, static_cast<size_t>(m * pitch + e)),
               "row " + std::to_string(m) + " col " + std::to_string(e) + " outside the view changed");
    }
  }
  EXPECT_EQ(mm.count(), 0) << mm.report();
}

TEST(HostKernels, NormRopeMatchesFloat64Reference) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  const NormKind norms[] = {NormKind::kNone, NormKind::kRmsPerHead, NormKind::kRmsAcrossHeads,
                            NormKind::kLayerPerHead};
  // Two batches of a 9-token shard starting at a nonzero global position (large
  // angles); a D = 72 case with one token per batch; D = 2, the smallest RoPE.
  const NormRopeCase cases[] = {
      {2, 9, rng.pick(1, 4000), 3, 16},
      {3, 1, rng.pick(1, 4000), 2, 72},
      {1, 5, rng.pick(1, 100), 4, 2},
  };
  for (DType dtype : kAllTypes)
    for (NormKind norm : norms)
      for (RopeKind rope : {RopeKind::kNone, RopeKind::k1D})
        for (const auto& c : cases) run_norm_rope_case(*k, s, rng, dtype, norm, rope, c, 1e-6f);
}

// A head slice written to its final-layout target (a rank's own slice of the scatter):
// the moved heads land in the target bit-identical to what the in-place call leaves, the
// other heads are as in place, and the moved heads' source is left as it was.
TEST(HostKernels, NormRopeHeadSliceGoesToItsTarget) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  const int64_t B = 2, T = 5, seq = 3 * T, t0 = T;  // the slice's tokens start at T of 3T
  const int heads = 4, hd = 8, hb = 1, hn = 2;
  const int64_t width = heads * hd, pitch = 3 * width, rows = B * T;
  for (DType dtype : kAllTypes) {
    for (NormKind norm : {NormKind::kNone, NormKind::kRmsPerHead, NormKind::kRmsAcrossHeads, NormKind::kLayerPerHead}) {
      SCOPED_TRACE(dt(dtype) + " norm " + std::to_string(static_cast<int>(norm)));
      Tensor in_place(dtype, static_cast<size_t>(rows * pitch));
      in_place.fill_random(rng, -0.7f, 1.3f);
      const Tensor before = in_place;
      Tensor moved = in_place;
      Tensor target(dtype, static_cast<size_t>(B * seq * hn * hd));
      target.poison();
      const Tensor target_before = target;
      NormWeights wts = make_weights(rng, norm, heads, hd);
      NormRopeParams p;
      p.norm = norm;
      p.rope = RopeKind::k1D;
      p.gamma = wts.gamma.data();
      p.beta = wts.beta.data();
      QkView v{in_place.data(), pitch, B, T, 40, heads, hd, {}};
      k->norm_rope(s, v, dtype, p);
      v.data = moved.data();
      v.out = HeadSliceOut{static_cast<unsigned char*>(target.data()) + t0 * hn * hd * dtype_size(dtype), hb, hn,
                           hn * hd, seq * hn * hd};
      k->norm_rope(s, v, dtype, p);
      s.synchronize();
      for (int64_t m = 0; m < rows; ++m) {
        const int64_t b = m / T, t = m % T;
        for (int h = 0; h < heads; ++h) {
          for (int d = 0; d < hd; ++d) {
            const size_t src = static_cast<size_t>(m * pitch + h * hd + d);
            if (h >= hb && h < hb + hn) {
              const size_t dst = static_cast<size_t>(((b * seq + t0 + t) * hn + (h - hb)) * hd + d);
              ASSERT_EQ(target.get(dst), in_place.get(src)) << "m " << m << " h " << h << " d " << d;
              ASSERT_TRUE(moved.same_bits(before, src)) << "moved head's source written at m " << m << " h " << h;
            } else {
              ASSERT_TRUE(moved.same_bits(in_place, src)) << "m " << m << " h " << h << " d " << d;
            }
          }
        }
      }
      // Nothing of the target outside the slice's tokens was written.
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < seq; ++t)
          if (t < t0 || t >= t0 + T)
            for (int64_t e = 0; e < hn * hd; ++e) {
              const size_t i = static_cast<size_t>((b * seq + t) * hn * hd + e);
              ASSERT_TRUE(target.same_bits(target_before, i)) << "target token " << t << " written";
            }
    }
  }
}

// eps at 1e-6 hardly moves the result; a large eps shows that it is added where
// docs/math.md says (inside the square root, to the mean square / variance).
TEST(HostKernels, NormRopeUsesEps) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  for (NormKind norm : {NormKind::kRmsPerHead, NormKind::kRmsAcrossHeads, NormKind::kLayerPerHead})
    run_norm_rope_case(*k, s, rng, DType::kFP32, norm, RopeKind::k1D, {2, 4, 7, 2, 8}, 0.25f);
}

// RoPE at position 0 rotates by 0: bit-identical output, in every dtype.
TEST(HostKernels, RopeAtPositionZeroIsIdentity) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(dt(dtype));
    const int heads = 3, hd = 8;
    Tensor buf(dtype, static_cast<size_t>(4 * heads * hd));  // 4 batches of one token
    buf.fill_random(rng, -1.0f, 1.0f);
    const Tensor before = buf;
    QkView v{buf.data(), heads * hd, 4, 1, 0, heads, hd, {}};
    NormRopeParams p;
    p.rope = RopeKind::k1D;
    k->norm_rope(s, v, dtype, p);
    s.synchronize();
    for (size_t i = 0; i < buf.n; ++i) ASSERT_TRUE(buf.same_bits(before, i)) << "element " << i;
    // ... and at position 1 it is not the identity (the rotation is applied at all).
    v.pos_offset = 1;
    k->norm_rope(s, v, dtype, p);
    s.synchronize();
    size_t changed = 0;
    for (size_t i = 0; i < buf.n; ++i) changed += buf.same_bits(before, i) ? 0 : 1;
    EXPECT_GT(changed, buf.n / 2);
  }
}

// The norms normalise: with constant gamma (and beta) the output of each group has
// rms gamma (RMS), or mean beta and standard deviation gamma (LayerNorm), whatever the
// scale of the input; heads get different scales so that the group is visible.
TEST(HostKernels, NormsNormalise) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  const int heads = 4, hd = 32, width = heads * hd, rows = 6;
  const float g = 1.75f, b = 0.375f;
  for (NormKind norm : {NormKind::kRmsPerHead, NormKind::kRmsAcrossHeads, NormKind::kLayerPerHead}) {
    SCOPED_TRACE("norm " + std::to_string(static_cast<int>(norm)));
    Tensor buf(DType::kFP32, static_cast<size_t>(rows * width));
    for (int m = 0; m < rows; ++m)
      for (int e = 0; e < width; ++e)
        buf.set(static_cast<size_t>(m * width + e), static_cast<float>(1 + e / hd) * 3.0f * rng.uni(-0.5f, 1.0f));
    std::vector<float> gamma(static_cast<size_t>(width), g), beta(static_cast<size_t>(hd), b);
    NormRopeParams p;
    p.norm = norm;
    p.eps = 1e-12f;  // negligible: the statistics below are exact up to fp32 rounding
    p.gamma = gamma.data();
    p.beta = beta.data();
    QkView v{buf.data(), width, 2, rows / 2, 0, heads, hd, {}};
    k->norm_rope(s, v, DType::kFP32, p);
    s.synchronize();
    // fp32 statistics of <= 128 values: relative error well below 1e-5.
    const double tol = 1e-5;
    for (int m = 0; m < rows; ++m) {
      const int group = norm == NormKind::kRmsAcrossHeads ? width : hd;
      for (int g0 = 0; g0 < width; g0 += group) {
        double sum = 0, sq = 0;
        for (int i = 0; i < group; ++i) {
          const double y = buf.get(static_cast<size_t>(m * width + g0 + i));
          sum += y;
          sq += y * y;
        }
        if (norm == NormKind::kLayerPerHead) {
          const double mean = sum / group, sd = std::sqrt(sq / group - mean * mean);
          EXPECT_NEAR(mean, b, tol) << "row " << m << " group " << g0;
          EXPECT_NEAR(sd, g, tol * g) << "row " << m << " group " << g0;
        } else {
          EXPECT_NEAR(std::sqrt(sq / group), g, tol * g) << "row " << m << " group " << g0;
        }
      }
      if (norm == NormKind::kRmsAcrossHeads) {
        // Normalised across heads, single heads keep their different scales.
        double sq0 = 0, sq3 = 0;
        for (int i = 0; i < hd; ++i) {
          sq0 += std::pow(buf.get(static_cast<size_t>(m * width + i)), 2);
          sq3 += std::pow(buf.get(static_cast<size_t>(m * width + 3 * hd + i)), 2);
        }
        EXPECT_GT(sq3, 4.0 * sq0) << "row " << m;
      }
    }
  }
}

// --- attention ----------------------------------------------------------------------

struct AttnCase {
  int64_t batch, seq;
  int heads, head_dim;
  float amp;    // inputs uniform in [-amp, amp)
  float scale;  // 0: 1/sqrt(D), as the layer uses
};

void run_attention_case(LayerKernels& k, Stream& s, Rng& rng, DType dtype, const AttnCase& c) {
  const float scale = c.scale != 0.0f ? c.scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  SCOPED_TRACE("attention " + dt(dtype) + " B=" + std::to_string(c.batch) + " S=" + std::to_string(c.seq) +
               " H=" + std::to_string(c.heads) + " D=" + std::to_string(c.head_dim) + " scale=" + std::to_string(scale));
  const int64_t B = c.batch, S = c.seq, H = c.heads, D = c.head_dim;
  const size_t n = static_cast<size_t>(B * S * H * D);
  Tensor q(dtype, n), kk(dtype, n), v(dtype, n), o(dtype, n);
  q.fill_random(rng, -c.amp, c.amp);
  kk.fill_random(rng, -c.amp, c.amp);
  v.fill_random(rng, -1.0f, 1.0f);
  o.poison();
  k.attention(s, q.data(), kk.data(), v.data(), o.data(), B, S, c.heads, c.head_dim, dtype, scale);
  s.synchronize();

  const double uo = unit_roundoff(dtype);
  auto at = [&](int64_t b, int64_t t, int64_t h, int64_t d) { return static_cast<size_t>(((b * S + t) * H + h) * D + d); };
  Mismatches mm;
  std::vector<double> sc(static_cast<size_t>(S)), eta(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        double mx = -INFINITY, dmax = 0;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0, dabs = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double pr = q.get(at(b, i, h, d)) * kk.get(at(b, j, h, d));
            dot += pr;
            dabs += std::fabs(pr);
          }
          sc[static_cast<size_t>(j)] = dot * scale;
          // fp32 score error: D-term sum (+ the scale product), as for gemm.
          eta[static_cast<size_t>(j)] = static_cast<double>(D + 2) * kU32 * dabs * scale;
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        double l = 0;
        for (int64_t j = 0; j < S; ++j) {
          const size_t js = static_cast<size_t>(j);
          // Relative error of fp32 exp(s_j - max): both scores' errors, the subtraction,
          // expf (<= 1 ulp) -- bounded with the worst row maximum error.
          eta[js] += kU32 * std::fabs(sc[js] - mx) + 2.0 * kU32;
          dmax = std::max(dmax, eta[js]);
          sc[js] = std::exp(sc[js] - mx);
          l += sc[js];
        }
        for (int64_t d = 0; d < D; ++d) {
          double num = 0, absnum = 0;
          for (int64_t j = 0; j < S; ++j) {
            num += sc[static_cast<size_t>(j)] * v.get(at(b, j, h, d));
            absnum += sc[static_cast<size_t>(j)] * std::fabs(v.get(at(b, j, h, d)));
          }
          const double want = num / l;
          // p_j relatively off by <= 2 max(eta) (own + the max score's), the S-term sums
          // of l and of p v by <= S u each, + the product and division roundings.
          const double err = (2.0 * dmax + (2.0 * static_cast<double>(S) + 8.0) * kU32) * (absnum / l);
          const double tol = err + uo * (std::fabs(want) + err) + abs_floor(dtype);
          mm.check_close(o.get(at(b, i, h, d)), want, tol,
                         "o[" + std::to_string(b) + "," + std::to_string(i) + "," + std::to_string(h) + "," +
                             std::to_string(d) + "]");
        }
      }
    }
  }
  EXPECT_EQ(mm.count(), 0) << mm.report();
}

TEST(HostKernels, AttentionMatchesFloat64Softmax) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  const AttnCase cases[] = {
      {1, 17, 2, 8, 2.0f, 0.0f},   {2, 33, 3, 72, 2.0f, 0.0f},  {1, 100, 1, 64, 2.0f, 0.0f},
      {2, 7, 4, 16, 2.0f, 0.0f},   {1, 129, 2, 128, 1.0f, 0.0f}, {1, 1, 1, 4, 1.0f, 0.0f},
      // Logits up to ~500: expf overflows unless the row maximum is subtracted first.
      {1, 24, 2, 16, 2.0f, 8.0f},
  };
  for (DType dtype : kAllTypes)
    for (const auto& c : cases) run_attention_case(*k, s, rng, dtype, c);
}

// --- convert_from_f32 ------------------------------------------------------------------

TEST(HostKernels, ConvertFromF32IsBitExact) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream s;
  const int64_t n = 10007;
  std::vector<float> in;
  // Specials, fp16 overflow / subnormals, bf16 and fp16 halfway cases, then random
  // values over 40 binades.
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 70000.0f, 65519.0f, 65520.0f,
                            std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), 1e-30f,
                            1.0f + std::ldexp(1.0f, -8), 1.0f + std::ldexp(3.0f, -8), 1.0f + std::ldexp(1.0f, -11),
                            1.0f + std::ldexp(3.0f, -11)};
  for (float f : specials) in.push_back(f);
  while (static_cast<int64_t>(in.size()) < n)
    in.push_back(rng.uni(-1.0f, 1.0f) * std::ldexp(1.0f, static_cast<int>(rng.pick(-25, 15))));
  for (DType dtype : kAllTypes) {
    SCOPED_TRACE(dt(dtype));
    Tensor out(dtype, static_cast<size_t>(n + 5));  // 5 guard elements after the end
    out.poison();
    const Tensor before = out;
    k->convert_from_f32(s, in.data(), out.data(), n, dtype);
    s.synchronize();
    Mismatches mm;
    for (int64_t i = 0; i < n; ++i) {
      const float got = load_as_float(dtype, out.data(), static_cast<size_t>(i));
      const float want = round_to(dtype, in[static_cast<size_t>(i)]);
      uint32_t gb, wb;
      std::memcpy(&gb, &got, 4);
      std::memcpy(&wb, &want, 4);
      mm.check(gb == wb, "element " + std::to_string(i) + " of " + std::to_string(in[static_cast<size_t>(i)]));
    }
    for (int64_t i = n; i < n + 5; ++i) mm.check(out.same_bits(before, static_cast<size_t>(i)), "wrote past n");
    EXPECT_EQ(mm.count(), 0) << mm.report();
  }
}

// --- stream behaviour -------------------------------------------------------------------

// Kernels only enqueue: nothing happens before the stream runs, and the work is done
// from the arguments as they were at the call (captured by value), on another thread.
TEST(HostKernels, KernelsOnlyEnqueueAndCaptureByValue) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  DeferredStream ds;
  ImmediateStream is;
  const int heads = 2, hd = 16, rows = 5, width = heads * hd;
  Tensor a(DType::kBF16, static_cast<size_t>(rows * width));
  a.fill_random(rng, -1.0f, 1.0f);
  Tensor expect = a;
  std::vector<float> gamma(static_cast<size_t>(hd));
  for (auto& gm : gamma) gm = 1.0f + 0.25f * rng.uni(-1.0f, 1.0f);
  {
    NormRopeParams p;
    p.norm = NormKind::kRmsPerHead;
    p.rope = RopeKind::k1D;
    p.gamma = gamma.data();
    QkView v{expect.data(), width, 1, rows, 11, heads, hd, {}};
    k->norm_rope(is, v, DType::kBF16, p);
  }
  const Tensor before = a;
  {
    auto p = std::make_unique<NormRopeParams>();
    p->norm = NormKind::kRmsPerHead;
    p->rope = RopeKind::k1D;
    p->gamma = gamma.data();
    auto v = std::make_unique<QkView>(QkView{a.data(), width, 1, rows, 11, heads, hd, {}});
    k->norm_rope(ds, *v, DType::kBF16, *p);
    // Clobber and free the argument structs: a task holding references would now see
    // an empty view (or freed memory under ASan).
    *v = QkView{};
    *p = NormRopeParams{};
    v.reset();
    p.reset();
  }
  EXPECT_EQ(ds.pending(), 1u);
  for (size_t i = 0; i < a.n; ++i) ASSERT_TRUE(a.same_bits(before, i)) << "ran before the stream did";
  ds.synchronize();
  for (size_t i = 0; i < a.n; ++i) ASSERT_TRUE(a.same_bits(expect, i)) << "element " << i;
}

// Two streams with their own worker threads run kernels at the same time; results are
// bit-identical to running them one after the other (no shared scratch between tasks).
TEST(HostKernels, ConcurrentStreamsGiveIdenticalResults) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  ImmediateStream is;
  const int64_t M = 96, N = 80, K = 64, B = 1, S = 48, D = 32;
  const int H = 2;
  Tensor in(DType::kBF16, static_cast<size_t>(M * K)), w(DType::kBF16, static_cast<size_t>(K * N));
  in.fill_random(rng, -1.0f, 1.0f);
  w.fill_random(rng, -1.0f, 1.0f);
  const size_t na = static_cast<size_t>(B * S * H * D);
  Tensor q(DType::kBF16, na), kk(DType::kBF16, na), v(DType::kBF16, na);
  q.fill_random(rng, -2.0f, 2.0f);
  kk.fill_random(rng, -2.0f, 2.0f);
  v.fill_random(rng, -1.0f, 1.0f);
  Tensor g_ref(DType::kFP32, static_cast<size_t>(M * N)), a_ref(DType::kBF16, na);
  k->gemm(is, in.data(), K, w.data(), N, g_ref.data(), N, M, N, K, DType::kBF16, DType::kFP32);
  k->attention(is, q.data(), kk.data(), v.data(), a_ref.data(), B, S, H, D, DType::kBF16, 0.17f);

  const int reps = 4;
  std::vector<Tensor> g_out(reps, Tensor(DType::kFP32, static_cast<size_t>(M * N)));
  std::vector<Tensor> a_out(reps, Tensor(DType::kBF16, na));
  {
    WorkerStream s1, s2;
    for (int r = 0; r < reps; ++r) {
      g_out[static_cast<size_t>(r)].poison();
      a_out[static_cast<size_t>(r)].poison();
      k->gemm(s1, in.data(), K, w.data(), N, g_out[static_cast<size_t>(r)].data(), N, M, N, K, DType::kBF16,
              DType::kFP32);
      k->attention(s2, q.data(), kk.data(), v.data(), a_out[static_cast<size_t>(r)].data(), B, S, H, D,
                   DType::kBF16, 0.17f);
    }
    s1.synchronize();
    s2.synchronize();
  }
  for (int r = 0; r < reps; ++r) {
    EXPECT_EQ(g_out[static_cast<size_t>(r)].bytes, g_ref.bytes) << "gemm rep " << r;
    EXPECT_EQ(a_out[static_cast<size_t>(r)].bytes, a_ref.bytes) << "attention rep " << r;
  }
}

// The kernels on a stream of the real host device (comm/host_device.*): host_stream()
// accepts it and the results equal those of the test streams bit for bit.
TEST(HostKernels, RunOnHostDeviceStream) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  auto k = make_host_kernels();
  auto dev = make_host_device(0);
  auto ds = dev->create_stream(StreamPriority::kNormal);
  ImmediateStream is;
  const int64_t M = 21, N = 19, K = 33;
  Tensor in(DType::kFP16, static_cast<size_t>(M * K)), w(DType::kFP16, static_cast<size_t>(K * N));
  in.fill_random(rng, -1.0f, 1.0f);
  w.fill_random(rng, -1.0f, 1.0f);
  Tensor want(DType::kFP16, static_cast<size_t>(M * N)), got(DType::kFP16, static_cast<size_t>(M * N));
  got.poison();
  k->gemm(is, in.data(), K, w.data(), N, want.data(), N, M, N, K, DType::kFP16, DType::kFP16);
  k->gemm(*ds, in.data(), K, w.data(), N, got.data(), N, M, N, K, DType::kFP16, DType::kFP16);
  ds->synchronize();
  EXPECT_EQ(got.bytes, want.bytes);
}

// --- argument checks ----------------------------------------------------------------------

TEST(HostKernels, RejectsInvalidArguments) {
  auto k = make_host_kernels();
  ImmediateStream s;
  std::vector<float> buf(64, 0.0f);
  // Leading dimensions shorter than the rows.
  EXPECT_THROW(k->gemm(s, buf.data(), 3, buf.data(), 4, buf.data(), 4, 2, 4, 4, DType::kFP32, DType::kFP32), Error);
  EXPECT_THROW(k->gemm(s, buf.data(), 4, buf.data(), 4, buf.data(), 3, 2, 4, 4, DType::kFP32, DType::kFP32), Error);
  // RoPE needs an even head_dim; a norm needs its weights; a view needs its pitch.
  NormRopeParams p;
  p.rope = RopeKind::k1D;
  EXPECT_THROW(k->norm_rope(s, QkView{buf.data(), 6, 1, 2, 0, 2, 3, {}}, DType::kFP32, p), Error);
  p.rope = RopeKind::kNone;
  p.norm = NormKind::kRmsPerHead;
  EXPECT_THROW(k->norm_rope(s, QkView{buf.data(), 8, 1, 2, 0, 2, 4, {}}, DType::kFP32, p), Error);
  std::vector<float> gamma(4, 1.0f);
  p.gamma = gamma.data();
  p.norm = NormKind::kLayerPerHead;
  EXPECT_THROW(k->norm_rope(s, QkView{buf.data(), 8, 1, 2, 0, 2, 4, {}}, DType::kFP32, p), Error);
  p.norm = NormKind::kRmsPerHead;
  EXPECT_THROW(k->norm_rope(s, QkView{buf.data(), 7, 1, 2, 0, 2, 4, {}}, DType::kFP32, p), Error);
  EXPECT_THROW(k->convert_from_f32(s, buf.data(), buf.data(), -1, DType::kBF16), Error);
}

// --- reach of views ------------------------------------------------------------------------

// Each kernel checks its input and output views against the device buffers they point
// into before anything is enqueued: a view one row (or element) too long is an error
// naming the kernel, the operand and the sizes, and the kernel never runs.
TEST(HostKernels, AViewPastItsBufferIsANamedErrorBeforeTheKernelRuns) {
  auto k = make_host_kernels();
  auto dev = make_host_device(0);
  auto s = dev->create_stream(StreamPriority::kNormal);
  auto expect_reach_error = [&](const std::function<void()>& call, const std::string& want) {
    try {
      call();
      ADD_FAILURE() << "no error; wanted: " << want;
    } catch (const RuntimeError& e) {
      EXPECT_EQ(e.exit_code(), kExitRuntime);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  const int64_t M = 8, N = 16, K = 32;
  DeviceBuffer in = dev->alloc(M * K * 2), w = dev->alloc(K * N * 2), out = dev->alloc(M * N * 2);
  DeviceBuffer out_short = dev->alloc(M * N * 2 - 2);
  EXPECT_NO_THROW(k->gemm(*s, in.get(), K, w.get(), N, out.get(), N, M, N, K, DType::kBF16, DType::kBF16));
  expect_reach_error([&] { k->gemm(*s, in.get(), K, w.get(), N, out_short.get(), N, M, N, K, DType::kBF16, DType::kBF16); },
                     "gemm: the output view (M x N, ldo) reaches 256 bytes from offset 0 of a buffer of 254 bytes");
  expect_reach_error([&] { k->gemm(*s, in.get(), K, w.get(), N, out.get(), N, M + 1, N, K, DType::kBF16, DType::kBF16); },
                     "gemm: the input view (M x K, lda)");
  expect_reach_error([&] { k->gemm(*s, in.get(), K, w.get(), N + 1, out.get(), N, M, N, K, DType::kBF16, DType::kBF16); },
                     "gemm: the weight view (K x N, ldw)");
  // An fp32 output where the buffer holds bf16.
  expect_reach_error([&] { k->gemm(*s, in.get(), K, w.get(), N, out.get(), N, M, N, K, DType::kBF16, DType::kFP32); },
                     "gemm: the output view (M x N, ldo) reaches 512 bytes");

  // norm_rope: 2 heads of 4 over 3 tokens, pitch 8 (fp32) = 96 bytes; the head slice
  // target and gamma are checked too.
  DeviceBuffer x = dev->alloc(3 * 8 * 4), gamma = dev->alloc(4 * 4), target = dev->alloc(3 * 4 * 4);
  NormRopeParams p;
  p.norm = NormKind::kRmsPerHead;
  p.gamma = gamma.as<float>();
  EXPECT_NO_THROW(k->norm_rope(*s, QkView{x.get(), 8, 1, 3, 0, 2, 4, {}}, DType::kFP32, p));
  expect_reach_error([&] { k->norm_rope(*s, QkView{x.get(), 9, 1, 3, 0, 2, 4, {}}, DType::kFP32, p); },
                     "norm_rope: the view (tokens x heads*head_dim, row_pitch) reaches 104 bytes");
  HeadSliceOut slice{target.get(), 1, 1, 5, 15};
  expect_reach_error([&] { k->norm_rope(*s, QkView{x.get(), 8, 1, 3, 0, 2, 4, slice}, DType::kFP32, p); },
                     "norm_rope: the output head slice (batch x tokens x heads*head_dim) reaches 56 bytes");
  slice.row_pitch = 4;
  EXPECT_NO_THROW(k->norm_rope(*s, QkView{x.get(), 8, 1, 3, 0, 2, 4, slice}, DType::kFP32, p));
  p.norm = NormKind::kRmsAcrossHeads;  // gamma of heads*head_dim = 8 floats
  expect_reach_error([&] { k->norm_rope(*s, QkView{x.get(), 8, 1, 3, 0, 2, 4, {}}, DType::kFP32, p); },
                     "norm_rope: the gamma reaches 32 bytes from offset 0 of a buffer of 16 bytes");

  // attention: B x S x H x D = 1 x 4 x 2 x 8 fp16 = 128 bytes each.
  DeviceBuffer q = dev->alloc(128), kk = dev->alloc(128), v = dev->alloc(128), o = dev->alloc(127);
  expect_reach_error([&] { k->attention(*s, q.get(), kk.get(), v.get(), o.get(), 1, 4, 2, 8, DType::kFP16, 1.0f); },
                     "attention: the output (B x S x H x D) reaches 128 bytes from offset 0 of a buffer of 127 bytes");
  expect_reach_error([&] { k->attention(*s, q.get(), kk.get(), v.get(), o.get(), 1, 5, 2, 8, DType::kFP16, 1.0f); },
                     "attention: the Q (B x S x H x D) reaches 160 bytes");

  DeviceBuffer f32 = dev->alloc(10 * 4), half = dev->alloc(10 * 2), sums = dev->alloc(2 * 5 * 8);
  EXPECT_NO_THROW(k->convert_from_f32(*s, f32.as<float>(), half.get(), 10, DType::kBF16));
  expect_reach_error([&] { k->convert_from_f32(*s, f32.as<float>(), half.get(), 11, DType::kBF16); },
                     "convert_from_f32: the fp32 input reaches 44 bytes");
  expect_reach_error([&] { k->row_change(*s, half.get(), half.get(), DType::kBF16, 6, 2, sums.as<double>()); },
                     "row_change: the current rows reaches 24 bytes");
  expect_reach_error([&] { k->row_change(*s, f32.get(), f32.get(), DType::kBF16, 6, 2, sums.as<double>()); },
                     "row_change: the output (2 doubles per row) reaches 96 bytes");
  EXPECT_NO_THROW(s->synchronize());
}

}  // namespace

// 16-bit LayerNorm's walk by the GPU's peak memory bandwidth per SM (kernels/norm_rope_walk.hpp):
// the two GPUs measured fall on either side of the threshold, and unknown figures keep the
// staged walk.
TEST(NormRopeWalk, StagedWalkByMemoryBandwidthPerSm) {
  // The public memory clocks and bus widths of the two GPUs measured.
  const double h200 = peak_memory_gbs(3201000, 6144), h100 = peak_memory_gbs(2619000, 5120);
  EXPECT_NEAR(h200, 4916.7, 0.1);
  EXPECT_NEAR(h100, 3352.3, 0.1);
  EXPECT_TRUE(staged_walk_pays(h200, 132));   // H200 SXM: 37.3 GB/s an SM (staged measured ahead)
  EXPECT_FALSE(staged_walk_pays(h100, 132));  // H100 SXM: 25.4 GB/s an SM (pipelined measured ahead)
  EXPECT_FALSE(staged_walk_pays(kStagedWalkMinGbsPerSm * 100, 100));
  EXPECT_TRUE(staged_walk_pays(kStagedWalkMinGbsPerSm * 100 + 1, 100));
  EXPECT_TRUE(staged_walk_pays(0, 132));
  EXPECT_TRUE(staged_walk_pays(4800, 0));
}
