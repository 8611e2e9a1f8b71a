// NCCL collectives bootstrapped over MPI: rank 0 makes the unique id, every rank gets
// it over MPI and joins on its current CUDA device. Every step is bounded: the MPI
// exchanges by the bounded waits of comm/bootstrap, NCCL by a non-blocking communicator
// whose state is polled against the same limit, so a rank that never joins (dead, hung,
// or running something else) is a PeerTimeout on the others, not a hang.
#include "comm/collectives/nccl_collectives.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/poll.hpp"
#include "comm/bootstrap.hpp"
#include "comm/device/cuda_check.hpp"

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
void require_one_gpu_per_rank(MPI_Comm comm, int rank, int size, double timeout_s) {
  GpuPlace mine;
  int len = 0;
  UIPC_MPI_CHECK(MPI_Get_processor_name(mine.host, &len));
  int dev = 0;
  UIPC_CUDA_CHECK(cudaGetDevice(&dev));
  UIPC_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.bus, sizeof(mine.bus), dev));
  std::vector<GpuPlace> all(size);
  allgather_bounded(comm, &mine, sizeof(GpuPlace), all.data(), timeout_s, "the NCCL set-up (where each rank's GPU is)");
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

// Polls a non-blocking communicator until its state leaves ncclInProgress; false if it
// is still in progress after timeout_s. Any other state is an error, thrown.
bool settle(ncclComm_t comm, double timeout_s, const char* what) {
  return poll_until(
      [&] {
        ncclResult_t state = ncclSuccess;
        UIPC_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
        if (state != ncclSuccess && state != ncclInProgress)
          throw_library_error("NCCL", nccl_error_string(state), what, __FILE__, __LINE__);
        return state == ncclSuccess;
      },
      timeout_s);
}

// Test hook: the rank named here leaves before joining the NCCL communicator, so that the
// test suite can check that the others give up in bounded time.
const char* const kAbsentRankEnv = "ULYSSES_TEST_NCCL_ABSENT_RANK";

