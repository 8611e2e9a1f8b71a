// The one table of the scatter's transports (as NCCL's ncclTransports[]): every name the
// program knows and what kind of transport it is. The deck's validation, the command
// lines' help, the run's choices (which gather may ride on it, which ablations apply)
// and the report read it; select_transport (transport.hpp) walks from the requested one
// along the fallback column until one serves.
// Standard library only, so that lib/deck reads it without linking the transports.
#pragma once

#include <string>
#include <vector>

namespace uipc {

struct TransportKind {
  const char* name;
  bool exact;          // bit-identical data movement (hier-vmajor is lossy by design)
  bool ipc_protocol;   // the IPC protocol's own (target cache, copy stream): its ablations apply
  bool carries_gather; // --gather ipc rides on it (the IPC protocol, or hier's path backwards)
  bool multi_node;     // spans nodes (a hierarchical pipeline in --hier-chunks chunks)
  const char* fallback;  // what serves where this one cannot (nullptr: it always serves)
};

inline const std::vector<TransportKind>& transport_table() {
  static const std::vector<TransportKind> table = {
      // name          exact  ipc    gather multi-node fallback
      {"nccl",         true,  false, false, false,     nullptr},
      {"nccl-ce",      true,  false, false, false,     "nccl"},
      {"ipc",          true,  true,  true,  false,     "nccl"},
      {"vmm",          true,  true,  true,  false,     "nccl"},
      {"hier",         true,  false, true,  true,      "nccl"},  // on one node hier itself is ipc
      {"hier-vmajor",  false, false, true,  true,      "nccl"},
  };
  return table;
}

// The entry of `name` (a requested or a used transport), nullptr for none.
inline const TransportKind* find_transport_kind(const std::string& name) {
  for (const auto& t : transport_table())
    if (name == t.name) return &t;
  return nullptr;
}

}  // namespace uipc
