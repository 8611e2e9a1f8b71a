// Transport selection (the requested transport, then the fallback column of the table in
// transports.hpp until one serves: ipc -> nccl, vmm -> nccl, hier -> (ipc on one node) ->
// nccl), and IPC and vmm eligibility.
#include "comm/transport/transport.hpp"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/bootstrap.hpp"
#include "comm/collectives/collectives.hpp"
#include "comm/nodes.hpp"
#include "comm/transport/transports.hpp"

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

namespace {

// One transport's answer to "can you serve this group?", the same on every rank (the
// checks are collective). Served: the transport and the name that serves (hier on one
// node is ipc), with `why` saying so where that is not the name asked. Not served: no
// transport, and `why`.
struct Attempt {
  std::unique_ptr<Transport> transport;
  std::string used, why, note;
};

Attempt not_served(std::string why) { return {nullptr, "", std::move(why), ""}; }

Attempt open_nccl(const std::string& name, const TransportSetup& s) {
  return {make_nccl_transport(s.dev, s.coll), name, "", ""};
}

Attempt open_nccl_ce(const std::string& name, const TransportSetup& s) {
  // Made (or not) alike on every rank: the same mode and GPU placement everywhere.
  if (s.ce_coll == nullptr) return not_served(name + " not available: " + s.ce_unavailable);
  const std::string why_not = s.ce_coll->copy_engine_note();
  return {make_nccl_ce_transport(s.dev, *s.ce_coll), name, "",
          why_not.empty() ? "copy engines: NCCL's zero-CTA all-to-all on symmetric windows"
                          : "copy engines: not used (" + why_not + ")"};
}

// Why ipc or vmm cannot serve the group ("" = it can), and the transport where it can.
std::string ipc_family_ineligible(const std::string& name, const TransportSetup& s) {
  return name == "vmm" ? vmm_ineligible_reason(s.dev, s.group, s.group_nodes)
                       : ipc_ineligible_reason(s.dev, s.group, s.group_nodes);
}
std::unique_ptr<Transport> make_ipc_family(const std::string& name, const TransportSetup& s) {
  return name == "vmm" ? make_vmm_transport(s.dev, s.group, s.options) : make_ipc_transport(s.dev, s.group, s.options);
}

Attempt open_ipc_family(const std::string& name, const TransportSetup& s) {
  const std::string why = ipc_family_ineligible(name, s);
  if (!why.empty()) return not_served(name + " not eligible: " + why);
  return {make_ipc_family(name, s), name, "", ""};
}

// hier (and hier-vmajor) across nodes; on one node hier is the IPC transport.
Attempt open_hier(const std::string& name, const TransportSetup& s) {
  const std::string why = hier_ineligible_reason(s.dev, s.group, s.group_nodes);
  if (why.empty()) {
    VMajorOptions vm;
    vm.enabled = name == "hier-vmajor";
    vm.threshold = s.vmajor_threshold;
    vm.row_change = s.row_change;
    UIPC_CHECK(!vm.enabled || vm.row_change, "hier-vmajor needs the row_change kernel in its TransportSetup");
    return {make_hier_transport(s.dev, s.group, s.group_nodes, s.make_collectives, s.options,
                                s.hier_chunks, vm),
            name, "", ""};
  }
  if (!s.group_nodes.one_node()) return not_served(name + " not eligible: " + why);
  const std::string ipc_why = ipc_family_ineligible("ipc", s);
  if (!ipc_why.empty()) return not_served("hier on one node is ipc, and ipc is not eligible: " + ipc_why);
  return {make_ipc_family("ipc", s), "ipc", "hier: the Ulysses group is on one node, where the ipc transport serves it",
          ""};
}

using OpenFn = Attempt (*)(const std::string& name, const TransportSetup& setup);

// The code behind each row of the transport table (transports.hpp).
OpenFn opener_of(const std::string& name) {
  static const std::pair<const char*, OpenFn> openers[] = {
      {"nccl", open_nccl}, {"nccl-ce", open_nccl_ce}, {"ipc", open_ipc_family},
      {"vmm", open_ipc_family}, {"hier", open_hier}, {"hier-vmajor", open_hier},
  };
  for (const auto& [n, open] : openers)
    if (name == n) return open;
  return nullptr;
}

}  // namespace

SelectedTransport select_transport(const std::string& requested, const TransportSetup& setup) {
  const TransportKind* kind = find_transport_kind(requested);
  if (kind == nullptr) {
    std::vector<std::string> names;
    for (const auto& t : transport_table()) names.push_back(t.name);
    throw InputError("unknown transport '" + requested + "' (allowed: " + join(names) + ")");
  }
  // The requested transport, then the table's fallbacks until one serves; the first
  // reason not to serve is the one the report gives.
  SelectedTransport sel;
  for (; kind != nullptr; kind = kind->fallback ? find_transport_kind(kind->fallback) : nullptr) {
    const OpenFn open = opener_of(kind->name);
    UIPC_CHECK(open != nullptr, std::string("transport '") + kind->name + "' has no opener in transport.cpp");
    Attempt a = open(kind->name, setup);
    if (sel.fallback_reason.empty()) sel.fallback_reason = a.why;
    if (!a.transport) continue;
    sel.transport = std::move(a.transport);
    sel.used = a.used;
    sel.note = a.note;
    return sel;
  }
  throw RuntimeError("transport '" + requested + "': neither it nor a fallback can serve");
}

}  // namespace uipc
