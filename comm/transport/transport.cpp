// Transport selection (ipc -> nccl, vmm -> nccl, hier -> ipc on one node -> nccl: first
// that can serve), and IPC and vmm eligibility.
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

}  // namespace uipc
