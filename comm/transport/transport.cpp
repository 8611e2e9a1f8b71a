// Transport selection (ipc -> nccl, vmm -> nccl, hier -> ipc on one node -> nccl: first
// that can serve), IPC and vmm eligibility, and the MPI collectives that stand in for
// NCCL on the host device.
#include "comm/transport/transport.hpp"

#include <cstdlib>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/nodes.hpp"

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

std::string vmm_ineligible_reason(Device& dev, MPI_Comm group, const NodeLayout& group_nodes) {
  std::string why = ipc_ineligible_reason(dev, group, group_nodes);  // collective; the same on every rank
  if (!why.empty()) return why;
  std::string reason = forced_reason(kForceVmmIneligibleEnv);
  if (reason.empty()) reason = dev.vmm_ineligible_reason();
  return agree_on_reason(group, reason, dev.watchdog_seconds());
}

std::string ipc_ineligible_reason(Device& dev, MPI_Comm group, const NodeLayout& group_nodes) {
  // The collectives first, on every rank whatever it finds itself: a rank that skipped
  // one because of its own reason would leave the others waiting in it.
  int size = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(group, &size));
  std::vector<int> ords(size);
  const int ord = dev.ordinal();
  allgather_bounded(group, &ord, sizeof(int), ords.data(), dev.watchdog_seconds(), "the peer-access check");

  std::string reason = forced_reason(kForceIneligibleEnv);
  UIPC_CHECK(group_nodes.size() == size, "ipc_ineligible_reason: the node layout is not the group's");
  if (reason.empty() && !group_nodes.one_node())
    reason = "the Ulysses group spans " + std::to_string(group_nodes.nodes()) + " nodes (" + group_nodes.source() + ")";
  if (reason.empty()) reason = dev.ipc_ineligible_reason();
  for (size_t i = 0; reason.empty() && i < ords.size(); ++i) reason = dev.peer_ineligible_reason(ords[i]);
  // Agree: the first non-empty reason by rank order wins on every rank.
  return agree_on_reason(group, reason, dev.watchdog_seconds());
}

SelectedTransport select_transport(const std::string& requested, const TransportSetup& setup) {
  Device& dev = setup.dev;
  SelectedTransport sel;
  // ipc or vmm where eligible (else null and why not).
  auto try_ipc = [&](const std::string& name, std::string* why) -> std::unique_ptr<Transport> {
    const bool vmm = name == "vmm";
    *why = vmm ? vmm_ineligible_reason(dev, setup.group, setup.group_nodes)
               : ipc_ineligible_reason(dev, setup.group, setup.group_nodes);
    if (!why->empty()) return nullptr;
    return vmm ? make_vmm_transport(dev, setup.group, setup.options) : make_ipc_transport(dev, setup.group, setup.options);
  };
  if (requested == "nccl-ce") {
    // Made (or not) alike on every rank: the same mode and GPU placement everywhere.
    if (setup.ce_coll != nullptr) {
      sel.transport = make_nccl_ce_transport(dev, *setup.ce_coll);
      sel.used = requested;
      const std::string why_not = setup.ce_coll->copy_engine_note();
      sel.note = why_not.empty() ? "copy engines: NCCL's zero-CTA all-to-all on symmetric windows"
                                 : "copy engines: not used (" + why_not + ")";
      return sel;
    }
    sel.fallback_reason = "nccl-ce not available: " + setup.ce_unavailable;
    sel.transport = make_nccl_transport(dev, setup.coll);
    sel.used = "nccl";
    return sel;
  }
  std::string why;
  if (requested == "hier" || requested == "hier-vmajor") {
    why = hier_ineligible_reason(dev, setup.group, setup.group_nodes);
    if (why.empty()) {
      VMajorOptions vm;
      vm.enabled = requested == "hier-vmajor";
      vm.threshold = setup.vmajor_threshold;
      vm.row_change = setup.row_change;
      UIPC_CHECK(!vm.enabled || vm.row_change, "hier-vmajor needs the row_change kernel in its TransportSetup");
      sel.transport = make_hier_transport(dev, setup.group, setup.group_nodes, setup.make_collectives,
                                          setup.options.cache_capacity, setup.hier_chunks, vm);
      sel.used = requested;
      return sel;
    }
    if (setup.group_nodes.one_node()) {
      // On one node hier is the IPC transport.
      sel.transport = try_ipc("ipc", &why);
      if (sel.transport) {
        sel.used = "ipc";
        sel.fallback_reason = "hier: the Ulysses group is on one node, where the ipc transport serves it";
        return sel;
      }
      sel.fallback_reason = "hier on one node is ipc, and ipc is not eligible: " + why;
    } else {
      sel.fallback_reason = requested + " not eligible: " + why;
    }
  } else if (requested == "ipc" || requested == "vmm") {
    sel.transport = try_ipc(requested, &why);
    if (sel.transport) {
      sel.used = requested;
      return sel;
    }
    sel.fallback_reason = requested + " not eligible: " + why;
  } else if (requested != "nccl") {
    throw InputError("unknown transport '" + requested + "' (allowed: nccl, nccl-ce, ipc, vmm, hier, hier-vmajor)");
  }
  sel.transport = make_nccl_transport(dev, setup.coll);
  sel.used = "nccl";
  return sel;
}

