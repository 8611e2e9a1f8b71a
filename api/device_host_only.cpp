// The public API's per-build pieces in a build without CUDA: no CUDA device, and MPI
// collectives for the fallback (api/internal.hpp).
#include "api/internal.hpp"

#include "base/error.hpp"

namespace ulysses_ipc::internal {

std::unique_ptr<uipc::Device> make_cuda(int ordinal) {
  throw uipc::RuntimeError("CUDA device " + std::to_string(ordinal) +
                           ": this ulysses_ipc library was built without CUDA; use Device::simulated()");
}

int cuda_count() { return 0; }

std::unique_ptr<uipc::Collectives> make_fallback_collectives(uipc::Device& dev, MPI_Comm group) {
  return uipc::make_mpi_collectives(group, dev);
}

std::unique_ptr<uipc::Collectives> make_ce_collectives(uipc::Device& dev, MPI_Comm group, std::string* /*why*/) {
  return uipc::make_mpi_collectives(group, dev);
}

}  // namespace ulysses_ipc::internal
