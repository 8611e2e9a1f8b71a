// The recording decorator of the layer kernels (kernels/tracing_kernels.hpp). Flops and
// bytes are those of the math in docs/math.md: a GEMM reads its input and weight and
// writes its output; attention does 4 B H S^2 D flops (Q K^T and P V); norm + RoPE reads
// and writes its rows in place; the conversion reads fp32 and writes the dtype.
#include "kernels/tracing_kernels.hpp"

namespace uipc {
namespace {
model::Op kernel_op(model::KernelKind k, double flops, double bytes, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  model::Op op;
  op.kind = model::OpKind::kKernel;
  op.kernel = k;
  op.flops = flops;
  op.bytes = bytes;
  op.dims[0] = d0;
  op.dims[1] = d1;
  op.dims[2] = d2;
  op.dims[3] = d3;
  return op;
}
double d(int64_t v) { return static_cast<double>(v); }
}  // namespace

void TracingKernels::gemm(Stream& s, const void* in, int64_t lda, const void* w, int64_t ldw, void* out, int64_t ldo,
                          int64_t M, int64_t N, int64_t K, DType dtype, DType out_dtype) {
  const double es = d(static_cast<int64_t>(dtype_size(dtype))), os = d(static_cast<int64_t>(dtype_size(out_dtype)));
  model::Op op = kernel_op(model::KernelKind::kGemm, 2 * d(M) * d(N) * d(K), (d(M) * d(K) + d(K) * d(N)) * es + d(M) * d(N) * os,
                           M, N, K, static_cast<int64_t>(dtype_size(out_dtype)));
  dev_.record_op(s, op, true, [=, this](Stream& in_s) { inner_->gemm(in_s, in, lda, w, ldw, out, ldo, M, N, K, dtype, out_dtype); },
                 op_key(in, lda, w, ldw, out, ldo, M, N, K, dtype, out_dtype));
}

namespace {
model::Op norm_rope_op(int64_t rows, const QkView& x, DType dtype, const NormRopeParams& p) {
  const double bytes = 2 * d(rows) * d(x.heads) * d(x.head_dim) * d(static_cast<int64_t>(dtype_size(dtype)));
  return kernel_op(model::KernelKind::kNormRope, 0, bytes, rows, x.heads, x.head_dim,
                   model::norm_rope_code(static_cast<int>(p.norm), static_cast<int>(dtype)));
}
uint64_t norm_rope_key(const QkView& x, DType dtype, const NormRopeParams& p) {
  return op_key(x.data, x.row_pitch, x.batch, x.tokens_per_batch, x.pos_offset, x.heads, x.head_dim, x.out.data,
                x.out.head_begin, x.out.head_count, x.out.row_pitch, x.out.batch_pitch, dtype, p.norm, p.rope, p.eps,
                p.rope_theta, p.gamma, p.beta);
}
}  // namespace

void TracingKernels::norm_rope(Stream& s, const QkView& x, DType dtype, const NormRopeParams& p) {
  dev_.record_op(s, norm_rope_op(x.batch * x.tokens_per_batch, x, dtype, p), true,
                 [=, this](Stream& in_s) { inner_->norm_rope(in_s, x, dtype, p); }, norm_rope_key(x, dtype, p));
}

void TracingKernels::norm_rope_qk(Stream& s, const QkView& q, const NormRopeParams& pq, const QkView& k,
                                  const NormRopeParams& pk, DType dtype) {
  const int64_t rows = q.batch * q.tokens_per_batch + k.batch * k.tokens_per_batch;
  dev_.record_op(s, norm_rope_op(rows, q, dtype, pq), true,
                 [=, this](Stream& in_s) { inner_->norm_rope_qk(in_s, q, pq, k, pk, dtype); },
                 op_key(norm_rope_key(q, dtype, pq), norm_rope_key(k, dtype, pk)));
}

void TracingKernels::attention(Stream& s, const void* q, const void* k, const void* v, void* o, int64_t batch,
                               int64_t seq, int heads, int head_dim, DType dtype, float scale) {
  const double flops = 4 * d(batch) * d(heads) * d(seq) * d(seq) * d(head_dim);
  const double bytes = 4 * d(batch) * d(seq) * d(heads) * d(head_dim) * d(static_cast<int64_t>(dtype_size(dtype)));
  model::Op op = kernel_op(model::KernelKind::kAttention, flops, bytes, batch, seq, heads, head_dim);
  dev_.record_op(s, op, true,
                 [=, this](Stream& in_s) { inner_->attention(in_s, q, k, v, o, batch, seq, heads, head_dim, dtype, scale); },
                 op_key(q, k, v, o, batch, seq, heads, head_dim, dtype, scale));
}

void TracingKernels::convert_from_f32(Stream& s, const float* in, void* out, int64_t n, DType dtype) {
  model::Op op = kernel_op(model::KernelKind::kConvert, 0, d(n) * (4 + d(static_cast<int64_t>(dtype_size(dtype)))), n,
                           0, 0, 0);
  dev_.record_op(s, op, true, [=, this](Stream& in_s) { inner_->convert_from_f32(in_s, in, out, n, dtype); },
                 op_key(in, out, n, dtype));
}

void TracingKernels::row_change(Stream& s, const void* now, const void* last, DType dtype, int64_t rows,
                                int64_t row_elems, double* out) {
  // Reads both tensors, writes two fp64 sums a row: a memory-bound kernel.
  const double bytes = 2 * d(rows) * d(row_elems) * d(static_cast<int64_t>(dtype_size(dtype))) + 16 * d(rows);
  model::Op op = kernel_op(model::KernelKind::kNone, 0, bytes, rows, row_elems, 0, 0);
  dev_.record_op(s, op, true, [=, this](Stream& in_s) { inner_->row_change(in_s, now, last, dtype, rows, row_elems, out); },
                 op_key(now, last, dtype, rows, row_elems, out));
}

}  // namespace uipc
