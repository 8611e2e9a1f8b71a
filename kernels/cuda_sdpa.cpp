// Attention through cuDNN's fused scaled-dot-product attention, built with the
// header-only cudnn-frontend graph API (found at configure time; see
// kernels/CMakeLists.txt). One graph per shape and dtype, built once and cached.
// cuDNN SDPA takes bf16/fp16 only; the caller falls back to the reference kernel for
// anything it refuses.
#include <cudnn.h>

#include <map>
#include <mutex>
#include <tuple>

#include "comm/device/cuda_check.hpp"
#include "kernels/cuda_internal.hpp"

#if defined(ULYSSES_HAVE_CUDNN_FRONTEND)
#include <cudnn_frontend.h>
#endif

namespace uipc {

std::string cudnn_error_string(int status) { return cudnnGetErrorString(static_cast<cudnnStatus_t>(status)); }

#if defined(ULYSSES_HAVE_CUDNN_FRONTEND)

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4 };

using GraphKey = std::tuple<int64_t, int64_t, int, int, int, float>;

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;  // null: refused, see why
  std::string why;
  int64_t workspace = 0;
};

}  // namespace

struct CudnnSdpa::Impl {
  cudnnHandle_t handle = nullptr;
  std::mutex m;
  std::map<GraphKey, Built> graphs;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  ~Impl() {
    graphs.clear();
    if (workspace) cudaFree(workspace);
    if (handle) cudnnDestroy(handle);
  }

  Built build(int64_t B, int64_t S, int H, int D, DType dtype, float scale) {
    Built out;
    auto g = std::make_shared<fe::graph::Graph>();
    const auto io = dtype == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
    g->set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(
        fe::DataType_t::FLOAT);
    // Logical (B, H, S, D) over the (B, S, H, D) storage.
    const std::vector<int64_t> dim{B, H, S, D};
    const std::vector<int64_t> stride{S * H * D, D, H * D, 1};
    auto tensor = [&](const char* name, int64_t uid) {
      return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
    };
    auto q = tensor("Q", kQ), k = tensor("K", kK), v = tensor("V", kV);
    auto opts = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(false).set_attn_scale(scale);
    auto [o, stats] = g->sdpa(q, k, v, opts);
    (void)stats;
    o->set_output(true).set_uid(kO).set_dim(dim).set_stride(stride);
    auto fail = [&](const char* step, fe::error_t e) {
      out.why = std::string(step) + ": " + e.get_message();
      return out;
    };
    if (auto e = g->validate(); !e.is_good()) return fail("validate", e);
    if (auto e = g->build_operation_graph(handle); !e.is_good()) return fail("build_operation_graph", e);
    if (auto e = g->create_execution_plans({fe::HeurMode_t::A}); !e.is_good()) return fail("create_execution_plans", e);
    if (auto e = g->check_support(handle); !e.is_good()) return fail("check_support", e);
    if (auto e = g->build_plans(handle); !e.is_good()) return fail("build_plans", e);
    if (auto e = g->get_workspace_size(out.workspace); !e.is_good()) return fail("get_workspace_size", e);
    out.graph = g;
    return out;
  }
};

CudnnSdpa::CudnnSdpa() : impl_(std::make_unique<Impl>()) { UIPC_CUDNN_CHECK(cudnnCreate(&impl_->handle)); }
CudnnSdpa::~CudnnSdpa() = default;

std::string CudnnSdpa::run(cudaStream_t s, const void* q, const void* k, const void* v, void* o, int64_t batch,
                           int64_t seq, int heads, int head_dim, DType dtype, float scale) {
  if (dtype == DType::kFP32) return "cuDNN SDPA takes bf16/fp16 only";
  std::lock_guard<std::mutex> lock(impl_->m);
  const GraphKey key{batch, seq, heads, head_dim, static_cast<int>(dtype), scale};
  auto it = impl_->graphs.find(key);
  if (it == impl_->graphs.end()) it = impl_->graphs.emplace(key, impl_->build(batch, seq, heads, head_dim, dtype, scale)).first;
  Built& b = it->second;
  if (!b.graph) return b.why;
  if (b.workspace > impl_->workspace_bytes) {
    // Freed while no work of ours can use it: the stream's earlier SDPA calls may, so
    // wait for them first.
    UIPC_CUDA_CHECK(cudaStreamSynchronize(s));
    if (impl_->workspace) UIPC_CUDA_CHECK(cudaFree(impl_->workspace));
    impl_->workspace = nullptr;
    UIPC_CUDA_CHECK(cudaMalloc(&impl_->workspace, static_cast<size_t>(b.workspace)));
    impl_->workspace_bytes = b.workspace;
  }
  UIPC_CUDNN_CHECK(cudnnSetStream(impl_->handle, s));
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},
                                          {kV, const_cast<void*>(v)}, {kO, o}};
  auto e = b.graph->execute(impl_->handle, pack, impl_->workspace);
  UIPC_CHECK(e.is_good(), "cuDNN SDPA execute failed: " + e.get_message());
  return {};
}

#else  // no cudnn-frontend: the reference kernel serves every call

struct CudnnSdpa::Impl {};
CudnnSdpa::CudnnSdpa() = default;
CudnnSdpa::~CudnnSdpa() = default;
std::string CudnnSdpa::run(cudaStream_t, const void*, const void*, const void*, void*, int64_t, int64_t, int, int,
                           DType, float) {
  return "not built (cudnn-frontend headers were not found at configure time)";
}

#endif

}  // namespace uipc
