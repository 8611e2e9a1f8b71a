// The public API's per-build pieces in a CUDA build: the CUDA device, and NCCL for the
// fallback where every rank has a GPU of its own (NCCL refuses two ranks on one GPU),
// else MPI staged through the host (api/internal.hpp).
#include "api/internal.hpp"

#include <algorithm>

#include "comm/device/cuda_device.hpp"
#include "comm/collectives/nccl_collectives.hpp"

namespace ulysses_ipc::internal {

std::unique_ptr<uipc::Device> make_cuda(int ordinal) { return uipc::make_cuda_device(ordinal); }

int cuda_count() { return uipc::cuda_usable_device_count(); }

namespace {

// Collective, alike on every rank: does every rank of group have a GPU of its own?
bool own_gpus(uipc::Device& dev, MPI_Comm group) {
  std::vector<std::string> places = uipc::allgather_strings(
      group, uipc::host_name() + "/" + std::to_string(dev.ordinal()), dev.watchdog_seconds(), "the GPU placement");
  std::sort(places.begin(), places.end());
  return std::adjacent_find(places.begin(), places.end()) == places.end();
}

}  // namespace

std::unique_ptr<uipc::Collectives> make_fallback_collectives(uipc::Device& dev, MPI_Comm group) {
  if (dev.kind() == uipc::DeviceKind::kCuda && own_gpus(dev, group))
    return uipc::make_nccl_collectives(group, dev.watchdog_seconds());
  return uipc::make_mpi_collectives(group, dev);
}

std::unique_ptr<uipc::Collectives> make_ce_collectives(uipc::Device& dev, MPI_Comm group, std::string* why) {
  if (dev.kind() != uipc::DeviceKind::kCuda) return uipc::make_mpi_collectives(group, dev);
  if (own_gpus(dev, group)) return uipc::make_nccl_collectives(group, dev.watchdog_seconds(), /*zero_cta=*/true);
  *why = "several ranks share a GPU: NCCL needs one GPU per rank";
  return nullptr;
}

}  // namespace ulysses_ipc::internal
