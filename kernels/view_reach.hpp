// The reach of every LayerKernels call's input and output views, checked against the
// buffers they point into (comm/device/memory_reach.hpp) on the host before the kernel is
// issued: one set of checks, called by the host kernels and by the CUDA kernels alike.
// A view that runs past its buffer is a RuntimeError naming the kernel, the operand and
// the sizes. Negative sizes are left to each kernel's own argument checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "comm/device/memory_reach.hpp"
#include "kernels/kernels.hpp"

namespace uipc {
namespace view_reach {

// rows x width elements of t, `pitch` elements apart.
inline void check_rows(const char* op, const char* what, const void* p, int64_t rows, int64_t pitch, int64_t width,
                       size_t elem) {
  if (rows <= 0 || width <= 0 || pitch < 0) return;
  check_reach_2d(op, what, p, static_cast<size_t>(rows), span_bytes(op, what, static_cast<size_t>(pitch), elem),
                 span_bytes(op, what, static_cast<size_t>(width), elem));
}

// n contiguous elements.
inline void check_elems(const char* op, const char* what, const void* p, int64_t n, size_t elem) {
  if (n <= 0) return;
  check_reach(op, what, p, span_bytes(op, what, static_cast<size_t>(n), elem));
}

// A product of sizes in 64 bits, or -1 (not checked here) when one is negative or it
// overflows.
inline int64_t product(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
  return r;
}

}  // namespace view_reach

inline void check_gemm_reach(const void* in, int64_t lda, const void* w, int64_t ldw, const void* out, int64_t ldo,
                             int64_t M, int64_t N, int64_t K, DType dtype, DType out_dtype) {
  using namespace view_reach;
  check_rows("gemm", "input view (M x K, lda)", in, M, lda, K, dtype_size(dtype));
  check_rows("gemm", "weight view (K x N, ldw)", w, K, ldw, N, dtype_size(dtype));
  check_rows("gemm", "output view (M x N, ldo)", out, M, ldo, N, dtype_size(out_dtype));
}

inline void check_norm_rope_reach(const QkView& x, DType dtype, const NormRopeParams& p) {
  using namespace view_reach;
  const size_t es = dtype_size(dtype);
  const int64_t width = product(x.heads, x.head_dim);
  check_rows("norm_rope", "view (tokens x heads*head_dim, row_pitch)", x.data, product(x.batch, x.tokens_per_batch),
             x.row_pitch, width, es);
  const HeadSliceOut& o = x.out;
  if (o.data != nullptr && x.batch > 0 && x.tokens_per_batch > 0 && o.head_count > 0 && o.batch_pitch >= 0 &&
      o.row_pitch >= 0) {
    // Batches of tokens_per_batch rows: the last row of the last batch ends the span.
    const int64_t last_row = product(x.batch - 1, o.batch_pitch);
    const int64_t row_span = product(x.tokens_per_batch - 1, o.row_pitch);
    const int64_t head_span = product(o.head_count, x.head_dim);
    int64_t elems = 0;
    if (last_row < 0 || row_span < 0 || head_span < 0 || __builtin_add_overflow(last_row, row_span, &elems) ||
        __builtin_add_overflow(elems, head_span, &elems))
      throw RuntimeError("norm_rope: the output head slice's span overflows a 64-bit count");
    check_elems("norm_rope", "output head slice (batch x tokens x heads*head_dim)", o.data, elems, es);
  }
  // gamma/beta: [head_dim] per head, [heads*head_dim] across heads.
  const int64_t group = p.norm == NormKind::kRmsAcrossHeads ? width : x.head_dim;
  if (p.norm != NormKind::kNone) check_elems("norm_rope", "gamma", p.gamma, group, sizeof(float));
  if (p.norm == NormKind::kLayerPerHead) check_elems("norm_rope", "beta", p.beta, group, sizeof(float));
}

inline void check_attention_reach(const void* q, const void* k, const void* v, const void* o, int64_t batch,
                                  int64_t seq, int heads, int head_dim, DType dtype) {
  using namespace view_reach;
  const int64_t n = product(product(batch, seq), product(heads, head_dim));
  const size_t es = dtype_size(dtype);
  check_elems("attention", "Q (B x S x H x D)", q, n, es);
  check_elems("attention", "K (B x S x H x D)", k, n, es);
  check_elems("attention", "V (B x S x H x D)", v, n, es);
  check_elems("attention", "output (B x S x H x D)", o, n, es);
}

inline void check_convert_reach(const float* in, const void* out, int64_t n, DType dtype) {
  view_reach::check_elems("convert_from_f32", "fp32 input", in, n, sizeof(float));
  view_reach::check_elems("convert_from_f32", "output", out, n, dtype_size(dtype));
}

inline void check_row_change_reach(const void* now, const void* last, DType dtype, int64_t rows, int64_t row_elems,
                                   const double* out) {
  using namespace view_reach;
  const int64_t n = product(rows, row_elems);
  check_elems("row_change", "current rows", now, n, dtype_size(dtype));
  check_elems("row_change", "last sent rows", last, n, dtype_size(dtype));
  check_elems("row_change", "output (2 doubles per row)", out, product(rows, 2), sizeof(double));
}

}  // namespace uipc
