// Backend construction: the only file with a CUDA #if.
#include "lib/run/backend.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives/tracing_collectives.hpp"
#include "kernels/tracing_kernels.hpp"
#include "lib/run/run_shape.hpp"

#if defined(ULYSSES_HAVE_CUDA)
#include "comm/device/cuda_device.hpp"
#include "comm/collectives/nccl_collectives.hpp"
#include "kernels/cuda_kernels.hpp"
#endif

namespace uipc {

bool cuda_built() {
#if defined(ULYSSES_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

int usable_gpu_count() {
#if defined(ULYSSES_HAVE_CUDA)
  return cuda_usable_device_count();
#else
  return 0;
#endif
}

std::string Backend::attention_path() const {
  if (mode == Mode::kModel) return "none (modelled)";
#if defined(ULYSSES_HAVE_CUDA)
  if (mode == Mode::kGpu) return cuda_attention_path(static_cast<TracingKernels&>(*kernels).inner());
#endif
  return "host";
}

std::unique_ptr<Collectives> Backend::make_collectives(MPI_Comm comm) const {
  std::unique_ptr<Collectives> inner;
#if defined(ULYSSES_HAVE_CUDA)
  if (mode == Mode::kGpu && nccl_usable) inner = make_nccl_collectives(comm, device->watchdog_seconds());
#endif
  if (!inner) inner = make_mpi_collectives(comm, tracer->inner());
  return make_tracing_collectives(std::move(inner), *tracer, comm);
}

std::unique_ptr<Collectives> Backend::make_ce_collectives(MPI_Comm comm, std::string* why) const {
  if (mode != Mode::kGpu)
    return make_tracing_collectives(make_mpi_collectives(comm, tracer->inner()), *tracer, comm);
#if defined(ULYSSES_HAVE_CUDA)
  if (nccl_usable)
    return make_tracing_collectives(make_nccl_collectives(comm, device->watchdog_seconds(), /*zero_cta=*/true),
                                    *tracer, comm);
#endif
  *why = nccl_unusable_reason;
  return nullptr;
}

namespace {
// Wraps the backend's device and kernels in their recording decorators.
void wrap_for_tracing(Backend& b, int rank, int world) {
  auto tracing = std::make_unique<TracingDevice>(std::move(b.device), rank, world, b.mode == Mode::kModel);
  b.tracer = tracing.get();
  b.device = std::move(tracing);
  b.kernels = std::make_unique<TracingKernels>(std::move(b.kernels), *b.tracer);
}
}  // namespace

Backend make_backend(const BackendOptions& opt, MPI_Comm world) {
  const std::vector<std::string> choices = mode_choices();
  if (std::find(choices.begin(), choices.end(), opt.mode) == choices.end())
    throw InputError("--mode: unknown mode '" + opt.mode + "' (allowed: " + join(choices) + ")");
  int rank = 0, size = 1;
  UIPC_MPI_CHECK(MPI_Comm_rank(world, &rank));
  UIPC_MPI_CHECK(MPI_Comm_size(world, &size));
  // Every rank decides alike: gpu only when every rank sees a GPU.
  int mine = usable_gpu_count(), least = 0;
  UIPC_MPI_CHECK(MPI_Allreduce(&mine, &least, 1, MPI_INT, MPI_MIN, world));
  Backend b;
  if (opt.mode == "gpu") {
    if (!cuda_built())
      throw InputError("--mode gpu: this ulysses-ipc was built without the CUDA device layer (configure with nvcc present or -DULYSSES_CUDA=ON)");
    if (least == 0) throw InputError("--mode gpu: no usable CUDA device on at least one rank (no GPU or no driver); use --mode sim");
    b.mode = Mode::kGpu;
  } else if (opt.mode == "auto") {
    b.mode = least > 0 ? Mode::kGpu : Mode::kSim;
  } else {
    b.mode = mode_of(opt.mode);
  }

  if (b.mode != Mode::kGpu) {
    // Model mode: the host device's protocol at full size, its memory left untouched.
    b.device = make_host_device(rank, /*untouched_memory=*/b.mode == Mode::kModel);
    b.kernels = make_host_kernels();
    b.nccl_usable = false;
    b.nccl_unusable_reason = "simulation mode: NCCL is emulated with MPI";
    wrap_for_tracing(b, rank, size);
    return b;
  }
#if defined(ULYSSES_HAVE_CUDA)
  NodeInfo node = node_info(world);
  int count = usable_gpu_count();
  if (node.local_size > count && !opt.allow_shared_gpu)
    throw InputError(std::to_string(node.local_size) + " ranks on this node but only " + std::to_string(count) +
                     " usable GPU(s): one GPU per rank, or --allow-shared-gpu for functional testing (time-sliced, no performance figures)");
  const int ordinal = node.local_rank % count;
  b.device = make_cuda_device(ordinal);
  b.kernels = make_cuda_kernels();
  b.nccl_usable = node.local_size <= count;
  if (!b.nccl_usable) b.nccl_unusable_reason = "several ranks share a GPU: NCCL needs one GPU per rank";
  b.versions_cuda = cuda_version_string();
  b.versions_nccl = nccl_version_string();
  wrap_for_tracing(b, rank, size);
#endif
  return b;
}

}  // namespace uipc
