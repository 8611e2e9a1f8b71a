// Transport selection (ipc -> nccl, vmm -> nccl: first that can serve), IPC and vmm
// eligibility, and the
// MPI collectives that stand in for NCCL on the host device.
#include "comm/transport.hpp"

#include <cstdlib>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives.hpp"

namespace uipc {

const char* tag_name(Tag t) {
  switch (t) {
    case Tag::kQ: return "Q";
    case Tag::kK: return "K";
    case Tag::kV: return "V";
    case Tag::kO: return "O";
  }
  return "?";
}

// Test and operations hooks: a non-empty value makes every rank treat the IPC transports
// (ipc and vmm, which shares its checks) or the vmm transport alone as ineligible, with
// this text as the reason (exercises the fallback path).
static const char* const kForceIneligibleEnv = "ULYSSES_IPC_FORCE_INELIGIBLE";
static const char* const kForceVmmIneligibleEnv = "ULYSSES_VMM_FORCE_INELIGIBLE";

namespace {

// This rank's reason from an environment hook ("" when it is not set).
std::string forced_reason(const char* env) {
  const char* forced = std::getenv(env);
  return forced && *forced ? std::string("forced by ") + env + ": " + forced : std::string();
}

// The first non-empty reason by rank order, on every rank of group.
std::string agree_on_reason(MPI_Comm group, const std::string& reason, double timeout_s) {
  std::vector<std::string> all = allgather_strings(group, reason, timeout_s, "the transport eligibility check");
  for (size_t i = 0; i < all.size(); ++i)
    if (!all[i].empty()) return "rank " + std::to_string(i) + " of the group: " + all[i];
  return "";
}

}  // namespace

std::string vmm_ineligible_reason(Device& dev, MPI_Comm group) {
  std::string why = ipc_ineligible_reason(dev, group);  // collective; the same on every rank
  if (!why.empty()) return why;
  std::string reason = forced_reason(kForceVmmIneligibleEnv);
  if (reason.empty()) reason = dev.vmm_ineligible_reason();
  return agree_on_reason(group, reason, dev.watchdog_seconds());
}

std::string ipc_ineligible_reason(Device& dev, MPI_Comm group) {
  // The collectives first, on every rank whatever it finds itself: a rank that skipped
  // one because of its own reason would leave the others waiting in it.
  const bool one_node = all_on_one_node(group);
  int size = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(group, &size));
  std::vector<int> ords(size);
  const int ord = dev.ordinal();
  allgather_bounded(group, &ord, sizeof(int), ords.data(), dev.watchdog_seconds(), "the peer-access check");

  std::string reason = forced_reason(kForceIneligibleEnv);
  if (reason.empty() && !one_node) reason = "the Ulysses group spans several nodes";
  if (reason.empty()) reason = dev.ipc_ineligible_reason();
  for (size_t i = 0; reason.empty() && i < ords.size(); ++i) reason = dev.peer_ineligible_reason(ords[i]);
  // Agree: the first non-empty reason by rank order wins on every rank.
  return agree_on_reason(group, reason, dev.watchdog_seconds());
}

SelectedTransport select_transport(const std::string& requested, Device& dev, MPI_Comm group,
                                   Collectives& coll, int cache_capacity) {
  SelectedTransport sel;
  if (requested == "ipc" || requested == "vmm") {
    const bool vmm = requested == "vmm";
    std::string why = vmm ? vmm_ineligible_reason(dev, group) : ipc_ineligible_reason(dev, group);
    if (why.empty()) {
      sel.transport =
          vmm ? make_vmm_transport(dev, group, cache_capacity) : make_ipc_transport(dev, group, cache_capacity);
      sel.used = requested;
      return sel;
    }
    sel.fallback_reason = requested + " not eligible: " + why;
  } else if (requested != "nccl") {
    throw InputError("unknown transport '" + requested + "' (allowed: nccl, ipc, vmm)");
  }
  sel.transport = make_nccl_transport(dev, coll);
  sel.used = "nccl";
  return sel;
}

// --- MPI collectives for the host device

namespace {

class MpiCollectives : public Collectives {
 public:
  MpiCollectives(MPI_Comm c, Device& dev) : comm_(dup_comm(c)), dev_(dev) {}
  std::string name() const override { return "mpi"; }
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }

  void all_to_all(Stream& s, const void* send, void* recv, size_t bytes_per_peer) override {
    UIPC_CHECK(bytes_per_peer <= static_cast<size_t>(INT32_MAX), "all-to-all chunk too large for MPI");
    const size_t total = bytes_per_peer * static_cast<size_t>(size());
    s.synchronize();  // the bytes are final once the stream has drained
    std::vector<unsigned char> out(total), in(total);
    dev_.copy_to_host(out.data(), send, total);
    alltoall_bounded(comm_.get(), out.data(), in.data(), bytes_per_peer, dev_.watchdog_seconds(),
                     "the all-to-all of the nccl transport (MPI emulation)");
    dev_.copy_to_device(recv, in.data(), total);
  }

  void all_reduce_sum_f32(Stream& s, float* buf, size_t n) override {
    set_activity("in the TP all-reduce (MPI): draining the compute stream");
    s.synchronize();
    set_activity("in the TP all-reduce (MPI): exchanging");
    // Summed in rank order, so the result is the same on every rank (docs/math.md §7).
    const int size = comm_.size();
    std::vector<float> mine(n), all(n * static_cast<size_t>(size));
    dev_.copy_to_host(mine.data(), buf, n * sizeof(float));
    // An all-gather as an all-to-all of the same chunk: point to point, bounded.
    std::vector<float> same(n * static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) std::copy(mine.begin(), mine.end(), same.begin() + static_cast<size_t>(r) * n);
    alltoall_bounded(comm_.get(), same.data(), all.data(), n * sizeof(float), dev_.watchdog_seconds(),
                     "the TP all-reduce (MPI)");
    for (size_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int r = 0; r < size; ++r) acc += all[static_cast<size_t>(r) * n + i];
      mine[i] = acc;
    }
    dev_.copy_to_device(buf, mine.data(), n * sizeof(float));
  }

 private:
  MpiComm comm_;
  Device& dev_;
};

}  // namespace

std::unique_ptr<Collectives> make_mpi_collectives(MPI_Comm comm, Device& dev) {
  return std::make_unique<MpiCollectives>(comm, dev);
}

}  // namespace uipc
