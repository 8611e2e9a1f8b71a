// Which node each rank runs on: the one place that decides it. Nodes are the MPI
// shared-memory split of the world (ranks that share a host), or, for testing several
// nodes on one machine, blocks of N consecutive ranks declared by the run
// (--ranks-per-node N): IPC works only inside a (declared) node, and what crosses nodes
// goes over the collectives (NCCL; MPI in simulation). Transport eligibility, the
// hierarchical transport and the report all read this layout; nothing else asks MPI
// about nodes for that purpose.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace uipc {

struct NodeLayout {
  // Per rank of the communicator the layout describes (the world, or a group).
  std::vector<int> node_of;      // node index, 0 .. nodes()-1 in order of first rank
  std::vector<int> local_index;  // index among the ranks of the same node, in rank order
  int declared_ranks_per_node = 0;  // 0: nodes from the MPI shared-memory split

  int size() const { return static_cast<int>(node_of.size()); }
  int nodes() const;
  bool one_node() const { return nodes() <= 1; }
  // Ranks on each node, when every node has the same number (else 0).
  int ranks_per_node() const;
  // True when every node's ranks are consecutive (node 0 first, then node 1, ...) and
  // equal in number: the shape the hierarchical transport needs.
  bool equal_blocks() const;
  // "mpi shared-memory split" or "declared: --ranks-per-node 2"
  std::string source() const;
  // "2 nodes x 2 ranks (declared: --ranks-per-node 2)"; "1 node of 4 ranks (...)"
  std::string describe() const;
  // The layout restricted to the ranks of `sub`, a communicator whose ranks are all in
  // `parent` (the communicator this layout describes): node indices renumbered in order
  // of first appearance, local indices counted among `sub`'s ranks. Local (no messages).
  NodeLayout of(MPI_Comm sub, MPI_Comm parent) const;
};

// Discovers the nodes of `world`: the MPI shared-memory split, or with
// ranks_per_node > 0 the declared blocks [k*N, (k+1)*N), each of which must lie within
// one shared-memory node and divide the world evenly (InputError otherwise: the same
// message on every rank). Collective over world; its exchanges are bounded by timeout_s.
NodeLayout discover_nodes(MPI_Comm world, int ranks_per_node, double timeout_s);

}  // namespace uipc
