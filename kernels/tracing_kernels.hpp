// The recording decorator of the layer kernels (kernels/kernels.hpp): each GEMM,
// norm + RoPE, attention and conversion becomes a trace record of the tracing device
// (flops, bytes read and written, shape), then runs on the wrapped kernels; with the
// device's data work elided (--mode model) it is recorded only.
#pragma once

#include <memory>

#include "comm/device/tracing_device.hpp"
#include "kernels/kernels.hpp"

namespace uipc {

class TracingKernels final : public LayerKernels {
 public:
  TracingKernels(std::unique_ptr<LayerKernels> inner, TracingDevice& dev) : inner_(std::move(inner)), dev_(dev) {}
  LayerKernels& inner() { return *inner_; }

  void gemm(Stream& s, const void* in, int64_t lda, const void* w, int64_t ldw, void* out, int64_t ldo, int64_t M,
            int64_t N, int64_t K, DType dtype, DType out_dtype) override;
  void norm_rope(Stream& s, const QkView& x, DType dtype, const NormRopeParams& p) override;
  // One record for both: one launch on a GPU (its rows are Q's and K's).
  void norm_rope_qk(Stream& s, const QkView& q, const NormRopeParams& pq, const QkView& k, const NormRopeParams& pk,
                    DType dtype) override;
  void attention(Stream& s, const void* q, const void* k, const void* v, void* o, int64_t batch, int64_t seq,
                 int heads, int head_dim, DType dtype, float scale) override;
  void convert_from_f32(Stream& s, const float* in, void* out, int64_t n, DType dtype) override;
  void row_change(Stream& s, const void* now, const void* last, DType dtype, int64_t rows, int64_t row_elems,
                  double* out) override;

 private:
  std::unique_ptr<LayerKernels> inner_;
  TracingDevice& dev_;
};

}  // namespace uipc
