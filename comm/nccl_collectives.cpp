// NCCL collectives bootstrapped over MPI: rank 0 makes the unique id, MPI broadcasts
// it, every rank joins with ncclCommInitRank on its current CUDA device.
#include "comm/nccl_collectives.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "comm/cuda_check.hpp"

namespace uipc {

std::string nccl_error_string(int result) {
  std::string out = ncclGetErrorString(static_cast<ncclResult_t>(result));
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) out += std::string(": ") + last;
  return out;
}

namespace {

// Where this rank's GPU is: host name and PCI bus id, fixed size for MPI_Allgather.
struct GpuPlace {
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  char bus[32] = {0};
};

// NCCL refuses two ranks on one GPU with a terse "Duplicate GPU detected"; find it
// ourselves first so that every rank raises the same clear error.
void require_one_gpu_per_rank(MPI_Comm comm, int rank, int size) {
  GpuPlace mine;
  int len = 0;
  UIPC_MPI_CHECK(MPI_Get_processor_name(mine.host, &len));
  int dev = 0;
  UIPC_CUDA_CHECK(cudaGetDevice(&dev));
  UIPC_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.bus, sizeof(mine.bus), dev));
  std::vector<GpuPlace> all(size);
  UIPC_MPI_CHECK(MPI_Allgather(&mine, sizeof(GpuPlace), MPI_BYTE, all.data(), sizeof(GpuPlace), MPI_BYTE, comm));
  for (int a = 0; a < size; ++a) {
    for (int b = a + 1; b < size; ++b) {
      if (std::strcmp(all[a].host, all[b].host) == 0 && std::strcmp(all[a].bus, all[b].bus) == 0) {
        throw RuntimeError("NCCL needs one GPU per rank: ranks " + std::to_string(a) + " and " + std::to_string(b) +
                           " of the communicator share GPU " + all[a].bus + " on " + all[a].host +
                           " (run one rank per GPU, or use a path that does not need NCCL) (" +
                           error_where(__FILE__, __LINE__) + ", rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + ")");
      }
    }
  }
}

class NcclCollectives : public Collectives {
 public:
  explicit NcclCollectives(MPI_Comm comm) {
    UIPC_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    UIPC_MPI_CHECK(MPI_Comm_size(comm, &size_));
    require_one_gpu_per_rank(comm, rank_, size_);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) UIPC_NCCL_CHECK(ncclGetUniqueId(&id));
    UIPC_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm));
    ncclResult_t r = ncclCommInitRank(&comm_, size_, id, rank_);
    if (r == ncclInvalidUsage) {
      throw RuntimeError("ncclCommInitRank failed: " + nccl_error_string(r) +
                         " (NCCL needs one GPU per rank and one communicator per GPU) (" +
                         error_where(__FILE__, __LINE__) + ")");
    }
    UIPC_NCCL_CHECK(r);
  }
  ~NcclCollectives() override {
    if (comm_) ncclCommDestroy(comm_);
  }

  std::string name() const override { return "nccl"; }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  void all_to_all(Stream& s, const void* send, void* recv, size_t bytes_per_peer) override {
    auto stream = static_cast<cudaStream_t>(s.native());
    UIPC_CHECK(stream != nullptr, "NCCL collectives need a CUDA stream");
    UIPC_NCCL_CHECK(ncclAlltoAll(send, recv, bytes_per_peer, ncclUint8, comm_, stream));
  }
  void all_reduce_sum_f32(Stream& s, float* buf, size_t n) override {
    auto stream = static_cast<cudaStream_t>(s.native());
    UIPC_CHECK(stream != nullptr, "NCCL collectives need a CUDA stream");
    UIPC_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream));
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(MPI_Comm comm) {
  // NVLink multicast (NVLS) can put a shared host's GPUs out of service: never use it.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  return std::make_unique<NcclCollectives>(comm);
}

std::string nccl_version_string() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace uipc