// --- MPI collectives for the host device

namespace {

class MpiCollectives : public Collectives {
 public:
  MpiCollectives(MPI_Comm c, Device& dev) : comm_(dup_comm(c)), dev_(dev), world_rank_(world_ranks(c)) {}
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

  void send_recv(Stream& s, const std::vector<PeerTransfer>& transfers) override {
    s.synchronize();  // the bytes are final once the stream has drained
    std::vector<std::vector<unsigned char>> out(transfers.size()), in(transfers.size());
    std::vector<MPI_Request> reqs;
    std::vector<int> peer_of;  // world ranks: what a timeout names
    reqs.reserve(2 * transfers.size());
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PeerTransfer& t = transfers[i];
      UIPC_CHECK(t.send_bytes <= static_cast<size_t>(INT32_MAX) && t.recv_bytes <= static_cast<size_t>(INT32_MAX),
                 "point-to-point message too large for MPI");
      UIPC_CHECK(t.peer >= 0 && t.peer < size(), "send_recv: no peer " + std::to_string(t.peer));
      if (t.recv_bytes == 0) continue;
      in[i].resize(t.recv_bytes);
      reqs.emplace_back();
      UIPC_MPI_CHECK(MPI_Irecv(in[i].data(), static_cast<int>(t.recv_bytes), MPI_BYTE, t.peer, kSendRecvTag,
                               comm_.get(), &reqs.back()));
      peer_of.push_back(world_rank_[static_cast<size_t>(t.peer)]);
    }
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PeerTransfer& t = transfers[i];
      if (t.send_bytes == 0) continue;
      out[i].resize(t.send_bytes);
      dev_.copy_to_host(out[i].data(), t.send, t.send_bytes);
      reqs.emplace_back();
      UIPC_MPI_CHECK(MPI_Isend(out[i].data(), static_cast<int>(t.send_bytes), MPI_BYTE, t.peer, kSendRecvTag,
                               comm_.get(), &reqs.back()));
      peer_of.push_back(world_rank_[static_cast<size_t>(t.peer)]);
    }
    wait_bounded(reqs.data(), static_cast<int>(reqs.size()), dev_.watchdog_seconds(),
                 "the point-to-point exchange of the inter-node phase (MPI)", peer_of);
    for (size_t i = 0; i < transfers.size(); ++i)
      if (transfers[i].recv_bytes > 0) dev_.copy_to_device(transfers[i].recv, in[i].data(), transfers[i].recv_bytes);
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

  std::unique_ptr<RegisteredBuffer> alloc_registered(size_t bytes) override {
    return plain_registered_buffer(dev_, bytes);
  }
  std::string copy_engine_note() const override {
    return "MPI collectives (simulation mode, or ranks sharing a GPU): staged through host memory, no copy engines";
  }

 private:
  static constexpr int kSendRecvTag = 11;  // apart from the all-to-all's
  MpiComm comm_;
  Device& dev_;
  std::vector<int> world_rank_;
};

class PlainRegisteredBuffer final : public RegisteredBuffer {
 public:
  explicit PlainRegisteredBuffer(DeviceBuffer b) : buf_(std::move(b)) {}
  void* get() const override { return buf_.get(); }
  size_t bytes() const override { return buf_.bytes(); }

 private:
  DeviceBuffer buf_;
};

}  // namespace

std::unique_ptr<RegisteredBuffer> plain_registered_buffer(Device& dev, size_t bytes) {
  return std::make_unique<PlainRegisteredBuffer>(dev.alloc(bytes));
}

std::unique_ptr<Collectives> make_mpi_collectives(MPI_Comm comm, Device& dev) {
  return std::make_unique<MpiCollectives>(comm, dev);
}

}  // namespace uipc
