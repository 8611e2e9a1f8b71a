// Row-major GEMMs through cuBLASLt: out = in * w with fp32 accumulation. cuBLASLt is
// column-major, so the transposed problem is computed: out^T (N x M) = w^T (N x K) *
// in^T (K x M), where each row-major operand read column-major is its own transpose.
// Descriptors and the heuristic's algorithm are cached per problem.
#include <cublasLt.h>

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "comm/device/cuda_check.hpp"
#include "kernels/cuda_internal.hpp"

namespace uipc {

std::string cublas_error_string(int status) {
  auto st = static_cast<cublasStatus_t>(status);
  return std::string(cublasLtGetStatusName(st)) + " (" + cublasLtGetStatusString(st) + ")";
}

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kFP16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// The largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by
// the operands' alignment, and strided views (Q of a fused QKV) may be less aligned
// than a fresh allocation.
uint32_t alignment_of(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

constexpr size_t kWorkspaceBytes = 32u << 20;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, uint32_t, uint32_t, uint32_t>;

}  // namespace

struct CublasLtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  float* scratch = nullptr;  // fp32 output of an fp32 GEMM whose result is stored narrower
  size_t scratch_elems = 0;
  std::mutex m;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  ~Impl() {
    plans.clear();
    if (scratch) cudaFree(scratch);
    if (workspace) cudaFree(workspace);
    if (handle) cublasLtDestroy(handle);
  }

  Plan& plan(const PlanKey& key, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldw, int64_t ldo, DType dtype,
             DType out_dtype, uint32_t al_in, uint32_t al_w, uint32_t al_out) {
    auto it = plans.find(key);
    if (it != plans.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    // fp32 inputs: plain fp32 compute (no TF32), so that parity against the reference
    // stays tight.
    UIPC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t nt = CUBLAS_OP_N;
    UIPC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &nt, sizeof(nt)));
    UIPC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
    // Column-major view: A = w^T (N x K, ld ldw), B = in^T (K x M, ld lda), C = out^T (N x M, ld ldo).
    UIPC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, cuda_type(dtype), N, K, ldw));
    UIPC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, cuda_type(dtype), K, M, lda));
    UIPC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, cuda_type(out_dtype), N, M, ldo));

    cublasLtMatmulPreference_t pref = nullptr;
    UIPC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w, sizeof(al_w));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_in, sizeof(al_in));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_out, sizeof(al_out));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_out, sizeof(al_out));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    UIPC_CUBLAS_CHECK(st);
    UIPC_CHECK(found > 0, "cuBLASLt has no algorithm for M=" + std::to_string(M) + " N=" + std::to_string(N) +
                              " K=" + std::to_string(K) + " " + dtype_name(dtype) + " -> " + dtype_name(out_dtype));
    p->algo = result.algo;
    auto& ref = *p;
    plans.emplace(key, std::move(p));
    return ref;
  }
};

CublasLtGemm::CublasLtGemm() : impl_(std::make_unique<Impl>()) {
  UIPC_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  UIPC_CUDA_CHECK(cudaMalloc(&impl_->workspace, kWorkspaceBytes));
}

CublasLtGemm::~CublasLtGemm() = default;

void CublasLtGemm::run(cudaStream_t s, const void* in, int64_t lda, const void* w, int64_t ldw, void* out, int64_t ldo,
                       int64_t M, int64_t N, int64_t K, DType dtype, DType out_dtype) {
  if (M == 0 || N == 0) return;
  UIPC_CHECK(K > 0, "gemm with K = 0");
  UIPC_CHECK(lda >= K && ldo >= N && ldw >= N, "gemm leading dimensions smaller than the rows");
  std::lock_guard<std::mutex> lock(impl_->m);
  // cuBLASLt writes fp32 or the input type only (fp32 x fp32 -> bf16 and fp16 x fp16
  // -> bf16 have no kernels): those products go through an fp32 scratch and are rounded
  // once by the conversion kernel.
  const bool via_scratch = out_dtype != DType::kFP32 && out_dtype != dtype;
  void* target = out;
  int64_t ld_target = ldo;
  DType t_dtype = out_dtype;
  if (via_scratch) {
    const size_t need = static_cast<size_t>(M * N);
    if (impl_->scratch_elems < need) {
      if (impl_->scratch) UIPC_CUDA_CHECK(cudaFree(impl_->scratch));
      impl_->scratch = nullptr;
      UIPC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&impl_->scratch), need * sizeof(float)));
      impl_->scratch_elems = need;
    }
    target = impl_->scratch;
    ld_target = N;
    t_dtype = DType::kFP32;
  }
  const uint32_t al_in = alignment_of(in), al_w = alignment_of(w), al_out = alignment_of(target);
  const PlanKey key{M, N, K, lda, ldw, ld_target, static_cast<int>(dtype), static_cast<int>(t_dtype), al_in, al_w, al_out};
  Plan& p = impl_->plan(key, M, N, K, lda, ldw, ld_target, dtype, t_dtype, al_in, al_w, al_out);
  const float alpha = 1.0f, beta = 0.0f;
  UIPC_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, p.op, &alpha, w, p.a, in, p.b, &beta, target, p.c, target, p.c,
                                   &p.algo, impl_->workspace, kWorkspaceBytes, s));
  if (via_scratch) launch_convert_from_f32_2d(s, impl_->scratch, N, out, ldo, M, N, out_dtype);
}

}  // namespace uipc
