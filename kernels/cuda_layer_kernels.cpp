// LayerKernels on CUDA streams: dispatches each call to cuBLASLt, cuDNN SDPA or the
// project's kernels (kernels/cuda_kernels.cu), and picks the attention path.
#include <cstdlib>
#include <string>

#include "base/error.hpp"
#include "comm/device/cuda_check.hpp"
#include "kernels/cuda_internal.hpp"
#include "kernels/cuda_kernels.hpp"
#include "kernels/view_reach.hpp"

namespace uipc {
namespace {

// The attention path: "cudnn" (default: fused cuDNN SDPA, falling back to the reference
// kernel for what cuDNN refuses) or "reference" (always the project's own kernel).
constexpr const char* kAttentionEnv = "ULYSSES_ATTENTION";

bool attention_wants_cudnn() {
  const char* v = std::getenv(kAttentionEnv);
  const std::string s = v ? v : "cudnn";
  if (s == "cudnn" || s.empty()) return true;
  if (s == "reference") return false;
  throw InputError(std::string(kAttentionEnv) + " must be 'cudnn' or 'reference', not '" + s + "'");
}

cudaStream_t native(Stream& s) {
  auto st = static_cast<cudaStream_t>(s.native());
  UIPC_CHECK(st != nullptr, "CUDA kernels need a stream of the CUDA device");
  return st;
}

class CudaKernels : public LayerKernels {
 public:
  CudaKernels() : want_cudnn_(attention_wants_cudnn()) {}

  void gemm(Stream& s, const void* in, int64_t lda, const void* w, int64_t ldw, void* out, int64_t ldo, int64_t M,
            int64_t N, int64_t K, DType dtype, DType out_dtype) override {
    check_gemm_reach(in, lda, w, ldw, out, ldo, M, N, K, dtype, out_dtype);
    if (!gemm_) gemm_ = std::make_unique<CublasLtGemm>();
    gemm_->run(native(s), in, lda, w, ldw, out, ldo, M, N, K, dtype, out_dtype);
  }

  void norm_rope(Stream& s, const QkView& x, DType dtype, const NormRopeParams& p) override {
    check_norm_rope_reach(x, dtype, p);
    launch_norm_rope(native(s), x, dtype, p);
  }

  void norm_rope_qk(Stream& s, const QkView& q, const NormRopeParams& pq, const QkView& k, const NormRopeParams& pk,
                    DType dtype) override {
    check_norm_rope_reach(q, dtype, pq);
    check_norm_rope_reach(k, dtype, pk);
    launch_norm_rope_qk(native(s), q, pq, k, pk, dtype);
  }

  void attention(Stream& s, const void* q, const void* k, const void* v, void* o, int64_t batch, int64_t seq,
                 int heads, int head_dim, DType dtype, float scale) override {
    check_attention_reach(q, k, v, o, batch, seq, heads, head_dim, dtype);
    if (want_cudnn_) {
      if (!sdpa_) sdpa_ = std::make_unique<CudnnSdpa>();
      const std::string why = sdpa_->run(native(s), q, k, v, o, batch, seq, heads, head_dim, dtype, scale);
      if (why.empty()) {
        last_path_ = "cudnn";
        return;
      }
      last_path_ = "reference (cudnn: " + why + ")";
    } else {
      last_path_ = "reference";
    }
    launch_attention_reference(native(s), q, k, v, o, batch, seq, heads, head_dim, dtype, scale);
  }

  void convert_from_f32(Stream& s, const float* in, void* out, int64_t n, DType dtype) override {
    check_convert_reach(in, out, n, dtype);
    launch_convert_from_f32(native(s), in, out, n, dtype);
  }

  void row_change(Stream& s, const void* now, const void* last, DType dtype, int64_t rows, int64_t row_elems,
                  double* out) override {
    check_row_change_reach(now, last, dtype, rows, row_elems, out);
    launch_row_change(native(s), now, last, dtype, rows, row_elems, out);
  }

  const std::string& last_path() const { return last_path_; }

 private:
  bool want_cudnn_;
  std::unique_ptr<CublasLtGemm> gemm_;  // made on first use: the device must be current by then
  std::unique_ptr<CudnnSdpa> sdpa_;
  std::string last_path_;
};

}  // namespace

std::unique_ptr<LayerKernels> make_cuda_kernels() { return std::make_unique<CudaKernels>(); }

std::string cuda_attention_path(LayerKernels& k) {
  auto* ck = dynamic_cast<CudaKernels*>(&k);
  return ck ? ck->last_path() : std::string();
}

bool cuda_cudnn_sdpa_built() {
#if defined(ULYSSES_HAVE_CUDNN_FRONTEND)
  return true;
#else
  return false;
#endif
}

}  // namespace uipc