// A symmetric window: ncclMemAlloc'ed and registered with NCCL_WIN_COLL_SYMMETRIC (every
// rank's buffer at the same offsets), deregistered and freed when it goes. On a
// non-blocking communicator registration completes asynchronously even when the call
// returns ncclSuccess (the handle stays unset until the communicator's state is success
// again), so every call is followed by `complete`, which polls that state, bounded.
class NcclWindow final : public RegisteredBuffer {
 public:
  using Complete = std::function<void(ncclResult_t, const char*)>;
  NcclWindow(ncclComm_t comm, size_t bytes, Complete complete) : comm_(comm), bytes_(bytes), complete_(std::move(complete)) {
    UIPC_NCCL_CHECK(ncclMemAlloc(&ptr_, bytes));
    try {
      complete_(ncclCommWindowRegister(comm_, ptr_, bytes, &win_, NCCL_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister");
    } catch (...) {
      ncclMemFree(ptr_);
      throw;
    }
  }
  ~NcclWindow() override {
    if (win_) {
      try {
        complete_(ncclCommWindowDeregister(comm_, win_), "ncclCommWindowDeregister");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ulysses-ipc: %s\n", e.what());
      }
    }
    if (ptr_) ncclMemFree(ptr_);
  }
  void* get() const override { return ptr_; }
  size_t bytes() const override { return bytes_; }

 private:
  ncclComm_t comm_;
  size_t bytes_;
  Complete complete_;
  void* ptr_ = nullptr;
  ncclWindow_t win_ = nullptr;
};

class NcclCollectives : public Collectives {
 public:
  NcclCollectives(MPI_Comm comm, double timeout_s, bool zero_cta) : timeout_s_(timeout_s), zero_cta_(zero_cta) {
    UIPC_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    UIPC_MPI_CHECK(MPI_Comm_size(comm, &size_));
    require_one_gpu_per_rank(comm, rank_, size_, timeout_s);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) UIPC_NCCL_CHECK(ncclGetUniqueId(&id));
    // Rank 0's id to every rank, as a bounded all-gather (the others send zeros).
    std::vector<ncclUniqueId> ids(static_cast<size_t>(size_));
    allgather_bounded(comm, &id, sizeof(id), ids.data(), timeout_s, "the NCCL set-up (the unique id)");
    id = ids[0];
    const char* absent = std::getenv(kAbsentRankEnv);
    if (absent && *absent && std::atoi(absent) == rank_)
      throw RuntimeError(std::string("test hook ") + kAbsentRankEnv + ": rank " + std::to_string(rank_) +
                         " stays out of the NCCL communicator");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // return at once; the state is polled below, against the limit
    if (zero_cta_) config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r == ncclInvalidUsage) {
      throw RuntimeError("ncclCommInitRankConfig failed: " + nccl_error_string(r) +
                         " (NCCL needs one GPU per rank and one communicator per GPU) (" +
                         error_where(__FILE__, __LINE__) + ")");
    }
    if (r != ncclInProgress) UIPC_NCCL_CHECK(r);
    bool joined = false;
    try {
      joined = settle(comm_, timeout_s, "ncclCommInitRankConfig");
    } catch (...) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw;
    }
    if (!joined) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw PeerTimeout("rank " + std::to_string(rank_) + ": the NCCL communicator of " + std::to_string(size_) +
                        " ranks was not set up within " + std::to_string(static_cast<int>(timeout_s)) +
                        " s (a rank did not join: it died, hangs, or runs something else)");
    }
  }
  ~NcclCollectives() override {
    if (!comm_) return;
    // Finalize is global (every rank's operations flushed): bounded like the rest; a
    // communicator that does not quiesce in time is aborted rather than waited for. While
    // an error unwinds this rank, the peers may never finalize: abort at once.
    bool quiet = false;
    if (std::uncaught_exceptions() == 0) try {
      const ncclResult_t r = ncclCommFinalize(comm_);
      quiet = (r == ncclSuccess || r == ncclInProgress) && settle(comm_, timeout_s_, "ncclCommFinalize");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ulysses-ipc: rank %d: %s\n", rank_, e.what());
    }
    if (quiet) {
      ncclCommDestroy(comm_);
      return;
    }
    if (std::uncaught_exceptions() == 0)
      std::fprintf(stderr, "ulysses-ipc: rank %d: the NCCL communicator did not finalize; aborting it\n", rank_);
    ncclCommAbort(comm_);
  }

  std::string name() const override { return "nccl"; }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  void all_to_all(Stream& s, const void* send, void* recv, size_t bytes_per_peer) override {
    auto stream = static_cast<cudaStream_t>(s.native());
    UIPC_CHECK(stream != nullptr, "NCCL collectives need a CUDA stream");
    enqueued(ncclAlltoAll(send, recv, bytes_per_peer, ncclUint8, comm_, stream), "ncclAlltoAll");
  }
  void send_recv(Stream& s, const std::vector<PeerTransfer>& transfers) override {
    auto stream = static_cast<cudaStream_t>(s.native());
    UIPC_CHECK(stream != nullptr, "NCCL collectives need a CUDA stream");
    // One group: NCCL pairs each send with the peer's receive, whatever the order.
    UIPC_NCCL_CHECK(ncclGroupStart());
    for (const PeerTransfer& t : transfers) {
      UIPC_CHECK(t.peer >= 0 && t.peer < size_, "send_recv: no peer " + std::to_string(t.peer));
      if (t.send_bytes > 0) {
        const ncclResult_t r = ncclSend(t.send, t.send_bytes, ncclUint8, t.peer, comm_, stream);
        if (r != ncclSuccess && r != ncclInProgress) {
          ncclGroupEnd();
          throw_library_error("NCCL", nccl_error_string(r), "ncclSend", __FILE__, __LINE__);
        }
      }
      if (t.recv_bytes > 0) {
        const ncclResult_t r = ncclRecv(t.recv, t.recv_bytes, ncclUint8, t.peer, comm_, stream);
        if (r != ncclSuccess && r != ncclInProgress) {
          ncclGroupEnd();
          throw_library_error("NCCL", nccl_error_string(r), "ncclRecv", __FILE__, __LINE__);
        }
      }
    }
    enqueued(ncclGroupEnd(), "ncclGroupEnd (send/recv)");
  }
  void all_reduce_sum_f32(Stream& s, float* buf, size_t n) override {
    auto stream = static_cast<cudaStream_t>(s.native());
    UIPC_CHECK(stream != nullptr, "NCCL collectives need a CUDA stream");
    enqueued(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream), "ncclAllReduce");
  }
  std::unique_ptr<RegisteredBuffer> alloc_registered(size_t bytes) override {
    return std::make_unique<NcclWindow>(comm_, bytes, [this](ncclResult_t r, const char* what) { completed(r, what); });
  }
  std::string graph_ineligible_reason() const override { return ""; }
  std::string copy_engine_note() const override {
    // What NCCL 2.28 needs for its copy-engine all-to-all (enqueue.cc, ceCollTaskAppend):
    // the zero-CTA policy, 2+ ranks, symmetric windows on both sides, and "symmetric
    // support" (one node, every pair of GPUs direct P2P, cuMem), which it does not report.
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess || v < 22800)
      return "NCCL " + std::to_string(v) + " has no copy-engine collectives (2.28 or later)";
    if (!zero_cta_) return "the communicator's CTA policy is not NCCL_CTA_POLICY_ZERO";
    if (size_ < 2) return "one rank: NCCL copies locally with a kernel (its copy-engine all-to-all needs 2+ ranks)";
    return "";
  }

 private:
  // On a non-blocking communicator a call may return ncclInProgress while NCCL is still
  // enqueueing it; the next call may come only once the state is back to success.
  void enqueued(ncclResult_t r, const char* what) {
    if (r == ncclInProgress) {
      if (!settle(comm_, timeout_s_, what))
        throw PeerTimeout("rank " + std::to_string(rank_) + ": NCCL did not finish enqueueing " + what + " within " +
                          std::to_string(static_cast<int>(timeout_s_)) + " s");
      return;
    }
    if (r != ncclSuccess) throw_library_error("NCCL", nccl_error_string(r), what, __FILE__, __LINE__);
  }
  // A call whose work NCCL may finish asynchronously whatever it returned (window
  // registration): the communicator's state must be back to success before the next call.
  void completed(ncclResult_t r, const char* what) {
    if (r != ncclSuccess && r != ncclInProgress)
      throw_library_error("NCCL", nccl_error_string(r), what, __FILE__, __LINE__);
    if (!settle(comm_, timeout_s_, what))
      throw PeerTimeout("rank " + std::to_string(rank_) + ": NCCL did not complete " + what + " within " +
                        std::to_string(static_cast<int>(timeout_s_)) + " s (a peer did not take part)");
  }

  double timeout_s_;
  bool zero_cta_ = false;
  int rank_ = 0;
  int size_ = 1;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(MPI_Comm comm, double timeout_s, bool zero_cta) {
  // NVLink multicast (NVLS) can put a shared host's GPUs out of service: never use it.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  return std::make_unique<NcclCollectives>(comm, timeout_s, zero_cta);
}

std::string nccl_version_string() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace uipc
