// Backend construction: the only file with a CUDA #if.
#include "lib/backend.hpp"

#include "base/error.hpp"
#include "comm/bootstrap.hpp"

#if defined(ULYSSES_HAVE_CUDA)
#include "comm/cuda_device.hpp"
#include "comm/nccl_collectives.hpp"
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
#if defined(ULYSSES_HAVE_CUDA)
  if (mode == "gpu") return cuda_attention_path(*kernels);
#endif
  return "host";
}

std::unique_ptr<Collectives> Backend::make_collectives(MPI_Comm comm) const {
#if defined(ULYSSES_HAVE_CUDA)
  if (mode == "gpu" && nccl_usable) return make_nccl_collectives(comm, device->watchdog_seconds());
#endif
  return make_mpi_collectives(comm, *device);
}

std::unique_ptr<Collectives> Backend::make_ce_collectives(MPI_Comm comm, std::string* why) const {
  if (mode == "sim") return make_mpi_collectives(comm, *device);
#if defined(ULYSSES_HAVE_CUDA)
  if (nccl_usable) return make_nccl_collectives(comm, device->watchdog_seconds(), /*zero_cta=*/true);
#endif
  *why = nccl_unusable_reason;
  return nullptr;
}

Backend make_backend(const BackendOptions& opt, MPI_Comm world) {
  if (opt.mode != "auto" && opt.mode != "sim" && opt.mode != "gpu")
    throw InputError("--mode: unknown mode '" + opt.mode + "' (allowed: auto, sim, gpu)");
  int rank = 0;
  UIPC_MPI_CHECK(MPI_Comm_rank(world, &rank));
  // Every rank decides alike: gpu only when every rank sees a GPU.
  int mine = usable_gpu_count(), least = 0;
  UIPC_MPI_CHECK(MPI_Allreduce(&mine, &least, 1, MPI_INT, MPI_MIN, world));
  Backend b;
  if (opt.mode == "gpu") {
    if (!cuda_built())
      throw InputError("--mode gpu: this ulysses-ipc was built without the CUDA device layer (configure with nvcc present or -DULYSSES_CUDA=ON)");
    if (least == 0) throw InputError("--mode gpu: no usable CUDA device on at least one rank (no GPU or no driver); use --mode sim");
    b.mode = "gpu";
  } else if (opt.mode == "sim") {
    b.mode = "sim";
  } else {
    b.mode = least > 0 ? "gpu" : "sim";
  }

  if (b.mode == "sim") {
    b.device = make_host_device(rank);
    b.kernels = make_host_kernels();
    b.nccl_usable = false;
    b.nccl_unusable_reason = "simulation mode: NCCL is emulated with MPI";
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
#endif
  return b;
}

}  // namespace uipc
